"""Settings of the local context engine, with named defaults and checked ranges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ctxbus.agents.context._errors import InvalidConfig
from ctxbus.agents.context._tokens import DEFAULT_ENCODING

__all__ = [
    "ContextConfig",
    "LayerBudgets",
    "DEFAULT_WINDOW",
    "DEFAULT_RESERVE_SYSTEM",
    "DEFAULT_RESERVE_OUTPUT",
    "DEFAULT_SPLIT",
    "DEFAULT_ARCHIVE_THRESHOLD",
    "DEFAULT_USER_SHARE",
]

DEFAULT_WINDOW = 128_000
DEFAULT_RESERVE_SYSTEM = 1_024
"""Room kept for the mode's system prompt; a longer prompt eats into the layers."""
DEFAULT_RESERVE_OUTPUT = 2_048
"""Room kept for the model's answer; never used by the prompt."""
DEFAULT_SPLIT = (1, 3, 2)
"""pinned : rolling : summary."""
DEFAULT_USER_SHARE = 0.25
"""Share of the layers' room for what the user wrote (the authored layer) before it is
compressed. Sized from the 34 recorded sessions of ../shared/anchors/transcripts: users
wrote 9 % of the tokens of the interactive (Claude Code) sessions, up to 22 % in one, and
3 % of the task-driven ones; what they wrote outlives the tool output around it, so its
share of a trimmed prompt is a few times its share of the history."""
DEFAULT_ARCHIVE_THRESHOLD = 1_000
"""Tool output above this many tokens is archived and shown compact."""
DEFAULT_HIGH_WATER = 1.0
"""A compose that would take more than this share of the layers' room rebuilds the head."""
DEFAULT_LOW_WATER = 0.6
"""A rebuild taken under pressure evicts down to this share of the layers' room."""
DEFAULT_CACHE_LIFETIME = 300.0
"""Seconds a provider keeps a prompt prefix cached (Anthropic's and OpenAI's default, 5 min)."""
MIN_LAYER_ROOM = 64
"""Smallest window left after reserves that we accept: below it nothing useful fits."""


