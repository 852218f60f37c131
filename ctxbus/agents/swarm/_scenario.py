"""The built-in scenario: what each agent's user says and what its scripted model does.

Every step is a pure function of (agent index, swarm size, step number), so a restarted
agent replays exactly the step it was killed in, and every run tells the same story:

- the lead agent's user states the goal and hard constraints up front; the lead
  records them in the brief, rules out a Redis lock and decides on a file lock;
- every agent adds its own pending item, shares a finding, and completes the item at
  the end;
- halfway through, another agent (the forgetful one) tries to adopt the Redis lock
  anyway, and the coordinator refuses it, naming who rejected it and why;
- in between, tools return long output (grep, file reads, pytest runs, diffs; a CI log
  big enough to be archived), which is what drives the nudges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ctxbus.schemas import AddConstraint, AddDecision, AddNote, AddPending, BriefOp, Reject, SetGoal

__all__ = [
    "ADOPTER",
    "CACHE_GET_RULE",
    "CONSTRAINTS",
    "GOAL",
    "MIN_STEPS",
    "REJECTED_OPTION",
    "VENDOR_RULE",
    "AdoptRejected",
    "CompleteMine",
    "Intent",
    "Propose",
    "Step",
    "agent_name",
    "pending_text",
    "step",
    "user_constraints",
]

GOAL: Final = "Fix the flaky cache-invalidation tests in service/cache without changing the public API of Cache.get"
VENDOR_RULE: Final = "Never edit files under vendor/"
CONSTRAINTS: Final = (VENDOR_RULE, "Budget <= 100k tokens per prompt", "Do not add new dependencies")
"""The lead's user states all three; the lead records them in the brief."""
CACHE_GET_RULE: Final = "do not change the signature of Cache.get"
"""Said to every agent later on, in a 'Remember:' nudge."""
REJECTED_OPTION: Final = "Redis distributed lock"
REJECTION_REASON: Final = "ops will not run Redis in production (the user ruled it out at the start)"
ADOPTER: Final = 1
"""Index of the agent that later tries to adopt the rejected option (never the lead)."""
MIN_STEPS: Final = 40
"""Below this the tail does not grow enough for Channel 2 (first reached around step 35)."""

_AREAS: Final = (
    "make test_ttl_expiry deterministic by injecting the clock",
    "fix the invalidation race in CacheWriter.flush",
    "add a regression test for stale reads after invalidate",
    "measure lock contention in service/locks",
    "document the invalidation protocol in docs/cache.md",
)
_FINDINGS: Final = (
    "the stale read comes from flush() releasing the lock before bumping the generation",
    "test_ttl_expiry sleeps on the wall clock; a fake clock makes it pass 500/500",
    "the CI timeout is the writer lock held across a network call in backend.refresh",
    "lock hold time p99 is 4.8 ms; contention is not the cause",
    "invalidate() and flush() disagree on the generation counter's meaning",
)
# One cycle of tool calls; the last one is long enough to be archived.
_TOOLS: Final = (
    ("grep", "generation"),
    ("read_file", "service/cache/writer.py"),
    ("pytest", "tests/cache/test_invalidation.py"),
    ("read_file", "service/cache/invalidation.py"),
    ("grep", "flush("),
    ("git_diff", "service/cache/writer.py"),
    ("edit", "service/cache/writer.py"),
    ("pytest", "tests/cache/test_ttl.py"),
    ("read_file", "service/locks/locks.py"),
    ("ci_logs", "test-cache (3.11)"),
)
_USER_EVERY: Final = 4
_NUDGES: Final = (
    "Keep going; tell me when the invalidation test passes.",
    f"Remember: {CACHE_GET_RULE}, other teams call it.",
    "Any progress? Run the failing test again after your change.",
    "Good. Keep the fix small and stay inside service/cache.",
)


@dataclass(frozen=True, slots=True)
class Propose:
    """Propose `op`; a refusal is unexpected and reported."""

    op: BriefOp


