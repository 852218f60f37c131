"""The line protocol between the swarm runner and its worker processes.

A worker writes one JSON object per line on stdout (progress, notes, `finished`, and
its final result); the runner answers on the worker's stdin with one `ReportRequest`
once every worker has finished, so all of them report the brief at the same revision.
It is a pipe between `agents.swarm` processes, never put on the bus; it lives in
`schemas` because it crosses a process boundary. Exported from `schemas` like every
other shape: `agents.swarm` re-exports the models its report is made of (`AgentResult`,
`Tally`, ...), so readers of a `SwarmReport` can use them too.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AgentResult",
    "Channel2Cycle",
    "Event",
    "EventAdapter",
    "Finished",
    "Note",
    "Progress",
    "Refusal",
    "ReportRequest",
    "Tally",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Refusal(_Model):
    """A proposal the coordinator refused, as the agent received it."""

    option: str
    code: str
    reason: str


class Tally(BaseModel):
    """What one agent did so far; persisted in its store so it survives a SIGKILL."""

    model_config = ConfigDict(extra="forbid")

    step: int = 0
    """The next step to run."""
    starts: int = 0
    """Processes that ran this agent (1, or 2 after a kill and restart)."""
    resumed_from: int | None = None
    """The step the latest process resumed at, if it resumed from the store."""
    bands: list[str] = Field(default_factory=list)
    """Bands reached, in the order first reached."""
    reminders: int = 0
    """Channel 1 reminders appended to tool outputs."""
    reduces: int = 0
    """ctx_reduce calls."""
    dropped: int = 0
    """Tags those calls queued for dropping."""
    searches: int = 0
    reads: int = 0
    committed: int = 0
    """Proposals the coordinator committed."""
    refusals: list[Refusal] = Field(default_factory=list)
    """Proposals refused on purpose by the scenario (the rejected option)."""
    unexpected: list[str] = Field(default_factory=list)
    """Anything that went against the script: a refused proposal that should pass, ..."""
    handled_synthetic: int = 0
    """Tag of the newest Channel 2 message the model has acted on."""
    peak_prompt_tokens: int = 0
    model_prompt_tokens: int = 0
    """Prompt tokens a real model's endpoint reported, all turns together (`swarm run`)."""
    model_cached_tokens: int = 0
    """Of those, the ones the endpoint served from its prefix cache."""
    model_completion_tokens: int = 0
    stopped: str | None = None
    """Why an agent loop stopped (`swarm run`); None for the scripted demo."""


class Progress(_Model):
    """One step done; drives the live table."""

    type: Literal["progress"] = "progress"
    agent: str
    pid: int
    starts: int
    step: int
    """Steps done."""
    steps: int
    band: str
    u: int
    t: int
    prompt_tokens: int
    history_tokens: int
    """Every message the agent ever saw, counted whole: the prompt without ctxbus."""
    revision: int
    channel2: int
    """Channel 2 messages the agent holds."""


class Note(_Model):
    """Something worth a line in the event log."""

    type: Literal["note"] = "note"
    agent: str
    step: int
    text: str


class Finished(_Model):
    """The agent ran its last step and waits for the `ReportRequest`."""

    type: Literal["finished"] = "finished"
    agent: str


class Channel2Cycle(_Model):
    """One tail cycle of an agent, as the bus lease and the agent's host see it."""

    cycle: int
    lease: str
    """The lease state: delivered, pending, claimed, or '' (never armed / expired)."""
    in_host: bool
    """The agent's conversation holds this cycle's message."""


class AgentResult(_Model):
    """The agent's final word: its tally, its context sizes and its brief."""

    type: Literal["result"] = "result"
    agent: str
    tally: Tally
    prompt_tokens: int
    history_tokens: int
    synthetic_messages: int
    cycles: list[Channel2Cycle]
    missing_constraints: list[str]
    """Hard constraints the agent's own user stated that its pinned context lacks at the
    end (should be none); the brief block does not count."""
    missing_from_brief: list[str] = []
    """The lead's constraints that the brief block of the final prompt lacks (should be none)."""
    revision: int
    hash: str
    cached_share: float | None = None
    """Share of the prompts' tokens a provider's cache would serve (each prompt against
    the one before); None where the agent did not measure it."""
    cost: dict[str, float] = {}
    """The prompts' input cost under each price preset, in base-price tokens."""
    full_cost: dict[str, float] = {}
    """Likewise for sending the whole history at every call, cached the same way."""


class ReportRequest(_Model):
    """Runner -> worker: report once your brief is at `revision`."""

    revision: int


Event: TypeAlias = Annotated[Progress | Note | Finished | AgentResult, Field(discriminator="type")]
EventAdapter: TypeAdapter[Event] = TypeAdapter(Event)
