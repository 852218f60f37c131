"""What the MCP server says about itself: missing arguments in one sentence, the brief
without its bookkeeping unless asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus import NatsClient
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
