"""The Agent runtime: local context + nudges + brief replica, joined on the bus."""

from agents.runtime._agent import Agent, AgentConfig, AgentState, HostFactory, ToolOutcome
from agents.runtime._host import ContextHost
from agents.runtime._replay import ReplayReport, replay_transcript
from agents.runtime._saved import inspect_store, save_config
from agents.runtime._tail import TailAdapter
from agents.runtime._transcript import Transcript, TranscriptError, TranscriptMessage, read_transcript

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
