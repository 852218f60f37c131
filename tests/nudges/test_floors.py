"""The rules' absolute figures fit the model's window: magic-context's at 200k and above,
the same share of a smaller window below (the severity thresholds hold at every size)."""

from __future__ import annotations

import pytest

from ctxbus.agents.nudges import (
    CHANNEL2_MIN_RECLAIMABLE_TOKENS,
    DEFAULT_FLOORS,
    MAGIC_CONTEXT_WINDOW,
    MIN_RECLAIMABLE_TOKENS,
    MIN_TAIL_TOKENS,
    REFIRE_MIN_GROWTH_TOKENS,
    Band,
    Channel1State,
    Channel2State,
    HygieneWalker,
    NudgeFloors,
    PartKind,
    TagKind,
    TailPart,
    TailTag,
    Verdict,
    advance_cycle,
    band_for,
    channel1_band,
    channel2_armed,
    decide,
    refire_growth,
)
from tests.nudges.helpers import WordCounter

SMALL = NudgeFloors.for_window(32_000)


@pytest.mark.parametrize("window", [MAGIC_CONTEXT_WINDOW, 400_000, 1_000_000])
def test_at_200k_and_above_the_floors_are_magic_contexts(window: int) -> None:
    floors = NudgeFloors.for_window(window)
    assert floors == DEFAULT_FLOORS == NudgeFloors()
    assert (
        (floors.tail, floors.reclaimable, floors.channel2_reclaimable, floors.refire_growth)
        == (
            MIN_TAIL_TOKENS,
            MIN_RECLAIMABLE_TOKENS,
            CHANNEL2_MIN_RECLAIMABLE_TOKENS,
            REFIRE_MIN_GROWTH_TOKENS,
        )
        == (60_000, 25_000, 50_000, 25_000)
    )


@pytest.mark.parametrize(
    ("window", "figures"),
    [
        (8_000, (2_400, 1_000, 2_000, 1_000)),
        (16_000, (4_800, 2_000, 4_000, 2_000)),
        (32_000, (9_600, 4_000, 8_000, 4_000)),
        (100_000, (30_000, 12_500, 25_000, 12_500)),
        (150_000, (45_000, 18_750, 37_500, 18_750)),
        (199_999, (60_000, 25_000, 50_000, 25_000)),  # 59,999.7 and so on, rounded: no step at 200k
        (8_333, (2_500, 1_042, 2_083, 1_042)),  # 2,499.9 / 1,041.6 / 2,083.25 / 1,041.6
    ],
)
def test_below_200k_each_floor_is_its_share_of_the_window(window: int, figures: tuple[int, ...]) -> None:
    floors = NudgeFloors.for_window(window)
    assert (floors.tail, floors.reclaimable, floors.channel2_reclaimable, floors.refire_growth) == figures


@pytest.mark.parametrize(
    ("u", "t", "band"),
    [
        (4_000, 9_599, Band.QUIET),  # tail below the floor
        (3_999, 9_600, Band.QUIET),  # too little to reclaim
        (4_000, 20_000, Band.GENTLE),
        (8_000, 20_000, Band.FIRM),
        (12_000, 20_000, Band.URGENT),
        (7_999, 9_600, Band.URGENT),  # Channel 2 needs 8k reclaimable
        (8_000, 10_000, Band.CHANNEL2),
        (15_000, 20_000, Band.CHANNEL2),
    ],
)
def test_bands_on_a_32k_window(u: int, t: int, band: Band) -> None:
    assert band_for(u, t, floors=SMALL) is band
    assert channel2_armed(u, t, floors=SMALL) is (band is Band.CHANNEL2)
    assert channel1_band(u, t, floors=SMALL) is (Band.URGENT if band is Band.CHANNEL2 else band)
    assert band_for(u, t) is Band.QUIET, "magic-context's floors never speak on a tail this size"


def test_the_refire_cadence_and_the_channel2_cycle_use_the_floors() -> None:
    assert refire_growth(10_000, floors=SMALL) == 4_000 and refire_growth(100_000, floors=SMALL) == 8_000
    armed = advance_cycle(Channel2State(cycle=2), u=8_000, t=10_000, floors=SMALL)
    assert armed == Channel2State(cycle=2, armed_t=10_000)
    assert advance_cycle(armed, u=4_000, t=12_000, floors=SMALL) == armed, "still reclaimable: the same cycle"
    assert advance_cycle(armed, u=3_999, t=12_000, floors=SMALL) == Channel2State(cycle=3), "pruned: a new one"
    first = decide(Channel1State(), 8_000, 40_000, user_turn=1, floors=SMALL)
    assert (first.verdict, first.band) == (Verdict.RISE, Band.GENTLE)
    again = decide(first.state, 11_999, 40_000, user_turn=9, floors=SMALL)
    assert again.verdict is Verdict.CADENCE, "U grew by 3,999, under the 4,000 a 32k window asks for"
    assert decide(first.state, 12_000, 40_000, user_turn=9, floors=SMALL).verdict is Verdict.REFIRE


def test_a_walker_measures_with_its_floors() -> None:
    parts = [TailPart(key=f"p{i}", kind=PartKind.TOOL_OUTPUT, tag=i, tokens=1_200) for i in range(1, 11)]
    tags = [TailTag(number=i, kind=TagKind.TOOL, tokens=1_200, tool_name="grep") for i in range(1, 11)]
    small = HygieneWalker(WordCounter(), protected_floor=2_000, floors=SMALL).measure(parts, tags)
    large = HygieneWalker(WordCounter(), protected_floor=2_000).measure(parts, tags)
    assert (small.u, small.t) == (large.u, large.t) == (8_400, 12_000)
    assert (small.band, large.band) == (Band.URGENT, Band.QUIET)
    assert small.floors == SMALL and large.floors == DEFAULT_FLOORS
