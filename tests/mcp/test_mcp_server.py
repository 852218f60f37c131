"""`ctxbus mcp` end to end: the MCP SDK's own client drives real server subprocesses
against a real NATS with a coordinator."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.types import CallToolResult, TextContent, TextResourceContents

from ctxbus.bus import free_port
from tests._support import running_coordinator

TOOLS = {"brief_get", "brief_propose", "ctx_search", "ctx_read", "ctx_reduce", "ctx_status"}
REMINDER = "<system-reminder>"
CHANNEL2 = "Before your next step, call ctx_reduce"


@pytest.fixture
async def url(nats_url: str) -> AsyncIterator[str]:
    """The session's NATS, with a coordinator serving it for this test."""
    async with running_coordinator(nats_url, coordinator_id="mcp-test"):
        yield nats_url


@pytest.fixture
def domain() -> str:
    return f"alice/mcp/{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def serve(url: str, domain: str, agent: str, state: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """`ctxbus mcp` in a subprocess, as an MCP client config would start it.

    It logs verbosely; any of that reaching stdout would reach the client as a line
    that is not JSON-RPC, which the session reports to its message handler.
    """
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "ctxbus.coordinator.cli",
            "-vv",
            "mcp",
            "--domain",
            domain,
            "--agent",
            agent,
            "--nats",
            url,
            *extra,
        ],
        env={"CTXBUS_STATE_DIR": str(state)},
    )
    garbage: list[Exception] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            garbage.append(message)

    stderr = state / f"{agent}.stderr"
    with stderr.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            await session.initialize()
            yield session
    assert not garbage, garbage
    assert f"serving {agent} on {domain} over stdio" in stderr.read_text()


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def body(result: CallToolResult) -> str:
    """The text after the `§N§` tag."""
    return text(result).split(" ", 1)[1]


def tag_of(result: CallToolResult) -> int:
    """The `§N§` a result starts with."""
    head = text(result).split(" ", 1)[0]
    assert head.startswith("§") and head.endswith("§"), head
    return int(head.strip("§"))


async def call(session: ClientSession, tool: str, **arguments: object) -> CallToolResult:
    return await session.call_tool(tool, arguments)


async def propose(session: ClientSession, **op: object) -> CallToolResult:
    return await call(session, "brief_propose", op=op)


async def test_every_tool_the_resource_and_bad_input(url: str, domain: str, tmp_path: Path) -> None:
    async with serve(url, domain, "claude", tmp_path) as mcp:
        listed = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert set(listed) == TOOLS
        op_help = listed["brief_propose"].input_schema["properties"]["op"]["description"]
        assert "add_decision {option, rationale?, supersedes?}" in op_help and "fold_done" not in op_help
        assert listed["ctx_search"].input_schema["properties"]["limit"]["maximum"] == 20
        assert listed["brief_get"].annotations is not None and listed["brief_get"].annotations.read_only_hint

        first = await call(mcp, "brief_get")
        assert not first.is_error and f"Task brief {domain} @ rev 0" in text(first)
        goal = await propose(mcp, op="set_goal", text="ship the cache")
        assert text(goal).endswith("committed at revision 1"), text(goal)
        assert not (await propose(mcp, op="reject", option="redis lock", reason="no redis in prod")).is_error
        shown = json.loads(body(await call(mcp, "brief_get", view="json")))
        assert shown["revision"] == 2 and shown["brief"]["goal"]["text"] == "ship the cache"

        # Refusals and bad input are error results the model can read; the server lives on.
        refused = await propose(mcp, op="add_decision", option="Redis lock")
        assert (
            refused.is_error and "rejected (rejected_option)" in text(refused) and "no redis in prod" in text(refused)
        )
        unknown = await propose(mcp, op="frobnicate")
        assert unknown.is_error and "unknown op 'frobnicate'; use one of: set_goal" in text(unknown)
        assert "has no 'op' field" in text(await call(mcp, "brief_propose", op={"text": "x"}))
        missing = await propose(mcp, op="complete")
        assert missing.is_error and "bad complete op: field 'item_id': Field required" in text(missing)
        assert (await propose(mcp, op="fold_done", item_ids=["d1"])).is_error
        not_an_object = await call(mcp, "brief_propose", op="set_goal")
        assert not_an_object.is_error and body(not_an_object).startswith("error: the op must be an object such as")

        resources = (await mcp.list_resources()).resources
        assert [str(r.uri) for r in resources] == [f"ctxbus://brief/{domain}"]
        contents = (await mcp.read_resource(f"ctxbus://brief/{domain}")).contents
        assert isinstance(contents[0], TextResourceContents)
        assert "Goal: ship the cache" in contents[0].text and "redis lock: no redis in prod" in contents[0].text

        hits = await call(mcp, "ctx_search", query="redis prod")
        assert not hits.is_error and "§" in body(hits), text(hits)
        assert "no matches" in text(await call(mcp, "ctx_search", query="zebra"))
        whole = await call(mcp, "ctx_read", tag=tag_of(first))
        assert body(whole) == body(first)
        lines = await call(mcp, "ctx_read", tag=f"§{tag_of(first)}§", first_line=1, last_line=1)
        assert body(lines) == f"1: Task brief {domain} @ rev 0"
        assert "no message" in text(await call(mcp, "ctx_read", tag=99_999)).lower()

        malformed = await call(mcp, "ctx_reduce", drop="3-x")
        assert malformed.is_error and 'write it like drop="3-5,9"' in text(malformed)
        gone = await call(mcp, "ctx_reduce", drop="99999")
        assert gone.is_error and "no such tag §99999§" in text(gone)
        # A tail this small is all inside the protected recent window.
        reduced = await call(mcp, "ctx_reduce", drop=str(tag_of(first)))
        assert not reduced.is_error and f"deferred §{tag_of(first)}§ (still in use" in text(reduced), text(reduced)

        status = json.loads(body(await call(mcp, "ctx_status")))
        assert status["agent"] == "claude" and status["domain"] == domain
        assert status["band"] == "quiet" and status["brief_revision"] == 2 and status["queued_drops"] == []
        assert {"tag": tag_of(first), "tool": "brief_get"}.items() <= status["tail"][0].items()
    store = tmp_path / "agents" / domain / "claude.db"
    assert store.exists()


async def test_two_servers_on_one_domain_share_the_brief(url: str, domain: str, tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "cursor.db"
    async with (
        serve(url, domain, "claude", tmp_path) as a,
        serve(url, domain, "cursor", tmp_path, "--store", str(store)) as b,
    ):
        assert text(await propose(a, op="add_decision", option="use sqlite")).endswith("committed at revision 1")
        assert "use sqlite" in await brief_when(b, "use sqlite")
        assert text(await propose(b, op="add_constraint", text="no new services")).endswith("committed at revision 2")
        assert "no new services" in await brief_when(a, "no new services")
        hashes = [json.loads(body(await call(s, "brief_get", view="json")))["hash"] for s in (a, b)]
        assert hashes[0] == hashes[1]
        refused = await propose(a, op="add_constraint", text="No new  services")
        assert refused.is_error and "(duplicate)" in text(refused)
    assert store.exists() and not (tmp_path / "agents" / domain / "cursor.db").exists()


async def brief_when(session: ClientSession, needle: str) -> str:
    """The brief once it holds `needle`; replicas follow the log within milliseconds."""
    with anyio.fail_after(5):
        while needle not in (shown := text(await call(session, "brief_get"))):
            await anyio.sleep(0.05)
    return shown


async def test_reminders_ride_on_tool_results_and_stop_after_ctx_reduce(url: str, domain: str, tmp_path: Path) -> None:
    # A big brief read over and over fills the tail the way long tool output does.
    async with serve(url, domain, "claude", tmp_path, "--window", "400000") as mcp:
        proposals = []
        for i in range(25):
            note = " ".join(f"module_{i}_{j} serves /api/v{j}/items and caches {j * 7} rows;" for j in range(40))
            proposals.append(await propose(mcp, op="add_note", text=note[:2000]))
            assert not proposals[-1].is_error
        results = [await call(mcp, "brief_get") for _ in range(16)]
        reminded = [r for r in results if REMINDER in text(r)]
        assert reminded, "Channel 1 should have spoken as the tail grew"
        assert "ctx_reduce" in text(reminded[0]) and "§" in text(reminded[0]).rsplit(REMINDER, 1)[1]
        assert sum(CHANNEL2 in text(r) for r in results) == 1, "Channel 2 is delivered once per cycle"

        # Everything but the three newest calls, which are protected: the notes sent (each
        # call's tag is just before its result's) and the briefs read.
        read = [tag_of(r) for r in results[:-3]]
        spent = [tag_of(r) - 1 for r in proposals] + read
        reduced = await call(mcp, "ctx_reduce", drop=",".join(map(str, spent)))
        assert f"§{read[0]}§" in text(reduced).split("queued", 1)[1], text(reduced)
        after = await call(mcp, "ctx_status")  # the next call applies the queued drops
        assert REMINDER not in text(after)
        status = json.loads(body(after))
        assert status["band"] == "quiet", json.dumps(status)
        assert {item["tag"]: item["state"] for item in status["tail"]}[read[0]] == "dropped"


def test_a_store_that_cannot_be_created_is_a_one_line_error(nats_url: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "ctxbus.coordinator.cli", "mcp", "-d", "alice/s1/t1", "-a", "claude"]
    command += ["--nats", nats_url, "--store", "/proc/ctxbus-test/x/claude.db"]
    run = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (
        "ctxbus: error: cannot create the directory of agent store /proc/ctxbus-test/x/claude.db: "
        "No such file or directory\n"
    ), run.stderr


def test_unreachable_nats_and_bad_names_are_one_line_errors(tmp_path: Path) -> None:
    def ctxbus(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ctxbus.coordinator.cli", "mcp", *args]
        return subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)

    down = ctxbus("-d", "alice/s1/t1", "-a", "claude", "--nats", f"nats://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and down.stdout == ""
    assert down.stderr.startswith("ctxbus: error: could not connect") and down.stderr.count("\n") == 1, down.stderr
    bad = ctxbus("-d", "alice/s1/t1", "-a", "claude/../x")
    assert bad.returncode == 2 and "agent name" in bad.stderr
