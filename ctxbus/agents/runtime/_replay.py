"""Replaying a recorded session through a local context: what it would have saved.

Reads a transcript (`read_transcript`: its first system message is the agent's system
prompt, its calls are recorded whole), composes before every model call as an agent
would (before an assistant message that follows anything but another assistant
message: consecutive ones are one turn), and measures the tail after every tool result
as the nudges would, with the floors of the replay's window.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxbus.agents.context import PRICE_PRESETS, CacheMeter, ContextConfig, LocalContext, Tokenizer
from ctxbus.agents.nudges import Band, HygieneWalker, NudgeFloors, protected_floor
from ctxbus.agents.runtime._tail import TailAdapter
from ctxbus.agents.runtime._transcript import TranscriptError, TranscriptMessage, read_transcript
from ctxbus.schemas import Domain, UsageError

__all__ = ["ReplayReport", "replay_transcript", "TranscriptError"]

_DOMAIN = Domain.parse("replay/local/session")
_BAND_ORDER = [str(b) for b in sorted(Band, key=lambda b: b.rank)]


@dataclass
class ReplayReport:
    """What replaying one transcript showed."""

    file: str
    budget: int
    messages: int = 0
    composes: int = 0
    """Model calls: one compose before each."""
    prompt_tokens: list[int] = field(default_factory=list)
    """Prompt size at each compose."""
    history_tokens: list[int] = field(default_factory=list)
    """Full history size at each compose: what sending everything would cost."""
    bands: Counter[str] = field(default_factory=Counter)
    """Tool results measured in each band."""
    trims: Counter[str] = field(default_factory=Counter)
    """Trims by `reason -> destination`."""
    cache: CacheMeter | None = None
    """Cached share and cost of the prompts composed (Chat Completions rendering)."""
    full_cache: CacheMeter | None = None
    """The same for sending the full, untrimmed history at every call."""

    def cost(self, preset: str) -> float:
        """The prompts' input cost under a price preset, relative to the full history's."""
        if self.cache is None or self.full_cache is None or not self.full_cache.cost(preset):
            return 0.0
        return self.cache.cost(preset) / self.full_cache.cost(preset)

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
            "cache": {
                "cached_share": round(self.cache.cached_share, 4) if self.cache else 0.0,
                "full_history_cached_share": round(self.full_cache.cached_share, 4) if self.full_cache else 0.0,
                "rewrites_per_call": round(self.cache.rewrites_per_call, 4) if self.cache else 0.0,
                "cost_vs_full_history": {preset: round(self.cost(preset), 4) for preset in PRICE_PRESETS},
                "price_presets": {name: p._asdict() for name, p in PRICE_PRESETS.items()},
            },
        }


def replay_transcript(path: Path, *, budget: int, store: Path, tokenizer: Tokenizer | None = None) -> ReplayReport:
    """Replay `path` through a fresh context of window `budget`, kept in `store`.

    :raises TranscriptError: naming the line that is not a valid message.
    :raises InvalidConfig: if `budget` is too small for the reserves, or for the
        transcript's system prompt.
    :raises UsageError: if `store` holds messages already: the figures would count them.
    """
    transcript = read_transcript(path)
    config = ContextConfig(window=budget, system_prompt=transcript.system_prompt)
    report = ReplayReport(file=str(path), budget=budget)
    with LocalContext(store, _DOMAIN, config=config, tokenizer=tokenizer, autoflush=False) as context:
        if context.next_tag > 1:
            raise UsageError(f"{store} holds a replay already; replay into a new store")
        walker = HygieneWalker(
            context.tokenizer,
            protected_floor=protected_floor(config.available),
            floors=NudgeFloors.for_window(budget),
        )
        adapter = TailAdapter()
        history = context.tokenizer.count(transcript.system_prompt) if transcript.system_prompt else 0
        previous = ""
        counts: dict[str, int] = {}

        def count(text: str) -> int:
            n = counts.get(text)
            if n is None:
                n = counts[text] = context.tokenizer.count(text)
            return n

        report.cache, report.full_cache = CacheMeter(count), CacheMeter(count)
        full: list[tuple[object, ...]] = (
            [("system", transcript.system_prompt, None, ())] if transcript.system_prompt else []
        )
        for message in transcript.messages:
            if message.role == "assistant" and previous not in ("", "assistant"):
                composition = context.compose()
                report.composes += 1
                report.prompt_tokens.append(composition.report.total)
                report.history_tokens.append(history)
                report.trims.update(f"{t.reason} -> {t.destination}" for t in composition.report.trims)
                report.cache.call(composition.to_openai())
                report.full_cache.call_keys(full)
            try:
                tag = context.add(**message.add_arguments())
            except UsageError as exc:
                raise TranscriptError(f"{path}:{message.line}: {exc}") from exc
            history += context.message(tag).tokens
            full.append(_full_key(message))
            report.messages += 1
            previous = message.role
            if message.role == "tool":
                parts, tags = adapter.convert(context.tail())
                report.bands[str(walker.measure(parts, tags).band)] += 1
    return report


def _full_key(message: TranscriptMessage) -> tuple[object, ...]:
    """A message as the full history would send it, as `CacheMeter` compares it."""
    calls = tuple((c.id, c.name, c.arguments) for c in message.tool_calls)
    return (message.role, message.content, message.call_id if message.role == "tool" else None, calls)
