"""The CLI's log lines carry the facts log calls pass as extras."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from ctxbus.coordinator.cli._app import _StderrNow, _WithExtras


def test_extras_follow_the_message_and_a_traceback_comes_last() -> None:
    formatter = _WithExtras("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("bus", logging.INFO, __file__, 1, "nats-server ready", None, None)
    record.__dict__.update(url="nats://127.0.0.1:4222", pid=42)
    assert formatter.format(record) == "INFO bus: nats-server ready url=nats://127.0.0.1:4222 pid=42"
    try:
        raise ValueError("boom")
    except ValueError as exc:
        failed = logging.LogRecord("bus", logging.ERROR, __file__, 1, "failed", None, (ValueError, exc, None))
    failed.__dict__.update(domain="a/b/c")
    first, *rest = formatter.format(failed).splitlines()
    assert first == "ERROR bus: failed domain=a/b/c" and rest[-1] == "ValueError: boom"


def test_log_lines_go_to_stderr_as_it_is_when_they_are_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live view redirects sys.stderr to print log lines above itself: the handler,
    made before, must follow."""
    handler = _StderrNow()
    redirected = io.StringIO()
    monkeypatch.setattr(sys, "stderr", redirected)
    handler.emit(logging.LogRecord("bus", logging.WARNING, __file__, 1, "disconnected from NATS", None, None))
    assert redirected.getvalue() == "disconnected from NATS\n"
