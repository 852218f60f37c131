"""The transaction-log primitive: ordered, deduplicated, compare-and-set appends.

One JetStream stream holds every domain's log on its own subject. Appends carry
`Nats-Msg-Id` (the stream drops a repeat within the duplicate window) and, for
ordered writers, `Nats-Expected-Last-Subject-Sequence` (the stream refuses the write if
someone appended to the subject since the writer last looked).

Two NATS behaviours shape this module (measured on nats-server 2.15.1, nats-py 2.16):

- A publish whose ack is lost (timeout, server restart) may or may not have been
  stored. We retry with the same msg id. Without CAS the retry is answered as a
  duplicate with the original sequence. With CAS the server checks the expected
  sequence before the msg id, so the retry fails with err_code 10071 because our own
  first attempt moved the subject on; we reconcile by reading the first message after
  the expected sequence and comparing its msg id.
- nats-py's ordered consumer resets itself on gaps, but its watchdog task dies if the
  server is down at that moment. `follow` therefore supervises the subscription itself:
  it filters by stream sequence, and when nothing arrives for a while it asks the
  stream whether it is behind and re-subscribes from the next sequence if so.

The stream also republishes every entry it stores on a core subject (`live_subject`),
with the sequence of the entry before it on the same subject. That is the fastest way
to hear of a new entry (it leaves the server before the publisher's ack), and the
previous sequence tells a reader whether it missed one; `tail` reads the log itself
only then. `tail` hands entries over in the subscription's callback rather than through
a queue: on a busy machine every extra trip through the event loop shows in how soon
the last of many agents has applied a commit.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, NoReturn

import anyio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from ctxbus.bus._errors import (
    AppendExpired,
    BusError,
    BusUnavailable,
    CasConflict,
    LogTruncated,
    NoResponders,
    NotFound,
    Refused,
)
from ctxbus.bus._retry import Retry
from ctxbus.bus._streams import (
    DUPLICATE_IN_PROCESS,
    EXPECTED_LAST_SUBJECT_SEQ,
    WRONG_LAST_SEQUENCE,
    actual_sequence,
    ensure_stream,
    read_unavailable,
)
from ctxbus.bus._subjects import TX_STREAM, TX_SUBJECTS, live_subject
from ctxbus.bus._translate import translating
from ctxbus.schemas import UsageError

__all__ = ["TxLog", "TxLogConfig", "LogEntry"]

log = logging.getLogger(__name__)

MSG_ID: Final = "Nats-Msg-Id"
STORED_SUBJECT: Final = "Nats-Subject"
STORED_SEQ: Final = "Nats-Sequence"
STORED_TIME: Final = "Nats-Time-Stamp"
PREVIOUS_SEQ: Final = "Nats-Last-Sequence"
"""Republish header: the sequence of the entry before this one on its subject (0: none)."""

_DIRECT_READ_LIMIT: Final = 32
"""Entries `read` fetches one by one before it sets up a consumer for the rest."""


@dataclass(frozen=True, kw_only=True)
class TxLogConfig:
    """The stream behind a `TxLog`."""

    stream: str = TX_STREAM
    """Stream name."""
    subjects: tuple[str, ...] = (TX_SUBJECTS,)
    """Subjects the stream captures."""
    replicas: int = 1
    """1 on a single node; 3 on a cluster."""
    duplicate_window: float = 120.0
    """Seconds a msg id is remembered; longer than any retry loop."""
    max_msg_size: int | None = None
    """Largest message the stream accepts; the server's max_payload when None."""
    attempt_timeout: float = 2.0
    """Seconds one publish waits for its ack before it is retried."""
    deadline: float = 60.0
    """Seconds an append keeps retrying (server restarts included) before giving up."""
    idle_heartbeat: float = 1.0
    """Heartbeat of `follow`'s consumer: how fast a dead subscription is noticed; `tail`
    checks the log after three of these without news."""
    consumers: bool = True
    """Whether this reader may create consumers on the stream. An agent may not: a push
    consumer delivers to any subject its creator names, which no server permission can
    restrict (into the proposal queue, into another client's inbox), so the agent role
    reads with direct gets only (`read` and `tail` then never stream; `follow` is refused)."""


