"""`RepeatFilter`: an outage's retries are one line, then one with how many more."""

from __future__ import annotations

import logging

import pytest

from ctxbus.bus import RepeatFilter


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, clock: _Clock) -> tuple[logging.Logger, list[str]]:
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = _Collect()
    handler.addFilter(RepeatFilter(30.0, clock=clock))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, lines


def test_a_line_repeated_every_half_second_is_written_once_per_window_with_a_count() -> None:
    clock = _Clock()
    logger, lines = _logger("tests.repeat.outage", clock)
    for i in range(120):  # a minute of an outage, a retry every 0.5 s
        logger.warning("no stream took an append to %s (%s); creating the log again", "ctx.a.b.c.tx", f"try {i}")
        clock.now += 0.5
    assert lines == [
        "no stream took an append to ctx.a.b.c.tx (try 0); creating the log again",
        "no stream took an append to ctx.a.b.c.tx (try 60); creating the log again (59 more like this in the last 30s)",
    ]


def test_other_lines_other_levels_and_debug_are_not_held_back() -> None:
    clock = _Clock()
    logger, lines = _logger("tests.repeat.mixed", clock)
    logger.warning("cannot reach %s", "n1")
    logger.error("cannot reach %s", "n1")  # another level: another line
    logger.warning("heartbeat %s skipped", "a1")  # another template
    logger.debug("retrying %s", "n1")
    logger.debug("retrying %s", "n1")  # below WARNING: a debugging run sees every retry
    logger.warning("cannot reach %s", "n2")  # held back: the same template, within the window
    assert lines == ["cannot reach n1", "cannot reach n1", "heartbeat a1 skipped", "retrying n1", "retrying n1"]
    clock.now += 31
    logger.warning("cannot reach %s", "n3")
    assert lines[-1] == "cannot reach n3 (1 more like this in the last 31s)"
    clock.now += 31
    logger.warning("cannot reach %s", "n3")  # nothing held back since: no count
    assert lines[-1] == "cannot reach n3"


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RepeatFilter(0)
