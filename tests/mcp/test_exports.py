"""`ctxbus.agents.mcp`'s public names: none of them means something else elsewhere in `ctxbus.agents`."""

from __future__ import annotations

import importlib
import inspect

import pytest

import ctxbus.agents.mcp as mcp
from ctxbus.agents.brief import DEFAULT_PROPOSE_DEADLINE


@pytest.mark.parametrize(
    "package", ["ctxbus.agents.brief", "ctxbus.agents.context", "ctxbus.agents.nudges", "ctxbus.agents.runtime"]
)
def test_a_name_exported_twice_is_the_same_object(package: str) -> None:
    other = importlib.import_module(package)
    shared = set(mcp.__all__) & set(other.__all__)
    assert [name for name in shared if getattr(mcp, name) is not getattr(other, name)] == []


def test_brief_propose_waits_less_than_an_agent_does() -> None:
    default = inspect.signature(mcp.AgentTools).parameters["propose_deadline"].default
    assert default == mcp.MCP_PROPOSE_DEADLINE < DEFAULT_PROPOSE_DEADLINE