@dataclass(frozen=True)
class LogEntry:
    """One message of the log, as stored."""

    seq: int
    """Stream sequence: the total order."""
    subject: str
    payload: bytes
    msg_id: str | None
    time: datetime | None = field(default=None, compare=False)
    """When the stream stored it, by the server's clock (None from direct gets)."""
    pending: int | None = field(default=None, compare=False)
    """Entries after this one that `follow` has not delivered yet (None outside `follow`)."""
    prev_seq: int | None = field(default=None, compare=False)
    """Sequence of the entry before this one on the same subject, 0 for the first
    (known for entries heard live by `tail`; None otherwise)."""
    headers: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    """The headers it was stored with (its signature among them, if signed)."""


class TxLog:
    """Append to and read the transaction log stream through one NATS client."""

    def __init__(
        self, client: Client, config: TxLogConfig | None = None, *, on_trouble: Callable[[str], object] | None = None
    ) -> None:
        """:param on_trouble: told, in a sentence, of each failure an append rides out by
        retrying (no stream answered, so it is created again): a coordinator keeps
        the last one as its last error, though the append may succeed in the end."""
        self.config = config or TxLogConfig()
        self._client = client
        self._on_trouble = on_trouble
        self._js: JetStreamContext = client.jetstream(timeout=self.config.attempt_timeout)

    def __repr__(self) -> str:
        return f"<TxLog stream={self.config.stream!r} replicas={self.config.replicas}>"

    async def ensure(self) -> None:
        """Create the stream, or bring its settings up to date; idempotent.

        :raises BusError: if the server refuses the stream config.
        """
        cfg = api.StreamConfig(
            name=self.config.stream,
            subjects=list(self.config.subjects),
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            num_replicas=self.config.replicas,
            duplicate_window=self.config.duplicate_window,
            max_msg_size=self.config.max_msg_size,
            allow_direct=True,
            republish=api.RePublish(src=">", dest=live_subject(self.config.stream, ">")),
        )
        await ensure_stream(self._js, cfg)

    async def append(
        self,
        subject: str,
        payload: bytes,
        msg_id: str,
        *,
        expected_last_subject_seq: int | None = None,
        not_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Append `payload` to `subject` and return its stream sequence.

        The append is idempotent per `msg_id` within the duplicate window: a repeat
        returns the sequence of the message already stored.

        :param expected_last_subject_seq: append only if the last message on `subject`
            has this stream sequence (0: the subject is empty).
        :param not_after: Unix time after which no attempt is sent (checked before each):
            for a payload that may not be stored later than that.
        :param headers: more headers to store the entry with (a signature).
        :raises CasConflict: if `subject` has moved past `expected_last_subject_seq`.
        :raises AppendExpired: if `not_after` passed before an attempt could be sent.
        :raises BusUnavailable: if no ack arrived before the configured deadline.
        """
        headers = {**(headers or {}), MSG_ID: msg_id}
        if expected_last_subject_seq is not None:
            headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        retry = Retry(self.config.deadline)
        while (left := retry.left()) > 0:
            if not_after is not None and (late := time.time() - not_after) > 0:
                raise AppendExpired(subject, late)
            try:
                with translating(f"append to {subject} refused"):
                    ack = await self._js.publish(
                        subject,
                        payload,
                        timeout=min(self.config.attempt_timeout, left),
                        stream=self.config.stream,
                        headers=headers,
                    )
                return ack.seq
            except NoResponders as exc:
                log.warning("no stream took an append to %s (%s); creating the log again", subject, exc)
                if self._on_trouble is not None:
                    self._on_trouble(f"no stream took an append to {subject} ({exc}); creating the log again")
                await self._recreate()
                await retry.pause()
            except BusUnavailable as exc:  # a repeat is safe: the message id dedupes it
                log.debug("append to %s not acknowledged (%s); retrying", subject, exc)
                await retry.pause()
            except Refused as exc:
                if exc.err_code == WRONG_LAST_SEQUENCE and expected_last_subject_seq is not None:
                    # Our own earlier attempt (lost ack, or a caller's retry) may be what
                    # moved the subject on: then the append already happened.
                    stored = await self._find_own_append(subject, msg_id, expected_last_subject_seq)
                    if stored is not None:
                        return stored
                    raise CasConflict(subject, expected_last_subject_seq, actual_sequence(exc)) from exc
                if exc.err_code != DUPLICATE_IN_PROCESS:
                    raise
                # An earlier attempt, unacknowledged in time, is still being stored: ask
                # again once it is, and hear its sequence.
                log.debug("append to %s still in process under msg id %s; asking again", subject, msg_id)
                await retry.pause()
        raise BusUnavailable(f"append to {subject} not acknowledged within {self.config.deadline:g}s")

    async def _recreate(self) -> None:
        """`ensure`, for an append that found no stream: a server that lost its store (or
        a stream deleted by hand) would otherwise refuse every commit for good."""
        try:
            await self.ensure()
        except BusError as exc:  # the server is not ready yet: the append tries again
            log.debug("cannot create %s yet (%s)", self.config.stream, exc)

    async def last_seq(self, subject: str, *, from_leader: bool = False) -> int:
        """Stream sequence of the last message on `subject`; 0 if it has none.

        Any copy of a replicated stream answers, and a follower's answer may lag a little;
        `from_leader` asks the stream's leader, whose answer is never behind what anyone read.
        """
        action = f"cannot read the last sequence of {subject}"
        try:
            with translating(action):
                raw = await self._js.get_msg(self.config.stream, subject=subject, direct=not from_leader)
        except NotFound:
            return 0
        except NoResponders as exc:
            raise read_unavailable(action, exc) from exc
        return int(raw.seq or 0)

    async def read(
        self, subject: str, from_seq: int = 1, *, direct_limit: int = _DIRECT_READ_LIMIT
    ) -> AsyncGenerator[LogEntry, None]:
        """Yield the entries of `subject` from `from_seq` up to the current end, in order.

        A short tail (the usual case: a writer catching up after losing a race) is read
        with direct gets, one round trip per entry; after `direct_limit` of them, the
        rest through an ordered consumer, whose setup costs more but which then streams
        and tells how many entries are still to come (`LogEntry.pending`). A reader
        that may not create consumers (`TxLogConfig.consumers`) reads all of it with
        direct gets.
        """
        end = await self.last_seq(subject)
        next_seq = from_seq
        while direct_limit > 0 or not self.config.consumers:
            direct_limit -= 1
            if next_seq > end:
                return
            entry = await self._get_next(subject, next_seq)
            if entry is None:
                return
            yield entry
            next_seq = entry.seq + 1
        if next_seq > end:
            return
        async with contextlib.aclosing(self.follow(subject, next_seq, until=end)) as follower:
            async for entry in follower:
                yield entry

    async def follow(
        self, subject_filter: str, from_seq: int = 1, *, until: int | None = None
    ) -> AsyncGenerator[LogEntry, None]:
        """Yield every entry matching `subject_filter` from `from_seq` on, in order: forever,
        or up to the one at sequence `until`.

        Each entry is yielded exactly once, across disconnects and server restarts.
        Close the iterator (`aclose()`, or leave an `async with aclosing(...)`) to stop.
        With `until`, it also ends early if the entries up to `until` are purged meanwhile.

        :raises UsageError: if this reader may not create consumers (`TxLogConfig.consumers`).
        """
        if not self.config.consumers:
            raise UsageError(
                "this reader follows the log without consumers (the agent role may not create them): "
                "follow with an operator's credentials"
            )
        next_seq = max(from_seq, 1)
        if until is not None and next_seq > until:
            return
        stall = self.config.idle_heartbeat * 3
        while True:
            sub = await self._subscribe(subject_filter, next_seq)
            reconnects = self._client.stats["reconnects"]
            try:
                while True:
                    try:
                        with translating(f"cannot follow {subject_filter}"):
                            msg = await sub.next_msg(timeout=stall)
                    except BusUnavailable:  # nothing came within `stall`: idle, or dead?
                        if self._client.stats["reconnects"] != reconnects:
                            break  # the server may have lost our ephemeral consumer
                        unsent = await self._has_entry_from(subject_filter, next_seq)
                        if unsent:
                            break  # the consumer is dead, not idle
                        if unsent is False and until is not None:
                            return  # what was to come up to `until` is gone
                        continue
                    meta = msg.metadata
                    if meta.sequence.stream < next_seq:
                        continue  # redelivered after a consumer reset
                    next_seq = meta.sequence.stream + 1
                    yield LogEntry(
                        seq=meta.sequence.stream,
                        subject=msg.subject,
                        payload=msg.data,
                        msg_id=(msg.headers or {}).get(MSG_ID),
                        time=meta.timestamp,
                        pending=meta.num_pending,
                        headers=msg.headers,
                    )
                    if until is not None and next_seq > until:
                        return
            finally:
                with anyio.CancelScope(shield=True):
                    await _unsubscribe(sub)
            log.info("re-subscribing to %s from sequence %d", subject_filter, next_seq)

    async def tail(self, subject: str, after_seq: int, on_entry: Callable[[LogEntry], object]) -> NoReturn:
        """Call `on_entry` with every entry of one `subject` after `after_seq`, in order,
        exactly once, until cancelled.

        `after_seq` is the sequence of an entry of `subject` (or 0): the last one the
        caller holds. New entries come from the stream's republished copies and reach
        `on_entry` inside the subscription's callback, with no further trip through the
        event loop; the log itself is read only to catch up at the start, after a missed
        entry, and when a quiet spell may hide one. `on_entry` must not block; if it
        raises, the tail ends with its exception.

        :raises LogTruncated: if the log no longer holds the last entry handed on
            (purged, or its stream recreated): as found after a quiet spell or a
            reconnect (the log ends before it), or from a live entry whose predecessor
            on the subject is older than it. A stream recreated while the tail was
            connected and busy, whose new sequences come to line up with the old ones
            before either check, cannot be told from the old one.
        """
        feed = _LiveFeed(subject, after_seq, on_entry)
        stall = self.config.idle_heartbeat * 3
        sub = await self._client.subscribe(live_subject(self.config.stream, subject), cb=feed.on_msg)
        try:
            try:
                with translating(f"cannot subscribe to the live log of {subject}"):
                    await self._client.flush()  # subscribed on the server before the log is read
            except BusUnavailable as exc:  # the subscription is sent again on reconnect
                log.debug("live subscription to %s not confirmed yet (%s)", subject, exc)
            direct_limit = 0  # a join may be far behind: stream it, and learn how far
            reconnects = self._client.stats["reconnects"]
            while True:
                if feed.behind:
                    feed.behind = False
                    async with contextlib.aclosing(self._read_retrying(subject, feed.have + 1, direct_limit)) as read:
                        async for entry in read:
                            feed.deliver(entry)
                direct_limit = _DIRECT_READ_LIMIT
                heard = feed.heard
                with anyio.move_on_after(stall):
                    await feed.news.wait()
                feed.raise_failure()
                if feed.news.is_set():
                    feed.news = anyio.Event()  # a gap: `behind` is set
                elif feed.heard == heard or self._client.stats["reconnects"] != reconnects:
                    # A quiet spell may hide an entry; a reconnect may hide a server that
                    # came back with an empty store, even under a busy tail.
                    reconnects = self._client.stats["reconnects"]
                    await self._look_past_quiet_spell(feed)
        finally:
            with anyio.CancelScope(shield=True):
                await _unsubscribe(sub)

    async def purge(self, subject: str) -> None:
        """Remove every entry of `subject` (used when a domain is closed for good)."""
        with translating(f"cannot purge {subject}"):
            await self._js.purge_stream(self.config.stream, subject=subject)

    # -- internals -----------------------------------------------------------------------

    async def _subscribe(self, subject_filter: str, start: int) -> JetStreamContext.PushSubscription:
        retry = Retry(max_pause=1.0)
        while True:
            action = f"cannot follow {subject_filter}"
            try:
                with translating(action):
                    return await self._js.subscribe(
                        subject_filter,
                        stream=self.config.stream,
                        ordered_consumer=True,
                        idle_heartbeat=self.config.idle_heartbeat,
                        config=api.ConsumerConfig(
                            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
                        ),
                    )
            except NotFound as exc:  # no stream: nothing to follow yet
                raise read_unavailable(action, exc) from exc
            except BusUnavailable as exc:
                log.debug("cannot subscribe to %s yet (%s); retrying", subject_filter, exc)
                await retry.pause()

    async def _read_retrying(self, subject: str, from_seq: int, direct_limit: int) -> AsyncGenerator[LogEntry, None]:
        """`read`, resumed after the last entry it yielded while the server is away."""
        retry = Retry(max_pause=1.0)
        while True:
            try:
                async for entry in self.read(subject, from_seq, direct_limit=direct_limit):
                    yield entry
                    from_seq = entry.seq + 1
                return
            except BusUnavailable as exc:
                log.debug("cannot read %s yet (%s); retrying", subject, exc)
                await retry.pause()

    async def _look_past_quiet_spell(self, feed: _LiveFeed) -> None:
        """Check the log's end after nothing was heard live for a while: an entry the
        spell hid sets `feed.behind`; a log ending before `feed.have` was truncated."""
        end = await self._end_if_known(feed.subject)
        if end is not None and end < feed.have:  # confirmed by the leader: a follower may lag
            end = await self._end_if_known(feed.subject, from_leader=True)
            if end is not None and end < feed.have:
                raise LogTruncated(feed.subject, feed.have, end)
        if end is not None and end > feed.have:
            feed.behind = True  # only ever set here: a gap heard while asking must not be
            # undone by an answer from before it

    async def _end_if_known(self, subject: str, *, from_leader: bool = False) -> int | None:
        """`last_seq(subject)`; None while that cannot be told."""
        try:
            return await self.last_seq(subject, from_leader=from_leader)
        except BusUnavailable:
            return None  # ask again after the next quiet spell

    async def _has_entry_from(self, subject_filter: str, seq: int) -> bool | None:
        """Whether the stream holds an entry of `subject_filter` at or after `seq`; None
        while that cannot be told."""
        try:
            with translating(f"cannot read {subject_filter} from sequence {seq}"):
                await self._js.get_msg(self.config.stream, seq=seq, subject=subject_filter, next=True)
        except NotFound:
            return False
        except (BusUnavailable, Refused):
            return None  # ask again after the next quiet spell
        return True

    async def _find_own_append(self, subject: str, msg_id: str, expected: int) -> int | None:
        """Sequence of our own earlier attempt, if it is what moved `subject` on."""
        entry = await self._get_next(subject, expected + 1)
        if entry is not None and entry.msg_id == msg_id:
            log.debug("append to %s already stored at %s under msg id %s", subject, entry.seq, msg_id)
            return entry.seq
        return None

    async def _get_next(self, subject: str, seq: int) -> LogEntry | None:
        """The first entry of `subject` at or after `seq`, by direct get; None if none."""
        action = f"cannot read {subject} from sequence {seq}"
        try:
            with translating(action):
                raw = await self._js.get_msg(self.config.stream, seq=seq, subject=subject, next=True, direct=True)
        except NotFound:
            return None
        except NoResponders as exc:
            raise read_unavailable(action, exc) from exc
        return LogEntry(
            seq=int(raw.seq or 0),
            subject=raw.subject or subject,
            payload=raw.data or b"",
            msg_id=(raw.headers or {}).get(MSG_ID),
            headers=raw.headers,
        )


class _LiveFeed:
    """`tail`'s state, shared by the live callback and the loop that reads the log."""

    def __init__(self, subject: str, after_seq: int, on_entry: Callable[[LogEntry], object]) -> None:
        self.subject = subject
        self.have = after_seq
        """Sequence of the last entry handed to `on_entry`."""
        self.behind = True
        """Whether the log may hold entries after `have` that live did not bring."""
        self.heard = 0
        """Live entries received so far: unchanged over a quiet spell."""
        self.news = anyio.Event()
        """Set when the loop must act now: a gap, or a failure of `on_entry`."""
        self._on_entry = on_entry
        self._failure: Exception | None = None

    def deliver(self, entry: LogEntry) -> None:
        """Hand `entry` on unless it is held already; it must follow `have` on the subject."""
        if entry.seq > self.have and self._failure is None:
            try:
                self._on_entry(entry)
            except Exception as exc:  # raised in the loop, not lost in nats-py's callback
                self._failure = exc
                self.news.set()
                raise
            self.have = entry.seq

    async def on_msg(self, msg: Msg) -> None:
        entry = _live_entry(msg)
        if entry is None:
            log.warning("ignoring a message on %s without the stream's republish headers", msg.subject)
            return
        if entry.seq <= self.have:
            return  # read already (not news: a quiet spell may still hide an entry)
        self.heard += 1
        if entry.prev_seq is not None and entry.prev_seq < self.have:
            # The entry before this one on the subject is older than ours: ours is gone
            # (a stream recreated under a busy tail, which a quiet spell never checks).
            self._failure = self._failure or LogTruncated(self.subject, self.have, entry.prev_seq)
            self.news.set()
            return
        if entry.prev_seq != self.have:
            log.debug("missed entries of %s after %d; reading them", self.subject, self.have)
            self.behind = True
            self.news.set()
            return
        with contextlib.suppress(Exception):  # kept for `raise_failure`
            self.deliver(entry)

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


def _live_entry(msg: Msg) -> LogEntry | None:
    """The log entry a republished message carries; None if its headers are not the stream's."""
    headers = msg.headers or {}
    try:
        return LogEntry(
            seq=int(headers[STORED_SEQ]),
            subject=headers[STORED_SUBJECT],
            payload=msg.data,
            msg_id=headers.get(MSG_ID),
            time=datetime.fromisoformat(headers[STORED_TIME]),
            prev_seq=int(headers[PREVIOUS_SEQ]),
            headers=headers,
        )
    except (KeyError, ValueError):
        return None


async def _unsubscribe(sub: Subscription) -> None:
    # The connection gone: the server drops the subscription (and any consumer) itself.
    with contextlib.suppress(BusError), translating("cannot unsubscribe"):
        await sub.unsubscribe()
