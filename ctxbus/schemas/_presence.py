"""An agent's heartbeat: who is on a domain, how full its context is, how far behind."""

from __future__ import annotations

import time
from typing import ClassVar, Final

from pydantic import Field

from ctxbus.schemas._stored import StoredValue

__all__ = ["STALE_AFTER_BEATS", "CoordinatorPresence", "Presence"]

STALE_AFTER_BEATS: Final = 3
"""Heartbeats missed before an agent or a coordinator is shown as stale."""


class Presence(StoredValue):
    """One agent's latest heartbeat, kept in the presence bucket with a TTL."""

    label: ClassVar[str] = "presence value"

    agent: str = Field(min_length=1, max_length=128)
    """Agent id."""
    band: str = "quiet"
    """Current nudge band: quiet, gentle, firm, urgent or channel2."""
    unused_tokens: int = Field(default=0, ge=0)
    """U: tokens of the tail the agent could still drop."""
    tail_tokens: int = Field(default=0, ge=0)
    """T: eligible tokens of the tail."""
    prompt_tokens: int = Field(default=0, ge=0)
    """Tokens of the last prompt this process composed (0 until its first)."""
    brief_revision: int = Field(default=0, ge=0)
    """Revision of the agent's brief replica."""
    lag: int = Field(default=0, ge=0)
    """Commits the replica is known to be behind the log."""
    cached_share: float | None = Field(default=None, ge=0, le=1)
    """Share of the last prompt the provider's cache served, as its API reported it (an
    agent loop on a real model knows it); None where nothing says."""
    at: float = Field(default_factory=time.time)
    """When this heartbeat was written, Unix seconds."""
    interval: float = Field(default=2.0, gt=0)
    """Seconds between the agent's heartbeats: one older than a few of these is stale."""

    def age(self, now: float) -> float:
        """Seconds since this heartbeat was written."""
        return max(0.0, now - self.at)

    def stale(self, now: float) -> bool:
        """Whether the agent has missed its last few heartbeats (frozen, stuck, or gone)."""
        return self.age(now) > STALE_AFTER_BEATS * self.interval


class CoordinatorPresence(StoredValue):
    """A coordinator's latest heartbeat, in the coordinators' bucket: who serves, since
    when, and how to tell one that stopped answering (frozen, or killed) from one that
    stopped (it says so on its way out)."""

    label: ClassVar[str] = "coordinator heartbeat"

    coordinator: str = Field(min_length=1, max_length=128)
    """The coordinator's id."""
    started: float
    """When it started, Unix seconds."""
    at: float = Field(default_factory=time.time)
    """When this heartbeat was written, Unix seconds."""
    interval: float = Field(gt=0)
    """Seconds between its heartbeats: one older than a few of these is late."""
    stopped: bool = False
    """Written once on a clean stop: it is gone, not frozen."""

    def age(self, now: float) -> float:
        """Seconds since this heartbeat was written."""
        return max(0.0, now - self.at)

    def late(self, now: float) -> bool:
        """Whether it has missed its last few heartbeats."""
        return self.age(now) > STALE_AFTER_BEATS * self.interval

    pid: int | None = None
    host: str | None = None
