"""An agent's store as the page reads it: what the model sees now (`ctxbus inspect`), and
when Channel 1 reminders and Channel 2 messages reached it."""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ctxbus.agents.context import LayerView, LocalContext
from ctxbus.agents.runtime import inspect_store
from ctxbus.schemas import Domain

__all__ = ["REMINDER_MARK", "StoreView", "read_store"]

REMINDER_MARK = "<system-reminder>"
"""How a reminder opens, in a tool result (Channel 1) or a synthetic message (Channel 2)."""


@dataclass(frozen=True)
class StoreView:
    layers: tuple[LayerView, ...]
    """What the model would see at the agent's next compose, layer by layer."""
    events: tuple[dict[str, object], ...]
    """Channel 1 reminders still shown (by their tool result's tag) and Channel 2
    messages, each with when its message was recorded."""


def read_store(path: Path, domain: Domain) -> StoreView:
    """Read a consistent copy of the agent's store at `path`; the agent is not disturbed.

    :raises StoreError: if there is no store at `path`, or it cannot be read.
    """
    layers = inspect_store(path, domain)
    with tempfile.TemporaryDirectory(prefix="ctxbus-web-") as tmp:
        copy = Path(tmp) / path.name
        with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        with LocalContext(copy, domain) as context:
            messages = {m.tag: m for m in context.messages()}
    events: list[dict[str, object]] = []
    for message in messages.values():
        if message.kind == "synthetic":
            events.append({"at": message.created_at, "channel": 2, "tag": message.tag, "text": "Channel 2 message"})
    for view in layers:
        for item in view.items:
            shown = messages.get(item.tag) if item.tag is not None else None
            if shown is not None and shown.kind == "tool_result" and REMINDER_MARK in item.text:
                text = f"Channel 1 reminder with §{item.tag}§ ({shown.tool_name or 'tool'})"
                events.append({"at": shown.created_at, "channel": 1, "tag": item.tag, "text": text})
    return StoreView(layers, tuple(sorted(events, key=lambda e: float(str(e["at"])))))
