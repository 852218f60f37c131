"""What a run of prompts costs with a provider's prompt cache.

Each call's prompt is compared with the previous call's: the longest run of leading
whole messages identical to it (role, content, tool call id, calls) is served from the
cache, the rest is written to it. Prices are multiples of the base input price, under
named presets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["PRICE_PRESETS", "CacheMeter", "PricePreset", "PromptCache"]


class PricePreset(NamedTuple):
    """Input prices as multiples of the base input price."""

    write: float
    """An input token not served from the cache (written to it)."""
    read: float
    """An input token served from the cache."""


PRICE_PRESETS: Mapping[str, PricePreset] = {
    "anthropic": PricePreset(write=1.25, read=0.1),
    "openai": PricePreset(write=1.0, read=0.5),
}
"""Anthropic: cache writes at 1.25x, reads at 0.1x; OpenAI: cached input at 0.5x."""

Key = tuple[Any, ...]


def message_key(message: Mapping[str, Any]) -> Key:
    """What the cache compares of a Chat Completions message."""
    calls = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ())
    return (message["role"], message.get("content") or "", message.get("tool_call_id"), calls)


@dataclass
class CacheMeter:
    """Cached share, prefix rewrites and cost of one agent's prompts, call by call.

    :param count: a token counter for texts (cached by the caller if it likes).
    :param overhead: tokens a chat API adds around each message.
    """

    count: Callable[[str], int]
    overhead: int = 4
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    rewrites: int = 0
    """Calls whose prompt did not start with the whole previous prompt."""
    _previous: list[Key] = field(default_factory=list, repr=False)

    def call(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Count one call's prompt, as Chat Completions messages (`Composition.to_openai()`)."""
        self.call_keys([message_key(m) for m in messages])

    def call_keys(self, keys: Sequence[Key]) -> None:
        """Count one call's prompt, one (role, content, tool call id, calls) key a message."""
        previous = self._previous
        same, limit = 0, min(len(keys), len(previous))
        while same < limit and keys[same] == previous[same]:
            same += 1
        if self.calls and same < len(previous):
            self.rewrites += 1
        tokens = [self._tokens(k) for k in keys]
        self.calls += 1
        self.prompt_tokens += sum(tokens)
        self.cached_tokens += sum(tokens[:same])
        self._previous = list(keys)

    def _tokens(self, key: Key) -> int:
        _, content, _, calls = key
        return self.overhead + self.count(content) + sum(self.count(name) + self.count(args) for _, name, args in calls)

    @property
    def cached_share(self) -> float:
        """Share of all prompt tokens served from the cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def rewrites_per_call(self) -> float:
        return self.rewrites / self.calls if self.calls else 0.0

    def cost(self, preset: str | PricePreset) -> float:
        """The input cost of every call, in base-price tokens, under `preset`.

        :raises KeyError: for a preset name not in `PRICE_PRESETS`.
        """
        price = PRICE_PRESETS[preset] if isinstance(preset, str) else preset
        uncached = self.prompt_tokens - self.cached_tokens
        return uncached * price.write + self.cached_tokens * price.read


@dataclass
class PromptCache:
    """What an agent's prompts cost with a provider's cache, against what sending its
    whole history each call would cost (the history only grows, so each call's cached
    prefix is the whole previous history).

    Feed it every prompt with `observe`, and the history's size then.
    """

    meter: CacheMeter
    full_prompt_tokens: int = 0
    full_cached_tokens: int = 0
    _last_history: int = 0

    def observe(self, messages: Sequence[Mapping[str, Any]], history_tokens: int) -> None:
        """Count one call's prompt (`Composition.to_openai()`), with the tokens of the
        whole history at that call."""
        self.meter.call(messages)
        self.full_prompt_tokens += history_tokens
        self.full_cached_tokens += min(self._last_history, history_tokens) if self.meter.calls > 1 else 0
        self._last_history = history_tokens

    @property
    def cached_share(self) -> float:
        return self.meter.cached_share

    def cost(self, preset: str | PricePreset) -> float:
        """The prompts' input cost, in base-price tokens."""
        return self.meter.cost(preset)

    def full_cost(self, preset: str | PricePreset) -> float:
        """What the whole history each call would have cost, in base-price tokens."""
        price = PRICE_PRESETS[preset] if isinstance(preset, str) else preset
        uncached = self.full_prompt_tokens - self.full_cached_tokens
        return uncached * price.write + self.full_cached_tokens * price.read
