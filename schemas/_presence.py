"""An agent's heartbeat: who is on a domain, how full its context is, how far behind."""

from __future__ import annotations

import time
from typing import ClassVar

from pydantic import Field

from schemas._stored import StoredValue

__all__ = ["Presence"]


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
    at: float = Field(default_factory=time.time)
    """When this heartbeat was written, Unix seconds."""
