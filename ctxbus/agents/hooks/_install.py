"""`ctxbus hook install`: the hook entries in a project's `.claude/settings.json`.

Claude Code reads hooks from `.claude/settings.json` under `hooks`: for each event a
list of matcher groups, each with a list of `{"type": "command", "command": ...}`.
Installing merges ours into whatever the file holds and is idempotent: an entry of
ours (its command runs `hook claude-code`) is updated in place, never added twice, and
every other setting and hook is left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ctxbus.schemas import UsageError

__all__ = ["HOOK_EVENTS", "HOOK_TIMEOUT", "install_hooks"]

HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact")
HOOK_TIMEOUT = 10
"""Seconds Claude Code gives the hook before it stops waiting (its default is 60)."""
_OURS = "hook claude-code"


def install_hooks(project: Path, command: str) -> tuple[Path, list[str]]:
    """Write (or update) our entries in `project/.claude/settings.json`.

    Returns the file and the events whose entries were added or changed (empty when
    everything was in place already).

    :raises UsageError: if the file exists but is not a JSON object with a `hooks` object.
    """
    path = project / ".claude" / "settings.json"
    settings: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {path}: {exc}; fix or move it, then install again") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"{path} is not a JSON object; fix or move it, then install again")
        settings = loaded
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError(f"'hooks' in {path} is not an object; fix it, then install again")
    changed = [event for event in HOOK_EVENTS if _merge(hooks, event, command, path)]
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8", suffix=".tmp") as out:
            json.dump(settings, out, indent=2, ensure_ascii=False)
            out.write("\n")
        os.replace(out.name, path)
    return path, changed


def _merge(hooks: dict[str, Any], event: str, command: str, path: Path) -> bool:
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise UsageError(f"'hooks.{event}' in {path} is not a list; fix it, then install again")
    wanted = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
    for group in groups:
        entries = group.get("hooks") if isinstance(group, dict) else None
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and _OURS in str(entry.get("command", "")):
                if entry == wanted:
                    return False
                entries[i] = wanted  # type: ignore[index]
                return True
    groups.append({"matcher": "*", "hooks": [wanted]} if event == "PostToolUse" else {"hooks": [wanted]})
    return True
