"""The domain: the `user/session/task` scope of every subject, key, row and log line."""

from __future__ import annotations

import functools
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from ctxbus.schemas._errors import InvalidDomain, shown

__all__ = ["Domain", "DOMAIN_TOKEN_MAX", "validate_token"]

DOMAIN_TOKEN_MAX = 64
"""Longest token allowed; keeps subjects and KV keys well under NATS limits."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def validate_token(value: str, *, field: str = "token") -> str:
    """Return `value` if it is a valid domain token, else raise `InvalidDomain`.

    Tokens end up as NATS subject tokens and KV key parts, so only `[A-Za-z0-9_-]` is
    allowed: no dots, wildcards, spaces or slashes.
    """
    if not isinstance(value, str):
        raise InvalidDomain(f"{field} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidDomain(f"{field} is empty")
    if len(value) > DOMAIN_TOKEN_MAX:
        raise InvalidDomain(f"{field} is {len(value)} characters long, over the limit of {DOMAIN_TOKEN_MAX}")
    if not _TOKEN.fullmatch(value):
        bad = next(c for c in value if not _TOKEN.fullmatch(c))
        raise InvalidDomain(
            f"{field} {shown(value)} contains {bad!r}; only ASCII letters, digits, '_' and '-' are allowed"
        )
    return value


def _user(v: str) -> str:
    return validate_token(v, field="user")


def _session(v: str) -> str:
    return validate_token(v, field="session")


def _task(v: str) -> str:
    return validate_token(v, field="task")


class Domain(BaseModel):
    """One task of one session of one user; nothing crosses domains."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: Annotated[str, AfterValidator(_user)]
    """Tenant: separated from other tenants by a NATS account of its own (`ctxbus auth`);
    subject permissions alone cannot, since agents need the JetStream API."""
    session: Annotated[str, AfterValidator(_session)]
    """A working session of that user."""
    task: Annotated[str, AfterValidator(_task)]
    """One task inside the session; the unit that shares a brief."""

    @classmethod
    def parse(cls, text: str) -> Domain:
        """Parse the display form `user/session/task`.

        Every message names its domain, often more than once, so parses are cached:
        a `Domain` is immutable, and one instance per string serves every message.

        :raises InvalidDomain: if there are not exactly three tokens or one is malformed.
        """
        if not isinstance(text, str):
            raise InvalidDomain(f"domain must be a string 'user/session/task', got {shown(text)}")
        return _parse(text)

    @classmethod
    def of(cls, value: Domain | str) -> Domain:
        """The domain `value` names: a `Domain` as it is, a string parsed (`parse`).

        :raises InvalidDomain: if `value` is neither, or a malformed string.
        """
        return value if isinstance(value, Domain) else cls.parse(value)

    @property
    def tokens(self) -> tuple[str, str, str]:
        """The three subject tokens, in order."""
        return (self.user, self.session, self.task)

    @property
    def subject_prefix(self) -> str:
        """`user.session.task`, ready to put into a NATS subject."""
        return ".".join(self.tokens)

    def __str__(self) -> str:
        return "/".join(self.tokens)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Domain:
    parts = text.split("/")
    if len(parts) != 3:
        raise InvalidDomain(f"domain {shown(text)} must have the form 'user/session/task' (3 parts, got {len(parts)})")
    return Domain(user=_user(parts[0]), session=_session(parts[1]), task=_task(parts[2]))
