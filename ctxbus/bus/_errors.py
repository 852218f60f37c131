"""Errors raised by the bus layer; NATS exceptions never leak past `bus`.

CtxbusError
└── BusError                 talking to NATS failed
    ├── ServerError          the embedded nats-server is missing or would not start
    ├── NotAuthorized        the server refused who we connected as (or that we gave no one)
    ├── Refused              the server refused a request (a JetStream API error, with its code)
    │   └── NotFound         what was asked for is not there (a stream, a message, a key)
    ├── BusUnavailable       no server answered in time (down, restarting, unreachable)
    │   ├── NoResponders     nobody took the request (no stream for a write, nobody serving)
    │   └── StreamMissing    no stream answered a read: not created yet, or lost with a store
    ├── Unsigned             an answer no trusted key signed
    ├── CasConflict          a compare-and-set found another last sequence
    ├── AppendExpired        an append's attempts went on past what it carries may be sent
    ├── LogTruncated         a log no longer holds entries a reader has seen
    └── LeaseHeld            a lease is already claimed by another holder
"""

from __future__ import annotations

from ctxbus.schemas import CtxbusError

__all__ = [
    "BusError",
    "ServerError",
    "NotAuthorized",
    "Refused",
    "NotFound",
    "BusUnavailable",
    "NoResponders",
    "StreamMissing",
    "CasConflict",
    "Unsigned",
    "AppendExpired",
    "LogTruncated",
    "LeaseHeld",
]


class BusError(CtxbusError):
    """Raised when an operation on NATS fails."""


class ServerError(BusError):
    """Raised when the embedded nats-server cannot be found, started or stopped."""


class NotAuthorized(BusError):
    """Raised when the server refuses the connection's credentials, or the lack of them:
    a server started with auth (`ctxbus up --auth`) admits only its principals."""


class Refused(BusError):
    """Raised when the server refused a request: JetStream's API said no, with an HTTP-like
    `code`, its own `err_code` (10071: a compare-and-set found another last sequence)
    and a `description`."""

    def __init__(self, action: str, *, code: int | None, err_code: int | None, description: str) -> None:
        self.action = action
        self.code = code
        self.err_code = err_code
        self.description = description
        super().__init__(f"{action}: {description}")


class NotFound(Refused):
    """Raised when what a request asked for is not there: a stream, a message, a key."""


class BusUnavailable(BusError):
    """Raised when no server answered before the operation's deadline."""


class NoResponders(BusUnavailable):
    """Raised when nobody took a request: a write to a stream that does not exist (a
    server back with an empty store), or a request nobody serves."""


class StreamMissing(BusUnavailable):
    """Raised when no stream answered a read: on a fresh server nobody has created it yet,
    and after a server lost its store it is gone. Only its writers may create it again."""


class CasConflict(BusError):
    """Raised when a compare-and-set append or update found another last sequence.

    `actual` is the sequence (or KV revision) the subject really had, so the caller can
    reload from there and retry; `None` when the server did not say.
    """

    def __init__(self, subject: str, expected: int, actual: int | None) -> None:
        self.subject = subject
        self.expected = expected
        self.actual = actual
        found = "unknown" if actual is None else str(actual)
        super().__init__(f"{subject}: expected last sequence {expected}, found {found}")


class Unsigned(BusError):
    """Raised when an answer that must be signed (by a tenant's coordinators) is not, or
    not by a key the reader trusts: forged, or from another tenant's coordinator."""


class AppendExpired(BusError):
    """Raised when an append would be sent (or sent again) after its `not_after` time:
    what it carries may not be stored that late (proposals past their deadline).

    An attempt sent earlier may still have been stored: the caller reads the log to
    know, as after any failed append.
    """

    def __init__(self, subject: str, late: float) -> None:
        self.subject = subject
        self.late = late
        super().__init__(f"append to {subject} not sent: {late:.1f}s past the deadline of what it carries")


class LogTruncated(BusError):
    """Raised when a log ends before the last entry a reader already holds: its entries
    were purged (a closed domain) or its stream recreated while the reader was away.

    What the reader built from the lost entries can no longer be checked against the
    log; it must load afresh.
    """

    def __init__(self, subject: str, held: int, end: int) -> None:
        self.subject = subject
        self.held = held
        self.end = end
        super().__init__(f"{subject} ends at sequence {end}, before {held}, the last entry read")


class LeaseHeld(BusError):
    """Raised when `claim` loses: someone else holds the lease (`holder`, or None when
    the key holds a value that is not a lease record)."""

    def __init__(self, key: str, holder: str | None, revision: int) -> None:
        self.key = key
        self.holder = holder
        self.revision = revision
        super().__init__(f"lease {key!r} is held by {holder or 'an unknown holder'} (revision {revision})")
