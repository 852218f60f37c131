"""`ctxbus hook claude-code` fed real Claude Code sessions, event by event.

The bulk of each session goes through `run_claude_code` in this process (the command
is that function behind a CLI: a process per event would take minutes per session);
the events a test asserts on go through the real command, as Claude Code runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.hooks import hook_agent, run_claude_code
from ctxbus.bus import BusConfig, PidLock, free_port
from ctxbus.schemas import Domain
from tests.hooks._claude import ClaudeSession, check_output, claude_sessions, context_of, reachable

SESSIONS = {path.name: path for path in claude_sessions()}


def test_the_anchor_sessions_are_there() -> None:
    assert len(SESSIONS) >= 10, "the Claude Code anchor sessions are required (set CTXBUS_ANCHORS)"


def store_of(state: Path) -> Callable[[Domain, str], Path]:
    return lambda domain, agent: state.joinpath("agents", *domain.tokens, f"{agent}.db")


def hook(payload: dict[str, Any], state: Path, **env: str) -> str:
    """The real command, as Claude Code runs it: the event on stdin, the answer on stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "hook", "claude-code"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env={**os.environ, "CTXBUS_STATE_DIR": str(state), **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not done.stderr, done.stderr  # logs go to the hook log, never to the host
    return done.stdout.decode()


def in_process(
    payload: dict[str, Any], state: Path, *, window: int = 200_000, bus: BusConfig | None = None, **extra: str
) -> str:
    env = {"CTXBUS_STATE_DIR": str(state), **extra}
    raw = json.dumps(payload).encode()
    return run_claude_code(raw, env=env, store_of=store_of(state), bus=lambda: bus, window=window)


def inspect_pinned(state: Path, session: ClaudeSession) -> list[str]:
    """The pinned layer as `ctxbus inspect` shows it, for the session's own agent."""
    agent = hook_agent({}, session.session_id)
    stores = list((state / "agents").rglob(f"{agent}.claude-code.db"))
    assert len(stores) == 1, stores
    domain = "/".join(stores[0].relative_to(state / "agents").parts[:3])
    done = subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "inspect", agent, "-d", domain, "--json"],
        capture_output=True,
        env={**os.environ, "CTXBUS_STATE_DIR": str(state), "COLUMNS": "100000"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    layers = json.loads(done.stdout)
    pinned = next(layer for layer in layers if layer["layer"] == "pinned")
    return [item["text"] for item in pinned["items"] if item["kind"] != "opening"]


@pytest.mark.parametrize("name", ["bookminder__day-002__s0.jsonl", "bookminder__day-005__s0.jsonl"])
def test_every_pinned_rule_is_back_verbatim_after_a_compaction(name: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    session = ClaudeSession(SESSIONS[name], tmp_path / "transcript.jsonl", tmp_path)
    for payload in session.events():
        event = payload["hook_event_name"]
        check_output(event, in_process(payload, state))
    assert session.prompts
    rules = inspect_pinned(state, session)
    stated = [
        rule for rule in rules if any(prompt in rule or rule.split(" ", 1)[1] in prompt for prompt in session.prompts)
    ]
    assert len(stated) >= 3, rules  # the goal and at least two of the user's "don't"s
    compaction = session.compact()
    assert check_output("PreCompact", hook(next(compaction), state)) == check_output("PreCompact", "{}")
    context = context_of(check_output("SessionStart", hook(next(compaction), state)))
    assert "compacted" in context
    shown = [rule for rule in rules if rule in context]
    assert len(shown) >= 3, context  # the first rules in the context itself
    missing = [rule for rule in rules if rule not in reachable(context)]  # the rest, where it says
    assert not missing, missing


def test_a_new_session_starts_empty_and_a_resumed_one_does_not(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "a.jsonl", tmp_path)
    for payload in first.events(limit=40):
        in_process(payload, state)
    resumed = context_of(
        check_output("SessionStart", hook({**first.common("SessionStart"), "source": "resume"}, state))
    )
    assert first.prompts[0] in resumed
    second = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "b.jsonl", tmp_path)
    fresh = hook({**second.common("SessionStart"), "source": "startup"}, state)
    assert check_output("SessionStart", fresh).hookSpecificOutput is None  # nothing carried in


def test_a_fixed_agent_name_keeps_one_store_per_host_session(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"CTXBUS_DOMAIN": "alice/s1/cache-fix", "CTXBUS_AGENT": "claude-1"}
    first = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "a.jsonl", tmp_path)
    hook({**first.common("UserPromptSubmit"), "prompt": "Never touch vendor/."}, state, **env)
    again = hook({**first.common("SessionStart"), "source": "resume"}, state, **env)
    assert "Never touch vendor/." in context_of(check_output("SessionStart", again))
    second = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "b.jsonl", tmp_path)
    fresh = hook({**second.common("SessionStart"), "source": "startup"}, state, **env)
    assert check_output("SessionStart", fresh).hookSpecificOutput is None
    stores = {p.name for p in (state / "agents" / "alice" / "s1" / "cache-fix").glob("*.db")}
    assert stores == {f"claude-1.claude-code.{first.session_id}.db", "claude-1.claude-code.db"}, stores