@dataclass(frozen=True, slots=True)
class CompleteMine:
    """Complete this agent's own pending item (its id is looked up in the brief)."""

    outcome: str


@dataclass(frozen=True, slots=True)
class AdoptRejected:
    """Try to adopt the rejected option, as a model that did not read its brief would."""

    option: str
    rationale: str


Intent = Propose | CompleteMine | AdoptRejected


@dataclass(frozen=True, slots=True)
class Step:
    """One turn of one agent: maybe a user message, then a tool call, then brief work."""

    number: int
    user: str | None
    thought: str
    tool: str
    argument: str
    intents: tuple[Intent, ...]


def agent_name(index: int) -> str:
    """`agent-1`, `agent-2`, ...: valid as a domain token and readable in tables."""
    return f"agent-{index + 1}"


def pending_text(index: int) -> str:
    """The pending item an agent adds, unique per agent so none is a duplicate."""
    area = _AREAS[index % len(_AREAS)]
    suffix = f" (part {index // len(_AREAS) + 1})" if index >= len(_AREAS) else ""
    return f"{agent_name(index)}: {area}{suffix}"


def step(index: int, agents: int, number: int, steps: int) -> Step:
    """Step `number` (0-based) of agent `index` in a swarm of `agents` running `steps` steps."""
    tool, argument = _TOOLS[(number + index) % len(_TOOLS)]
    return Step(
        number=number,
        user=_user_message(index, number),
        thought=f"Step {number + 1}: running {tool} on {argument} to narrow down the stale read.",
        tool=tool,
        argument=argument,
        intents=_intents(index, agents, number, steps),
    )


def user_constraints(index: int, steps: int) -> tuple[str, ...]:
    """The hard constraints agent `index`'s own user states in a run of `steps` steps.

    The lead's user states all of `CONSTRAINTS`, every other agent's user only
    `VENDOR_RULE`; all of them later say `CACHE_GET_RULE`. Each agent must keep its own
    in its pinned layer, whatever the brief holds.
    """
    said = [text for number in range(steps) if (text := _user_message(index, number))]
    return tuple(rule for rule in (*CONSTRAINTS, CACHE_GET_RULE) if any(rule in text for text in said))


def _user_message(index: int, number: int) -> str | None:
    if number == 0:
        if index == 0:
            return f"Goal: {GOAL}. You lead the team. {'. '.join(CONSTRAINTS)}."
        return f"Goal: {GOAL}. Your part: {_AREAS[index % len(_AREAS)]}. {VENDOR_RULE}."
    if index == 0 and number == 2:
        return f"We tried a {REJECTED_OPTION} last year; {REJECTION_REASON.split(' (')[0]}. Rule it out."
    if number % _USER_EVERY == 0:
        return _NUDGES[(number // _USER_EVERY + index) % len(_NUDGES)]
    return None


def _intents(index: int, agents: int, number: int, steps: int) -> tuple[Intent, ...]:
    intents: list[Intent] = []
    if number == 0:
        if index == 0:
            intents += [Propose(SetGoal(text=GOAL)), *(Propose(AddConstraint(text=c)) for c in CONSTRAINTS)]
        intents.append(Propose(AddPending(text=pending_text(index))))
    if index == 0 and number == 2:
        intents.append(Propose(Reject(option=REJECTED_OPTION, reason=REJECTION_REASON)))
    if index == 0 and number == 4:
        rationale = "no new dependencies, and the service runs on one host"
        intents.append(Propose(AddDecision(option="fcntl file lock around CacheWriter.flush", rationale=rationale)))
    if number == steps // 3:
        intents.append(Propose(AddNote(text=f"{agent_name(index)}: {_FINDINGS[index % len(_FINDINGS)]}")))
    if index == min(ADOPTER, agents - 1) and number == steps // 2:
        intents.append(AdoptRejected(REJECTED_OPTION, "simpler than file locks once we run several workers"))
    if number == steps - 1:
        intents.append(CompleteMine(outcome=_FINDINGS[index % len(_FINDINGS)]))
    return tuple(intents)
