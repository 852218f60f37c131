"""The MCP tools in process, through the SDK's own client: bad arguments, unanswered and
reused-key proposals, line ranges and annotations, each answered as a tagged result."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from ctxbus.agents.mcp import McpHost, build_server, host_context
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain
from tests._support import running_coordinator

WINDOW = 8_192


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[NatsClient]:
    """A client on the session's NATS, with a coordinator serving it for this test."""
    async with running_coordinator(nats_url, coordinator_id="mcp-tools") as (running, _):
        yield running


@asynccontextmanager
async def connected(
    client: NatsClient, store: Path, *, joined: bool = True, propose_deadline: float = 20.0, window: int = WINDOW
) -> AsyncIterator[Client]:
    """An agent on a fresh domain, served in process, and an MCP client on it.

    :param joined: run the agent (its replica joins the brief, which needs the log a
        coordinator creates); brief_propose alone works without.
    """
    domain = Domain.parse(f"alice/tools/{uuid.uuid4().hex[:8]}")
    config = AgentConfig(agent_id="claude", domain=domain, store=store, context=host_context(window))
    agent = Agent(client, config, host_for=McpHost)
    try:
        async with anyio.create_task_group() as tg:
            if joined:
                await tg.start(agent.run)
            async with Client(build_server(agent, propose_deadline=propose_deadline)) as mcp:
                yield mcp
            tg.cancel_scope.cancel()
    finally:
        agent.close()


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def tagged_error(result: CallToolResult) -> str:
    """The error sentence of a tagged error result (`§N§ error: ...`), checked to be one line."""
    head, _, rest = text(result).partition(" ")
    assert result.is_error and head.startswith("§") and head.endswith("§"), text(result)
    assert rest.startswith("error: ") and "\n" not in rest, rest
    return rest.removeprefix("error: ")


@pytest.mark.parametrize(
    ("tool", "arguments", "sentence"),
    [
        ("brief_propose", {"op": "set_goal"}, 'the op must be an object such as {"op": "set_goal", "text": "..."}, got "set_goal"'),
        ("brief_propose", {"op": ["set_goal"]}, 'the op must be an object such as {"op": "set_goal", "text": "..."}, got ["set_goal"]'),
        ("brief_propose", {"op": {"op": "set_goal", "text": "x"}, "key": ""}, "argument 'key' must be a string of 1 to 128 characters, got \"\""),
        ("brief_propose", {"op": {"op": "set_goal", "text": "x"}, "key": 7}, "argument 'key' must be a string of 1 to 128 characters, got 7"),
        ("brief_get", {"view": "xml"}, "argument 'view' must be \"text\" or \"json\" or \"json_keys\", got \"xml\""),
        ("ctx_read", {"tag": 1.5}, 'argument \'tag\' must be a tag: a whole number such as 12, or a string such as "§12§", got 1.5'),
        ("ctx_read", {"tag": True}, 'argument \'tag\' must be a tag: a whole number such as 12, or a string such as "§12§", got true'),
        ("ctx_read", {"tag": 1, "first_line": 0}, "argument 'first_line' must be a whole number >= 1, got 0"),
        ("ctx_read", {"tag": 1, "last_line": "9"}, "argument 'last_line' must be a whole number >= 1, got \"9\""),
        ("ctx_search", {"query": "x", "limit": 21}, "argument 'limit' must be a whole number from 1 to 20, got 21"),
        ("ctx_search", {"query": ""}, "argument 'query' must be a string of 1 to 500 characters, got \"\""),
        ("ctx_reduce", {"drop": 3}, "argument 'drop' must be a string of 1 to 2,000 characters, got 3"),
    ],
)  # fmt: skip
async def test_a_bad_argument_is_one_tagged_sentence(
    client: NatsClient, tmp_path: Path, tool: str, arguments: dict[str, object], sentence: str
) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        assert tagged_error(await mcp.call_tool(tool, arguments)) == sentence


async def test_true_is_not_tag_1_strings_arrive_as_sent_and_the_schema_says_what_each_takes(
    client: NatsClient, tmp_path: Path
) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        await mcp.call_tool("brief_get", {})  # §1§ is its call, §2§ its result
        assert not (await mcp.call_tool("ctx_read", {"tag": 1})).is_error
        assert tagged_error(await mcp.call_tool("ctx_read", {"tag": True})).startswith("argument 'tag'")
        # String arguments reach the body as sent: the SDK does not JSON-decode "null" into None.
        found = await mcp.call_tool("ctx_search", {"query": "null"})
        assert not found.is_error and '"query": [null]' in text(found), text(found)  # the calls above hold null
        schemas = {tool.name: tool.input_schema for tool in (await mcp.list_tools()).tools}
    assert schemas["ctx_read"]["required"] == ["tag"]
    assert schemas["ctx_read"]["properties"]["tag"]["anyOf"][0] == {"type": "integer"}
    assert schemas["brief_get"]["properties"]["view"]["enum"] == ["text", "json", "json_keys"]
    assert schemas["brief_propose"]["properties"]["op"]["type"] == "object"
    assert schemas["brief_propose"]["required"] == ["op"]
    assert schemas["ctx_search"]["properties"]["limit"]["maximum"] == 20


