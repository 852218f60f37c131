"""Settings of the coordinator daemon, with named defaults."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ctxbus.bus import Signer, Verifier
from ctxbus.schemas import AUTHOR_MAX, UsageError

__all__ = ["CoordinatorConfig", "DEFAULT_BRIEF_BUDGET", "DEFAULT_SNAPSHOT_EVERY", "DEFAULT_CAS_RETRIES"]

DEFAULT_SNAPSHOT_EVERY: Final = 500
"""Commits between snapshots of a domain: bounds what a joiner replays."""

DEFAULT_CAS_RETRIES: Final = 8
"""Reload-and-revalidate rounds before a proposal is answered `busy`."""

DEFAULT_CLOSE_GRACE: Final = 300.0
"""Seconds a closed domain's log stays readable before it is purged."""

DEFAULT_MAX_IN_FLIGHT: Final = 256
"""Proposals a coordinator holds at once, across all domains; more are answered `busy`."""

DEFAULT_FORWARD_TIMEOUT: Final = 1.0
"""Seconds to wait for a domain's owner before committing a proposal here instead;
under a proposer's 2 s attempt timeout, so the proposer still hears back in time."""

DEFAULT_BATCH_LINGER: Final = 0.001
"""Seconds a busy domain's next batch waits before it is cut, so that proposers just
answered can join it (as PostgreSQL's `commit_delay`); never when the domain is quiet."""

DEFAULT_MAX_BATCH: Final = 64
"""Proposals committed in one log entry at most; 64 bounded ops fit well in 1 MiB."""

DEFAULT_HEARTBEAT: Final = 2.0
"""Seconds between a coordinator's heartbeats (`ctxbus status` tells a late one apart)."""
DEFAULT_AGENT_SCAN: Final = 5.0
"""Seconds between two reads of the agents' heartbeats, for the per-agent metrics."""

DEFAULT_IDLE_EVICT: Final = 600.0
"""Seconds a domain goes without proposals before its cached brief is dropped; the next
proposal loads it again (snapshot plus the log after it)."""
DEFAULT_BRIEF_BUDGET: Final = 4_000
"""Tokens of rendered brief the `ctxbus` commands give a coordinator before it folds old
done items: about two pages, a small share of any agent's pinned layer. The library has
no default (`CoordinatorConfig.brief_budget_tokens`): it needs a token counter."""

MAX_REPLICAS: Final = 5
"""JetStream keeps at most five copies of a stream."""

FOLD_AUTHOR_SUFFIX: Final = ":fold"
"""Appended to the coordinator's id to author the folds it commits."""
COORDINATOR_ID_MAX: Final = AUTHOR_MAX - len(FOLD_AUTHOR_SUFFIX)
"""Longest coordinator id: it authors commits, and with `FOLD_AUTHOR_SUFFIX` folds."""


def _default_id() -> str:
    return f"coord-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class CoordinatorConfig:
    """How a coordinator validates, commits and maintains briefs."""

    coordinator_id: str = field(default_factory=_default_id)
    """Names this process in commits, replies and logs."""
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    cas_retries: int = DEFAULT_CAS_RETRIES
    close_grace: float = DEFAULT_CLOSE_GRACE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_batch: int = DEFAULT_MAX_BATCH
    batch_linger: float = DEFAULT_BATCH_LINGER
    forward_timeout: float = DEFAULT_FORWARD_TIMEOUT
    idle_evict: float = DEFAULT_IDLE_EVICT
    heartbeat: float = DEFAULT_HEARTBEAT
    """Seconds between heartbeats in the coordinators' bucket."""
    agent_scan: float = DEFAULT_AGENT_SCAN
    """Seconds between reads of the agents' heartbeats, which the per-agent metrics show."""
    replicas: int = 1
    """Copies of the log, the snapshots and the agents' lease and presence buckets the
    coordinator creates: 3 on a 3-node cluster. An existing stream is never cut down."""
    brief_budget_tokens: int | None = None
    """Token budget of the rendered brief; over it, old done items are folded. None: no
    budget (the `ctxbus` commands default to `DEFAULT_BRIEF_BUDGET`). Needs `count_tokens`."""
    count_tokens: Callable[[str], int] | None = None
    """Token counter for the budget (injected: the coordinator does not own a tokenizer).
    The commands pass `Tokenizer.count_lines`: a commit changes a line or two of the
    rendered brief, and only those are encoded again."""
    signer: Signer | None = None
    """Signs every log entry and every answer, with its tenant's signing key (from its
    credentials, `Credentials.signing_seed`), so replicas and proposers can tell them
    from forgeries. None: nothing is signed."""
    verifier: Verifier | None = None
    """Only log entries signed by a key it trusts are applied (the tenant's key, from
    `Credentials.trusted_signers`); others are skipped and dead-lettered. None: all are."""

    def __post_init__(self) -> None:
        # Checked here, not at the first commit: a bad id would fail every batch, silently
        # for the proposers, who would only see their deadline pass.
        if not self.coordinator_id.strip():
            raise UsageError("the coordinator id is empty")
        if len(self.coordinator_id) > COORDINATOR_ID_MAX:
            raise UsageError(
                f"the coordinator id is {len(self.coordinator_id)} characters long, "
                f"over the limit of {COORDINATOR_ID_MAX}"
            )
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise UsageError(f"replicas must be between 1 and {MAX_REPLICAS}, got {self.replicas!r}")
        for name in ("snapshot_every", "cas_retries", "max_in_flight", "max_batch"):
            if not getattr(self, name) >= 1:  # 0 would answer every proposal `busy`, or none
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("idle_evict", "forward_timeout", "heartbeat", "agent_scan"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
        for name in ("close_grace", "batch_linger"):
            if not getattr(self, name) >= 0:
                raise UsageError(f"{name} must be zero or more seconds, got {getattr(self, name)!r}")
        if self.brief_budget_tokens is not None and not self.brief_budget_tokens >= 1:
            raise UsageError(f"brief_budget_tokens must be at least 1, got {self.brief_budget_tokens!r}")
        if self.brief_budget_tokens is not None and self.count_tokens is None:
            raise UsageError(
                "brief_budget_tokens needs count_tokens to measure the brief with "
                "(e.g. ctxbus.agents.context.Tokenizer.load().count_lines); without it the budget is never checked"
            )
