"""The Agent runtime: local context + nudges + brief replica, joined on the bus."""

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
