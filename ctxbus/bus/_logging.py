"""Log lines that say a thing once: a retry loop that fails every half second during an
outage logs its first failure, then one line with how many more there were.

`RepeatFilter` goes on a handler (the CLI's, a swarm worker's). Records are alike when
they come from the same logger, at the same level, with the same message template (the
`%s` arguments may differ: a subject, an error text). The first passes; the alike ones in
the next `window` seconds are counted, not written; the first after that passes with the
count appended, and opens a new window.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_REPEAT_WINDOW", "RepeatFilter"]

DEFAULT_REPEAT_WINDOW: Final = 30.0
"""Seconds after a line during which lines like it are counted rather than written."""
_MAX_KEYS: Final = 1024
"""Templates remembered at most; the stalest are forgotten first."""


class RepeatFilter(logging.Filter):
    """Writes a repeated line once per `window` seconds, with a count of those held back.

    Records below `min_level` always pass: a debugging run (`-vv`) sees every retry.
    """

    def __init__(
        self,
        window: float = DEFAULT_REPEAT_WINDOW,
        *,
        min_level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if not window > 0:
            raise ValueError(f"window must be a positive number of seconds, got {window!r}")
        self.window = window
        self.min_level = min_level
        self._clock = clock
        self._lock = threading.Lock()  # handlers may be called from several threads
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        """(logger, level, template) -> (when one was last written, alike ones held back since)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level:
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._seen.pop(key, None)  # re-inserted last: the dict stays ordered by use
            written, held = seen if seen is not None else (now, 0)
            if seen is not None and now - written < self.window:
                self._seen[key] = (written, held + 1)
                return False
            self._seen[key] = (now, 0)
            while len(self._seen) > _MAX_KEYS:
                del self._seen[next(iter(self._seen))]
        if held:  # the message as it reads, then the count
            record.msg = f"{record.getMessage()} ({held} more like this in the last {now - written:.0f}s)"
            record.args = None
        return True
