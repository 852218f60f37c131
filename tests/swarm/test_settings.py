"""A demo run's numbers are checked before anything starts."""

from __future__ import annotations

import pytest

from agents.swarm import InvalidSwarmConfig, check_settings


@pytest.mark.parametrize("delay", [-0.1, float("nan"), float("inf")])
def test_a_step_delay_that_is_not_a_number_of_seconds_is_refused(delay: float) -> None:
    with pytest.raises(InvalidSwarmConfig, match="--step-delay"):
        check_settings(agents=3, steps=60, step_delay=delay, kill_at=None)
