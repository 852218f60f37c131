"""Nudge bands on severity = U / max(T, 1), and the rounding every nudge rule uses.

Thresholds are exact fractions and comparisons are done in integers, so a tail that
sits exactly on a boundary always lands in the upper band (all rules are ``>=``),
whatever the floating-point representation of the ratio would have said.

The rules' absolute token figures (a tail of 60k before anything is said, 25k
reclaimable, 50k for Channel 2, 25k of regrowth before a band speaks again) are
magic-context's, calibrated for a 200k window: on a 32k model the tail never reaches
60k, and nothing would ever be said. `NudgeFloors.for_window` scales all four with the
model's window, linearly, below `MAGIC_CONTEXT_WINDOW` (a 32k window: 9,600 / 4,000 /
8,000 / 4,000), and keeps them exactly at 200k and above. The severity thresholds are
shares and hold at every size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

__all__ = [
    "CHANNEL2_MIN_RECLAIMABLE_TOKENS",
    "CHANNEL2_SEVERITY",
    "DEFAULT_FLOORS",
    "FIRM_SEVERITY",
    "GENTLE_SEVERITY",
    "MIN_RECLAIMABLE_TOKENS",
    "MIN_TAIL_TOKENS",
    "MAGIC_CONTEXT_WINDOW",
    "REFIRE_GROWTH_RATIO",
    "REFIRE_MIN_GROWTH_TOKENS",
    "URGENT_SEVERITY",
    "Band",
    "NudgeFloors",
    "band_for",
    "channel1_band",
    "channel2_armed",
    "refire_growth",
    "round_half_up",
    "scale_half_up",
    "severity",
]

MIN_TAIL_TOKENS = 60_000
"""Below this tail size nothing is worth nagging about."""
MIN_RECLAIMABLE_TOKENS = 25_000
"""Below this much reclaimable mass a reduce pass would not pay for itself."""
GENTLE_SEVERITY = Fraction("0.20")
FIRM_SEVERITY = Fraction("0.40")
URGENT_SEVERITY = Fraction("0.60")
CHANNEL2_SEVERITY = Fraction("0.75")
"""Severity at which a tool-output reminder is no longer enough (Channel 2)."""
CHANNEL2_MIN_RECLAIMABLE_TOKENS = 50_000
REFIRE_GROWTH_RATIO = Fraction("0.08")
"""Share of T that U must grow by before a band may fire again."""
REFIRE_MIN_GROWTH_TOKENS = 25_000
MAGIC_CONTEXT_WINDOW = 200_000
"""The model window the absolute figures above are calibrated for; see `NudgeFloors`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NudgeFloors:
    """The absolute token figures of the nudge rules, for one model window.

    The defaults are magic-context's; `for_window` gives a smaller window its share.
    """

    tail: int = MIN_TAIL_TOKENS
    """T below this: quiet, whatever U is."""
    reclaimable: int = MIN_RECLAIMABLE_TOKENS
    """U below this: quiet; and a Channel 2 cycle ends once U falls below it."""
    channel2_reclaimable: int = CHANNEL2_MIN_RECLAIMABLE_TOKENS
    """Channel 2 needs at least this much U."""
    refire_growth: int = REFIRE_MIN_GROWTH_TOKENS
    """The least U growth before the same band speaks again (see `refire_growth`)."""

    @classmethod
    def for_window(cls, window: int) -> NudgeFloors:
        """The floors for a model of `window` tokens: magic-context's at
        `MAGIC_CONTEXT_WINDOW` and above, each times window / 200k below (halves up)."""
        if window >= MAGIC_CONTEXT_WINDOW:
            return DEFAULT_FLOORS
        share = Fraction(max(window, 0), MAGIC_CONTEXT_WINDOW)
        return cls(
            tail=scale_half_up(MIN_TAIL_TOKENS, share),
            reclaimable=scale_half_up(MIN_RECLAIMABLE_TOKENS, share),
            channel2_reclaimable=scale_half_up(CHANNEL2_MIN_RECLAIMABLE_TOKENS, share),
            refire_growth=scale_half_up(REFIRE_MIN_GROWTH_TOKENS, share),
        )


DEFAULT_FLOORS: NudgeFloors = NudgeFloors()
"""magic-context's floors: a window of 200k or more, and what every rule uses unless told."""


class Band(StrEnum):
    """How strongly the agent should be asked to prune, weakest first."""

    QUIET = "quiet"
    GENTLE = "gentle"
    FIRM = "firm"
    URGENT = "urgent"
    CHANNEL2 = "channel2"

    @property
    def rank(self) -> int:
        """Position in the escalation order; QUIET is 0."""
        return _RANKS[self]


_RANKS = {band: rank for rank, band in enumerate(Band)}


def round_half_up(value: Fraction | float) -> int:
    """Round to the nearest integer, halves upwards: floor(x + 0.5).

    Python's `round` rounds halves to even, which would make 0.05 * 10 round to 0.
    """
    return math.floor(Fraction(value) + Fraction(1, 2))


def scale_half_up(amount: int, ratio: Fraction) -> int:
    """`round_half_up(ratio * amount)` computed exactly, without float error."""
    return round_half_up(ratio * amount)


def severity(u: int, t: int) -> float:
    """U / max(T, 1), clamped to [0, 1]; for display and logs, not for banding."""
    return min(1.0, max(0.0, u / max(t, 1)))


def _at_least(u: int, t: int, threshold: Fraction) -> bool:
    # u / max(t, 1) >= threshold, in integers.
    return u * threshold.denominator >= threshold.numerator * max(t, 1)


def channel1_band(u: int, t: int, *, floors: NudgeFloors = DEFAULT_FLOORS) -> Band:
    """The Channel 1 band (QUIET..URGENT) for reclaimable U out of tail T."""
    if t < floors.tail or u < floors.reclaimable:
        return Band.QUIET
    if _at_least(u, t, URGENT_SEVERITY):
        return Band.URGENT
    if _at_least(u, t, FIRM_SEVERITY):
        return Band.FIRM
    if _at_least(u, t, GENTLE_SEVERITY):
        return Band.GENTLE
    return Band.QUIET


def channel2_armed(u: int, t: int, *, floors: NudgeFloors = DEFAULT_FLOORS) -> bool:
    """Whether the Channel 2 predicate holds: T >= 60k, U >= 50k and U/T >= 0.75 (the
    figures scaled by `floors`)."""
    return t >= floors.tail and u >= floors.channel2_reclaimable and _at_least(u, t, CHANNEL2_SEVERITY)


def band_for(u: int, t: int, *, floors: NudgeFloors = DEFAULT_FLOORS) -> Band:
    """The overall band: CHANNEL2 when its predicate holds, else the Channel 1 band."""
    return Band.CHANNEL2 if channel2_armed(u, t, floors=floors) else channel1_band(u, t, floors=floors)


def refire_growth(t: int, *, floors: NudgeFloors = DEFAULT_FLOORS) -> int:
    """How much U must grow before the same band may fire again: max(25k, 8% of T)
    (the 25k scaled by `floors`)."""
    return max(floors.refire_growth, scale_half_up(max(t, 0), REFIRE_GROWTH_RATIO))
