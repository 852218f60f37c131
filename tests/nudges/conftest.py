"""Shared fixtures for the nudge tests: the Claude tokenizer and the reference vectors."""

from __future__ import annotations

from typing import Any

import pytest

from ctxbus.agents.context import CLAUDE_SPLIT_PATTERN, Tokenizer
from tests.nudges.golden import anchors_dir, load_anchor


@pytest.fixture(scope="session")
def claude_tokenizer() -> Tokenizer:
    """The token unit U and T are specified in (the reference's `claude.tiktoken`)."""
    return Tokenizer.load(str(anchors_dir() / "claude.tiktoken"), pattern=CLAUDE_SPLIT_PATTERN)


@pytest.fixture(scope="session")
def copy_golden() -> dict[str, dict[str, Any]]:
    """Reference reminder strings, by case id."""
    return {case["id"]: case for case in load_anchor("ctx-reduce-nudge-copy-golden.json")["cases"]}
