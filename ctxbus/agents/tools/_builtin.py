"""The built-in tools every ctxbus agent has: the shared brief and its own context.

One set of bodies serves both fronts: the MCP server (`agents.mcp`, which records each
call and wraps the text in a `CallToolResult`) and the agent loop (`agents.loop`, which
records the model's calls itself). Method docstrings are the tool descriptions the
model reads, and parameter `Field`s become the input schema, so both are written for
that reader. Every argument is let through as sent and the body checks it (see
`_args`), so a bad argument is a one-sentence error like any other: a body returns the
result's text, or raises `ToolFailure` (a refusal the model must read) or a
`UsageError` (a bad argument).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Sequence
from typing import Annotated, Any, Final, Protocol

import anyio
import anyio.to_thread
from pydantic import Field

from ctxbus.agents.brief import ProposalUnanswered
from ctxbus.agents.context import LinesPastTheEnd, SearchHit, StoreError, UnknownReference
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import _args as args
from ctxbus.agents.tools._ops import op_menu, parse_op
from ctxbus.schemas import KEY_MAX, CtxbusError, Rejection, UsageError

__all__ = ["BUILTIN_TOOLS", "PROPOSE_DEADLINE", "TAIL_SHOWN", "Archive", "BuiltinTools", "ToolFailure"]

log = logging.getLogger(__name__)

PROPOSE_DEADLINE: Final = 20.0
"""Seconds `brief_propose` waits for a coordinator: shorter than the agent's own
`agents.brief.DEFAULT_PROPOSE_DEADLINE`, to stay well inside clients' tool timeouts."""

BUILTIN_TOOLS: Final = ("brief_get", "brief_propose", "ctx_search", "ctx_read", "ctx_reduce", "ctx_status")
"""The tools `BuiltinTools` defines, by name (each a method of that name)."""

TAIL_SHOWN: Final = 30
"""Newest tool results `ctx_status` lists, so the model can pick what to release."""

_VISIBLE_WAIT: Final = 5.0
"""Seconds to wait for our own commit to reach the local replica (read-your-writes)."""

_VIEWS: Final = ("text", "json", "json_keys")
_BOOKKEEPING: Final = frozenset({"applied_keys", "keys_forgotten_until"})
"""Fields of the brief that only idempotency needs: left out of `json` (thousands of
tokens on a busy task), shown by `json_keys`."""
_QUERY_MAX: Final = 500
_DROP_MAX: Final = 2000
_LIMIT_MAX: Final = 20
READ_CHARS: Final = 20_000
"""Characters ctx_read returns at most (~5k tokens); the rest is read on with `offset`."""

_KEY_HELP = (
    "Idempotency key: reuse it to retry a proposal without committing it twice. A key "
    "belongs to one operation: sent again with the same op, a committed key is answered "
    "as already committed (nothing new is committed); sent with another op, it is refused "
    "(key_reused). Use a new key for each new op."
)

_OP_HELP = (
    "One brief operation, as an object with an `op` field and that op's fields "
    "(`?` marks optional ones; reject, reopen and remove_constraint need a reason):\n" + op_menu()
)


_LineNumber = Annotated[Any, args.AS_SENT, args.schema({"type": "integer", "minimum": 1}, optional=True)]
"""A 1-based line number, or None: checked in the tool body."""


class ToolFailure(CtxbusError):
    """Raised by a tool body for an answer the model must read as a failure (e.g. a
    rejected proposal), as opposed to a bug."""


