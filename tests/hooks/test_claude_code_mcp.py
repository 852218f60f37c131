"""The hooks and `ctxbus mcp` of one agent, as Claude Code runs them side by side: what
the hooks archive, the MCP server's ctx_search finds and its ctx_read reads."""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from tests.hooks._claude import ClaudeSession, check_output, claude_sessions
from tests.hooks.test_claude_code import in_process
from tests.hooks.test_claude_code_bus import hook
from tests.mcp.test_mcp_server import body, call, domain, serve, text, url  # noqa: F401 - fixtures

SESSION = "bookminder__day-002__s0.jsonl"


def rare_word(output: str, others: list[str]) -> tuple[str, int]:
    """A word of `output`'s second half found nowhere else in the session, and its line."""
    lines = output.splitlines()
    elsewhere = " ".join(others).lower()
    for number, line in enumerate(lines[len(lines) // 2 :], len(lines) // 2 + 1):
        for word in re.findall(r"[A-Za-z]{8,}", line):
            if word.lower() not in elsewhere and sum(word.lower() in ln.lower() for ln in lines) == 1:
                return word, number
    raise AssertionError("no word of the output is its own")


async def test_output_the_hooks_archived_is_found_and_read_through_the_agents_mcp_server(
    url: str,  # noqa: F811 - the fixture
    domain: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    env = {"CTXBUS_DOMAIN": domain, "CTXBUS_AGENT": "claude-1"}
    anchor = next(path for path in claude_sessions() if path.name == SESSION)
    session = ClaudeSession(anchor, tmp_path / "transcript.jsonl", tmp_path)
    async with serve(url, domain, "claude-1", state) as mcp:  # holds claude-1.db from here on
        before = text(await call(mcp, "ctx_read", tag="0123456789abcdef-9999"))  # no hooks' store yet
        assert "no message with tag or id '0123456789abcdef-9999'" in before, before
        outputs: list[str] = []
        big: dict[str, Any] | None = None
        for payload in session.events():
            event = payload["hook_event_name"]
            if event == "PostToolUse" and len(payload["tool_response"]["stdout"]) > 20_000:
                big = payload
                break
            if event == "PostToolUse":
                outputs.append(payload["tool_response"]["stdout"])
            if event in ("UserPromptSubmit", "SessionStart") or len(outputs) <= 3:
                answer = await anyio.to_thread.run_sync(functools.partial(in_process, payload, state, **env))
                check_output(event, answer)
        assert big is not None
        output = big["tool_response"]["stdout"]
        word, line = rare_word(output, [*outputs, *session.prompts])
        check_output("PostToolUse", await hook(big, state, **env))  # the real command, as Claude Code runs it

        found = body(await call(mcp, "ctx_search", query=word))
        hit = re.search(rf"^(\S+) {big['tool_name']} \(Claude Code, score [\d.]+\): .*{word}", found, re.M)
        assert hit is not None, found
        ref = hit[1]
        lines = body(await call(mcp, "ctx_read", tag=ref, query=word))
        assert lines == f"{line}: {output.splitlines()[line - 1]}", lines
        head = body(await call(mcp, "ctx_read", tag=ref, first_line=1, last_line=3))
        assert head == "\n".join(f"{n}: {t}" for n, t in enumerate(output.splitlines()[:3], 1)), head
        whole = body(await call(mcp, "ctx_read", tag=ref))
        assert whole.startswith(output[:1000]) and len(whole) > 20_000, whole[:200]
        unknown = text(await call(mcp, "ctx_read", tag="0123456789abcdef-9999"))
        assert "no message with tag or id" in unknown, unknown
    log = state / "hooks" / "claude-code.log"
    assert not log.exists() or " ERROR " not in log.read_text()  # no hook failed (and answered `{}`)
    shown = await anyio.run_process(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "inspect", "claude-1", "-d", domain],
        env={**os.environ, "CTXBUS_STATE_DIR": str(state), "COLUMNS": "400"},
    )
    said = " ".join(shown.stdout.decode().split())
    assert f"{big['tool_name']} (Claude Code, score" in said  # the server's own store: what its ctx_search returned
    assert "never sees the host's own system prompt" in said
    assert f"{state / 'agents' / Path(*domain.split('/')) / 'claude-1.claude-code.db'}" in said, said  # and the hooks'
