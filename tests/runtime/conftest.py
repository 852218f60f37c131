"""Fixtures of the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime._agents import Agents


@pytest.fixture
def agents() -> Iterator[Agents]:
    """Build agents through this; it closes those the test left open."""
    opened = Agents()
    try:
        yield opened
    finally:
        opened.close_all()
