"""ctx_read by query through the SDK's own client, and a tool body that crashes.

A query returns the numbered lines of a message that hold any of its words; a query
and a line range together are refused. A body that raises something unexpected (a
bug: not a `CtxbusError` or `ValueError`) is recorded in the agent's context as an
internal error and re-raised, so the SDK logs it and answers the client with its own
line, which quotes nothing of the error.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from ctxbus.agents.context import LocalContext
from ctxbus.agents.mcp import McpHost, ToolCalls, build_server, host_context
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain
from tests._support import running_coordinator

WINDOW = 8_192
REMINDER = "<system-reminder>"


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[NatsClient]:
    """A client on the session's NATS, with a coordinator serving it for this test."""
    async with running_coordinator(nats_url, coordinator_id="mcp-read") as (running, _):
        yield running


class Bug(Exception):
    """What a tool body raises in `crash`: an error nobody anticipated."""


@asynccontextmanager
async def connected(client: NatsClient, store: Path) -> AsyncIterator[tuple[Client, Agent]]:
    """An agent on a fresh domain, joined to its brief and served in process, and an MCP
    client on it. Besides the six tools, the server has `crash`, whose body raises `Bug`
    through the same `ToolCalls` machinery as theirs."""
    domain = Domain.parse(f"alice/read/{uuid.uuid4().hex[:8]}")
    config = AgentConfig(agent_id="claude", domain=domain, store=store, context=host_context(WINDOW))
    async with Agent.open(client, config, host_for=McpHost) as agent:
        assert isinstance(agent.host, McpHost)
        server = build_server(agent)
        calls = ToolCalls(agent, agent.host)

        async def crash(detail: str) -> CallToolResult:
            async def body() -> str:
                raise Bug(detail)

            return await calls.run("crash", {"detail": detail}, body)

        server.add_tool(crash)
        async with Client(server) as mcp:
            yield mcp, agent


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def split(result: CallToolResult) -> tuple[int, str]:
    """The `§N§` tag a result starts with, and the rest of it."""
    head, _, rest = text(result).partition(" ")
    assert re.fullmatch(r"§\d+§", head), text(result)
    return int(head.strip("§")), rest


def tagged_error(result: CallToolResult) -> tuple[int, str]:
    """The tag and the sentence of a `§N§ error: ...` result, checked to be one line."""
    tag, rest = split(result)
    assert result.is_error and rest.startswith("error: ") and "\n" not in rest, text(result)
    return tag, rest.removeprefix("error: ")


CONSTRAINTS = ("cache reads in SQLite", "no Redis in production", "keep the sqlite file under 1 GB")


async def read_brief(mcp: Client) -> tuple[int, list[str]]:
    """A brief_get result holding `CONSTRAINTS`: its tag and its lines, as stored."""
    for constraint in CONSTRAINTS:
        assert not (await mcp.call_tool("brief_propose", {"op": {"op": "add_constraint", "text": constraint}})).is_error
    with anyio.fail_after(10):  # hang guard: the replica follows the log in milliseconds
        while CONSTRAINTS[-1] not in text(result := await mcp.call_tool("brief_get", {})):
            await anyio.sleep(0.05)
    assert not result.is_error and REMINDER not in text(result)  # the stored output is all there is
    tag, body = split(result)
    return tag, body.splitlines()


async def test_a_query_returns_the_numbered_lines_holding_any_of_its_words(client: NatsClient, tmp_path: Path) -> None:
    async with connected(client, tmp_path / "a.db") as (mcp, _):
        tag, lines = await read_brief(mcp)

        def expected(*words: str) -> str:
            return "\n".join(f"{n}: {line}" for n, line in enumerate(lines, 1) if any(w in line.lower() for w in words))

        sqlite = await mcp.call_tool("ctx_read", {"tag": tag, "query": "SQLITE"})  # any case
        assert not sqlite.is_error
        assert split(sqlite)[1] == expected("sqlite")
        assert len(split(sqlite)[1].splitlines()) == 2, "both SQLite constraints, nothing else"
        either = await mcp.call_tool("ctx_read", {"tag": f"§{tag}§", "query": "redis, sqlite!"})
        assert split(either)[1] == expected("redis", "sqlite") != expected("sqlite")
        nothing = await mcp.call_tool("ctx_read", {"tag": tag, "query": "null"})  # a word, not JSON's null
        assert split(nothing)[1] == f"no line of §{tag}§ holds 'null'", text(nothing)
        # The numbers are the message's own line numbers: a range reads the same line.
        first = int(split(sqlite)[1].split(":", 1)[0])
        same = await mcp.call_tool("ctx_read", {"tag": tag, "first_line": first, "last_line": first})
        assert split(same)[1] == split(sqlite)[1].splitlines()[0]


async def test_lines_of_an_empty_message_are_refused_as_such(client: NatsClient, tmp_path: Path) -> None:
    async with connected(client, tmp_path / "a.db") as (mcp, agent):
        tag = agent.context.add("assistant", "")
        _, sentence = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "last_line": 2}))
    assert sentence == f"§{tag}§ is empty: it has no lines to read"


