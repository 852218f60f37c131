"""What `ctxbus web` shows, gathered from the bus: the one owner of the page's live state.

A `Watcher` polls the presence bucket (every agent of every domain it may see), the
coordinators (`coordinator.survey`) and their metrics, listens to the dead-letter
subjects, and keeps what a heartbeat says only while it is there: each agent's samples
over time (U, T, prompt tokens, cached share, band, and the per-layer tokens of its
store where the store is readable), in memory, for as long as the server runs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from prometheus_client.parser import text_string_to_metric_families

from ctxbus.agents.context import LayerView
from ctxbus.bus import (
    GLOBAL_DLQ,
    METRICS_SUBJECT,
    PRESENCE_BUCKET,
    SUBJECT_ROOT,
    Bucket,
    BucketConfig,
    BusError,
    NatsClient,
    Verb,
    domain_of,
    gather,
)
from ctxbus.coordinator import CoordinatorView, survey
from ctxbus.coordinator.cli._web._store import StoreView
from ctxbus.schemas import DeadLetter, DeadLetterEnvelope, Domain, InvalidDomain, Presence, WireError

__all__ = ["BANDS", "AgentTrack", "Sample", "Watcher"]

log = logging.getLogger(__name__)

BANDS: Final = ("quiet", "gentle", "firm", "urgent", "channel2")
"""Nudge bands, lowest first (`ctxbus_agent_band` numbers them the same way)."""
SAMPLES_KEPT: Final = 2000
"""Samples kept per agent: at one per heartbeat (2 s), a bit over an hour."""
EVENTS_KEPT: Final = 200
"""Dead letters, Channel events and errors kept, newest last."""
INSPECT_EVERY: Final = 2.0
"""Seconds between two reads of one agent's store: a read copies it and composes."""


@dataclass(frozen=True)
class Sample:
    """One heartbeat of an agent, with what its store showed then, where it was read."""

    at: float
    band: str
    unused: int
    tail: int
    prompt: int
    cached_share: float | None
    lag: int
    revision: int
    layers: dict[str, int] | None
    """Tokens per prompt layer (system, pinned, authored, summary, brief, rolling, input), from the store."""

    def as_json(self) -> dict[str, object]:
        return {
            "at": self.at, "band": self.band, "U": self.unused, "T": self.tail, "prompt": self.prompt,
            "cached_share": self.cached_share, "lag": self.lag, "revision": self.revision, "layers": self.layers,
        }  # fmt: skip


@dataclass
class AgentTrack:
    """What the page knows of one agent: its last heartbeat, samples, store and events."""

    domain: Domain
    agent: str
    presence: Presence
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))
    events: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    """Channel 1 and 2 events, as the heartbeats show them (a band that rose; Channel 2
    reached), for an agent whose store is not readable here."""
    store_events: dict[tuple[object, object], dict[str, object]] = field(default_factory=dict)
    """Channel 1 and 2 events read from the store, by channel and tag: kept once seen
    (a reminder goes when `ctx_reduce` drops its tool result)."""
    store: Path | None = None
    layers: tuple[LayerView, ...] | None = None
    """What the model sees now, from the store, as `ctxbus inspect` shows it."""
    store_note: str | None = None
    """Why the store is not read (none found, unreadable), for the page to say."""
    inspected_at: float = 0.0


Inspect = Callable[[Path, Domain], StoreView]


