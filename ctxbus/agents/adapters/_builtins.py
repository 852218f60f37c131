"""The built-in tools every adapter offers, before they become the framework's tools."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxbus.agents.loop import Toolbox
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import BuiltinTools

__all__ = ["builtin_toolbox"]


def builtin_toolbox(
    agent: Agent, names: Iterable[str], *, propose_deadline: float
) -> tuple[Toolbox, list[Mapping[str, Any]]]:
    """A `Toolbox` of `agent`'s built-in tools `names` (the agent loop's argument checks),
    and each tool's declaration (`name`, `description`, JSON schema `parameters`)."""
    toolbox = Toolbox()
    toolbox.add_builtins(BuiltinTools(agent, propose_deadline=propose_deadline), names)
    return toolbox, [entry["function"] for entry in toolbox.to_openai()]
