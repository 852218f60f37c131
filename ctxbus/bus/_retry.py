"""Retrying until a deadline: a doubling pause between attempts, the time left checked by hand.

A cancel scope with a timeout would cost ~20 µs on every call of a hot path (every
proposal, every append), so the deadline is a point in time the caller's loop checks,
and each attempt's own timeout is clamped to what is left.
"""

from __future__ import annotations

import math

import anyio

__all__ = ["Retry"]


class Retry:
    """One operation's attempts: how long is left, and how long to pause before the next.

    ```
    retry = Retry(deadline=60)
    while (left := retry.left()) > 0:
        try:
            return await attempt(timeout=min(2.0, left))
        except Unavailable:
            await retry.pause()
    raise GaveUp(...)
    ```
    """

    def __init__(self, deadline: float = math.inf, *, first_pause: float = 0.05, max_pause: float = 0.5) -> None:
        self._give_up_at = anyio.current_time() + deadline
        self._pause = first_pause
        self._max_pause = max_pause

    def left(self) -> float:
        """Seconds until the deadline; 0 once it has passed."""
        return max(0.0, self._give_up_at - anyio.current_time())

    async def pause(self) -> None:
        """Sleep before the next attempt (never past the deadline), then double the pause."""
        await anyio.sleep(min(self._pause, self.left()))
        self._pause = min(self._pause * 2, self._max_pause)
