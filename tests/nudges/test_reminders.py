"""Our reminder texts carry the reference's structure in our own words.

The reference strings (`ctx-reduce-nudge-copy-golden.json`) fix what a reminder must
convey: how many spent outputs, about how many tokens, which tags to start with, and
which level it speaks at. We parse those facts out of both texts and compare them;
the wording itself is ours and is not compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from ctxbus.agents.nudges import (
    REMINDER_CLOSE,
    REMINDER_OPEN,
    Band,
    Channel1Level,
    ReclaimHint,
    Reminder,
    strip_reminder_spans,
    tool_category,
)

LEVELS: dict[str, Channel1Level] = {"gentle": Band.GENTLE, "firm": Band.FIRM, "urgent": Band.URGENT}
CHANNEL1_CASES = ["channel1-gentle", "channel1-firm", "channel1-urgent", "channel1-sticky"]


@dataclass(frozen=True)
class Facts:
    outputs: int
    thousands: int
    hints: tuple[tuple[int, str], ...]


def reference_facts(text: str) -> Facts:
    count = re.search(r"(\d+) spent tool outputs? \(~(\d+)k tokens\)", text)
    hints = re.search(r"oldest reclaimable: (.*)\.", text)
    assert count is not None and hints is not None
    return Facts(int(count[1]), int(count[2]), _hint_pairs(hints[1]))


def our_facts(text: str) -> Facts:
    count = re.search(r"(\d+) used tool outputs? \(about (\d+)k tokens\)", text)
    hints = re.search(r"[Ss]tart with:? (.*?)\)?\.", text)
    assert count is not None and hints is not None
    return Facts(int(count[1]), int(count[2]), _hint_pairs(hints[1]))


def _hint_pairs(text: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(n), name) for n, name in re.findall(r"§(\d+)§ ([\w:.-]+)", text))


def ours_for(case: dict[str, Any]) -> Reminder:
    return Reminder(
        level=LEVELS[case["level"]],
        calm=case["sticky"],
        outputs=case["reclaimable_tool_outputs"],
        tokens=case["reclaimable_tokens"],
        hints=tuple(ReclaimHint(tool_category(h["tool_name"]), h["tag_number"], h["tool_name"]) for h in case["hint"]),
    )


@pytest.mark.parametrize("case_id", CHANNEL1_CASES)
def test_same_facts_as_the_reference(case_id: str, copy_golden: dict[str, dict[str, Any]]) -> None:
    case = copy_golden[case_id]
    ours = ours_for(case).text
    assert our_facts(ours) == reference_facts(case["expected"])
    assert our_facts(ours) == Facts(16, 90, ((123, "read"),))


@pytest.mark.parametrize("case_id", CHANNEL1_CASES)
def test_same_span_as_the_reference(case_id: str, copy_golden: dict[str, dict[str, Any]]) -> None:
    """Both are appended to a tool output the same way, and the walk removes both."""
    reference = copy_golden[case_id]["expected"]
    ours = ours_for(copy_golden[case_id]).text
    for text in (reference, ours):
        assert text.startswith(REMINDER_OPEN) and text.endswith(REMINDER_CLOSE)
        assert strip_reminder_spans("tool output" + text) == "tool output"
    assert ours != reference


def test_each_level_has_its_own_text(copy_golden: dict[str, dict[str, Any]]) -> None:
    texts = {case_id: ours_for(copy_golden[case_id]).body for case_id in CHANNEL1_CASES}
    assert len(set(texts.values())) == len(CHANNEL1_CASES)
    assert "\n" not in texts["channel1-sticky"]  # the calm re-fire is one line
    assert all("\n" in texts[case_id] for case_id in CHANNEL1_CASES[:3])


@pytest.mark.parametrize("level", LEVELS.values())
@pytest.mark.parametrize("calm", [False, True])
def test_no_percentages_or_window_sizes(level: Channel1Level, calm: bool) -> None:
    hints = (ReclaimHint(tool_category("bash"), 7, "bash"), ReclaimHint(tool_category("read"), 31, "read"))
    text = Reminder(level=level, calm=calm, outputs=12, tokens=64_400, hints=hints).text
    assert "%" not in text
    numbers = sorted(int(n) for n in re.findall(r"\d+", text))
    assert numbers == [7, 12, 31, 64]  # the count, the figure in thousands, the two tags


def test_at_most_four_hints_are_named() -> None:
    hints = tuple(ReclaimHint(tool_category("bash"), n, "bash") for n in range(1, 7))
    text = Reminder(level=Band.FIRM, calm=False, outputs=6, tokens=50_000, hints=hints).text
    assert [n for n, _ in our_facts(text).hints] == [1, 2, 3, 4]


def test_singular_and_unknown_counts_and_no_hints() -> None:
    one = Reminder(level=Band.GENTLE, calm=False, outputs=1, tokens=30_000, hints=()).body
    assert one.startswith("Tidy-up note: 1 used tool output (about 30k tokens)")
    assert "Start with" not in one
    unknown = Reminder(level=Band.FIRM, calm=False, outputs=0, tokens=30_000, hints=()).body
    assert unknown.startswith("Used tool outputs (about 30k tokens)")
