"""The six tools an MCP client gets: the shared brief and the agent's own context.

Method docstrings are the tool descriptions the client's model reads, and parameter
`Field`s become the input schema, so both are written for that reader.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

import anyio
from mcp.types import CallToolResult
from pydantic import Field

from agents.mcp._calls import ToolCalls, ToolFailure
from agents.mcp._ops import op_menu, parse_op
from agents.runtime import Agent
from schemas import KEY_MAX, Rejection, UsageError

__all__ = ["AgentTools", "MCP_PROPOSE_DEADLINE", "TAIL_SHOWN"]

MCP_PROPOSE_DEADLINE: Final = 20.0
"""Seconds `brief_propose` waits for a coordinator: shorter than the agent's own
`agents.brief.DEFAULT_PROPOSE_DEADLINE`, to stay well inside clients' tool timeouts."""

TAIL_SHOWN: Final = 30
"""Newest tool results `ctx_status` lists, so the model can pick what to release."""

_VISIBLE_WAIT: Final = 5.0
"""Seconds to wait for our own commit to reach the local replica (read-your-writes)."""

_TO_END: Final = 2**31
"""`last_line` when only `first_line` is given."""

_OP_HELP = (
    "One brief operation, as an object with an `op` field and that op's fields "
    "(`?` marks optional ones; reject, reopen and remove_constraint need a reason):\n" + op_menu()
)


class AgentTools:
    """Tool bodies bound to one `Agent`; each runs through `ToolCalls`."""

    def __init__(self, agent: Agent, calls: ToolCalls, *, propose_deadline: float = MCP_PROPOSE_DEADLINE) -> None:
        self._agent = agent
        self._calls = calls
        self._propose_deadline = propose_deadline

    def __repr__(self) -> str:
        return f"<AgentTools of {self._agent!r}>"

    def brief_text(self) -> str:
        """The brief as the pinned context block renders it, with its hash."""
        replica = self._agent.replica
        return f"{replica.render()}\n(hash {replica.hash[:16]})"

    # -- shared brief -------------------------------------------------------------------

    async def brief_get(
        self,
        view: Annotated[Literal["text", "json"], Field(description="'text' to read, 'json' for every field.")] = "text",
    ) -> CallToolResult:
        """Read the task brief every agent on this task shares: goal, constraints,
        decisions, rejected options (with reasons), blockers, pending and done items,
        notes. Item ids in [brackets] are what brief_propose ops refer to."""

        async def body() -> str:
            if view == "text":
                return self.brief_text()
            replica = self._agent.replica
            return json.dumps(
                {"revision": replica.revision, "hash": replica.hash, "brief": replica.brief.model_dump(mode="json")}
            )

        return await self._calls.run("brief_get", {"view": view}, body)

    async def brief_propose(
        self,
        op: Annotated[dict[str, Any], Field(description=_OP_HELP)],
        key: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=KEY_MAX,
                description="Idempotency key: reuse it to retry a proposal without committing it twice.",
            ),
        ] = None,
    ) -> CallToolResult:
        """Propose one change to the shared brief. A coordinator checks it against the
        brief (e.g. a rejected option cannot be adopted without reopening it) and
        commits it for every agent, or refuses it with the reason. Example op:
        {"op": "add_decision", "option": "use sqlite", "rationale": "no server to run"}."""

        async def body() -> str:
            reply = await self._agent.proposer.propose(parse_op(op), key=key, deadline=self._propose_deadline)
            if isinstance(reply, Rejection):
                raise ToolFailure(f"rejected ({reply.code}): {reply.reason}")
            with anyio.move_on_after(_VISIBLE_WAIT):
                await self._agent.replica.wait_for(reply.revision)
            again = " (already committed earlier with this key)" if reply.duplicate else ""
            return f"committed at revision {reply.revision}{again}"

        return await self._calls.run("brief_propose", {"op": op, "key": key}, body)

    # -- own context --------------------------------------------------------------------

    async def ctx_search(
        self,
        query: Annotated[str, Field(min_length=1, max_length=500, description="Words to look for.")],
        limit: Annotated[int, Field(ge=1, le=20, description="Most hits to return.")] = 5,
    ) -> CallToolResult:
        """Search everything this agent has seen through these tools, including output
        it released with ctx_reduce. Returns compact hits; read one in full with
        ctx_read."""

        async def body() -> str:
            hits = self._agent.search(query, limit)
            if not hits:
                return f"no matches for {query!r}"
            return "\n".join(
                f"§{h.tag}§ {h.tool_name or h.kind} ({h.layer}, score {h.score:.1f}): {h.snippet}" for h in hits
            )

        return await self._calls.run("ctx_search", {"query": query, "limit": limit}, body)

    async def ctx_read(
        self,
        tag: Annotated[int | str, Field(description="A tag such as 12 or '§12§' (or a message id).")],
        first_line: Annotated[int | None, Field(ge=1, description="First line to return (1-based).")] = None,
        last_line: Annotated[int | None, Field(ge=1, description="Last line to return, inclusive.")] = None,
        query: Annotated[
            str | None, Field(min_length=1, max_length=500, description="Return only the lines with these words.")
        ] = None,
    ) -> CallToolResult:
        """Read the full text of a tagged message, or some of its lines. Nothing is ever
        lost: released (ctx_reduce) output reads back in full."""

        async def body() -> str:
            if query is not None and (first_line or last_line):
                raise UsageError("give a line range or a query, not both")
            lines = (first_line or 1, last_line or _TO_END) if first_line or last_line else None
            return self._agent.read(tag, lines=lines, query=query)

        arguments = {"tag": tag, "first_line": first_line, "last_line": last_line, "query": query}
        return await self._calls.run("ctx_read", arguments, body)

    async def ctx_reduce(
        self,
        drop: Annotated[
            str, Field(min_length=1, max_length=2000, description='Tags and ranges to release, e.g. "3-5,9".')
        ],
    ) -> CallToolResult:
        """Release tool outputs you have finished with, by the §N§ tags their results
        start with. They stop counting against your context; the text stays
        searchable and readable with ctx_search and ctx_read."""

        async def body() -> str:
            return self._agent.ctx_reduce(drop).summary()

        return await self._calls.run("ctx_reduce", {"drop": drop}, body)

    async def ctx_status(self) -> CallToolResult:
        """This agent's context and brief state: nudge band, releasable (U) and total
        (T) tail tokens, queued releases, brief revision and hash, and the newest tool
        results with their tags and sizes."""

        async def body() -> str:
            agent = self._agent
            agent.measure()
            tail = [item for item in agent.context.tail() if item.kind == "tool_result"][-TAIL_SHOWN:]
            status = {
                "agent": agent.id,
                "domain": str(agent.domain),
                **agent.status(),
                "tail": [
                    {"tag": i.tag, "tool": i.tool_name, "tokens": i.tokens, "state": i.state, "protected": i.protected}
                    for i in tail
                ],
            }
            return json.dumps(status, default=str)

        return await self._calls.run("ctx_status", {}, body)
