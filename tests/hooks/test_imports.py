"""What makes a hook answer fast (`bench/hooks.py` times it): a hook without NATS
imports neither nats nor the parts of ctxbus that need it; with a URL it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxbus.bus import free_port
from tests.hooks._claude import ClaudeSession, check_output, claude_sessions

BUS_ONLY = [
    "nats",
    "ctxbus.bus._connection",
    "ctxbus.bus._brief_log",
    "ctxbus.bus._keys",
    "ctxbus.bus._leases",
    "ctxbus.agents.brief",
    "ctxbus.agents.runtime._agent",
    "ctxbus.coordinator._config",
    "mcp",
]
"""Modules a hook needs only to read the brief or run Channel 2 on the bus."""


def loaded(payload: dict[str, Any], state: Path, **env: str) -> tuple[str, list[str]]:
    """The answer of the real command to `payload`, and which of `BUS_ONLY` it imported."""
    code = (
        "import sys; from ctxbus.coordinator.cli import main; code = main(sys.argv[1:]); "
        f"print(*[m for m in {BUS_ONLY!r} if m in sys.modules], sep=',', file=sys.stderr); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "hook", "claude-code"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env={**os.environ, "CTXBUS_STATE_DIR": str(state), **env},
        timeout=60,
        check=True,
    )
    return done.stdout.decode(), [m for m in done.stderr.decode().strip().split(",") if m]


@pytest.mark.parametrize("with_url", [False, True], ids=["no NATS", "a NATS URL"])
def test_a_hook_loads_the_bus_only_when_a_url_is_configured(tmp_path: Path, with_url: bool) -> None:
    state = tmp_path / "state"
    env = {"CTXBUS_NATS_URL": f"nats://127.0.0.1:{free_port()}"} if with_url else {}  # nobody listens there
    session = ClaudeSession(claude_sessions()[0], tmp_path / "t.jsonl", tmp_path)
    imported: dict[str, list[str]] = {}
    for payload in session.events():  # up to the first PostToolUse: it records, measures, runs the channels
        event = payload["hook_event_name"]
        answer, imported[event] = loaded(payload, state, **env)
        check_output(event, answer)
        if event == "PostToolUse":
            break
    assert set(imported) == {"SessionStart", "UserPromptSubmit", "PostToolUse"}, imported
    if with_url:
        for event in ("SessionStart", "UserPromptSubmit"):  # each reads the brief (or tries to)
            assert {"nats", "ctxbus.bus._brief_log"} <= set(imported[event]), imported
    else:
        assert imported == {event: [] for event in imported}, imported
