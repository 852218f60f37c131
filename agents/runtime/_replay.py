"""Replaying a recorded session through a local context: what it would have saved.

Reads the JSON Lines transcript format of `shared/anchors/transcripts` (one message a
line: role, content, tool_name, tool_call_id, ts), composes before every assistant
message as an agent would, and measures the tail after every tool result as the
nudges would.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.context import ContextConfig, LocalContext, Tokenizer
from agents.nudges import Band, HygieneWalker, protected_floor
from agents.runtime._tail import TailAdapter
from schemas import Domain, UsageError

__all__ = ["ReplayReport", "replay_transcript", "TranscriptError"]

_DOMAIN = Domain.parse("replay/local/session")
_BAND_ORDER = [str(b) for b in sorted(Band, key=lambda b: b.rank)]


class TranscriptError(UsageError):
    """Raised when a transcript line is not a message ctxbus can replay."""


@dataclass
class ReplayReport:
    """What replaying one transcript showed."""

    file: str
    budget: int
    messages: int = 0
    composes: int = 0
    prompt_tokens: list[int] = field(default_factory=list)
    """Prompt size at each compose."""
    history_tokens: list[int] = field(default_factory=list)
    """Full history size at each compose: what sending everything would cost."""
    bands: Counter[str] = field(default_factory=Counter)
    """Tool results measured in each band."""
    trims: Counter[str] = field(default_factory=Counter)
    """Trims by `reason -> destination`."""

    @property
    def mean_prompt(self) -> float:
        return sum(self.prompt_tokens) / len(self.prompt_tokens) if self.prompt_tokens else 0.0

    @property
    def mean_history(self) -> float:
        return sum(self.history_tokens) / len(self.history_tokens) if self.history_tokens else 0.0

    @property
    def saving(self) -> float:
        """Share of prompt tokens saved against sending the full history, over all composes."""
        full = sum(self.history_tokens)
        return 1 - sum(self.prompt_tokens) / full if full else 0.0

    @property
    def highest_band(self) -> str:
        reached = [b for b in _BAND_ORDER if self.bands.get(b)]
        return reached[-1] if reached else str(Band.QUIET)

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "budget": self.budget,
            "messages": self.messages,
            "composes": self.composes,
            "mean_prompt_tokens": round(self.mean_prompt, 1),
            "mean_history_tokens": round(self.mean_history, 1),
            "final_history_tokens": self.history_tokens[-1] if self.history_tokens else 0,
            "saving": round(self.saving, 4),
            "highest_band": self.highest_band,
            "bands": dict(self.bands),
            "trims": dict(self.trims),
        }


def replay_transcript(path: Path, *, budget: int, store: Path, tokenizer: Tokenizer | None = None) -> ReplayReport:
    """Replay `path` through a fresh context of window `budget`, kept in `store`.

    :raises TranscriptError: naming the line that is not a valid message.
    :raises InvalidConfig: if `budget` is too small for the reserves.
    :raises UsageError: if `store` holds messages already: the figures would count them.
    """
    config = ContextConfig(window=budget)
    report = ReplayReport(file=str(path), budget=budget)
    with LocalContext(store, _DOMAIN, config=config, tokenizer=tokenizer, autoflush=False) as context:
        if context.next_tag > 1:
            raise UsageError(f"{store} holds a replay already; replay into a new store")
        walker = HygieneWalker(context.tokenizer, protected_floor=protected_floor(config.available))
        adapter = TailAdapter()
        history = 0
        for number, message in _messages(path):
            if message["role"] == "assistant" and report.messages:
                composition = context.compose()
                report.composes += 1
                report.prompt_tokens.append(composition.report.total)
                report.history_tokens.append(history)
                report.trims.update(f"{t.reason} -> {t.destination}" for t in composition.report.trims)
            try:
                tag = context.add(
                    message["role"],
                    message["content"],
                    tool_name=message.get("tool_name") or None,
                    call_id=message.get("tool_call_id") or None,
                )
            except UsageError as exc:
                raise TranscriptError(f"{path}:{number}: {exc}") from exc
            history += context.message(tag).tokens
            report.messages += 1
            if message["role"] == "tool":
                parts, tags = adapter.convert(context.tail())
                report.bands[str(walker.measure(parts, tags).band)] += 1
    return report


def _messages(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
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
