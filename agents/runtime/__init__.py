"""The Agent runtime: local context + nudges + brief replica, joined on the bus."""

from agents.runtime._agent import Agent, AgentConfig, ToolOutcome
from agents.runtime._host import ContextHost
from agents.runtime._replay import ReplayReport, TranscriptError, replay_transcript
from agents.runtime._saved import inspect_store
from agents.runtime._tail import TailAdapter

__all__ = [
    "Agent",
    "AgentConfig",
    "ContextHost",
    "ReplayReport",
    "TailAdapter",
    "ToolOutcome",
    "TranscriptError",
    "inspect_store",
    "replay_transcript",
]
