"""Conformance: our walk reproduces magic-context's {U, T} and band vectors exactly."""

from __future__ import annotations

from typing import Any

import pytest

from ctxbus.agents.context import Tokenizer
from ctxbus.agents.nudges import HygieneWalker, TailMeasure
from tests.nudges.golden import GoldenTail, build_case, load_anchor
from tests.nudges.helpers import RecordingCounter

SCHEMA2 = load_anchor("nudge-hygiene-golden.schema2-v3.json")
SCHEMA1 = load_anchor("nudge-hygiene-golden.schema1-v2.json")


def _cases(golden: dict[str, Any]) -> list[Any]:
    return [pytest.param(case, id=case["id"]) for case in golden["cases"]]


def _assert_matches(measure: TailMeasure, tail: GoldenTail) -> None:
    assert (measure.u, measure.t, measure.band.value) == (
        tail.expected_u,
        tail.expected_t,
        tail.expected_band,
    )


def test_vectors_are_the_expected_generation() -> None:
    assert SCHEMA2["schema"] == 2
    assert SCHEMA2["provenance"]["generator_version"] == "nudge-hygiene-ts-v3"
    assert len(SCHEMA2["cases"]) == 16
    assert SCHEMA1["schema"] == 1
    assert len(SCHEMA1["cases"]) == 12


@pytest.mark.parametrize("case", _cases(SCHEMA2))
def test_schema2_token_window(case: dict[str, Any], claude_tokenizer: Tokenizer) -> None:
    tail = build_case(case)
    walker = HygieneWalker(claude_tokenizer, protected_floor=tail.floor)
    measure = walker.measure(tail.parts, tail.tags, queued=tail.queued)
    _assert_matches(measure, tail)
    assert measure.channel2 is (tail.expected_band == "channel2")


@pytest.mark.parametrize("case", _cases(SCHEMA1))
def test_schema1_newest_tags_rule(case: dict[str, Any], claude_tokenizer: Tokenizer) -> None:
    """Schema 1 protects the newest N tags of any kind; passed in as an explicit set."""
    tail = build_case(case)
    walker = HygieneWalker(claude_tokenizer, protected_floor=0)
    measure = walker.measure(tail.parts, tail.tags, queued=tail.queued, protected=tail.legacy_protected())
    _assert_matches(measure, tail)


@pytest.mark.parametrize("case", _cases(SCHEMA2))
def test_schema2_replayed_message_by_message(case: dict[str, Any], claude_tokenizer: Tokenizer) -> None:
    """Walking the tail as it grows gives the same answer and counts each text once."""
    tail = build_case(case)
    counter = RecordingCounter(claude_tokenizer)
    walker = HygieneWalker(counter, protected_floor=tail.floor)
    for end in tail.message_ends:
        measure = walker.measure(tail.parts[:end], tail.tags, queued=tail.queued)
    _assert_matches(measure, tail)
    assert max(counter.counted.values(), default=1) == 1
