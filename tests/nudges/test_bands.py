"""Band boundaries (all `>=`), the Channel 2 predicate, the re-fire cadence and rounding."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ctxbus.agents.nudges import (
    Band,
    approx_tokens,
    band_for,
    channel1_band,
    channel2_armed,
    refire_growth,
    round_half_up,
)


@pytest.mark.parametrize(
    ("u", "t", "band"),
    [
        (59_999, 59_999, Band.QUIET),  # tail below the minimum
        (24_999, 60_000, Band.QUIET),  # too little to reclaim
        (25_000, 60_000, Band.FIRM),
        (39_999, 200_000, Band.QUIET),
        (40_000, 200_000, Band.GENTLE),
        (79_999, 200_000, Band.GENTLE),
        (80_000, 200_000, Band.FIRM),
        (119_999, 200_000, Band.FIRM),
        (120_000, 200_000, Band.URGENT),
        (149_999, 200_000, Band.URGENT),
        (150_000, 200_000, Band.CHANNEL2),
        (49_999, 60_000, Band.URGENT),  # Channel 2 needs 50k reclaimable
        (50_000, 60_000, Band.CHANNEL2),
        (50_000, 66_667, Band.URGENT),  # 0.749996...
        (50_000, 66_666, Band.CHANNEL2),
    ],
)
def test_band_boundaries(u: int, t: int, band: Band) -> None:
    assert band_for(u, t) is band
    assert channel2_armed(u, t) is (band is Band.CHANNEL2)
    expected_channel1 = Band.URGENT if band is Band.CHANNEL2 else band
    assert channel1_band(u, t) is expected_channel1


def test_band_ranks_escalate() -> None:
    assert [band.rank for band in Band] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("t", "growth"),
    [(0, 25_000), (312_500, 25_000), (400_000, 32_000), (1_000_000, 80_000), (312_507, 25_001)],
)
def test_refire_growth_is_max_of_floor_and_eight_percent(t: int, growth: int) -> None:
    assert refire_growth(t) == growth


@pytest.mark.parametrize(
    ("value", "rounded"),
    [(0.5, 1), (1.5, 2), (2.5, 3), (2.4999, 2), (-0.5, 0), (Fraction(7, 2), 4)],
)
def test_round_half_up(value: float | Fraction, rounded: int) -> None:
    assert round_half_up(value) == rounded


@pytest.mark.parametrize(("tokens", "text"), [(90_000, "90k"), (90_500, "91k"), (90_499, "90k"), (0, "0k")])
def test_token_figures_round_half_up(tokens: int, text: str) -> None:
    assert approx_tokens(tokens) == text
