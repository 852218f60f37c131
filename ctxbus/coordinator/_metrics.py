"""What a coordinator has done, for `ctxbus status`, NATS `ctxbus.metrics` and Prometheus.

One `Metrics` per coordinator: plain counters for the status answer, and the same events
in a private Prometheus registry (histograms of commit latency and batch size, counts
by code and reason), plus what the agents' heartbeats say (band, U, T, prompt tokens,
cached share, replica lag), collected fresh on every scrape so that an agent gone from
presence is gone from the exposition too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ctxbus.schemas import CoordinatorStatus, Presence

__all__ = ["BAND_LEVELS", "Metrics", "MetricsServer"]

_RATE_WINDOW = 10.0
"""Seconds over which commits/s is averaged."""
BAND_LEVELS: Final = {"quiet": 0, "gentle": 1, "firm": 2, "urgent": 3, "channel2": 4}
"""A band as a number, for a gauge (`ctxbus_agent_band`)."""
_LATENCY_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class Metrics:
    """Counters of one coordinator process, and their Prometheus exposition."""

    coordinator_id: str = "coordinator"
    started: float = field(default_factory=time.time)
    commits: int = 0
    duplicates: int = 0
    cas_retries: int = 0
    forwarded: int = 0
    """Proposals passed on to the coordinator that owns their domain, and answered by it."""
    rejections: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    expired: Counter[str] = field(default_factory=Counter)
    """Proposals not committed because of their deadline: `late` (past it) or
    `unrecognisable` (too old for the keys the brief still remembers)."""
    self_check_failures: int = 0
    """Snapshots refused because the cached brief disagreed with the log."""
    purges: int = 0
    """Closed domains whose log was purged."""
    purge_failures: int = 0
    """Attempts to purge a closed domain's log that failed."""
    last_error: str | None = None
    last_error_at: float | None = None
    domains: int = 0
    """Domains cached now (set by the coordinator)."""
    _recent: deque[float] = field(default_factory=deque)
    _registry: CollectorRegistry = field(init=False, repr=False)
    _agents: dict[tuple[str, str], Presence] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._registry = CollectorRegistry(auto_describe=True)
        r, label = self._registry, ["coordinator"]
        self._p_commits = PromCounter("ctxbus_commits", "Proposals committed to a brief.", label, registry=r)
        self._p_duplicates = PromCounter(
            "ctxbus_duplicate_proposals", "Retried proposals answered from the log.", label, registry=r
        )
        self._p_cas = PromCounter(
            "ctxbus_cas_retries", "Commits retried after another writer moved the log.", label, registry=r
        )
        self._p_forwarded = PromCounter(
            "ctxbus_forwarded_proposals", "Proposals passed on to their domain's owner.", label, registry=r
        )
        self._p_rejections = PromCounter(
            "ctxbus_rejections", "Proposals refused, by code.", [*label, "code"], registry=r
        )
        self._p_dead = PromCounter(
            "ctxbus_dead_letters", "Messages sent to a dead-letter subject, by reason.", [*label, "reason"], registry=r
        )
        self._p_expired = PromCounter(
            "ctxbus_expired_proposals", "Proposals not committed for their deadline, by reason.", [*label, "reason"],
            registry=r,
        )  # fmt: skip
        self._p_self_check = PromCounter(
            "ctxbus_self_check_failures", "Snapshots refused: the cached brief disagreed with the log.", label,
            registry=r,
        )  # fmt: skip
        self._p_errors = PromCounter(
            "ctxbus_errors", "Errors the coordinator recorded (see last_error).", label, registry=r
        )
        self._p_latency = PromHistogram(
            "ctxbus_commit_latency_seconds", "From a proposal taken in to its answer sent, committed ones.", label,
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self._p_batch = PromHistogram(
            "ctxbus_batch_commits", "Commits per log entry appended.", label, buckets=_BATCH_BUCKETS, registry=r
        )
        self._p_domains = PromGauge("ctxbus_domains", "Domains cached by this coordinator.", label, registry=r)
        r.register(_AgentsCollector(self))
        for counter in (
            self._p_commits, self._p_duplicates, self._p_cas, self._p_forwarded, self._p_self_check, self._p_errors,
        ):  # fmt: skip
            counter.labels(self.coordinator_id)  # present at 0 from the start
        # Those counted on every commit, looked up once: `labels()` takes a lock and a dict.
        self._commits_child = self._p_commits.labels(self.coordinator_id)
        self._batch_child = self._p_batch.labels(self.coordinator_id)
        self._latency_child = self._p_latency.labels(self.coordinator_id)

    # -- events ------------------------------------------------------------------------------

    def committed(self, count: int = 1) -> None:
        now = time.monotonic()
        self.commits += count
        self._commits_child.inc(count)
        self._recent.extend([now] * count)
        while self._recent and self._recent[0] < now - _RATE_WINDOW:
            self._recent.popleft()

    def batch(self, commits: int) -> None:
        """A log entry of `commits` commits was appended."""
        self._batch_child.observe(commits)

    def answered(self, latency: float) -> None:
        """A committed proposal's answer went out `latency` seconds after it was taken in."""
        self._latency_child.observe(latency)

    def duplicate(self) -> None:
        self.duplicates += 1
        self._p_duplicates.labels(self.coordinator_id).inc()

    def cas_retry(self) -> None:
        self.cas_retries += 1
        self._p_cas.labels(self.coordinator_id).inc()

    def forward(self) -> None:
        self.forwarded += 1
        self._p_forwarded.labels(self.coordinator_id).inc()

    def rejected(self, code: str) -> None:
        self.rejections[code] += 1
        self._p_rejections.labels(self.coordinator_id, code).inc()

    def expire(self, reason: str) -> None:
        self.expired[reason] += 1
        self._p_expired.labels(self.coordinator_id, reason).inc()

    def dead_lettered(self, reason: str) -> None:
        self.dead_letters[reason] += 1
        self._p_dead.labels(self.coordinator_id, reason).inc()

    def self_check_failed(self) -> None:
        self.self_check_failures += 1
        self._p_self_check.labels(self.coordinator_id).inc()

    def error(self, message: str) -> None:
        self.last_error = message
        self.last_error_at = time.time()
        self._p_errors.labels(self.coordinator_id).inc()

    def set_domains(self, count: int) -> None:
        self.domains = count
        self._p_domains.labels(self.coordinator_id).set(count)

    def set_agents(self, heartbeats: Iterable[tuple[str, Presence]]) -> None:
        """What the agents' heartbeats say now, by domain: exported on the next scrape."""
        self._agents = {(domain, p.agent): p for domain, p in heartbeats}

    # -- reading ----------------------------------------------------------------------------

    @property
    def commits_per_second(self) -> float:
        now = time.monotonic()
        recent = [t for t in self._recent if t >= now - _RATE_WINDOW]
        return len(recent) / _RATE_WINDOW

    def status(self, *, domains: Sequence[str]) -> CoordinatorStatus:
        """The counters as the status reply: a model, so the CLI can validate what it reads."""
        return CoordinatorStatus(
            coordinator=self.coordinator_id,
            uptime_s=round(max(0.0, time.time() - self.started), 3),
            domains=tuple(domains),
            commits=self.commits,
            commits_per_s=round(self.commits_per_second, 2),
            duplicates=self.duplicates,
            cas_retries=self.cas_retries,
            forwarded=self.forwarded,
            rejections=dict(self.rejections),
            dead_letters=dict(self.dead_letters),
            expired=dict(self.expired),
            self_check_failures=self.self_check_failures,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
        )

    def prometheus(self) -> str:
        """Everything in Prometheus text exposition format."""
        return generate_latest(self._registry).decode()

    @property
    def registry(self) -> CollectorRegistry:
        """The registry to serve over HTTP (`coordinator.serve_metrics`)."""
        return self._registry


class _AgentsCollector(Collector):
    """Per-agent gauges from the latest heartbeats, built afresh on each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["domain", "agent"]
        families = {
            "band": GaugeMetricFamily("ctxbus_agent_band", "Nudge band: 0 quiet, 1 gentle, 2 firm, 3 urgent, 4 channel2.", labels=labels),
            "u": GaugeMetricFamily("ctxbus_agent_unused_tokens", "U: tail tokens the agent could still drop.", labels=labels),
            "t": GaugeMetricFamily("ctxbus_agent_tail_tokens", "T: eligible tokens of the tail.", labels=labels),
            "prompt": GaugeMetricFamily("ctxbus_agent_prompt_tokens", "Tokens of the agent's last prompt.", labels=labels),
            "cached": GaugeMetricFamily(
                "ctxbus_agent_cached_share", "Share of the last prompt a provider's cache served (0 to 1).", labels=labels
            ),
            "lag": GaugeMetricFamily("ctxbus_agent_replica_lag", "Commits the agent's replica is behind.", labels=labels),
            "seen": GaugeMetricFamily("ctxbus_agent_last_seen_seconds", "Seconds since the agent's last heartbeat.", labels=labels),
        }  # fmt: skip
        now = time.time()
        for (domain, agent), p in sorted(self._metrics._agents.items()):
            values = [domain, agent]
            families["band"].add_metric(values, BAND_LEVELS.get(p.band, 0))
            families["u"].add_metric(values, p.unused_tokens)
            families["t"].add_metric(values, p.tail_tokens)
            families["prompt"].add_metric(values, p.prompt_tokens)
            if p.cached_share is not None:
                families["cached"].add_metric(values, p.cached_share)
            families["lag"].add_metric(values, p.lag)
            families["seen"].add_metric(values, max(0.0, now - p.at))
        yield from families.values()


class MetricsServer:
    """`/metrics` over HTTP for Prometheus, on a thread of its own (prometheus_client's
    WSGI server), serving one coordinator's `Metrics`. Loopback by default."""

    def __init__(self, metrics: Metrics, *, port: int, host: str = "127.0.0.1") -> None:
        self._metrics = metrics
        self._requested = (host, port)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where Prometheus scrapes, once started."""
        if self._server is None:
            raise RuntimeError("the metrics server has not started")
        host, port = self._requested[0], self._server.server_port
        return f"http://{host}:{port}/metrics"

    def __enter__(self) -> MetricsServer:
        host, port = self._requested
        self._server, self._thread = start_http_server(port, addr=host, registry=self._metrics.registry)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
