"""The swarm's report, and the invariants a run must show to count as a success.

The report is built from what each agent said about itself (its result line) and
checked against what the bus says (the log's revision and hash, the Channel 2 leases
the agents read back): a claim is only believed where it can be cross-checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, computed_field

from ctxbus.schemas import Channel2Cycle, Refusal, RejectionCode

if TYPE_CHECKING:  # the runner builds the report from its own status objects
    from ctxbus.agents.swarm._config import SwarmPlan
    from ctxbus.agents.swarm._runner import AgentStatus

__all__ = ["AgentReport", "LogState", "SwarmRefusal", "SwarmReport", "UnreportedAgent", "judge_scenario"]

_DELIVERED = "delivered"
_ERRORS_QUOTED = 10
"""Error lines a report's failure quotes; the rest are counted."""


class AgentReport(BaseModel):
    """One agent at the end of the run."""

    model_config = ConfigDict(frozen=True)

    agent: str
    steps: int
    prompt_tokens: int
    """Tokens of the agent's final prompt."""
    history_tokens: int
    """Every message it ever saw, counted whole: its prompt without ctxbus."""
    peak_prompt_tokens: int
    bands: list[str]
    """Nudge bands reached, in the order first reached."""
    reminders: int
    reduces: int
    dropped: int
    searches: int
    reads: int
    committed: int
    channel2_messages: int
    """Channel 2 messages in the agent's conversation."""
    channel2_cycles: list[Channel2Cycle]
    missing_constraints: list[str]
    """Constraints the agent's own user stated that its final pinned layer lacks (the
    brief block aside): must be none, whatever was dropped."""
    missing_from_brief: list[str]
    """The lead's constraints that the brief block of the agent's final prompt lacks."""
    revision: int
    hash: str
    starts: int
    resumed_from: int | None
    killed_at: int | None
    unexpected: list[str]
    model_prompt_tokens: int = 0
    """Prompt tokens the model's endpoint reported, all turns together (`swarm run`)."""
    model_cached_tokens: int = 0
    """Of those, the ones it served from its prefix cache."""
    model_completion_tokens: int = 0
    stopped: str | None = None
    """Why the agent's loop stopped (`swarm run`): final_answer, max_turns, task_done."""
    cached_share: float | None = None
    """Share of its prompts' tokens a provider's cache would serve (each against the one before)."""
    cost: dict[str, float] = {}
    """Its prompts' input cost under each price preset (`agents.context.PRICE_PRESETS`),
    in base-price tokens."""
    full_cost: dict[str, float] = {}
    """Likewise for sending its whole history at every call."""


class LogState(BaseModel):
    """The brief as the log gives it at the end of a run, read two ways."""

    model_config = ConfigDict(frozen=True)

    revision: int
    hash: str
    """As an agent joining now reads it: the latest snapshot, then the log after it."""
    replay_hash: str
    """Replayed from the log's first entry."""
    snapshot_revision: int = 0
    """Revision of the snapshot a joiner starts from (0: none written yet)."""


class UnreportedAgent(BaseModel):
    """An agent that never sent its result: how the runner last saw it."""

    model_config = ConfigDict(frozen=True)

    agent: str
    state: str
    """What the runner last saw: `failed` once its process exited without a result."""
    exit_codes: list[int]
    killed_at: int | None


class SwarmRefusal(Refusal):
    """A refused re-adoption of a rejected option, and who attempted it."""

    agent: str


