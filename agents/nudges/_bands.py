"""Nudge bands on severity = U / max(T, 1), and the rounding every nudge rule uses.

Thresholds are exact fractions and comparisons are done in integers, so a tail that
sits exactly on a boundary always lands in the upper band (all rules are ``>=``),
whatever the floating-point representation of the ratio would have said.
"""

from __future__ import annotations

import math
from enum import StrEnum
from fractions import Fraction

__all__ = [
    "CHANNEL2_MIN_RECLAIMABLE_TOKENS",
    "CHANNEL2_SEVERITY",
    "FIRM_SEVERITY",
    "GENTLE_SEVERITY",
    "MIN_RECLAIMABLE_TOKENS",
    "MIN_TAIL_TOKENS",
    "REFIRE_GROWTH_RATIO",
    "REFIRE_MIN_GROWTH_TOKENS",
    "URGENT_SEVERITY",
    "Band",
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


def channel1_band(u: int, t: int) -> Band:
    """The Channel 1 band (QUIET..URGENT) for reclaimable U out of tail T."""
    if t < MIN_TAIL_TOKENS or u < MIN_RECLAIMABLE_TOKENS:
        return Band.QUIET
    if _at_least(u, t, URGENT_SEVERITY):
        return Band.URGENT
    if _at_least(u, t, FIRM_SEVERITY):
        return Band.FIRM
    if _at_least(u, t, GENTLE_SEVERITY):
        return Band.GENTLE
    return Band.QUIET


def channel2_armed(u: int, t: int) -> bool:
    """Whether the Channel 2 predicate holds: T >= 60k, U >= 50k and U/T >= 0.75."""
    return t >= MIN_TAIL_TOKENS and u >= CHANNEL2_MIN_RECLAIMABLE_TOKENS and _at_least(u, t, CHANNEL2_SEVERITY)


def band_for(u: int, t: int) -> Band:
    """The overall band: CHANNEL2 when its predicate holds, else the Channel 1 band."""
    return Band.CHANNEL2 if channel2_armed(u, t) else channel1_band(u, t)


def refire_growth(t: int) -> int:
    """How much U must grow before the same band may fire again: max(25k, 8% of T)."""
    return max(REFIRE_MIN_GROWTH_TOKENS, scale_half_up(max(t, 0), REFIRE_GROWTH_RATIO))
