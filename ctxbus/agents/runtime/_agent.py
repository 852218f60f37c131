"""The Agent runtime: one agent's local context, nudges and brief replica, on the bus.

This is where the pieces meet. The context engine keeps the prompt inside its budget;
the hygiene walk measures the tail after each tool call; Channel 1 appends reminders
to tool output (kept with the result, so the next compose shows them), Channel 2 asks
once per cycle for a prune; the replica keeps the shared brief in step and its text goes
into every compose as the brief block.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ctxbus.agents.brief import DEFAULT_HEARTBEAT, DEFAULT_PROPOSE_DEADLINE, BriefReplica, PresenceBeacon, Proposer
from ctxbus.agents.context import (
    AgentStore,
    CacheMeter,
    Composition,
    ContextConfig,
    LocalContext,
    PromptCache,
    SearchHit,
    StoreError,
    TailItem,
    Tokenizer,
)
from ctxbus.agents.nudges import (
    REDUCE_TOOL_NAME,
    Band,
    Channel1,
    Channel2,
    Channel2Lease,
    Channel2LeaseConfig,
    Delivery,
    DropPlan,
    HostAdapter,
    HygieneWalker,
    NudgeFloors,
    SqliteNudgeStateStore,
    TailMeasure,
    TailTag,
    plan_drops,
    protected_floor,
)
from ctxbus.agents.runtime._host import ContextHost
from ctxbus.agents.runtime._saved import (
    apply_queued_drops,
    load_brief,
    load_queued_drops,
    save_brief,
    save_config,
    save_queued_drops,
)
from ctxbus.agents.runtime._tail import FINAL_KINDS, TailAdapter
from ctxbus.bus import GEN_AI, BusError, Leases, NatsClient, PidLock, Verifier, span
from ctxbus.schemas import (
    BriefOp,
    CtxbusError,
    Domain,
    Presence,
    Reply,
    TaskBrief,
    ToolCall,
    UsageError,
    first_ctxbus_error,
)

__all__ = ["Agent", "AgentConfig", "AgentState", "HostFactory"]

log = logging.getLogger(__name__)

_USER_TURNS_KEY = "user_turns"

HostFactory = Callable[[LocalContext], HostAdapter]
"""Builds the agent's Channel 2 host on the agent's own context (e.g. `McpHost`)."""


class AgentState(enum.StrEnum):
    """Where an `Agent` is in its life: it only ever moves forward."""

    OPENING = "opening"
    """Built (its store open), not yet joined: the brief and the heartbeat start in `run`."""
    RUNNING = "running"
    """Joined the brief; its heartbeat goes."""
    STOPPED = "stopped"
    """`run` ended (its task group was cancelled) but the agent is not closed yet: its
    store is still open and locked until `close`."""
    CLOSED = "closed"
    """Saved and closed: its store is free for another process."""


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Who the agent is, where it keeps its state, and how its context is shaped."""

    agent_id: str
    domain: Domain
    """The task; `'user/session/task'` is parsed into one."""
    store: Path
    """The agent's SQLite file: context, archive, nudge state, saved brief."""
    context: ContextConfig = field(default_factory=ContextConfig)
    """The model's window and the agent's own system prompt (`ContextConfig.system_prompt`),
    among the rest; the nudge floors follow the window."""
    heartbeat: float = DEFAULT_HEARTBEAT
    channel2: Channel2LeaseConfig = field(default_factory=Channel2LeaseConfig)
    trusted_signers: tuple[str, ...] = ()
    """On a server with auth: the public keys whose signatures on log entries and answers
    the agent believes (`Credentials.trusted_signers`). Empty: it believes any."""

    def __post_init__(self) -> None:
        # Here rather than deep in the constructor, where a string fails as an AttributeError.
        object.__setattr__(self, "domain", Domain.of(self.domain))
        object.__setattr__(self, "store", Path(self.store))


@dataclass(frozen=True)
class ToolOutcome:
    """A tool result as the model should see it, and what the nudges did."""

    text: str
    """The output, with a Channel 1 reminder appended when one is due: what the next
    compose shows in this result's tool message (a host that keeps its own transcript
    sends this text)."""
    measure: TailMeasure
    delivery: Delivery | None


