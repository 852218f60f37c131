"""The Agent runtime: local context + nudges + brief replica, joined on the bus.

Names are imported on first use, as in `ctxbus.coordinator`: `save_config` and
`ContextHost` (all a Claude Code hook without NATS needs) come without the `Agent`,
its brief replica and the bus.
"""

import typing as _typing

from ctxbus._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ctxbus.agents.runtime._agent import Agent, AgentConfig, AgentState, HostFactory, ToolOutcome
    from ctxbus.agents.runtime._host import ContextHost
    from ctxbus.agents.runtime._replay import ReplayReport, replay_transcript
    from ctxbus.agents.runtime._saved import inspect_store, save_config
    from ctxbus.agents.runtime._tail import TailAdapter
    from ctxbus.agents.runtime._transcript import Transcript, TranscriptError, TranscriptMessage, read_transcript

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentState",
    "ContextHost",
    "HostFactory",
    "ReplayReport",
    "TailAdapter",
    "ToolOutcome",
    "Transcript",
    "TranscriptError",
    "TranscriptMessage",
    "inspect_store",
    "read_transcript",
    "replay_transcript",
    "save_config",
]

_EXPORTS = {
    "_agent": ("Agent", "AgentConfig", "AgentState", "HostFactory", "ToolOutcome"),
    "_host": ("ContextHost",),
    "_replay": ("ReplayReport", "replay_transcript"),
    "_saved": ("inspect_store", "save_config"),
    "_tail": ("TailAdapter",),
    "_transcript": ("Transcript", "TranscriptError", "TranscriptMessage", "read_transcript"),
}
"""The module of this package that defines each name, imported on first use."""
_HOMES = {name: f"{__name__}.{module}" for module, names in _EXPORTS.items() for name in names}


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)
