"""The swarm's line protocol is defined once, in `schemas`, and re-exported as it is."""

from __future__ import annotations

import pytest

from ctxbus import schemas
from ctxbus.agents import swarm


@pytest.mark.parametrize("name", ["AgentResult", "Channel2Cycle", "Note", "Progress", "Refusal", "Tally"])
def test_agents_swarm_reexports_the_schemas_model(name: str) -> None:
    assert name in swarm.__all__
    assert getattr(swarm, name) is getattr(schemas, name)