class SwarmReport(BaseModel):
    """Everything the demo promises to show, and which promises were broken."""

    model_config = ConfigDict(frozen=True)

    domain: str
    data_dir: Path
    elapsed_s: float
    log_revision: int
    log_hash: str
    """The brief's hash as a joiner reads it (the latest snapshot, then the log after it)."""
    replay_hash: str
    """The brief's hash replayed from the log's first entry: equal to `log_hash` when the
    snapshots are what the log gives."""
    snapshot_revision: int
    """Revision of the snapshot the joiner started from (0: none was written)."""
    errors_logged: list[str]
    """ERROR lines logged during the run (the runner's process, the coordinator's when it
    runs there, and every agent's log): must be none."""
    victim: str | None
    """The agent the run SIGKILLs and restarts (the demo's); None when none is."""
    agents: list[AgentReport]
    """The agents that reported."""
    unreported: list[UnreportedAgent]
    """The agents that did not: the invariants are checked on the others only."""
    refusals: list[SwarmRefusal]
    failures: list[str]
    """Broken invariants, in plain words; empty when the run holds."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """True when every invariant holds."""
        return not self.failures

    def failing(self, *failures: str) -> SwarmReport:
        """This report with more broken invariants: what the caller checked besides (the
        brief a coordinator of its own holds, say)."""
        return self.model_copy(update={"failures": [*self.failures, *failures]}) if failures else self

    @classmethod
    def build(
        cls,
        config: SwarmPlan,
        statuses: Sequence[AgentStatus],
        log_state: LogState,
        errors_logged: Sequence[str] = (),
        *,
        elapsed: float,
    ) -> SwarmReport:
        """Collect the agents' results and judge the run."""
        revision, log_hash = log_state.revision, log_state.hash
        failures: list[str] = []
        agents, unreported, refusals = [], [], []
        for status in statuses:
            if status.result is None:
                failures.append(f"{status.name} never reported (exit codes {status.exit_codes}, state {status.state})")
                unreported.append(
                    UnreportedAgent(
                        agent=status.name, state=status.state, exit_codes=status.exit_codes, killed_at=status.killed_at
                    )
                )
                continue
            r, tally = status.result, status.result.tally
            agents.append(
                AgentReport(
                    agent=r.agent,
                    steps=tally.step,
                    prompt_tokens=r.prompt_tokens,
                    history_tokens=r.history_tokens,
                    peak_prompt_tokens=tally.peak_prompt_tokens,
                    bands=tally.bands,
                    reminders=tally.reminders,
                    reduces=tally.reduces,
                    dropped=tally.dropped,
                    searches=tally.searches,
                    reads=tally.reads,
                    committed=tally.committed,
                    channel2_messages=r.synthetic_messages,
                    channel2_cycles=r.cycles,
                    missing_constraints=r.missing_constraints,
                    missing_from_brief=r.missing_from_brief,
                    revision=r.revision,
                    hash=r.hash,
                    starts=tally.starts,
                    resumed_from=tally.resumed_from,
                    killed_at=status.killed_at,
                    unexpected=tally.unexpected,
                    model_prompt_tokens=tally.model_prompt_tokens,
                    model_cached_tokens=tally.model_cached_tokens,
                    model_completion_tokens=tally.model_completion_tokens,
                    stopped=tally.stopped,
                    cached_share=r.cached_share,
                    cost=r.cost,
                    full_cost=r.full_cost,
                )
            )
            refusals += [SwarmRefusal(agent=r.agent, **f.model_dump()) for f in tally.refusals]
        failures += _judge(config, agents, refusals, revision, log_hash)
        if log_state.replay_hash != log_hash:
            failures.append(
                f"the brief a joiner loads (from the snapshot) has hash {log_hash[:12]}, the log replayed "
                f"from its start {log_state.replay_hash[:12]}"
            )
        if errors_logged:
            failures.append(_errors_failure(errors_logged))
        return cls(
            domain=str(config.domain),
            data_dir=config.data_dir,
            elapsed_s=round(elapsed, 1),
            log_revision=revision,
            log_hash=log_hash,
            replay_hash=log_state.replay_hash,
            snapshot_revision=log_state.snapshot_revision,
            errors_logged=list(errors_logged),
            victim=config.victim,
            agents=agents,
            unreported=unreported,
            refusals=refusals,
            failures=failures,
        )


def _judge(
    config: SwarmPlan, agents: list[AgentReport], refusals: list[SwarmRefusal], revision: int, log_hash: str
) -> list[str]:
    """What every swarm must show (one brief, one Channel 2 message per cycle, nothing
    unexpected), then what this kind of run promises besides (`SwarmPlan.judge`)."""
    failures = []
    for a in agents:
        if a.hash != log_hash or a.revision != revision:
            failures.append(
                f"{a.agent} holds brief rev {a.revision} hash {a.hash[:12]}, the log rev {revision} hash {log_hash[:12]}"
            )
        failures += _channel2_failures(a)
        failures += [f"{a.agent}: {what}" for what in a.unexpected]
    return failures + config.judge(agents, refusals)


def judge_scenario(
    steps: int, victim: str, agents: Sequence[AgentReport], refusals: Sequence[SwarmRefusal]
) -> list[str]:
    """What the demo's scenario promises of a run of `steps` steps."""
    failures = []
    for a in agents:
        if a.missing_constraints:
            failures.append(
                f"{a.agent}'s pinned context (brief block aside) lost constraints its user stated: "
                f"{a.missing_constraints}"
            )
        if a.missing_from_brief:
            failures.append(f"the brief in {a.agent}'s final prompt lacks the constraints {a.missing_from_brief}")
        if a.prompt_tokens >= a.history_tokens:
            failures.append(
                f"{a.agent}'s prompt ({a.prompt_tokens:,} tokens) is not smaller than its history ({a.history_tokens:,})"
            )
        if a.steps != steps:
            failures.append(f"{a.agent} ran {a.steps} of {steps} steps")
    if not any("channel2" in a.bands and a.channel2_messages for a in agents):
        failures.append("no agent reached Channel 2")
    if not any(r.code == RejectionCode.REJECTED_OPTION for r in refusals):
        failures.append("nobody was refused when re-adopting the rejected option")
    resumed = next((a for a in agents if a.agent == victim), None)
    if resumed is None or resumed.killed_at is None or resumed.starts < 2 or not resumed.resumed_from:
        failures.append(f"{victim} was not killed and resumed from its store")
    return failures


def _errors_failure(lines: Sequence[str]) -> str:
    quoted = "; ".join(lines[:_ERRORS_QUOTED])
    more = f" (and {len(lines) - _ERRORS_QUOTED} more)" if len(lines) > _ERRORS_QUOTED else ""
    return f"{len(lines)} errors were logged during the run: {quoted}{more}"


def _channel2_failures(a: AgentReport) -> list[str]:
    """Exactly one message per cycle: every cycle the lease marks delivered is in the
    conversation, and the conversation holds no more messages than such cycles."""
    failures = []
    held = [c.cycle for c in a.channel2_cycles if c.in_host]
    lost = [c.cycle for c in a.channel2_cycles if c.lease == _DELIVERED and not c.in_host]
    if lost:
        failures.append(f"{a.agent}: Channel 2 cycles {lost} are marked delivered but the agent never got them")
    if a.channel2_messages != len(held):
        failures.append(f"{a.agent} holds {a.channel2_messages} Channel 2 messages for {len(held)} delivered cycles")
    return failures
