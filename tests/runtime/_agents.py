"""Agents that are closed however their test ends: each holds its store's lock and file."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import NatsClient


class Agents:
    """Opens agents for one test; when the test ends, closes every one it did not close."""

    def __init__(self) -> None:
        self._open: list[Agent] = []

    def open(self, client: NatsClient, config: AgentConfig, **options: Any) -> Agent:
        agent = Agent(client, config, **options)
        self._open.append(agent)
        return agent

    def close(self, agent: Agent) -> None:
        """Close `agent` now, e.g. to open its store again as a restart would."""
        self._open.remove(agent)
        agent.close()

    def close_all(self) -> None:
        """Newest first; every agent is closed even if closing another one fails."""
        with ExitStack() as closing:
            for agent in self._open:
                closing.callback(agent.close)
            self._open.clear()
