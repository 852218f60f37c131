"""The value stored under a lease key on the bus."""

from __future__ import annotations

import time
from typing import Any, Self

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas._errors import DecodeError, EnvelopeInvalid

__all__ = ["LeaseRecord"]


class LeaseRecord(BaseModel):
    """Who holds a lease, in which state, since when.

    The lease primitive only needs `holder`; `state`, `token` and `detail` let a
    protocol built on it (Channel 2's `pending -> claimed -> delivered`) keep its own
    state machine in the same compare-and-set value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    def encode(self) -> bytes:
        """msgpack bytes for the KV value."""
        data: bytes = msgpack.packb(self.model_dump(mode="python"), use_bin_type=True)
        return data

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Parse a KV value.

        :raises DecodeError: if it is not msgpack.
        :raises EnvelopeInvalid: if a field is wrong.
        """
        try:
            raw = msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise DecodeError(f"lease value is not valid msgpack ({exc})") from exc
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise EnvelopeInvalid(f"lease value is invalid: {exc.errors(include_url=False)}") from exc
