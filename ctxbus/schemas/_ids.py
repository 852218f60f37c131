"""Unique ids for messages and idempotency keys, without a system call each.

`uuid4` reads the OS's random source for every id, which costs as much as building the
rest of a small envelope, and every proposal needs a key and three envelope ids. A
random 64-bit prefix per process, then a counter, is unique within the process by
construction and across processes with overwhelming probability.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["unique_id"]


class _UniqueIds:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new prefix and counter: what a forked child must start with."""
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


unique_id = _UniqueIds()
"""`unique_id()`: a new id of 17 or more hex digits."""
os.register_at_fork(after_in_child=unique_id.reset)  # a child must not repeat its parent's ids