class LayerBudgets(NamedTuple):
    """Token caps of the layers for one compose."""

    pinned: int
    rolling: int
    summary: int
    authored: int = 0
    """Where the authored layer (what the user wrote) starts being compressed; it gives
    way to nothing else below that, and beyond it only after every other layer did."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextConfig:
    """How big the window is and how the engine shares it out.

    All values are checked on construction so a bad setting fails where it is made, not
    at the first compose.

    :raises InvalidConfig: naming the field and the value that is out of range.
    """

    window: int = DEFAULT_WINDOW
    """The model's context window in tokens."""
    system_prompt: str | None = None
    """The host's own system prompt. Sent whole, as the one system message and first, in
    every mode; counted against the window like everything else, and never demoted,
    summarized or cut (a prompt that alone does not fit is an error at compose). None:
    the mode's built-in template is the system message."""
    reserve_system: int = DEFAULT_RESERVE_SYSTEM
    """Tokens kept for the system prompt (the host's, or the mode's template and output
    constraint); a longer prompt takes the rest from the layers."""
    reserve_output: int = DEFAULT_RESERVE_OUTPUT
    """Tokens kept for the model's answer."""
    split: tuple[int, int, int] = DEFAULT_SPLIT
    """Weights pinned:rolling:summary. Pinned and summary are capped at their share; rolling
    gets its share plus whatever the other two leave unused."""
    user_share: float = DEFAULT_USER_SHARE
    """Share of the layers' room kept for the user's own words (the authored layer: user
    and host messages the rolling layer let go, kept verbatim). Past it they are shown
    smaller (repeats left out, pasted logs archived, asides folded), never dropped while
    tool output or narration could go instead. Does not shrink the other layers' caps:
    rolling takes whatever the others leave."""
    protected_recent: int = 6
    """The newest messages of rolling that eviction never touches (widened to whole tool
    call/result units). Yields only when it alone is over budget."""
    archive_threshold: int = DEFAULT_ARCHIVE_THRESHOLD
    """Tool output larger than this is archived and shown in compact form."""
    encoding: str = DEFAULT_ENCODING
    """`cl100k_base` or a path to a `.tiktoken` BPE file."""
    encoding_pattern: str | None = None
    """Split pattern, required when `encoding` is a file path."""
    message_overhead: int = 4
    """Tokens a chat API adds around each message (role, separators)."""
    constraint_whole_max: int = 160
    """A constraint message up to this size is pinned whole; longer ones give their
    constraint sentences only, so a long task text does not crowd out the pinned layer."""
    eviction_scan: int = 32
    """How many of the oldest rolling units are weighed against each other per eviction;
    bounds compose time on long histories."""
    compact_lines: int = 5
    """Head and tail lines shown in the compact form of archived output."""
    compact_line_chars: int = 200
    """Longer lines in a compact form are clipped (the archive keeps them whole)."""
    compact_error_lines: int = 5
    """Error lines quoted in a compact form."""
    high_water: float = DEFAULT_HIGH_WATER
    """Share of the layers' room (the window less reserves and the new input) past which a
    compose rebuilds the head; below it, a compose only appends to the previous prompt, so
    a provider's prompt cache serves all of that prompt again. 1.0: only when the budget
    forces it."""
    low_water: float = DEFAULT_LOW_WATER
    """Share of the layers' room a rebuild evicts down to (lowest value first, the protected
    window kept), so the turns after it are append-only again for a while. Lower means
    rarer rebuilds and smaller prompts, higher means more of the history verbatim."""
    cache_lifetime: float = DEFAULT_CACHE_LIFETIME
    """Seconds after which a provider's cache has likely dropped the prompt: a compose that
    long after the previous one rebuilds (and evicts down to `low_water`), since it pays
    for the whole prompt anyway."""

    def __post_init__(self) -> None:
        _at_least("window", self.window, 1)
        if self.system_prompt is not None and (
            not isinstance(self.system_prompt, str) or not self.system_prompt.strip()
        ):
            raise InvalidConfig(
                f"system_prompt must be text (or None, for the mode's template), got {self.system_prompt!r:.60}"
            )
        _at_least("reserve_system", self.reserve_system, 0)
        _at_least("reserve_output", self.reserve_output, 0)
        _at_least("protected_recent", self.protected_recent, 0)
        _at_least("archive_threshold", self.archive_threshold, 1)
        _at_least("message_overhead", self.message_overhead, 0)
        _at_least("constraint_whole_max", self.constraint_whole_max, 1)
        _at_least("eviction_scan", self.eviction_scan, 1)
        _at_least("compact_lines", self.compact_lines, 0)
        _at_least("compact_line_chars", self.compact_line_chars, 16)
        _at_least("compact_error_lines", self.compact_error_lines, 0)
        share = self.user_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share <= 1.0:
            raise InvalidConfig(f"user_share must be a share of the layers' room, in (0, 1], got {share!r}")
        for name, share in (("high_water", self.high_water), ("low_water", self.low_water)):
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share <= 1.0:
                raise InvalidConfig(f"{name} must be a share of the layers' room, in (0, 1], got {share!r}")
        if self.low_water > self.high_water:
            raise InvalidConfig(
                f"low_water ({self.low_water}) must not be above high_water ({self.high_water}): "
                "a rebuild evicts down to the low-water mark"
            )
        lifetime = self.cache_lifetime
        if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or not lifetime > 0:
            raise InvalidConfig(f"cache_lifetime must be a positive number of seconds, got {lifetime!r}")
        if len(self.split) != 3 or any(not isinstance(w, int) or w < 0 for w in self.split):
            raise InvalidConfig(f"split must be three weights >= 0 (pinned, rolling, summary), got {self.split!r}")
        if self.split[1] == 0 or sum(self.split) == 0:
            raise InvalidConfig(f"split must give rolling a weight > 0, got {self.split!r}")
        room = self.window - self.reserve_system - self.reserve_output
        if room < MIN_LAYER_ROOM:
            raise InvalidConfig(
                f"reserves (system {self.reserve_system:,} + output {self.reserve_output:,}) leave "
                f"{room:,} tokens of window {self.window:,}; at least {MIN_LAYER_ROOM} are needed"
            )

    @property
    def available(self) -> int:
        """Tokens for the layers and the user input: window minus both reserves."""
        return self.window - self.reserve_system - self.reserve_output

    def budgets(self, room: int) -> LayerBudgets:
        """Split `room` tokens among the layers by `split` (rounding down)."""
        total = sum(self.split)
        pinned = room * self.split[0] // total
        summary = room * self.split[2] // total
        authored = int(room * self.user_share)
        return LayerBudgets(pinned=pinned, rolling=room - pinned - summary, summary=summary, authored=authored)


def _at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfig(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise InvalidConfig(f"{name} must be >= {low}, got {value!r}")
