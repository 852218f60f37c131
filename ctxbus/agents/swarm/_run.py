"""Settings of one `ctxbus swarm run`: N agent loops on a real model, one task."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ctxbus.agents.swarm._config import DEADLINE_FLOOR, MAX_AGENTS, InvalidSwarmConfig, SwarmPlace

if TYPE_CHECKING:
    from ctxbus.agents.swarm._report import AgentReport, SwarmRefusal

__all__ = ["DEFAULT_MAX_TURNS", "DEFAULT_RUN_WINDOW", "RUN_TOOLS", "TURN_ALLOWANCE", "RunConfig"]

DEFAULT_MAX_TURNS: Final = 50
DEFAULT_RUN_WINDOW: Final = 128_000
RUN_TOOLS: Final = ("bash",)
"""Optional tools a run can give its agents besides the built-in ones."""
TURN_ALLOWANCE: Final = 60.0
"""Seconds a turn may take by default (a slow local model answering a long prompt)."""


@dataclass(frozen=True, kw_only=True)
class RunConfig(SwarmPlace):
    """One run: where, how many agents, which model, which task, which tools.

    :raises InvalidSwarmConfig: for out-of-range values, naming the flag.
    """

    base_url: str
    model: str
    task: Path
    """The task, in a file (markdown): each agent's first user message."""
    tools: tuple[str, ...] = ()
    workdir: Path | None = None
    """Where `bash` runs (required with it)."""
    window: int = DEFAULT_RUN_WINDOW
    max_turns: int = DEFAULT_MAX_TURNS

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= MAX_AGENTS:
            raise InvalidSwarmConfig("--agents", f"must be between 1 and {MAX_AGENTS}, got {self.agents}")
        if self.max_turns < 1:
            raise InvalidSwarmConfig("--max-turns", f"must be at least 1, got {self.max_turns}")
        if self.window < 4_096:
            raise InvalidSwarmConfig("--window", f"must be at least 4,096 tokens, got {self.window:,}")
        unknown = sorted(set(self.tools) - set(RUN_TOOLS))
        if unknown:
            raise InvalidSwarmConfig(
                "--tools", f"unknown {', '.join(unknown)}; the optional tools are: {', '.join(RUN_TOOLS)}"
            )
        if "bash" in self.tools and (self.workdir is None or not self.workdir.is_dir()):
            raise InvalidSwarmConfig("--workdir", f"bash needs an existing working directory, got {self.workdir}")
        if not self.task.is_file():
            raise InvalidSwarmConfig("--task", f"{self.task} is not a file")
        if self.deadline is not None and not 0 < self.deadline < math.inf:
            raise InvalidSwarmConfig("--deadline", f"must be more than 0 seconds, got {self.deadline}")

    @property
    def time_limit(self) -> float:
        """The deadline given, or one that grows with the turns."""
        return self.deadline if self.deadline is not None else DEADLINE_FLOOR + self.max_turns * TURN_ALLOWANCE

    @property
    def victim(self) -> None:
        """Nobody is killed on purpose."""
        return None

    @property
    def victim_kill_at(self) -> int:
        return 0

    def worker(self, index: int, store: Path) -> list[str]:
        """An agent loop's process (`agents.swarm._run_worker`)."""
        return [
            sys.executable, "-m", "ctxbus.agents.swarm._run_worker",
            "--nats", self.nats_url, "--domain", str(self.domain),
            "--index", str(index), "--agents", str(self.agents), "--store", str(store),
            "--base-url", self.base_url, "--model", self.model, "--task", str(self.task),
            "--window", str(self.window), "--max-turns", str(self.max_turns),
            *(("--tools", ",".join(self.tools)) if self.tools else ()),
            *(("--workdir", str(self.workdir)) if self.workdir is not None else ()),
        ]  # fmt: skip

    def judge(self, agents: Sequence[AgentReport], refusals: Sequence[SwarmRefusal]) -> list[str]:
        """A run promises no story: only the common invariants hold it (one brief, one
        Channel 2 message per cycle, no error logged, every agent reported)."""
        return []