class Watcher:
    """Reads the bus every `interval` seconds and keeps what the page shows.

    Only this object changes that state, on its own task; the page's handlers read it.
    """

    def __init__(
        self,
        client: NatsClient,
        *,
        inspect: Inspect,
        store_dirs: Iterable[Path] = (),
        tenant: str | None = None,
        only: Domain | None = None,
        interval: float = 1.0,
    ) -> None:
        self.client = client
        self._inspect = inspect
        self._store_dirs = tuple(store_dirs)
        self.tenant = tenant
        """With credentials, the tenant whose domains alone are shown."""
        self.only = only
        self._interval = interval
        self.agents: dict[tuple[Domain, str], AgentTrack] = {}
        self.coordinators: list[CoordinatorView] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        """Per coordinator: commit latency (count, mean, p50, p95) from its metrics."""
        self.dead_letters: deque[dict[str, object]] = deque(maxlen=EVENTS_KEPT)
        self.errors: deque[dict[str, object]] = deque(maxlen=EVENTS_KEPT)
        """What went wrong reading the bus, newest last."""
        self.version = 0
        """Bumped after every poll: the page's live updates follow it."""
        self.polled_at: float | None = None
        self._changed = anyio.Event()
        self._ticks = 0

    def visible(self, domain: Domain) -> bool:
        """Whether the page may show `domain` (its tenant's, and the one asked for)."""
        return (self.tenant is None or domain.user == self.tenant) and (self.only is None or domain == self.only)

    def domains(self) -> list[Domain]:
        """Every visible domain an agent's heartbeat or a coordinator's status names."""
        found = {d for d, _ in self.agents}
        for view in self.coordinators:
            for name in view.status.domains if view.status else ():
                try:
                    found.add(Domain.parse(name))
                except InvalidDomain:
                    continue
        if self.only is not None:
            found.add(self.only)
        return sorted((d for d in found if self.visible(d)), key=str)

    async def changed(self, timeout: float) -> int:
        """Wait for the next poll (or `timeout` seconds); the version then."""
        with anyio.move_on_after(timeout):
            await self._changed.wait()
        return self.version

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll until cancelled; the first poll is done before `started`."""
        await self._listen_dead_letters()
        await self.poll()
        task_status.started()
        while True:
            await anyio.sleep(self._interval)
            await self.poll()

    async def poll(self) -> None:
        """Read heartbeats (every time), coordinators (every other) and metrics (every fifth)."""
        try:
            await self._read_presence()
            if self._ticks % 2 == 0:
                self.coordinators, _ = await survey(self.client, wait=0.5)
            if self._ticks % 5 == 0:
                await self._read_metrics()
        except BusError as exc:
            self._error(f"cannot read the bus: {exc}")
        self._ticks += 1
        self.polled_at = time.time()
        self.version += 1
        self._changed.set()
        self._changed = anyio.Event()

    def _error(self, text: str) -> None:
        if not self.errors or self.errors[-1]["text"] != text:
            self.errors.append({"at": time.time(), "source": "web", "text": text})
        log.warning("%s", text)

    async def _read_presence(self) -> None:
        bucket = Bucket(self.client, BucketConfig(name=PRESENCE_BUCKET))
        seen: set[tuple[Domain, str]] = set()
        for entry in await bucket.entries():
            if entry.value is None:
                continue
            try:
                domain = Domain.parse("/".join(entry.key.split(".")[:3]))
                presence = Presence.decode(entry.value)
            except (InvalidDomain, WireError) as exc:
                self._error(f"unreadable heartbeat {entry.key}: {exc}")
                continue
            if not self.visible(domain):
                continue
            seen.add((domain, presence.agent))
            await self._take(domain, presence)
        for gone in set(self.agents) - seen:  # stopped cleanly: its heartbeat was taken away
            del self.agents[gone]

    async def _take(self, domain: Domain, presence: Presence) -> None:
        key = (domain, presence.agent)
        track = self.agents.get(key)
        if track is None:
            track = self.agents[key] = AgentTrack(domain, presence.agent, presence)
        elif track.samples and track.samples[-1].at == presence.at:
            return  # nothing new since the last poll
        track.presence = presence
        now = time.time()
        layers = None  # per layer only for a sample whose store was read with it
        if now - track.inspected_at >= INSPECT_EVERY:
            track.inspected_at = now
            if await self._read_store(track) and track.layers is not None:
                layers = {v.name: v.tokens for v in track.layers}
        previous = track.samples[-1].band if track.samples else None
        track.samples.append(
            Sample(
                at=presence.at, band=presence.band, unused=presence.unused_tokens, tail=presence.tail_tokens,
                prompt=presence.prompt_tokens, cached_share=presence.cached_share, lag=presence.lag,
                revision=presence.brief_revision, layers=layers,
            )
        )  # fmt: skip
        rank = _rank(presence.band)
        if previous is not None and rank > _rank(previous):
            channel = 2 if presence.band == "channel2" else 1
            text = "Channel 2 reached" if channel == 2 else f"band rose to {presence.band}: a Channel 1 reminder"
            track.events.append({"at": presence.at, "channel": channel, "text": text})

    @staticmethod
    def events_of(track: AgentTrack) -> list[dict[str, object]]:
        """The agent's Channel 1 and 2 events: from its store where it is read, else as
        its heartbeats show them."""
        if track.store_events:
            return sorted(track.store_events.values(), key=lambda e: float(str(e["at"])))
        return list(track.events)

    def _store_of(self, domain: Domain, agent: str) -> Path | None:
        for root in self._store_dirs:
            for candidate in (root.joinpath(*domain.tokens, f"{agent}.db"), root / f"{agent}.db"):
                if candidate.is_file():
                    return candidate
        return None

    async def _read_store(self, track: AgentTrack) -> bool:
        """Read the agent's store, if one is found; whether it was read."""
        track.store = self._store_of(track.domain, track.agent)
        if track.store is None:
            track.store_note = "no store found here: samples come from heartbeats only (start with --store-dir)"
            return False
        try:
            view = await anyio.to_thread.run_sync(self._inspect, track.store, track.domain)
        except Exception as exc:  # a store being written, of another version: say so, keep serving
            track.store_note = f"cannot read {track.store}: {exc}"
            return False
        track.layers = view.layers
        track.store_note = None
        for event in view.events:
            track.store_events.setdefault((event["channel"], event["tag"]), event)
        return True

    async def _read_metrics(self) -> None:
        answers = await gather(self.client, METRICS_SUBJECT, b"", wait=0.5)
        for answer in answers:
            try:
                self._take_metrics(answer.decode())
            except ValueError as exc:
                self._error(f"unreadable metrics answer: {exc}")

    def _take_metrics(self, text: str) -> None:
        buckets: dict[str, list[tuple[float, float]]] = {}
        totals: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "ctxbus_commit_latency_seconds":
                continue
            for s in family.samples:
                who = s.labels.get("coordinator", "?")
                if s.name.endswith("_bucket"):
                    buckets.setdefault(who, []).append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count") or s.name.endswith("_sum"):
                    totals.setdefault(who, {})[s.name.rsplit("_", 1)[1]] = s.value
        for who, t in totals.items():
            count = t.get("count", 0.0)
            ladder = sorted(buckets.get(who, []))
            self.metrics[who] = {
                "commits": int(count),
                "mean_ms": None if not count else round(1000 * t.get("sum", 0.0) / count, 3),
                "p50_ms": _quantile(ladder, count, 0.5),
                "p95_ms": _quantile(ladder, count, 0.95),
                "buckets": [{"le": "+Inf" if le == float("inf") else le, "count": c} for le, c in ladder],
            }

    async def _listen_dead_letters(self) -> None:
        def on_domain(msg: Any) -> None:
            try:
                letter = DeadLetterEnvelope.decode(msg.data)
            except WireError as exc:
                self._error(f"unreadable dead letter on {msg.subject}: {exc}")
                return
            self._letter(domain_of(msg.subject), letter.body)

        def on_global(msg: Any) -> None:
            try:
                self._letter(None, DeadLetter.decode(msg.data))
            except WireError as exc:
                self._error(f"unreadable dead letter on {msg.subject}: {exc}")

        async def on_domain_async(msg: Any) -> None:
            on_domain(msg)

        async def on_global_async(msg: Any) -> None:
            on_global(msg)

        # A tenant's operator may listen to its own tenant's dead letters only.
        await self.client.subscribe(f"{SUBJECT_ROOT}.{self.tenant or '*'}.*.*.{Verb.DLQ}", cb=on_domain_async)
        await self.client.subscribe(GLOBAL_DLQ, cb=on_global_async)

    def _letter(self, domain: Domain | None, letter: DeadLetter) -> None:
        if domain is not None and not self.visible(domain):
            return
        if domain is None and (self.tenant is not None or self.only is not None):
            return
        self.dead_letters.append(
            {
                "at": time.time(), "domain": None if domain is None else str(domain), "reason": letter.reason,
                "detail": letter.detail, "subject": letter.subject, "size": letter.size,
            }
        )  # fmt: skip


def _rank(band: str) -> int:
    return BANDS.index(band) if band in BANDS else 0


def _quantile(ladder: list[tuple[float, float]], count: float, q: float) -> float | None:
    """The upper bound (ms) of the histogram bucket holding quantile `q`."""
    if not count:
        return None
    for le, cumulative in ladder:
        if cumulative >= q * count:
            return None if le == float("inf") else round(le * 1000, 3)
    return None