def test_reminders_come_with_the_tail_and_go_with_a_compaction(tmp_path: Path) -> None:
    state = tmp_path / "state"
    session = ClaudeSession(SESSIONS["bookminder__day-009__s0.jsonl"], tmp_path / "t.jsonl", tmp_path)
    window = 32_000  # nudge floors scale with the window: T >= 9.6k here
    reminded: list[int] = []
    tools = 0
    for payload in session.events(limit=400):
        event = payload["hook_event_name"]
        output = check_output(event, in_process(payload, state, window=window))
        if event == "PostToolUse":
            tools += 1
            if "[ctxbus]" in context_of(output):
                reminded.append(tools)
    assert reminded, "no reminder over a long session"
    assert len(reminded) < tools / 4, (reminded, tools)  # bands and cadence, not every call
    for payload in session.compact():
        in_process(payload, state, window=window)
    tool = {
        **session.common("PostToolUse"),
        "tool_name": "Read",
        "tool_input": {"file_path": "README.md"},
        "tool_response": {"type": "text", "file": {"filePath": "README.md", "content": "# BookMinder\n"}},
        "tool_use_id": "toolu_after_compaction",
    }
    after = check_output("PostToolUse", hook(tool, state, CTXBUS_HOOK_WINDOW=str(window)))
    assert after.hookSpecificOutput is None and after.decision is None  # the tail is short again


def test_broken_input_a_broken_store_and_an_unreachable_nats_get_a_valid_empty_answer(tmp_path: Path) -> None:
    state = tmp_path / "state"
    session = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "t.jsonl", tmp_path)
    assert hook({"not": "an event"}, state) == "{}\n"
    assert hook({"not": "an event"}, state, CTXBUS_HOOK_WINDOW="lots") == "{}\n"  # exit 2 would block the host
    assert hook({**session.common("Stop"), "stop_hook_active": False}, state) == "{}\n"
    prompt = {**session.common("UserPromptSubmit"), "prompt": "Never push to main."}
    # NATS configured but nobody listening: the prompt is recorded, the brief left out
    nowhere = f"nats://127.0.0.1:{free_port()}"
    assert hook(prompt, state, CTXBUS_NATS_URL=nowhere) == "{}\n"
    start = {**session.common("SessionStart"), "source": "compact"}
    assert "Never push to main." in context_of(
        check_output("SessionStart", hook(start, state, CTXBUS_NATS_URL=nowhere))
    )
    # a store that is no SQLite file
    for store in (state / "agents").rglob("*.db"):
        store.write_bytes(b"this is not a database" * 100)
        for suffix in ("-wal", "-shm"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
    assert hook(start, state) == "{}\n"
    log = (state / "hooks" / "claude-code.log").read_text()
    assert "not a hook event" in log and "SessionStart failed" in log


def test_rules_over_claude_codes_limit_are_all_reachable_from_the_context(tmp_path: Path) -> None:
    """More rules than Claude Code shows of a hook's text (10,000 characters): those that
    fit are in the context, and it names the file that holds them all."""
    state = tmp_path / "state"
    session = ClaudeSession(SESSIONS["bookminder__day-020__s0.jsonl"], tmp_path / "t.jsonl", tmp_path)
    rules = [
        row["content"]
        for anchor in SESSIONS.values()
        for row in map(json.loads, anchor.read_text(encoding="utf-8").splitlines())
        if row["role"] == "user"
        and any(word in row["content"].lower() for word in ("don't", "do not", "never", "must", "make sure"))
        and len(row["content"]) < 2_000
    ]
    for rule in rules:
        check_output("UserPromptSubmit", in_process({**session.common("UserPromptSubmit"), "prompt": rule}, state))
    pinned = inspect_pinned(state, session)
    assert sum(map(len, pinned)) > 12_000, "not enough real rules pinned to pass the limit"
    compaction = session.compact()
    hook(next(compaction), state)
    context = context_of(check_output("SessionStart", hook(next(compaction), state)))
    assert "did not fit here" in context and len(context) <= 10_000
    assert pinned[0] in context  # the first rules, in the context itself
    missing = [rule for rule in pinned if rule not in reachable(context)]
    assert not missing, missing


def test_the_hooks_neither_wait_for_nor_touch_a_store_a_running_process_holds(tmp_path: Path) -> None:
    """An MCP server (or Agent) under the hooks' agent name holds `AGENT.db` while it
    runs, from the moment it starts: the hooks keep theirs beside it and work as ever."""
    state = tmp_path / "state"
    env = {"CTXBUS_DOMAIN": "alice/s1/cache-fix", "CTXBUS_AGENT": "claude-1"}
    session = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "t.jsonl", tmp_path)
    store = store_of(state)(Domain.parse(env["CTXBUS_DOMAIN"]), env["CTXBUS_AGENT"])
    store.parent.mkdir(parents=True)
    lock = PidLock(store.with_name(store.name + ".lock"))
    assert lock.acquire()  # taken just now, as by a server that started with the session
    try:
        prompt = {**session.common("UserPromptSubmit"), "prompt": "Never push to main."}
        assert hook(prompt, state, **env) == "{}\n"
        start = {**session.common("SessionStart"), "source": "compact"}
        assert "Never push to main." in context_of(check_output("SessionStart", hook(start, state, **env)))
    finally:
        lock.release()
    assert not store.exists()  # the holder's store is not touched
    assert store.with_name("claude-1.claude-code.db").is_file()
    assert " ERROR " not in (state / "hooks" / "claude-code.log").read_text()


def test_precompact_takes_the_prompts_given_before_the_hooks_from_the_transcript(tmp_path: Path) -> None:
    state = tmp_path / "state"
    session = ClaudeSession(SESSIONS["bookminder__day-005__s0.jsonl"], tmp_path / "t.jsonl", tmp_path)
    session.write("user", "Fix the flaky cache test. Never touch vendor/ and do not push to main.")  # no hook ran
    session.write("user", [{"type": "text", "text": "Always run pytest -q before committing."}, {"type": "image"}])
    session.write("assistant", [{"type": "text", "text": "On it."}])
    compaction = session.compact()
    check_output("PreCompact", hook(next(compaction), state))
    context = context_of(check_output("SessionStart", hook(next(compaction), state)))
    assert "Never touch vendor/ and do not push to main." in context
    assert "Always run pytest -q before committing." in context
