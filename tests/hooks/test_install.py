"""`ctxbus hook install`: the hook entries merged into .claude/settings.json, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ctxbus.agents.hooks import HOOK_EVENTS


def install(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", "hook", "install", "--project", str(project)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
        timeout=60,
    )


def ours(settings: dict[str, object], event: str) -> list[dict[str, object]]:
    groups = settings["hooks"][event]  # type: ignore[index]
    return [h for g in groups for h in g["hooks"] if "hook claude-code" in h["command"]]


def test_install_merges_with_the_users_settings_and_is_idempotent(tmp_path: Path) -> None:
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    theirs = {"command": "npx prettier --write", "type": "command"}
    users = {
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {"PostToolUse": [{"matcher": "Write|Edit", "hooks": [theirs]}]},
    }
    settings_file.write_text(json.dumps(users))
    first = install(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "written to" in first.stdout
    settings = json.loads(settings_file.read_text())
    assert settings["permissions"] == users["permissions"]
    assert settings["hooks"]["PostToolUse"][0] == {"matcher": "Write|Edit", "hooks": [theirs]}
    for event in HOOK_EVENTS:
        (entry,) = ours(settings, event)
        assert entry["type"] == "command" and str(entry["command"]).endswith("hook claude-code")
        assert isinstance(entry["timeout"], int)
    again = install(tmp_path)
    assert again.returncode == 0 and "already" in again.stdout, again.stdout
    assert json.loads(settings_file.read_text()) == settings


def test_install_refuses_settings_it_cannot_read_and_leaves_them_as_they_are(tmp_path: Path) -> None:
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.write_text('{"hooks": [')
    done = install(tmp_path)
    assert done.returncode == 1
    assert "cannot read" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert settings_file.read_text() == '{"hooks": ['
