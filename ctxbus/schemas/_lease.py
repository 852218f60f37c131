"""The value stored under a lease key on the bus."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from pydantic import Field

from ctxbus.schemas._stored import StoredValue

__all__ = ["LeaseRecord"]


class LeaseRecord(StoredValue):
    """Who holds a lease, in which state, since when.

    The lease primitive only needs `holder`; `state`, `token` and `detail` let a
    protocol built on it (Channel 2's `pending -> claimed -> delivered`) keep its own
    state machine in the same compare-and-set value.
    """

    label: ClassVar[str] = "lease value"

    holder: str = Field(min_length=1, max_length=256)
    """Process or agent that holds it."""
    state: str = Field(default="claimed", min_length=1, max_length=64)
    """Protocol state name."""
    token: str | None = Field(default=None, max_length=256)
    """Proof of a claim, checked before the next transition."""
    at: float = Field(default_factory=time.time)
    """When this value was written, Unix seconds."""
    detail: dict[str, Any] = Field(default_factory=dict)
    """Protocol-specific extras."""