async def test_a_line_range_past_the_end_names_what_was_sent(client: NatsClient, tmp_path: Path) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        first = await mcp.call_tool("brief_get", {})
        tag = int(text(first).split("§")[1])
        lines = len(text(first).split(" ", 1)[1].splitlines())
        past = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "first_line": lines + 1}))
        assert past == f"first_line={lines + 1} starts past the end: §{tag}§ has {lines:,} lines"
        both = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "first_line": 9, "last_line": 12}))
        assert both == f"first_line=9, last_line=12 starts past the end: §{tag}§ has {lines:,} lines"
        last = await mcp.call_tool("ctx_read", {"tag": tag, "first_line": lines})
        assert not last.is_error and text(last).split(" ", 1)[1].startswith(f"{lines}: ")
        backwards = tagged_error(await mcp.call_tool("ctx_read", {"tag": tag, "first_line": 3, "last_line": 2}))
        assert backwards == "last_line=2 is before first_line=3"


async def test_an_unanswered_proposal_says_it_may_be_committed_and_names_the_key(
    nats_client: NatsClient, tmp_path: Path
) -> None:
    # No coordinator serves this test's NATS: nobody answers.
    async with connected(nats_client, tmp_path / "a.db", joined=False, propose_deadline=0.5) as mcp:
        result = await mcp.call_tool("brief_propose", {"op": {"op": "set_goal", "text": "ship"}, "key": "goal-1"})
    assert tagged_error(result) == (
        "no coordinator answered within 0.5s, so the proposal may or may not be committed: "
        "call brief_propose again with the same op and key='goal-1' to find out without committing it twice"
    )


@pytest.mark.parametrize("key", ["k1", "null"])  # "null" stays a key: the SDK must not decode it
async def test_a_key_belongs_to_one_op(client: NatsClient, tmp_path: Path, key: str) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        key_help = tools["brief_propose"].input_schema["properties"]["key"]["description"]
        assert "A key belongs to one operation" in key_help and "key_reused" in key_help
        goal = {"op": "set_goal", "text": "ship the cache"}
        assert text(await mcp.call_tool("brief_propose", {"op": goal, "key": key})).endswith("committed at revision 1")
        again = await mcp.call_tool("brief_propose", {"op": goal, "key": key})
        assert text(again).endswith("committed at revision 1 (already committed earlier with this key)")
        other = await mcp.call_tool("brief_propose", {"op": {"op": "add_note", "text": "hi"}, "key": key})
        assert tagged_error(other).startswith(f"rejected (key_reused): key {key!r} was committed at rev 1")


async def test_brief_propose_is_marked_destructive(nats_client: NatsClient, tmp_path: Path) -> None:
    async with connected(nats_client, tmp_path / "a.db", joined=False) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    hints = tools["brief_propose"].annotations
    assert hints is not None and hints.destructive_hint is True and hints.read_only_hint is not True


async def test_ctx_status_calls_protected_exactly_what_ctx_reduce_defers(client: NatsClient, tmp_path: Path) -> None:
    """ctx_reduce defers by the nudges' token window, not by the engine's newest-N rule:
    a tag shown unprotected must be released, and one shown protected deferred."""
    bulky = {"op": "frobnicate", "text": " ".join(f"module_{j} caches {j * 7} rows" for j in range(150))}
    async with connected(client, tmp_path / "a.db", window=32_768) as mcp:
        for _ in range(3):  # old calls heavy enough to fill the token window (2,376 tokens here)
            assert (await mcp.call_tool("brief_propose", {"op": bulky})).is_error
        for _ in range(20):  # then small results, far more than the engine's newest 6 messages
            await mcp.call_tool("brief_get", {})
        status = json.loads(text(await mcp.call_tool("ctx_status", {})).split(" ", 1)[1])
        shown = {item["tag"]: item["protected"] for item in status["tail"]}
        free = sorted(tag for tag, protected in shown.items() if not protected)
        held = max(tag for tag, protected in shown.items() if protected)
        assert free, shown
        reduced = await mcp.call_tool("ctx_reduce", {"drop": ",".join(map(str, [*free, held]))})
    queued = " ".join(f"§{tag}§" for tag in free)
    assert text(reduced).split(" ", 1)[1] == (
        f"queued {queued} (will be dropped); deferred §{held}§ (still in use; retry later)"
    ), shown
