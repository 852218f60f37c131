"""The swarm runner: N agent processes on one task.

`ctxbus swarm demo` drives them with a built-in scenario (`SwarmConfig`) to show every
feature at once on the embedded NATS: long tool outputs, pinned constraints, a shared
brief with a rejected option, nudges up to Channel 2, `ctx_reduce`, and an agent killed
and restarted from its own store. `ctxbus swarm run` (`RunConfig`) runs agent loops
(`agents.loop`) on a real model instead. The caller provides the NATS server and the
coordinator (see DESIGN section 2).
"""

from ctxbus.agents.swarm._config import (
    DEADLINE_FLOOR,
    DEFAULT_AGENTS,
    DEFAULT_STEP_DELAY,
    DEFAULT_STEPS,
    MAX_AGENTS,
    RUNNER_CREDENTIALS,
    STEP_MARGIN,
    InvalidSwarmConfig,
    SwarmConfig,
    SwarmError,
    SwarmPlan,
    check_settings,
    default_deadline,
)
from ctxbus.agents.swarm._report import AgentReport, LogState, SwarmRefusal, SwarmReport, UnreportedAgent
from ctxbus.agents.swarm._run import DEFAULT_MAX_TURNS, DEFAULT_RUN_WINDOW, RUN_TOOLS, RunConfig
from ctxbus.agents.swarm._runner import AgentStatus, SwarmRunner
from ctxbus.agents.swarm._scenario import GOAL, REJECTED_OPTION, agent_name
from ctxbus.schemas import AgentResult, Channel2Cycle, Note, Progress, Refusal, Tally

__all__ = [
    "LogState",
    "DEADLINE_FLOOR",
    "DEFAULT_AGENTS",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_RUN_WINDOW",
    "RUN_TOOLS",
    "DEFAULT_STEPS",
    "DEFAULT_STEP_DELAY",
    "GOAL",
    "MAX_AGENTS",
    "REJECTED_OPTION",
    "RUNNER_CREDENTIALS",
    "STEP_MARGIN",
    "AgentReport",
    "AgentResult",
    "AgentStatus",
    "Channel2Cycle",
    "InvalidSwarmConfig",
    "Note",
    "Progress",
    "Refusal",
    "RunConfig",
    "SwarmConfig",
    "SwarmError",
    "SwarmPlan",
    "SwarmRefusal",
    "SwarmReport",
    "SwarmRunner",
    "Tally",
    "agent_name",
    "UnreportedAgent",
    "check_settings",
    "default_deadline",
]
