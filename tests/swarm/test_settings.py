"""A demo run's numbers are checked before anything starts, and its deadline fits them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbus.agents.swarm import DEADLINE_FLOOR, InvalidSwarmConfig, SwarmConfig, check_settings
from ctxbus.schemas import Domain

DOMAIN = Domain.parse("t/s/swarm")


@pytest.mark.parametrize("delay", [-0.1, float("nan"), float("inf")])
def test_a_step_delay_that_is_not_a_number_of_seconds_is_refused(delay: float) -> None:
    with pytest.raises(InvalidSwarmConfig, match="--step-delay"):
        check_settings(agents=3, steps=60, step_delay=delay, kill_at=None)


@pytest.mark.parametrize(("steps", "step_delay"), [(40, 8.0), (75, 0.25), (400, 0.0), (120, 30.0)])
def test_the_deadline_leaves_time_for_every_step_and_the_start(steps: int, step_delay: float) -> None:
    config = SwarmConfig(nats_url="nats://x:1", domain=DOMAIN, data_dir=Path("."), steps=steps, step_delay=step_delay)
    assert config.time_limit >= DEADLINE_FLOOR + steps * step_delay + steps * 0.5


def test_a_given_deadline_wins() -> None:
    config = SwarmConfig(nats_url="nats://x:1", domain=DOMAIN, data_dir=Path("."), steps=400, deadline=2.5)
    assert config.time_limit == 2.5


@pytest.mark.parametrize("deadline", [0.0, -1.0, float("nan"), float("inf")])
def test_a_deadline_that_is_not_a_positive_number_of_seconds_is_refused(deadline: float) -> None:
    with pytest.raises(InvalidSwarmConfig, match="--deadline"):
        check_settings(agents=3, steps=60, step_delay=0.0, kill_at=None, deadline=deadline)
