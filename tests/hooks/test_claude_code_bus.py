"""The hooks with a real NATS and coordinator: the brief at SessionStart, its changes at
UserPromptSubmit, Channel 2 at most once per cycle."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from ctxbus.agents.brief import Proposer
from ctxbus.bus import BusConfig
from ctxbus.schemas import AddDecision, AddPending, SetGoal
from tests._support import running_coordinator
from tests.hooks._claude import ClaudeSession, check_output, claude_sessions, context_of
from tests.hooks.test_claude_code import in_process


async def hook(payload: dict[str, object], state: Path, **env: str) -> str:
    done = await anyio.run_process(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "hook", "claude-code"],
        input=json.dumps(payload).encode(),
        env={**os.environ, "CTXBUS_STATE_DIR": str(state), **env},
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.decode()


async def test_the_brief_at_session_start_and_its_changes_at_each_prompt(nats_url: str, tmp_path: Path) -> None:
    domain = f"alice/hooks/{uuid.uuid4().hex[:8]}"
    env = {"CTXBUS_DOMAIN": domain, "CTXBUS_AGENT": "claude-1", "CTXBUS_NATS_URL": nats_url}
    state = tmp_path / "state"
    session = ClaudeSession(claude_sessions()[0], tmp_path / "t.jsonl", tmp_path)
    async with running_coordinator(nats_url, coordinator_id="hooks-test") as (client, _):
        proposer = Proposer(client, domain, agent_id="a2")
        await proposer.propose(SetGoal(text="make the cache safe under concurrent writers"))
        await proposer.propose(AddDecision(option="sqlite wal", rationale="no server to run"))
        start = context_of(check_output("SessionStart", await hook({**session.common("SessionStart")}, state, **env)))
        assert "make the cache safe under concurrent writers" in start and "sqlite wal" in start
        prompt = {**session.common("UserPromptSubmit"), "prompt": "Carry on. Never use redis."}
        assert await hook(prompt, state, **env) == "{}\n"  # nothing new since SessionStart
        await proposer.propose(AddPending(text="write the migration"))
        delta = context_of(check_output("UserPromptSubmit", await hook(prompt, state, **env)))
        assert "changed since you last saw it" in delta
        assert "+ " in delta and "write the migration" in delta
        assert "make the cache safe" not in delta  # only what changed
        # and the prompt was recorded and pinned: it comes back after a compaction
        after = await hook({**session.common("SessionStart"), "source": "compact"}, state, **env)
        assert "Never use redis." in context_of(check_output("SessionStart", after))


async def test_a_task_nobody_has_written_a_brief_for_adds_no_brief(nats_url: str, tmp_path: Path) -> None:
    """The domain a hook derives (no CTXBUS_DOMAIN) or a new task has an empty brief at
    revision 0: nothing for the model to read, so no block at all."""
    env = {
        "CTXBUS_DOMAIN": f"alice/hooks/{uuid.uuid4().hex[:8]}",
        "CTXBUS_AGENT": "claude-1",
        "CTXBUS_NATS_URL": nats_url,
    }
    session = ClaudeSession(claude_sessions()[0], tmp_path / "t.jsonl", tmp_path)
    async with running_coordinator(nats_url, coordinator_id="hooks-empty"):
        assert await hook({**session.common("SessionStart")}, tmp_path / "state", **env) == "{}\n"


def heavy_tool_calls(session: ClaudeSession, count: int) -> list[dict[str, object]]:
    """PostToolUse events whose outputs are large files of the anchor data: a tail made
    mostly of spent output, as a Channel 2 cycle needs."""
    files = sorted(claude_sessions())
    events = []
    for i in range(count):
        call = f"toolu_{i:04d}"
        text = files[i % len(files)].read_text(encoding="utf-8")[:12_000]
        session.write("assistant", [{"type": "tool_use", "id": call, "name": "Read", "input": {"file_path": str(i)}}])
        events.append(
            {
                **session.common("PostToolUse"),
                "tool_name": "Read",
                "tool_input": {"file_path": str(i)},
                "tool_response": {"type": "text", "file": {"filePath": str(i), "content": text}},
                "tool_use_id": call,
            }
        )
    return events


@pytest.mark.parametrize("with_bus", [True, False])
async def test_channel2_asks_once_per_cycle_through_the_lease(nats_url: str, tmp_path: Path, with_bus: bool) -> None:
    domain = f"alice/hooks/{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    session = ClaudeSession(claude_sessions()[0], tmp_path / "t.jsonl", tmp_path)
    bus = BusConfig(servers=[nats_url]) if with_bus else None
    blocks = []
    async with running_coordinator(nats_url, coordinator_id="hooks-c2"):
        for payload in [
            {**session.common("UserPromptSubmit"), "prompt": "Read them all."},
            *heavy_tool_calls(session, 14),
        ]:
            raw = await anyio.to_thread.run_sync(
                lambda p=payload: in_process(p, state, window=32_000, bus=bus, CTXBUS_DOMAIN=domain)
            )
            output = check_output(str(payload["hook_event_name"]), raw)
            if output.decision == "block":
                blocks.append(output.reason or "")
            if payload["hook_event_name"] == "PostToolUse":  # Claude Code writes the result after the hook
                text = payload["tool_response"]["file"]["content"]  # type: ignore[index]
                session.write("user", [{"type": "tool_result", "tool_use_id": payload["tool_use_id"], "content": text}])
    if with_bus:
        assert len(blocks) == 1, blocks
        assert blocks[0].startswith("[ctxbus]"), blocks
    else:
        assert blocks == []
