"""Settings of one swarm demo run, checked where they are made."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from ctxbus.agents.swarm._scenario import ADOPTER, MIN_STEPS, agent_name
from ctxbus.schemas import CtxbusError, Domain, UsageError

if TYPE_CHECKING:
    from ctxbus.agents.swarm._report import AgentReport, SwarmRefusal

__all__ = [
    "DEADLINE_FLOOR",
    "DEFAULT_AGENTS",
    "DEFAULT_STEPS",
    "DEFAULT_STEP_DELAY",
    "MAX_AGENTS",
    "RUNNER_CREDENTIALS",
    "STEP_MARGIN",
    "InvalidSwarmConfig",
    "SwarmConfig",
    "SwarmError",
    "SwarmPlace",
    "SwarmPlan",
    "check_settings",
    "default_deadline",
]

DEFAULT_AGENTS: Final = 3
MAX_AGENTS: Final = 8
"""Each agent is a process tokenizing ~3k-token outputs: more than this crowds 2 cores."""
DEFAULT_STEPS: Final = 75
"""Enough for two Channel 2 cycles per agent."""
DEFAULT_STEP_DELAY: Final = 0.25
"""Seconds the scripted model 'thinks' per step: keeps the live view watchable."""
RUNNER_CREDENTIALS: Final = "swarm-runner"
"""The runner's principal on a server with auth: an operator, which reads the log."""
DEADLINE_FLOOR: Final = 120.0
"""Seconds a run may take besides its steps: starting the agents, the restart, waiting
for another agent's commit (up to 20 s) and for the reports (up to 30 s)."""
STEP_MARGIN: Final = 1.0
"""Seconds a step may take besides `step_delay`: eight agents on 2 cores take ~0.15 s."""


class SwarmError(CtxbusError):
    """Raised when a swarm run fails: it does not finish in time, or cannot start."""


class InvalidSwarmConfig(SwarmError, UsageError):
    """Raised for an out-of-range setting; `option` names the command-line flag."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


def default_deadline(*, steps: int, step_delay: float) -> float:
    """Seconds a run of `steps` steps `step_delay` apart may take before it is given up."""
    return DEADLINE_FLOOR + steps * (step_delay + STEP_MARGIN)


def check_settings(
    *, agents: int, steps: int, step_delay: float, kill_at: int | None, deadline: float | None = None
) -> None:
    """Check the numbers of a run before anything is started.

    :raises InvalidSwarmConfig: naming the flag and the offending value.
    """
    if not 2 <= agents <= MAX_AGENTS:
        raise InvalidSwarmConfig(
            "--agents",
            f"must be between 2 and {MAX_AGENTS}, got {agents} (one agent rejects an option and "
            "another tries to adopt it, so a swarm needs at least two)",
        )
    if steps < MIN_STEPS:
        raise InvalidSwarmConfig("--steps", f"must be at least {MIN_STEPS}, got {steps} (Channel 2 needs a long tail)")
    if not 0 <= step_delay < math.inf:  # also refuses nan
        raise InvalidSwarmConfig("--step-delay", f"must be 0 or more seconds, got {step_delay}")
    if kill_at is not None and not 0 < kill_at < steps:
        raise InvalidSwarmConfig("--kill-at", f"must be between 1 and {steps - 1} (steps - 1), got {kill_at}")
    if deadline is not None and not 0 < deadline < math.inf:
        raise InvalidSwarmConfig("--deadline", f"must be more than 0 seconds, got {deadline}")


class SwarmPlan(Protocol):
    """What the runner needs of a kind of swarm: where it runs, the command of each agent
    process, whom to kill (if anyone), and what its report must show."""

    @property
    def nats_url(self) -> str: ...
    @property
    def domain(self) -> Domain: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def agents(self) -> int: ...
    @property
    def time_limit(self) -> float: ...
    @property
    def victim(self) -> str | None: ...
    @property
    def victim_kill_at(self) -> int: ...

    def credentials(self, principal: str) -> Path | None: ...

    def worker(self, index: int, store: Path) -> list[str]:
        """The command line of agent `index`'s process, on its `store`."""
        ...

    def judge(self, agents: Sequence[AgentReport], refusals: Sequence[SwarmRefusal]) -> list[str]:
        """The invariants this kind of run promises besides the common ones, broken."""
        ...


@dataclass(frozen=True, kw_only=True)
class SwarmPlace:
    """Where a swarm runs and keeps its files, how many agents, and its time limit."""

    nats_url: str
    domain: Domain
    data_dir: Path
    """Holds `agents/<agent>.db` (each agent's store) and `agents/<agent>.log`."""
    agents: int = DEFAULT_AGENTS
    deadline: float | None = None
    """Seconds before the run is given up; one that grows with the run's length by default."""
    credentials_dir: Path | None = None
    """On a server with auth: where each agent's credentials are (`<agent>.json`), and
    the runner's own (`RUNNER_CREDENTIALS`, an operator's); None without auth."""

    def credentials(self, principal: str) -> Path | None:
        """The credentials file of an agent (or of the runner), if the server checks them."""
        return None if self.credentials_dir is None else self.credentials_dir / f"{principal}.json"


@dataclass(frozen=True, kw_only=True)
class SwarmConfig(SwarmPlace):
    """One demo run: where, how many agents, how long, whom to kill and when.

    :raises InvalidSwarmConfig: for out-of-range values, naming the flag.
    """

    steps: int = DEFAULT_STEPS
    step_delay: float = DEFAULT_STEP_DELAY
    kill_at: int | None = None
    """Steps the victim completes before its SIGKILL; 40% of `steps` by default."""

    def __post_init__(self) -> None:
        check_settings(
            agents=self.agents, steps=self.steps, step_delay=self.step_delay, kill_at=self.kill_at,
            deadline=self.deadline,
        )  # fmt: skip

    @property
    def time_limit(self) -> float:
        """The deadline in force: the one given, or one that grows with the steps."""
        if self.deadline is not None:
            return self.deadline
        return default_deadline(steps=self.steps, step_delay=self.step_delay)

    @property
    def victim(self) -> str:
        """The agent that is killed and restarted: the one that later re-proposes the
        rejected option, so its refusal also shows that it came back with its brief."""
        return agent_name(ADOPTER)

    def worker(self, index: int, store: Path) -> list[str]:
        """The scripted agent's process (`agents.swarm._worker`)."""
        return [
            sys.executable, "-m", "ctxbus.agents.swarm._worker",
            "--nats", self.nats_url, "--domain", str(self.domain),
            "--index", str(index), "--agents", str(self.agents),
            "--steps", str(self.steps), "--step-delay", str(self.step_delay),
            "--store", str(store),
        ]  # fmt: skip

    def judge(self, agents: Sequence[AgentReport], refusals: Sequence[SwarmRefusal]) -> list[str]:
        """The scenario's promises: constraints kept, a prompt smaller than its history,
        every step run, Channel 2 reached, the refused re-adoption, the resumed victim."""
        from ctxbus.agents.swarm._report import judge_scenario

        return judge_scenario(self.steps, self.victim, agents, refusals)

    @property
    def victim_kill_at(self) -> int:
        """Steps the victim completes before its SIGKILL."""
        return self.kill_at if self.kill_at is not None else self.steps * 2 // 5