class Agent:
    """One agent process's ctxbus side.

    Open it with `async with Agent.open(client, config) as agent:`, which joins the brief,
    runs the heartbeat in a task group of its own and closes the agent on the way out;
    `state` says where it is. (`await tg.start(agent.run)` in a task group of the
    caller's, then `agent.close()`, does the same by hand.)

    Methods that touch the context are synchronous and quick (SQLite in WAL mode);
    the ones that touch the bus are async. The context and the nudge state are only
    ever used on the event loop's thread, never from a worker thread: `LocalContext`
    is not thread-safe, and with one thread each synchronous step runs whole, so
    tasks that interleave (e.g. concurrent MCP tool calls) cannot lose each other's
    writes.

    :raises StoreError: from the constructor, if the store's directory cannot be
        created or the store cannot be opened.
    """

    def __init__(
        self,
        client: NatsClient,
        config: AgentConfig,
        *,
        host: HostAdapter | None = None,
        host_for: HostFactory | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        """:param host: the Channel 2 host; a `ContextHost` on the agent's context by default.
        :param host_for: builds the host on the agent's context instead (one that records
            deliveries there, as `agents.mcp.McpHost` does); not with `host`.
        """
        if host is not None and host_for is not None:
            raise UsageError("give the agent a host or a host_for factory, not both")
        self.config = config
        self.id = config.agent_id
        self.domain = config.domain
        _make_store_dir(config.store)
        with contextlib.ExitStack() as undo:  # a constructor that fails leaves nothing open
            self._store_lock = _lock_store(config)
            undo.callback(self._store_lock.release)
            self._store = AgentStore(config.store, str(config.domain))  # the file's one connection
            undo.callback(self._store.close)
            self.context = LocalContext(self._store, config.domain, config=config.context, tokenizer=tokenizer)
            undo.callback(self.context.close)
            self._nudge_store = SqliteNudgeStateStore(self._store)
            usable = config.context.window - config.context.reserve_system - config.context.reserve_output
            self._walker = HygieneWalker(
                self.context.tokenizer,
                protected_floor=protected_floor(usable),
                floors=NudgeFloors.for_window(config.context.window),
            )
            self._adapter = TailAdapter()
            self._queued = load_queued_drops(self.context)
            self._last_prompt_tokens = 0
            self.channel1 = Channel1(self._nudge_store)
            self._leases = Leases(client)
            self.host: HostAdapter = host or (host_for or ContextHost)(self.context)
            lease = Channel2Lease(
                self._leases, self.host, domain=config.domain, agent_id=self.id, config=config.channel2
            )
            self.channel2 = Channel2(self._nudge_store, lease)
            save_config(self.context, config.context)
            verifier = Verifier(config.trusted_signers) if config.trusted_signers else None
            self.replica = BriefReplica(client, config.domain, resume_from=load_brief(self.context), verifier=verifier)
            self._proposer = Proposer(client, config.domain, agent_id=self.id)
            self._beacon = PresenceBeacon(client, config.domain, self.id, self.presence, interval=config.heartbeat)
            self._band = "quiet"
            self._measure: TailMeasure | None = None
            self._drop_now = False
            self.prompt_cache: PromptCache | None = None
            """Set it (`measure_prompt_cache`) to count every compose's prompt against a
            provider's cache and against the whole history: off by default, as it costs
            each compose a pass over its messages."""
            self.reported_cached_share: float | None = None
            """Share of the last prompt the model's endpoint said its cache served (the agent
            loop sets it from the API's usage); shown in presence before `prompt_cache`'s
            estimate."""
            self._history_tokens = 0
            self._history_counted = 1
            """Tags below this are in `_history_tokens`."""
            """Whether ctx_reduce queued drops with the tail at urgent or past it: the next
            compose then shows them dropped at once, rather than at the next rebuild."""
            self._reduces_unrecorded = 0
            """ctx_reduce calls that queued drops and whose result is not recorded yet."""
            self._running: anyio.CancelScope | None = None
            """The scope of `run` while it runs: `close` ends it."""
            self._state = AgentState.OPENING
            self._ran = False
            self._measure_tail()  # a restarted agent shows its band before its next tool call
            undo.pop_all()

    def __repr__(self) -> str:
        return f"<Agent {self.id!r} on {self.domain} band={self._band}>"

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        client: NatsClient,
        config: AgentConfig,
        *,
        host: HostAdapter | None = None,
        host_for: HostFactory | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> AsyncIterator[Agent]:
        """An agent that has joined its brief and runs until the block ends, then closes.

        The agent owns the task group its replica and heartbeat run in. An error raised
        in the block, or the agent's own (it cannot join, say), comes out as itself, not
        in an exception group.

        :raises StoreError: if the store cannot be opened (another process has it, ...).
        :raises CtxbusError: if the agent cannot join its domain.
        """
        agent = cls(client, config, host=host, host_for=host_for, tokenizer=tokenizer)
        try:
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(agent.run)
                    try:
                        yield agent
                    finally:
                        tg.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                # The block's own error, or the agent's, comes out as itself.
                found = group.exceptions[0] if len(group.exceptions) == 1 else first_ctxbus_error(group)
                if found is None:
                    raise
                raise found from None
        finally:
            with anyio.CancelScope(shield=True):
                agent.close()

    @property
    def state(self) -> AgentState:
        """opening, running, stopped (by hand, not closed yet) or closed."""
        return self._state

    @property
    def _closed(self) -> bool:
        return self._state is AgentState.CLOSED

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Join the brief, start the heartbeat, report ready; run until cancelled or closed.

        :raises UsageError: if the agent runs already, or was closed.
        """
        if self._closed:
            raise UsageError(f"agent {self.id} is closed; make a new Agent to run it again")
        if self._running is not None:
            raise UsageError(f"agent {self.id} is running already: one run() per Agent")
        if self._ran:
            raise UsageError(f"agent {self.id} has run already: one run() per Agent")
        self._ran = True
        with anyio.CancelScope() as self._running:
            try:
                await self._leases.ensure()
                async with anyio.create_task_group() as tg:
                    await tg.start(self.replica.run)
                    await tg.start(self._beacon.run)
                    if not self._closed:
                        self._state = AgentState.RUNNING
                    task_status.started()
                    await anyio.sleep_forever()
            finally:
                self._running = None
                if not self._closed:
                    self._state = AgentState.STOPPED

    def close(self) -> None:
        """Stop `run` (the brief replica and the heartbeat), save what a restart needs,
        close the store and let another process have it. Closing again does nothing."""
        if self._closed:
            return
        self._state = AgentState.CLOSED
        if self._running is not None:
            # Outside its event loop (a sync teardown after `run`'s loop stopped) there is
            # nothing to cancel from here: whoever runs that loop ends `run` with it.
            with contextlib.suppress(RuntimeError):
                self._running.cancel()
        try:
            self._save_brief()
        finally:
            try:
                try:
                    self.context.close()  # even when the save failed: nothing else would close it
                finally:
                    self._store.close()
            finally:
                self._store_lock.release()

    # -- conversation --------------------------------------------------------------------

    @property
    def user_turns(self) -> int:
        """Real user turns so far (synthetic messages never count); persisted."""
        return int(self.context.get_state(_USER_TURNS_KEY) or 0)

    def user(self, text: str) -> int:
        """Record a real user message; returns its tag."""
        tag = self.context.add("user", text)
        self.context.set_state(_USER_TURNS_KEY, str(self.user_turns + 1))
        return tag

    def assistant(
        self,
        text: str,
        *,
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None,
        tool_name: str | None = None,
        call_id: str | None = None,
    ) -> int:
        """Record an assistant turn: its text and the calls it makes (`tool_calls`, or
        one call as `tool_name` and `call_id`); see `LocalContext.add`."""
        return self.context.add("assistant", text, tool_calls=tool_calls, tool_name=tool_name, call_id=call_id)

    async def tool_result(self, tool_name: str, output: str, *, call_id: str | None = None) -> ToolOutcome:
        """Record a tool's output and return it as the model should see it.

        Measures the tail, lets Channel 1 append a reminder if one is due, and lets
        Channel 2 deliver its message if this cycle needs one. The reminder is kept with
        the result, so the next compose shows it inside this tool message; it does not
        count in the tail. A bus outage only postpones Channel 2; it never fails the
        tool call.
        """
        tag = self.context.add("tool", output, tool_name=tool_name, call_id=call_id)
        measure = self.measure()
        if tool_name == REDUCE_TOOL_NAME:
            if self._reduces_unrecorded:
                # The reduce's own call and result now take window slots, which can
                # leave an older output unprotected: the grace counts from here, or
                # the agent's compliance would itself look like regrowth.
                self._reduces_unrecorded -= 1
                self.channel1.after_reduce(measure)
            return ToolOutcome(output, measure, None)
        outcome = self.channel1.after_tool_call(tool_name, measure, user_turn=self.user_turns)
        if outcome.text:
            # Written now: Channel 1 has recorded the reminder as given, and a restart
            # must find it where the model will read it.
            self.context.annotate(tag, outcome.text)
            self.context.flush()
        try:
            delivery = await self.channel2.observe(measure)
        except BusError as exc:
            # The tool ran and Channel 1 already counted its reminder as shown, so the
            # result must still go out with it; Channel 2 tries again on the next call.
            log.warning("Channel 2 skipped for %s: %s", self.id, exc)
            delivery = None
        text = output + outcome.text  # the span opens with its own blank line
        return ToolOutcome(text, measure, delivery)

    def measure(self) -> TailMeasure:
        """{U, T} of the tail as the model would see it now; queued drops leave U."""
        return self._measure_tail()[0]

    def _measure_tail(self, items: Sequence[TailItem] | None = None) -> tuple[TailMeasure, list[TailTag]]:
        items = self.context.tail() if items is None else items
        parts, tags = self._adapter.convert(items)
        # Dropped, but shown as they were until the context's next rebuild: they leave U as
        # the drops ctx_reduce queued here do.
        shown_until_rebuild = {item.tag for item in items if item.queued}
        measure = self._walker.measure(parts, tags, queued=frozenset(self._queued | shown_until_rebuild))
        self._measure = measure
        self._band = str(measure.band)
        return measure, tags

    def ctx_reduce(self, drop: str) -> DropPlan:
        """The `ctx_reduce` tool: queue tags for dropping at the next compose.

        The grace it starts is measured again once its result is recorded through
        `tool_result`. Final results (conclusions) are kept, never queued.

        :raises UsageError: for a malformed request (`DropSpecError`) or a tag never
            handed out (`UnknownDropTags`); nothing changes then.
        """
        items = self.context.tail()
        measure, tags = self._measure_tail(items)
        plan = plan_drops(
            drop,
            tags,
            next_tag=self.context.next_tag,
            protected=measure.protected,
            queued=frozenset(self._queued),
            keep=frozenset(item.tag for item in items if item.kind in FINAL_KINDS),
        )
        if plan.queued:
            self._queued.update(plan.queued)
            self._drop_now |= measure.band in (Band.URGENT, Band.CHANNEL2)
            # Kept with the grace period it starts, so a restart resumes both together.
            save_queued_drops(self.context, self._queued)
            self.channel1.after_reduce(self.measure())
            self._reduces_unrecorded += 1
        return plan

    def compose(self, user_input: str = "") -> Composition:
        """The prompt for the next model call: queued drops applied, the shared brief in its
        head. Send it with `Composition.to_openai()` or `to_anthropic()`."""
        with span("ctxbus.compose", {GEN_AI.AGENT_ID: self.id, "ctxbus.domain": str(self.domain)}) as current:
            dropped = bool(self._queued)
            if dropped:
                # magic-context's rule: below urgent, a drop waits for the next rebuild (the
                # high-water mark or the cache's lifetime), so the cached prefix is kept;
                # from urgent on, it is shown dropped at once.
                apply_queued_drops(self.context, self._queued, keep_prefix=not self._drop_now)
                self._queued.clear()
                self._drop_now = False
            composition = self.context.compose(user_input, brief=self._brief_text())
            self._last_prompt_tokens = composition.report.total
            if dropped:
                self._measure_tail()  # the heartbeat and ctx_status show the tail as it is now
            if self.prompt_cache is not None:
                self.prompt_cache.observe(composition.to_openai(), self._history())
            current.set_attribute("ctxbus.prompt_tokens", composition.report.total)
            current.set_attribute("ctxbus.band", self._band)
        return composition

    def measure_prompt_cache(self) -> PromptCache:
        """Count every compose from now on against a provider's prompt cache and against
        sending the whole history (`PromptCache`); returns the meter."""
        if self.prompt_cache is None:
            counts: dict[str, int] = {}
            tokenizer = self.context.tokenizer

            def count(text: str) -> int:
                n = counts.get(text)
                if n is None:
                    n = counts[text] = tokenizer.count(text)
                return n

            self.prompt_cache = PromptCache(CacheMeter(count))
        return self.prompt_cache

    def _history(self) -> int:
        """Tokens of everything recorded so far, counted once per message."""
        for tag in range(self._history_counted, self.context.next_tag):
            with contextlib.suppress(CtxbusError):  # a tag that names no message
                self._history_tokens += self.context.message(tag).tokens
        self._history_counted = self.context.next_tag
        return self._history_tokens

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """The `ctx_search` tool."""
        return self.context.search(query, limit=limit)

    def read(
        self,
        ref: int | str,
        *,
        lines: tuple[int, int | None] | None = None,
        query: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> str:
        """The `ctx_read` tool (see `LocalContext.read`)."""
        return self.context.read(ref, lines=lines, query=query, offset=offset, limit=limit)

    # -- shared brief --------------------------------------------------------------------

    @property
    def brief(self) -> TaskBrief:
        return self.replica.brief

    async def propose(
        self, op: BriefOp, *, key: str | None = None, deadline: float = DEFAULT_PROPOSE_DEADLINE
    ) -> Reply:
        """Propose a change to the shared brief; safe to retry with the same `key`. The
        one way an agent proposes (its tools, the loop and the MCP server all come here).

        :param deadline: seconds to keep asking a coordinator (`Proposer.propose`).
        :raises ProposalUnanswered: if no coordinator answered within `deadline`.
        :raises UsageError: if the agent was closed.
        """
        if self._closed:
            raise UsageError(f"agent {self.id} is closed; it proposes nothing more")
        return await self._proposer.propose(op, key=key, deadline=deadline)

    # -- status --------------------------------------------------------------------------

    def presence(self) -> Presence:
        """The heartbeat `ctxbus top` shows."""
        measure = self._measure
        revision = self.replica.revision if self.replica.joined else 0
        return Presence(
            agent=self.id,
            band=self._band,
            unused_tokens=measure.u if measure else 0,
            tail_tokens=measure.t if measure else 0,
            prompt_tokens=self._last_prompt_tokens,
            brief_revision=revision,
            lag=self.replica.state.behind if self.replica.joined else 0,
            cached_share=self._cached_share(),
        )

    def _cached_share(self) -> float | None:
        if self.reported_cached_share is not None:
            return self.reported_cached_share
        meter = self.prompt_cache.meter if self.prompt_cache is not None else None
        return round(meter.cached_share, 4) if meter is not None and meter.calls else None

    def status(self) -> dict[str, object]:
        """What `ctx_status` reports: band, U/T, prompt size, brief revision."""
        presence = self.presence()
        return {
            **presence.model_dump(exclude={"at"}),
            "queued_drops": sorted(self._queued),
            "brief_hash": self.replica.hash if self.replica.joined else None,
        }

    # -- internals -----------------------------------------------------------------------

    def _brief_text(self) -> str | None:
        if not self.replica.joined:
            return None
        self._save_brief()
        return self.replica.render()

    def _save_brief(self) -> None:
        if self.replica.joined:
            save_brief(self.context, self.replica.state)


def _make_store_dir(store: Path) -> None:
    """Create the directory the agent's store goes in.

    :raises StoreError: naming the store and the reason, if it cannot be created.
    """
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory of agent store {store}: {exc.strerror or exc}") from exc


def _lock_store(config: AgentConfig) -> PidLock:
    """One process per agent store: two would write the same tags into it.

    :raises StoreError: naming the process that has it.
    """
    lock = PidLock(config.store.with_name(config.store.name + ".lock"))
    try:
        taken = lock.acquire()
    except OSError as exc:
        raise StoreError(f"cannot lock the agent store {config.store}: {exc.strerror or exc}") from exc
    if not taken:
        holder = lock.holder()
        if holder == str(os.getpid()):
            raise StoreError(
                f"the store of agent {config.agent_id!r} ({config.store}) is open already in this "
                "process, by another Agent: close that one first, or give this one another name"
            )
        raise StoreError(
            f"the store of agent {config.agent_id!r} ({config.store}) is in use by another process "
            f"(pid {holder}); run one process per agent name, or give this one another name"
        )
    return lock
