"""Persisted nudge state and where it is kept.

The decision state must survive a restart: an agent that forgot it had already
reminded the model would repeat the full reminder right after coming back up. The
state is a small pydantic model stored as JSON in the nudge state section of the agent's
SQLite file (`AgentStore`, which owns the file and its one connection). Each channel has its own section of `NudgeState`; sections default, so stored
payloads keep loading as the model grows (a payload from before Channel 2 loads with a
fresh `Channel2State`).
"""

from __future__ import annotations

import os
from typing import Literal, Protocol, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ctxbus.agents.context import AgentStore
from ctxbus.agents.nudges._bands import Band
from ctxbus.schemas import CtxbusError

__all__ = [
    "Channel1Level",
    "Channel1State",
    "Channel2State",
    "MemoryNudgeStateStore",
    "NudgeState",
    "NudgeStateCorrupt",
    "NudgeStateStore",
    "PostReduceGrace",
    "SqliteNudgeStateStore",
]

Channel1Level: TypeAlias = Literal[Band.QUIET, Band.GENTLE, Band.FIRM, Band.URGENT]
"""The bands Channel 1 speaks in; CHANNEL2 is Channel 2's business."""


class PostReduceGrace(BaseModel):
    """Quiet period after the agent complied: it already did what a reminder would ask."""

    model_config = ConfigDict(frozen=True)

    baseline_u: int = Field(ge=0)
    """U right after ctx_reduce queued its drops."""
    pre_reduce_level: Channel1Level
    """The band observed before the reduce; only a higher band ends the grace early."""


class Channel1State(BaseModel):
    """What Channel 1 remembers between tool calls."""

    model_config = ConfigDict(frozen=True)

    level: Channel1Level = Band.QUIET
    """Last band observed; falls silently with the tail."""
    announced: Channel1Level = Band.QUIET
    """Highest band whose full reminder was given since the tail was last quiet or the
    agent last reduced; only a band above it fires the full reminder again, so a tail
    flapping across a band boundary does not. Defaults to `level`, which is what it
    was before this field existed."""
    last_u: int = Field(default=0, ge=0)
    """U when the last reminder fired, what a reduce left, or U at a fall below that: the
    base of the re-fire cadence."""
    last_fire_turn: int | None = Field(default=None, ge=0)
    """Real user turn count when the last reminder fired."""
    grace: PostReduceGrace | None = None

    @model_validator(mode="before")
    @classmethod
    def _announced_defaults_to_level(cls, data: object) -> object:
        # Stored states from before `announced` must not fire their band in full again.
        if isinstance(data, dict) and "announced" not in data:
            return {**data, "announced": data.get("level", Band.QUIET)}
        return data


class Channel2State(BaseModel):
    """Which tail cycle Channel 2 is in, and whether this agent saw it delivered.

    The bus lease of the cycle is the truth about delivery across processes; this is
    the agent's own memory of it, so a delivered cycle is not even looked up again.
    """

    model_config = ConfigDict(frozen=True)

    cycle: int = Field(default=0, ge=0)
    """Current tail cycle; the lease key and the directive id are derived from it."""
    armed_t: int | None = Field(default=None, ge=0)
    """T when this cycle first met the Channel 2 predicate; None until it does."""
    delivered: bool = False
    """The cycle's directive is known to be delivered: never armed again."""


class NudgeState(BaseModel):
    """Everything the nudges persist for one agent."""

    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    channel1: Channel1State = Channel1State()
    channel2: Channel2State = Channel2State()


class NudgeStateCorrupt(CtxbusError):
    """Raised when the stored nudge state cannot be read back."""


class NudgeStateStore(Protocol):
    """Where the nudge state lives; the agent's SQLite file in production."""

    def load(self) -> NudgeState:
        """The stored state, or a fresh one if nothing was stored yet."""
        ...

    def save(self, state: NudgeState) -> None:
        """Replace the stored state."""
        ...


class MemoryNudgeStateStore:
    """Keeps the state in memory: for agents without a store, and for tests."""

    def __init__(self, state: NudgeState | None = None) -> None:
        self._state = state or NudgeState()

    def __repr__(self) -> str:
        return f"MemoryNudgeStateStore({self._state!r})"

    def load(self) -> NudgeState:
        return self._state

    def save(self, state: NudgeState) -> None:
        self._state = state


class SqliteNudgeStateStore:
    """Keeps the state as JSON in the nudge state section (the `nudge_state` table) of
    the agent's SQLite file, through the file's `AgentStore` and its one connection.

    The agent passes the `AgentStore` its context uses, so the file has one connection;
    given a path, the store opens its own `AgentStore` of the file, once, and `close()`
    closes it. The agent calls it on its event loop, as it does its context: a
    read-modify-write with no await in between cannot interleave with another task's.

    :raises StoreError: from any method, naming the file, if SQLite fails.
    """

    def __init__(self, store: AgentStore | str | os.PathLike[str], *, scope: str = "agent") -> None:
        """
        :param store: the agent's open `AgentStore` (left open), or its SQLite file
            (created if missing; then `close()` closes it).
        :param scope: row key, for files that hold more than one agent's state.
        """
        self._owned = not isinstance(store, AgentStore)
        self._store = store if isinstance(store, AgentStore) else AgentStore(os.fspath(store), None)
        self._scope = scope

    def __repr__(self) -> str:
        return f"SqliteNudgeStateStore({self._store.path!r}, scope={self._scope!r})"

    def load(self) -> NudgeState:
        """:raises NudgeStateCorrupt: if the stored JSON does not validate."""
        body = self._store.nudge_state(self._scope)
        if body is None:
            return NudgeState()
        try:
            return NudgeState.model_validate_json(body)
        except ValidationError as exc:
            raise NudgeStateCorrupt(
                f"stored nudge state for scope {self._scope!r} in {self._store.path!r} is invalid"
            ) from exc

    def save(self, state: NudgeState) -> None:
        self._store.save_nudge_state(self._scope, state.model_dump_json())

    def close(self) -> None:
        """Close the file, if this store opened it (not the agent's `AgentStore`)."""
        if self._owned:
            self._store.close()
