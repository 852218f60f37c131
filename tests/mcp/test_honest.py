"""What the MCP server says about itself: missing arguments in one sentence, the brief
without its bookkeeping unless asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxbus.bus import NatsClient
from tests.mcp.test_mcp_server import body, call, domain, serve, tag_of, url  # noqa: F401 - fixtures
from tests.mcp.test_tools import client, connected, tagged_error, text  # noqa: F401 - `client` is a fixture


@pytest.mark.parametrize(
    ("tool", "arguments", "sentence"),
    [
        ("ctx_search", {}, "error: ctx_search needs the argument 'query'"),
        ("ctx_read", {"first_line": 2}, "error: ctx_read needs the argument 'tag'"),
        ("ctx_reduce", {}, "error: ctx_reduce needs the argument 'drop'"),
        ("brief_propose", {"key": "k1"}, "error: brief_propose needs the argument 'op'"),
    ],
)
async def test_a_missing_argument_is_one_sentence_naming_it(
    client: NatsClient,  # noqa: F811
    tmp_path: Path,
    tool: str,
    arguments: dict[str, object],
    sentence: str,
) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        result = await mcp.call_tool(tool, arguments)
    assert result.is_error and text(result) == sentence


async def test_brief_get_json_leaves_the_idempotency_keys_out_unless_asked(
    client: NatsClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with connected(client, tmp_path / "a.db") as mcp:
        committed = text(
            await mcp.call_tool("brief_propose", {"op": {"op": "set_goal", "text": "ship it"}, "key": "k1"})
        )
        assert "committed" in committed, committed
        plain = json.loads(text(await mcp.call_tool("brief_get", {"view": "json"})).split(" ", 1)[1])
        keyed = json.loads(text(await mcp.call_tool("brief_get", {"view": "json_keys"})).split(" ", 1)[1])
        bad = tagged_error(await mcp.call_tool("brief_get", {"view": "keys"}))
    assert plain["brief"]["goal"]["text"] == "ship it"
    assert "applied_keys" not in plain["brief"] and "keys_forgotten_until" not in plain["brief"]
    assert "k1" in json.dumps(keyed["brief"]["applied_keys"])
    assert {k: v for k, v in keyed["brief"].items() if k not in ("applied_keys", "keys_forgotten_until")} == plain[
        "brief"
    ]
    assert bad.startswith("argument 'view' must be")


async def test_each_server_start_is_a_new_session_unless_resumed_and_inspect_says_what_it_cannot_see(
    url: str,  # noqa: F811 - the fixture
    domain: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    async with serve(url, domain, "claude-1", tmp_path) as mcp:
        first = await call(mcp, "ctx_search", query="zanzibar")
        assert tag_of(first) == 2  # §1§ is the call
    async with serve(url, domain, "claude-1", tmp_path) as mcp:
        fresh = await call(mcp, "ctx_search", query="zanzibar")
        assert tag_of(fresh) == 2, text(fresh)  # a new session: tags start again
        assert body(fresh).startswith("no matches"), text(fresh)  # the first session's call is not carried in
    async with serve(url, domain, "claude-1", tmp_path, "--resume") as mcp:
        resumed = await call(mcp, "ctx_search", query="zanzibar")
        assert tag_of(resumed) == 4, text(resumed)  # the session before, carried on
        assert "§1§ ctx_search" in body(resumed), text(resumed)  # finds the first call of that session
    stores = sorted(p.name for p in tmp_path.rglob("claude-1*.db"))
    assert len(stores) == 2 and "claude-1.db" in stores, stores  # the first session kept beside
    shown = subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "inspect", "claude-1", "-d", domain],
        capture_output=True,
        text=True,
        env={**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"},
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "ctx_search" in shown.stdout  # what ctxbus holds: its own tools' calls
    assert "never sees the host's own system prompt" in " ".join(shown.stdout.split())
