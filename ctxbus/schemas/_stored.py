"""Base of the small values ctxbus keeps in KV buckets (leases, presence)."""

from __future__ import annotations

from typing import ClassVar, Self

import msgpack
from pydantic import BaseModel, ConfigDict, ValidationError

from ctxbus.schemas._errors import DecodeError, EnvelopeInvalid, describe_validation_error

__all__ = ["StoredValue"]


class StoredValue(BaseModel):
    """A frozen model stored as a msgpack map, validated again when read back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: ClassVar[str] = "value"
    """What the value is, for error messages."""

    def encode(self) -> bytes:
        """msgpack bytes for the KV value."""
        data: bytes = msgpack.packb(self.model_dump(mode="python"), use_bin_type=True)
        return data

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Parse a stored value.

        :raises DecodeError: if it is not msgpack.
        :raises EnvelopeInvalid: if a field is missing or wrong.
        """
        try:
            raw = msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise DecodeError(f"{cls.label} is not valid msgpack ({exc})") from exc
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise EnvelopeInvalid(f"{cls.label} is invalid: {describe_validation_error(exc)}") from exc
