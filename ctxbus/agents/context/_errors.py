"""Errors of the local context engine.

All are `CtxbusError`s. Caller mistakes are `UsageError`s (and so `ValueError`s)::

    CtxbusError
    ├── UsageError
    │   ├── EncodingNotFound   the token encoding cannot be loaded offline (`_tokens`)
    │   ├── InvalidConfig      a `ContextConfig` value is out of range
    │   ├── InvalidMessage     a message field (role, kind, importance, ...) is unusable
    │   ├── InputTooLarge      the user input alone does not fit the window
    │   ├── UnknownReference   no message has that tag or id
    │   ├── LinesPastTheEnd    a line range starts after a message's last line
    │   ├── UnknownMode        no mode of that name, or no snapshot to restore
    │   ├── DomainMismatch     a store bound to one domain was asked for another's data
    │   └── ContextClosed      the context was used after `close()`
    └── StoreError             the SQLite file is unreadable, unwritable or from an unknown schema
"""

from __future__ import annotations

from ctxbus.schemas import CtxbusError, UsageError

__all__ = [
    "ContextClosed",
    "DomainMismatch",
    "InputTooLarge",
    "InvalidConfig",
    "InvalidMessage",
    "LinesPastTheEnd",
    "StoreError",
    "UnknownMode",
    "UnknownReference",
]


class InvalidConfig(UsageError):
    """Raised when a `ContextConfig` value is out of range (negative, or no room left)."""


class InvalidMessage(UsageError):
    """Raised when a message to add has an unusable field value."""


class InputTooLarge(UsageError):
    """Raised when the latest user input alone exceeds what the window leaves for it."""

    def __init__(self, tokens: int, available: int) -> None:
        self.tokens = tokens
        self.available = available
        super().__init__(
            f"user input is {tokens:,} tokens, over the {available:,} tokens the window leaves "
            "after reserves and the system prompt; shorten it, or pass the bulk in as a tool result "
            "(tool output over `archive_threshold` is archived and read on demand)"
        )


class UnknownReference(UsageError):
    """Raised when `read` or `drop` names a tag or id that no message has, or passes
    something that is not a tag or id."""


class UnknownMode(UsageError):
    """Raised for a mode name that is not registered, or `restore` with no snapshot."""


class DomainMismatch(UsageError):
    """Raised when a store bound to one domain is asked for another domain's data."""

    def __init__(self, bound: str, asked: str) -> None:
        self.bound = bound
        self.asked = asked
        super().__init__(f"this store is bound to domain {bound!r}; refusing data of domain {asked!r}")


class ContextClosed(UsageError):
    """Raised when a closed `LocalContext` is used."""


class StoreError(CtxbusError):
    """Raised when the SQLite file cannot be used (corrupt, written by an unknown schema,
    or failing to write: a full disk, a lock held too long)."""


class LinesPastTheEnd(UsageError):
    """Raised when a line range starts after the last line of the message read."""

    def __init__(self, tag: int, lines: int, start: int) -> None:
        self.tag = tag
        self.lines = lines
        self.start = start
        super().__init__(f"line {start} is past the end: §{tag}§ has {lines:,} line{'' if lines == 1 else 's'}")