class Archive(Protocol):
    """Another store of the same agent that `ctx_search` and `ctx_read` reach besides its
    own: what a host's hooks recorded (`agents.hooks.HooksArchive`). Its messages are
    named by id (`<hash>-<tag>`), never by a bare tag, which names the agent's own."""

    label: str
    """Where its hits come from, as the model is told."""

    def search(self, query: str, limit: int) -> list[SearchHit]: ...

    def read(
        self,
        ref: str,
        *,
        lines: tuple[int, int | None] | None = None,
        query: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> str: ...


class BuiltinTools:
    """Tool bodies bound to one `Agent`: each returns the result's text.

    :param archives: other stores of the agent that `ctx_search` and `ctx_read` reach
        too (they may block on a lock for a moment: they run in a worker thread).
    """

    def __init__(
        self, agent: Agent, *, propose_deadline: float = PROPOSE_DEADLINE, archives: Sequence[Archive] = ()
    ) -> None:
        self._agent = agent
        self._propose_deadline = propose_deadline
        self._archives = tuple(archives)

    def __repr__(self) -> str:
        return f"<BuiltinTools of {self._agent!r}>"

    def brief_text(self) -> str:
        """The brief as the pinned context block renders it, with its hash."""
        replica = self._agent.replica
        return f"{replica.render()}\n(hash {replica.hash[:16]})"

    # -- shared brief -------------------------------------------------------------------

    async def brief_get(
        self,
        view: Annotated[
            str,
            args.AS_SENT,
            args.schema({"type": "string", "enum": list(_VIEWS)}),
            Field(
                description=(
                    "'text' to read, 'json' for every field of the task, 'json_keys' for those and the "
                    "idempotency keys committed so far (bookkeeping, long on a busy task)."
                )
            ),
        ] = "text",
    ) -> str:
        """Read the task brief every agent on this task shares: goal, constraints,
        decisions, rejected options (with reasons), blockers, pending and done items,
        notes. Item ids in [brackets] are what brief_propose ops refer to."""

        chosen = args.choice("view", view, _VIEWS)
        if chosen == "text":
            return self.brief_text()
        replica = self._agent.replica
        brief = replica.brief.model_dump(mode="json", exclude=None if chosen == "json_keys" else set(_BOOKKEEPING))
        return json.dumps({"revision": replica.revision, "hash": replica.hash, "brief": brief})

    async def brief_propose(
        self,
        op: Annotated[Any, args.AS_SENT, args.schema({"type": "object"}), Field(description=_OP_HELP)],
        key: Annotated[
            str,  # not `str | None`: see `_args` on why a string parameter stays `str`
            args.AS_SENT,
            args.schema({"type": "string", "minLength": 1, "maxLength": KEY_MAX}, optional=True),
            Field(description=_KEY_HELP),
        ] = None,  # type: ignore[assignment]
    ) -> str:
        """Propose one change to the shared brief. A coordinator checks it against the
        brief (e.g. a rejected option cannot be adopted without reopening it) and
        commits it for every agent, or refuses it with the reason. Example op:
        {"op": "add_decision", "option": "use sqlite", "rationale": "no server to run"}.
        An idempotency key belongs to one operation: never reuse one for another op."""

        parsed = parse_op(op)
        wanted = args.optional_text("key", key, max_length=KEY_MAX)
        try:
            reply = await self._agent.propose(parsed, key=wanted, deadline=self._propose_deadline)
        except ProposalUnanswered as exc:
            raise ToolFailure(
                f"no coordinator answered within {self._propose_deadline:g}s, so the proposal may or may not "
                f"be committed: call brief_propose again with the same op and key={exc.key!r} to find out "
                "without committing it twice"
            ) from exc
        if isinstance(reply, Rejection):
            raise ToolFailure(f"rejected ({reply.code}): {reply.reason}")
        with anyio.move_on_after(_VISIBLE_WAIT):
            await self._agent.replica.wait_for(reply.revision)
        again = " (already committed earlier with this key)" if reply.duplicate else ""
        return f"committed at revision {reply.revision}{again}"

    # -- own context --------------------------------------------------------------------

    async def ctx_search(
        self,
        query: Annotated[
            str,
            args.AS_SENT,
            args.schema({"type": "string", "minLength": 1, "maxLength": _QUERY_MAX}),
            Field(description="Words to look for."),
        ],
        limit: Annotated[
            Any,
            args.AS_SENT,
            args.schema({"type": "integer", "minimum": 1, "maximum": _LIMIT_MAX}),
            Field(description="Most hits to return."),
        ] = 5,
    ) -> str:
        """Search everything this agent has seen through these tools, including output
        it released with ctx_reduce, and the host's own tool output where its hooks
        record it (ctxbus's Claude Code hooks do). Returns compact hits, best first;
        read one in full with ctx_read, by its §N§ tag or, for a hit the hooks
        recorded, by its id (such as 1f2e3d4c5b6a7980-12)."""

        words = args.text("query", query, max_length=_QUERY_MAX)
        most = args.integer("limit", limit, minimum=1, maximum=_LIMIT_MAX)
        hits = [(hit, f"§{hit.tag}§", hit.layer) for hit in self._agent.search(words, most)]
        unread: list[str] = []
        for archive in self._archives:
            try:
                found = await anyio.to_thread.run_sync(archive.search, words, most)
            except StoreError as exc:
                log.warning("%s not searched: %s", archive.label, exc)
                unread.append(f"({archive.label}'s records could not be searched: {exc})")
                continue
            hits += [(hit, hit.id, archive.label) for hit in found]
        hits.sort(key=lambda found: -found[0].score)
        lines = [
            f"{ref} {hit.tool_name or hit.kind} ({where}, score {hit.score:.1f}): {hit.snippet}"
            for hit, ref, where in hits[:most]
        ]
        return "\n".join(lines + unread) if lines else "\n".join([f"no matches for {words!r}", *unread])

    async def ctx_read(
        self,
        tag: Annotated[
            Any,
            args.AS_SENT,
            args.schema({"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]}),
            Field(description="A tag such as 12 or '§12§' (or a message id)."),
        ],
        first_line: Annotated[_LineNumber, Field(description="First line to return (1-based).")] = None,
        last_line: Annotated[_LineNumber, Field(description="Last line to return, inclusive.")] = None,
        query: Annotated[
            str,  # not `str | None`: see `_args` on why a string parameter stays `str`
            args.AS_SENT,
            args.schema({"type": "string", "minLength": 1, "maxLength": _QUERY_MAX}, optional=True),
            Field(description="Return only the lines with these words."),
        ] = None,  # type: ignore[assignment]
        offset: Annotated[
            Any,
            args.AS_SENT,
            args.schema({"type": "integer", "minimum": 0}, optional=True),
            Field(description="Where to start in a long answer: the offset its last line names."),
        ] = None,
    ) -> str:
        """Read the full text of a tagged message, or some of its lines. Nothing is ever
        lost: released (ctx_reduce) output reads back in full. A long answer comes in
        pages of 20,000 characters, each ending with the offset to read on from."""

        ref = args.tag("tag", tag)
        first = args.optional_integer("first_line", first_line, minimum=1)
        last = args.optional_integer("last_line", last_line, minimum=1)
        words = args.optional_text("query", query, max_length=_QUERY_MAX)
        start = args.optional_integer("offset", offset, minimum=0) or 0
        if words is not None and (first or last):
            raise UsageError("give a line range or a query, not both")
        if first is not None and last is not None and last < first:
            raise UsageError(f"last_line={last} is before first_line={first}")
        try:
            lines = None if first is None and last is None else (first or 1, last)
            return await self._read(ref, lines=lines, query=words, offset=start, limit=READ_CHARS)
        except LinesPastTheEnd as exc:  # say it with the arguments the model sent
            sent = ", ".join(f"{name}={value}" for name, value in (("first_line", first), ("last_line", last)) if value)
            if not exc.lines:
                raise UsageError(f"§{exc.tag}§ is empty: it has no lines to read") from None
            plural = "" if exc.lines == 1 else "s"
            raise UsageError(f"{sent} starts past the end: §{exc.tag}§ has {exc.lines:,} line{plural}") from None

    async def _read(
        self, ref: int | str, *, lines: tuple[int, int | None] | None, query: str | None, offset: int, limit: int
    ) -> str:
        """The agent's own message `ref`, else the archived one with that id."""
        try:
            return self._agent.read(ref, lines=lines, query=query, offset=offset, limit=limit)
        except UnknownReference:
            if not isinstance(ref, str):
                raise
            for archive in self._archives:
                read = functools.partial(archive.read, ref, lines=lines, query=query, offset=offset, limit=limit)
                with contextlib.suppress(UnknownReference):
                    return await anyio.to_thread.run_sync(read)
            raise

    async def ctx_reduce(
        self,
        drop: Annotated[
            str,
            args.AS_SENT,
            args.schema({"type": "string", "minLength": 1, "maxLength": _DROP_MAX}),
            Field(description='Tags and ranges to release, e.g. "3-5,9".'),
        ],
    ) -> str:
        """Release tool outputs you have finished with, by the §N§ tags their results
        start with. They stop counting against your context; the text stays
        searchable and readable with ctx_search and ctx_read."""

        return self._agent.ctx_reduce(args.text("drop", drop, max_length=_DROP_MAX)).summary()

    async def ctx_status(self) -> str:
        """This agent's context and brief state: nudge band, releasable (U) and total
        (T) tail tokens, queued releases, brief revision and hash, and the newest tool
        results with their tags and sizes."""

        agent = self._agent
        # What ctx_reduce defers is the nudges' protection (a token window plus the
        # newest ctx_reduce calls), not the engine's count-based eviction window
        # (`TailItem.protected`): report the one ctx_reduce will apply.
        protected = agent.measure().protected
        tail = [item for item in agent.context.tail() if item.kind == "tool_result"][-TAIL_SHOWN:]
        status = {
            "agent": agent.id,
            "domain": str(agent.domain),
            **agent.status(),
            "tail": [
                {
                    "tag": i.tag,
                    "tool": i.tool_name,
                    "tokens": i.tokens,
                    "state": i.state,
                    "protected": i.tag in protected,
                }
                for i in tail
            ],
        }
        return json.dumps(status, default=str)
