"""The tail of Claude Code's own transcript, as the hygiene walk reads it.

Claude Code writes each session to a JSON Lines file (`transcript_path` in every hook
event): one object per line, `type` user, assistant, system, summary or others. A
user or assistant line has `message.content`, a string or a list of blocks: `text`,
`thinking`, `tool_use` (`id`, `name`, `input`) and, in user lines, `tool_result`
(`tool_use_id`, `content` as a string or blocks). A compaction appends a `system` line
with `subtype: "compact_boundary"`; what came before it is no longer in the model's
context, so the tail starts after the last one.

The format is Claude Code's, undocumented as a contract and changed between releases,
so every line is read defensively: a line that is not JSON, or not a shape we know,
is skipped (and counted), never an error.

Reading is incremental: the parts found so far (their token counts, not their text)
are kept in the agent's store with the byte offset read up to, so a hook reads only
what was appended since the last one. A file that shrank or was replaced is read
again from the start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ctxbus.agents.nudges import PartKind

__all__ = ["HostPart", "HostTail", "read_tail", "text_of"]

_KIND = {"text": PartKind.TEXT, "tool_input": PartKind.TOOL_INPUT, "tool_output": PartKind.TOOL_OUTPUT}


@dataclass(frozen=True, slots=True)
class HostPart:
    """One counted part of the host's transcript."""

    key: str
    kind: str
    """text, tool_input or tool_output (reasoning is never counted, so never kept)."""
    tokens: int
    call: str | None = None
    """The tool_use id a tool input or output belongs to."""

    @property
    def part_kind(self) -> PartKind:
        return _KIND[self.kind]

    def dump(self) -> list[Any]:
        return [self.key, self.kind, self.tokens, self.call]

    @classmethod
    def load(cls, row: list[Any]) -> HostPart:
        key, kind, tokens, call = row
        if kind not in _KIND or not isinstance(tokens, int):
            raise ValueError(f"bad tail part {row!r}")
        return cls(str(key), kind, tokens, None if call is None else str(call))


@dataclass(slots=True)
class HostTail:
    """What the hooks have read of one transcript so far."""

    path: str = ""
    device: int = 0
    inode: int = 0
    offset: int = 0
    parts: list[HostPart] = field(default_factory=list)
    compactions: int = 0
    skipped: int = 0
    """Lines that were not JSON or not a shape we know."""

    def dump(self) -> str:
        return json.dumps(
            {
                "path": self.path,
                "device": self.device,
                "inode": self.inode,
                "offset": self.offset,
                "parts": [p.dump() for p in self.parts],
                "compactions": self.compactions,
                "skipped": self.skipped,
            },
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, raw: str | None) -> HostTail:
        """A saved tail; an unreadable one is read again from the start."""
        if not raw:
            return cls()
        try:
            saved = json.loads(raw)
            return cls(
                path=str(saved["path"]),
                device=int(saved["device"]),
                inode=int(saved["inode"]),
                offset=int(saved["offset"]),
                parts=[HostPart.load(row) for row in saved["parts"]],
                compactions=int(saved.get("compactions", 0)),
                skipped=int(saved.get("skipped", 0)),
            )
        except (ValueError, KeyError, TypeError):
            return cls()

    def calls(self) -> set[str]:
        """The tool_use ids whose output the tail holds."""
        return {p.call for p in self.parts if p.kind == "tool_output" and p.call}


def read_tail(path: str, saved: HostTail, count: Callable[[str], int]) -> HostTail:
    """`saved` brought up to the end of the transcript at `path`.

    A missing or unreadable file leaves the tail as saved. Only whole lines are read:
    one being written is read next time.
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after fstat
    except OSError:
        return saved
    with handle:
        info = os.fstat(handle.fileno())
        tail = saved
        if (saved.path, saved.device, saved.inode) != (path, info.st_dev, info.st_ino) or info.st_size < saved.offset:
            tail = HostTail(path=path, device=info.st_dev, inode=info.st_ino)
        handle.seek(tail.offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    for number, raw in enumerate(data[:end].splitlines()):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            tail.skipped += 1
            continue
        if not isinstance(line, dict):
            tail.skipped += 1
            continue
        if line.get("type") == "system" and line.get("subtype") == "compact_boundary":
            tail.parts = []
            tail.compactions += 1
            continue
        key = str(line.get("uuid") or f"@{tail.offset}+{number}")
        tail.parts.extend(_parts(line, key, count))
    tail.offset += end
    return tail


def _parts(line: dict[str, Any], key: str, count: Callable[[str], int]) -> Iterator[HostPart]:
    if line.get("type") not in ("user", "assistant") or line.get("isSidechain"):
        return
    message = line.get("message")
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        if content:
            yield HostPart(key, "text", count(content))
        return
    if not isinstance(content, list):
        return
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            yield HostPart(f"{key}.{i}", "text", count(block["text"]))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            yield HostPart(f"{key}.{i}", "tool_input", count(arguments), _id(block.get("id")))
        elif kind == "tool_result":
            yield HostPart(
                f"{key}.{i}", "tool_output", count(text_of(block.get("content"))), _id(block.get("tool_use_id"))
            )


def _id(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def text_of(value: object) -> str:
    """The text of a tool result or response in any of the shapes Claude Code uses: a
    string, a list of text blocks, or an object (Bash's `stdout`/`stderr`, a file's
    `content`, ...), which is otherwise shown as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            text_of(item.get("text", item) if isinstance(item, dict) and item.get("type") == "text" else item)
            for item in value
        )
    if isinstance(value, dict):
        texts = [value[name] for name in ("stdout", "stderr") if isinstance(value.get(name), str) and value[name]]
        if texts:
            return "\n".join(texts)
        for name in ("content", "output", "result", "text"):
            if name in value:
                return text_of(value[name])
        file = value.get("file")
        if isinstance(file, dict) and "content" in file:
            return text_of(file["content"])
    return json.dumps(value, ensure_ascii=False, default=str)
