"""What a coordinator has done, for `ctxbus status` and Prometheus scrapes."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

from schemas import CoordinatorStatus

__all__ = ["Metrics"]

_RATE_WINDOW = 10.0
"""Seconds over which commits/s is averaged."""


@dataclass
class Metrics:
    """Counters of one coordinator process."""

    started: float = field(default_factory=time.time)
    commits: int = 0
    duplicates: int = 0
    cas_retries: int = 0
    forwarded: int = 0
    """Proposals passed on to the coordinator that owns their domain, and answered by it."""
    rejections: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    self_check_failures: int = 0
    """Snapshots refused because the cached brief disagreed with the log."""
    purges: int = 0
    """Closed domains whose log was purged."""
    purge_failures: int = 0
    """Attempts to purge a closed domain's log that failed."""
    last_error: str | None = None
    last_error_at: float | None = None
    _recent: deque[float] = field(default_factory=deque)

    def committed(self) -> None:
        now = time.monotonic()
        self.commits += 1
        self._recent.append(now)
        while self._recent and self._recent[0] < now - _RATE_WINDOW:
            self._recent.popleft()

    def rejected(self, code: str) -> None:
        self.rejections[code] += 1

    def dead_lettered(self, reason: str) -> None:
        self.dead_letters[reason] += 1

    def self_check_failed(self) -> None:
        self.self_check_failures += 1

    def error(self, message: str) -> None:
        self.last_error = message
        self.last_error_at = time.time()

    @property
    def commits_per_second(self) -> float:
        now = time.monotonic()
        recent = [t for t in self._recent if t >= now - _RATE_WINDOW]
        return len(recent) / _RATE_WINDOW

    def status(self, *, coordinator_id: str, domains: list[str]) -> CoordinatorStatus:
        """The counters as the status reply: a model, so the CLI can validate what it reads."""
        return CoordinatorStatus(
            coordinator=coordinator_id,
            uptime_s=round(max(0.0, time.time() - self.started), 3),
            domains=tuple(domains),
            commits=self.commits,
            commits_per_s=round(self.commits_per_second, 2),
            duplicates=self.duplicates,
            cas_retries=self.cas_retries,
            forwarded=self.forwarded,
            rejections=dict(self.rejections),
            dead_letters=dict(self.dead_letters),
            self_check_failures=self.self_check_failures,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
        )

    def prometheus(self, *, coordinator_id: str, domains: int) -> str:
        """The counters in Prometheus text exposition format."""
        label = f'coordinator="{_label_value(coordinator_id)}"'
        lines = [
            "# HELP ctxbus_commits_total Proposals committed to a brief.",
            "# TYPE ctxbus_commits_total counter",
            f"ctxbus_commits_total{{{label}}} {self.commits}",
            "# HELP ctxbus_duplicate_proposals_total Retried proposals answered from the log.",
            "# TYPE ctxbus_duplicate_proposals_total counter",
            f"ctxbus_duplicate_proposals_total{{{label}}} {self.duplicates}",
            "# HELP ctxbus_cas_retries_total Commits retried after another writer moved the log.",
            "# TYPE ctxbus_cas_retries_total counter",
            f"ctxbus_cas_retries_total{{{label}}} {self.cas_retries}",
            "# HELP ctxbus_forwarded_proposals_total Proposals passed on to their domain's owner.",
            "# TYPE ctxbus_forwarded_proposals_total counter",
            f"ctxbus_forwarded_proposals_total{{{label}}} {self.forwarded}",
            "# HELP ctxbus_rejections_total Proposals refused, by code.",
            "# TYPE ctxbus_rejections_total counter",
            *(f'ctxbus_rejections_total{{{label},code="{c}"}} {n}' for c, n in sorted(self.rejections.items())),
            "# HELP ctxbus_dead_letters_total Undecodable messages sent to a dead-letter subject.",
            "# TYPE ctxbus_dead_letters_total counter",
            *(f'ctxbus_dead_letters_total{{{label},reason="{r}"}} {n}' for r, n in sorted(self.dead_letters.items())),
            "# HELP ctxbus_self_check_failures_total Snapshots refused: the cached brief disagreed with the log.",
            "# TYPE ctxbus_self_check_failures_total counter",
            f"ctxbus_self_check_failures_total{{{label}}} {self.self_check_failures}",
            "# HELP ctxbus_domains Domains cached by this coordinator.",
            "# TYPE ctxbus_domains gauge",
            f"ctxbus_domains{{{label}}} {domains}",
        ]
        return "\n".join(lines) + "\n"


def _label_value(text: str) -> str:
    """`text` escaped as the exposition format wants a label value: an id may hold anything."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
