"""Reading a recorded session: the JSON Lines format of `shared/anchors/transcripts`.

One message a line: ``{role, content, tool_name, tool_call_id, ts}``. An assistant
message that calls tools holds its own text followed by one block per call,
``<tool_call name="NAME" id="ID">ARGUMENTS</tool_call>``, and names its calls in
`tool_name`/`tool_call_id`, comma-joined when there are several. Read here, such a
message becomes what an agent would have recorded: its text, and each call whole
(`ToolCall`: id, name, the arguments as the model wrote them). A leading system message
is the agent's own system prompt, as a host would configure it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbus.schemas import ToolCall, UsageError

__all__ = ["Transcript", "TranscriptError", "TranscriptMessage", "read_transcript"]

_CALL = re.compile(r'<tool_call name="([^"]*)" id="([^"]*)">(.*?)</tool_call>', re.DOTALL)


class TranscriptError(UsageError):
    """Raised when a transcript line is not a message ctxbus can replay."""


@dataclass(frozen=True, slots=True)
class TranscriptMessage:
    """One message of a transcript, as `LocalContext.add` takes it."""

    line: int
    """Its line number in the file, for errors."""
    role: str
    content: str
    """The text; for a call read from its blocks, the text before them."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls, when the content wrote them out; else they are in `tool_name`."""
    tool_name: str | None = None
    call_id: str | None = None

    def add_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `LocalContext.add` for this message."""
        if self.tool_calls:
            return {"role": self.role, "content": self.content, "tool_calls": self.tool_calls}
        return {"role": self.role, "content": self.content, "tool_name": self.tool_name, "call_id": self.call_id}


@dataclass(frozen=True, slots=True)
class Transcript:
    """A whole session."""

    path: Path
    system_prompt: str | None
    """The first line's content when it is a system message (not in `messages` then)."""
    messages: tuple[TranscriptMessage, ...]


def read_transcript(path: Path) -> Transcript:
    """The session recorded in `path`.

    :raises TranscriptError: if the file cannot be read, or naming the line that is not
        an object with a role and a string content.
    """
    messages = [_message(number, raw) for number, raw in _lines(path)]
    system: str | None = None
    if messages and messages[0].role == "system" and messages[0].content.strip():
        system = messages.pop(0).content
    return Transcript(path, system, tuple(messages))


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path} is not UTF-8 text (byte {exc.start}): a transcript is JSON lines") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(message, dict) or not isinstance(message.get("content"), str) or "role" not in message:
            raise TranscriptError(f"{path}:{number}: expected an object with 'role' and 'content' (a string)")
        yield number, message


def _message(number: int, raw: dict[str, Any]) -> TranscriptMessage:
    role, content = raw["role"], raw["content"]
    tool_name, call_id = raw.get("tool_name") or None, raw.get("tool_call_id") or None
    if role == "assistant" and tool_name:
        text, calls = _split_calls(content)
        if calls:
            return TranscriptMessage(number, role, text, calls)
    return TranscriptMessage(number, role, content, tool_name=tool_name, call_id=call_id)


def _split_calls(content: str) -> tuple[str, tuple[ToolCall, ...]]:
    """The text before the call blocks and the calls, if the content is exactly that
    (anything but blank space after the first block: left as it is, with no calls)."""
    blocks = list(_CALL.finditer(content))
    if not blocks:
        return content, ()
    rest = _CALL.sub("", content[blocks[0].start() :])
    if rest.strip() or not all(block[1] for block in blocks):
        return content, ()
    calls = tuple(ToolCall(id=block[2], name=block[1], arguments=block[3]) for block in blocks)
    return content[: blocks[0].start()].rstrip(), calls