async def test_a_query_and_a_line_range_together_are_refused(client: NatsClient, tmp_path: Path) -> None:
    async with connected(client, tmp_path / "a.db") as (mcp, agent):
        tag, _ = await read_brief(mcp)
        for arguments in (
            {"tag": tag, "query": "sqlite", "first_line": 1},
            {"tag": tag, "query": "sqlite", "last_line": 3},
            {"tag": tag, "query": "sqlite", "first_line": 1, "last_line": 3},
        ):
            refused, sentence = tagged_error(await mcp.call_tool("ctx_read", arguments))
            assert sentence == "give a line range or a query, not both", arguments
            # Recorded like any result: the model can read its own error back.
            assert agent.read(refused) == "error: give a line range or a query, not both"
        _, no_words = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "query": "?!"}))
        assert no_words == "query '?!' has no words to look for"
        _, empty = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "query": ""}))
        assert empty == "argument 'query' must be a string of 1 to 500 characters, got \"\""


async def test_a_crashing_tool_is_recorded_as_an_internal_error_and_the_server_goes_on(
    client: NatsClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with connected(client, tmp_path / "a.db") as (mcp, agent):
        assert not (await mcp.call_tool("brief_get", {})).is_error
        call_tag = agent.context.next_tag

        with caplog.at_level(logging.ERROR):
            crashed = await mcp.call_tool("crash", {"detail": "the secret in the traceback"})

        # The SDK's own answer: nothing of the error reaches the client.
        assert crashed.is_error and text(crashed) == "Error executing tool crash"
        # Re-raised for the SDK, which logged it with the original as the cause.
        [logged] = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert logged.exc_info is not None and logged.exc_info[1] is not None
        cause = logged.exc_info[1].__cause__
        assert isinstance(cause, Bug) and str(cause) == "the secret in the traceback", logged.exc_info
        # Recorded in the context: the call with its arguments, then the error as its result.
        call, result = [m for m in agent.context.messages() if m.tag >= call_tag]
        assert (call.tag, call.role, call.tool_name) == (call_tag, "assistant", "crash")
        assert [(c.name, c.arguments) for c in call.tool_calls] == [
            ("crash", '{"detail": "the secret in the traceback"}')
        ]
        assert (result.tag, result.role, result.tool_name) == (call_tag + 1, "tool", "crash")
        assert result.content == "error: internal error"

        # The server goes on, tags go on after the recorded pair, and the error reads back.
        back = await mcp.call_tool("ctx_read", {"tag": call_tag + 1})
        assert not back.is_error and split(back) == (call_tag + 3, "error: internal error")


def _long_line(chars: int) -> str:
    """One line of `chars` characters, different all along, so any slice tells where it is from."""
    words, size, i = [], 0, 0
    while size < chars:
        words.append(f"w{i}")
        size += len(words[-1]) + 1
        i += 1
    return " ".join(words)[:chars]


async def test_a_10_mb_line_is_read_in_pages(client: NatsClient, tmp_path: Path) -> None:
    line = _long_line(10_000_000)
    async with connected(client, tmp_path / "a.db") as (mcp, agent):
        tag = agent.context.add("tool", line, tool_name="bash", call_id="big")
        first = await mcp.call_tool("ctx_read", {"tag": tag})
        assert not first.is_error
        body = split(first)[1]
        piece, _, trailer = body.rpartition("\n")
        assert len(body) < 20_200, "a page, not the whole line"
        assert piece == line[:20_000]
        assert trailer == f"[§{tag}§: characters 0-20,000 of 10,000,000; read on with offset=20000]"
        second = split(await mcp.call_tool("ctx_read", {"tag": tag, "offset": 20_000}))[1]
        assert second.rpartition("\n")[0] == line[20_000:40_000]
        last = split(await mcp.call_tool("ctx_read", {"tag": tag, "offset": 9_990_000}))[1]
        assert last == line[9_990_000:] + f"\n[§{tag}§: characters 9,990,000-10,000,000 of 10,000,000; the end]"
        _, past = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "offset": 10_000_000}))
        assert past == f"offset 10,000,000 is past the end: this read of §{tag}§ is 10,000,000 characters"
        # A line range pages the same way, by characters of its numbered answer.
        numbered = split(await mcp.call_tool("ctx_read", {"tag": tag, "first_line": 1, "last_line": 1}))[1]
        assert numbered.startswith("1: w0 w1 ") and len(numbered) < 20_200

    # Every page, read on from the offset each one names, gives back the line whole.
    with LocalContext(tmp_path / "a.db", agent.domain) as context:
        pages, offset = [], 0
        while True:
            answer = context.read(tag, offset=offset, limit=1_000_000)
            piece, _, trailer = answer.rpartition("\n")
            pages.append(piece)
            if trailer.endswith("the end]"):
                break
            offset = int(trailer.rsplit("offset=", 1)[1].rstrip("]"))
        assert "".join(pages) == line and len(pages) == 10
