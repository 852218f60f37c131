"""Counting line by line, with each line's count remembered, gives what counting the
whole text gives: for the cl100k encoding and for Claude's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbus.agents.context import CLAUDE_SPLIT_PATTERN, Tokenizer
from tests.nudges.golden import anchors_dir as magic_context_dir

# Line breaks beside spaces, punctuation, digits and letters are where pieces could join.
_pieces = st.sampled_from(
    ["\n", "\n\n", " \n", "\n ", "  ", ".", "...", "->", "-", "[p12]", "'s", "42", "1234567", "3.5", "x",
     "word", "Über", "café", "日本語", "한국어", "😀", "\u200b", "\t", "\r\n", "/", "(a, b)",
     "\u00a0", "\u2028", "\x85", "\x1c", "\u3000"]
)  # fmt: skip
_texts = st.lists(_pieces, max_size=60).map("".join)


@pytest.fixture(scope="module", params=["cl100k", "claude"])
def tokenizer(request: pytest.FixtureRequest) -> Tokenizer:
    if request.param == "claude":
        return Tokenizer.load(str(magic_context_dir() / "claude.tiktoken"), pattern=CLAUDE_SPLIT_PATTERN)
    return Tokenizer.load()


@settings(max_examples=500, deadline=None)
@given(text=_texts)
def test_counting_by_line_is_exact(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.count_lines(text) == tokenizer.count(text)


def test_a_text_counted_again_after_some_lines_changed_gets_its_new_count(tokenizer: Tokenizer) -> None:
    first = "Task brief d @ rev 1\n- [p1] write the rules\n- [p2] write the tests\n"
    second = first.replace("rev 1", "rev 2").replace("[p2] write the tests", "[p2] write the tests again")
    assert tokenizer.count_lines(first) == tokenizer.count(first)
    assert tokenizer.count_lines(second) == tokenizer.count(second)
