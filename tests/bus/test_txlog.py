"""The transaction log against a real server: order, dedupe, CAS, and a crash mid-run."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import anyio
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from ctxbus.bus import (
    AppendExpired,
    BusConfig,
    BusUnavailable,
    CasConflict,
    EmbeddedServer,
    LogEntry,
    LogTruncated,
    TxLog,
    TxLogConfig,
    connect,
    live_subject,
)


def _subject() -> str:
    """A fresh domain subject per test, so tests sharing the session server never meet."""
    return f"ctx.u.{uuid.uuid4().hex[:12]}.t.tx"


@pytest.fixture
async def txlog(nats_client: Client) -> TxLog:
    log = TxLog(nats_client)
    await log.ensure()
    return log


async def test_appends_are_ordered_and_read_back(txlog: TxLog) -> None:
    subject = _subject()
    seqs = [await txlog.append(subject, f"p{i}".encode(), f"id-{subject}-{i}") for i in range(20)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 20
    entries = [e async for e in txlog.read(subject)]
    assert [e.payload for e in entries] == [f"p{i}".encode() for i in range(20)]
    assert [e.seq for e in entries] == seqs
    assert [e.msg_id for e in entries] == [f"id-{subject}-{i}" for i in range(20)]
    tail = [e.payload async for e in txlog.read(subject, from_seq=seqs[15])]
    assert tail == [f"p{i}".encode() for i in range(15, 20)]


async def test_read_of_an_empty_subject_is_empty(txlog: TxLog) -> None:
    assert [e async for e in txlog.read(_subject())] == []
    assert await txlog.last_seq(_subject()) == 0


async def test_a_read_ends_when_what_it_was_to_read_is_purged(nats_client: Client) -> None:
    txlog = TxLog(nats_client, TxLogConfig(stream=f"T{uuid.uuid4().hex[:8]}", subjects=("t.>",), idle_heartbeat=0.1))
    await txlog.ensure()
    for i in range(10):
        await txlog.append("t.a", b"x", f"m{i}")
    read = []
    with anyio.fail_after(10):
        async for entry in txlog.read("t.a", direct_limit=2):
            read.append(entry.seq)
            if len(read) == 2:  # the rest comes through a consumer, which will see nothing
                await txlog.purge("t.a")
    assert read[:2] == [1, 2] and len(read) < 10


async def test_repeated_msg_id_is_stored_once(txlog: TxLog) -> None:
    subject = _subject()
    first = await txlog.append(subject, b"x", "same-id")
    again = await txlog.append(subject, b"x", "same-id")
    assert again == first
    with_cas = await txlog.append(subject, b"y", "cas-id", expected_last_subject_seq=first)
    # A CAS retry of a stored append is rejected by the server (10071) and reconciled.
    assert await txlog.append(subject, b"y", "cas-id", expected_last_subject_seq=first) == with_cas
    assert [e.payload async for e in txlog.read(subject)] == [b"x", b"y"]


async def test_cas_conflict_reports_the_actual_sequence(txlog: TxLog) -> None:
    subject = _subject()
    first = await txlog.append(subject, b"a", uuid.uuid4().hex, expected_last_subject_seq=0)
    second = await txlog.append(subject, b"b", uuid.uuid4().hex, expected_last_subject_seq=first)
    with pytest.raises(CasConflict) as caught:
        await txlog.append(subject, b"c", uuid.uuid4().hex, expected_last_subject_seq=first)
    assert (caught.value.expected, caught.value.actual) == (first, second)
    with pytest.raises(CasConflict) as empty:
        await txlog.append(_subject(), b"c", uuid.uuid4().hex, expected_last_subject_seq=5)
    assert empty.value.actual == 0
    assert [e.payload async for e in txlog.read(subject)] == [b"a", b"b"]


async def test_an_append_gives_up_at_its_deadline_even_inside_an_attempt(nats_client: Client) -> None:
    """A subject no stream stores but a silent subscriber hears: each attempt would wait
    30 s for an ack, but the append's deadline of 0.5 s cuts it short."""
    subject = f"nowhere.{uuid.uuid4().hex[:12]}"
    silent = await nats_client.subscribe(subject)
    txlog = TxLog(nats_client, TxLogConfig(stream="NOWHERE", attempt_timeout=30, deadline=0.5))
    try:
        with anyio.fail_after(10), pytest.raises(BusUnavailable, match="not acknowledged within 0.5s"):
            await txlog.append(subject, b"lost", uuid.uuid4().hex)
    finally:
        await silent.unsubscribe()
    assert silent.delivered >= 1


async def test_an_append_past_its_not_after_is_never_sent(txlog: TxLog) -> None:
    subject = _subject()
    with pytest.raises(AppendExpired):
        await txlog.append(subject, b"late", uuid.uuid4().hex, not_after=time.time() - 0.01)
    assert [e async for e in txlog.read(subject)] == []
    assert await txlog.append(subject, b"in time", uuid.uuid4().hex, not_after=time.time() + 60) >= 1


async def test_an_attempt_unanswered_until_past_not_after_is_not_retried(nats_client: Client) -> None:
    """The first attempt is sent in time but never acknowledged (a silent subscriber, no
    stream): once `not_after` has passed, no further attempt goes out, whatever time the
    append's own deadline leaves."""
    subject = f"nowhere.{uuid.uuid4().hex[:12]}"
    silent = await nats_client.subscribe(subject)
    txlog = TxLog(nats_client, TxLogConfig(stream="NOWHERE", attempt_timeout=2.0, deadline=30))
    try:
        with anyio.fail_after(20), pytest.raises(AppendExpired):
            await txlog.append(subject, b"late", uuid.uuid4().hex, not_after=time.time() + 0.5)
        await nats_client.flush()
    finally:
        await silent.unsubscribe()
    assert silent.delivered == 1


async def test_cas_writers_never_both_commit_on_one_base(txlog: TxLog) -> None:
    subject = _subject()
    base = await txlog.append(subject, b"base", uuid.uuid4().hex)
    won: list[int] = []
    lost: list[CasConflict] = []

    async def writer(i: int) -> None:
        try:
            won.append(await txlog.append(subject, f"w{i}".encode(), uuid.uuid4().hex, expected_last_subject_seq=base))
        except CasConflict as exc:
            lost.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(writer, i)
    assert len(won) == 1 and len(lost) == 7
    assert all(exc.actual == won[0] for exc in lost)


async def test_follow_sees_domains_it_filters_only(txlog: TxLog) -> None:
    mine, other = _subject(), _subject()
    start = await txlog.append(mine, b"m0", uuid.uuid4().hex)
    await txlog.append(other, b"o0", uuid.uuid4().hex)
    await txlog.append(mine, b"m1", uuid.uuid4().hex)
    got: list[bytes] = []
    with anyio.fail_after(10):
        follower = txlog.follow(mine, start)
        async for entry in follower:
            got.append(entry.payload)
            if len(got) == 2:
                break
        await follower.aclose()
    assert got == [b"m0", b"m1"]


class _Collected:
    """What a tail hands over, and a way to wait for more."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._grew = anyio.Event()

    def __call__(self, entry: LogEntry) -> None:
        self.entries.append(entry)
        self._grew.set()
        self._grew = anyio.Event()

    @property
    def payloads(self) -> list[bytes]:
        return [e.payload for e in self.entries]

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.entries) < count:
                await self._grew.wait()


async def test_tail_hands_over_each_entry_once_in_order(txlog: TxLog) -> None:
    subject, other = _subject(), _subject()
    before = [await txlog.append(subject, f"b{i}".encode(), uuid.uuid4().hex) for i in range(3)]
    got = _Collected()
    async with anyio.create_task_group() as tg:
        tg.start_soon(txlog.tail, subject, before[0], got)
        await got.wait_for(2)  # read back: stored before the tail began
        for i in range(3):
            await txlog.append(other, b"not mine", uuid.uuid4().hex)
            await txlog.append(subject, f"a{i}".encode(), uuid.uuid4().hex)
        await got.wait_for(5)  # heard live
        await anyio.sleep(0.2)  # room for a repeat to show up
        tg.cancel_scope.cancel()
    assert got.payloads == [b"b1", b"b2", b"a0", b"a1", b"a2"]
    assert [e.prev_seq for e in got.entries[2:]] == [e.seq for e in got.entries[1:4]]


async def test_tail_ends_with_the_error_of_its_callback(nats_client: Client) -> None:
    txlog = TxLog(nats_client, TxLogConfig(idle_heartbeat=60))  # no quiet spell in time
    await txlog.ensure()
    subject = _subject()
    await txlog.append(subject, b"read back", uuid.uuid4().hex)
    got = _Collected()

    def take_one(entry: LogEntry) -> None:
        if got.entries:
            raise ValueError(f"refused {entry.payload!r}")
        got(entry)

    with pytest.raises(ExceptionGroup) as caught, anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(txlog.tail, subject, 0, take_one)
            await got.wait_for(1)
            await txlog.append(subject, b"heard live", uuid.uuid4().hex)
            await anyio.sleep_forever()  # the tail's error cancels this
    assert caught.group_contains(ValueError, match="heard live")


async def test_tail_raises_when_a_quiet_spell_finds_its_entries_purged(nats_client: Client) -> None:
    txlog = TxLog(nats_client, TxLogConfig(idle_heartbeat=0.1))
    await txlog.ensure()
    subject = _subject()
    got = _Collected()
    with pytest.raises(ExceptionGroup) as caught, anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(txlog.tail, subject, 0, got)
            for i in range(2):
                await txlog.append(subject, f"e{i}".encode(), uuid.uuid4().hex)
            await got.wait_for(2)
            await txlog.purge(subject)  # nothing is heard of it live
            await anyio.sleep_forever()  # the tail's error cancels this
    [error] = caught.value.exceptions
    assert isinstance(error, LogTruncated)
    assert (error.held, error.end) == (got.entries[-1].seq, 0)


async def test_a_busy_tail_notices_its_stream_recreated_from_the_next_entry(nats_client: Client) -> None:
    stream = f"RECREATED_{uuid.uuid4().hex[:8]}"
    txlog = TxLog(nats_client, TxLogConfig(stream=stream, subjects=(f"{stream}.>",), idle_heartbeat=60))
    await txlog.ensure()
    mine, other = f"{stream}.tx", f"{stream}.other"
    held = [await txlog.append(mine, name, uuid.uuid4().hex) for name in (b"old0", b"old1")][-1]
    got = _Collected()
    with pytest.raises(ExceptionGroup) as caught, anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(txlog.tail, mine, held, got)  # no quiet spell in time: only live entries tell
            await anyio.sleep(0.2)  # caught up (nothing to read), listening
            await nats_client.jetstream().delete_stream(stream)
            await txlog.ensure()  # sequences start again at 1
            await txlog.append(mine, b"new0", uuid.uuid4().hex)  # seq 1: at or below ours, ignored
            for _ in range(2):
                await txlog.append(other, b"x", uuid.uuid4().hex)
            await txlog.append(mine, b"new1", uuid.uuid4().hex)  # seq 4, after seq 1: ours (2) is gone
            await anyio.sleep_forever()
    [error] = caught.value.exceptions
    assert isinstance(error, LogTruncated) and (error.held, error.end) == (2, 1)
    assert got.payloads == [], "nothing of the new stream was taken for what followed ours"


async def _lossy_log(client: Client, idle_heartbeat: float) -> tuple[TxLog, str, set[bytes]]:
    """A log whose live copies reach tails through a relay that drops the payloads in the
    set it returns: a missed live entry, made to order (in life: a disconnect, or a
    reader too slow for its subscription's pending limit)."""
    stream = f"LOSSY_{uuid.uuid4().hex[:8]}"
    config = TxLogConfig(stream=stream, subjects=(f"{stream}.>",), idle_heartbeat=idle_heartbeat)
    relay_root = f"relay.{stream}"
    await client.jetstream().add_stream(
        api.StreamConfig(
            name=stream,
            subjects=list(config.subjects),
            allow_direct=True,
            republish=api.RePublish(src=">", dest=f"{relay_root}.>"),
        )
    )
    dropped: set[bytes] = set()

    async def relay(msg: Msg) -> None:
        if msg.data not in dropped:
            to = live_subject(stream, msg.subject.removeprefix(f"{relay_root}."))
            await client.publish(to, msg.data, headers=msg.headers)

    await client.subscribe(f"{relay_root}.>", cb=relay)
    return TxLog(client, config), f"{stream}.tx", dropped  # no ensure(): it would republish directly


async def test_tail_reads_back_what_a_later_entry_shows_it_missed(nats_client: Client) -> None:
    txlog, subject, dropped = await _lossy_log(nats_client, idle_heartbeat=60)  # no quiet spell in time
    dropped.update({b"e1", b"e2"})
    got = _Collected()
    async with anyio.create_task_group() as tg:
        tg.start_soon(txlog.tail, subject, 0, got)
        await txlog.append(subject, b"e0", uuid.uuid4().hex)
        await got.wait_for(1)
        for name in (b"e1", b"e2", b"e3"):
            await txlog.append(subject, name, uuid.uuid4().hex)
        await got.wait_for(4)  # e3 follows e2, which the tail does not hold: it reads e1..e3
        tg.cancel_scope.cancel()
    assert got.payloads == [b"e0", b"e1", b"e2", b"e3"]


async def test_tail_reads_back_what_a_quiet_spell_hides(nats_client: Client) -> None:
    txlog, subject, dropped = await _lossy_log(nats_client, idle_heartbeat=0.1)
    dropped.add(b"e1")
    got = _Collected()
    async with anyio.create_task_group() as tg:
        tg.start_soon(txlog.tail, subject, 0, got)
        await txlog.append(subject, b"e0", uuid.uuid4().hex)
        await got.wait_for(1)
        await txlog.append(subject, b"e1", uuid.uuid4().hex)  # lost, and nothing comes after it
        await got.wait_for(2)
        tg.cancel_scope.cancel()
    assert got.payloads == [b"e0", b"e1"]


async def test_appends_and_follow_survive_a_server_crash(
    nats_server_factory: Callable[..., EmbeddedServer],
) -> None:
    """2,000 appends, SIGKILL + restart mid-run: nothing lost, nothing doubled, in order,
    in the log and for both ways of following it."""
    server = nats_server_factory()
    writer = await connect(BusConfig(servers=[server.url]))
    reader = await connect(BusConfig(servers=[server.url]))
    config = TxLogConfig(attempt_timeout=0.5, idle_heartbeat=0.5)
    log, follow_log = TxLog(writer, config), TxLog(reader, config)
    await log.ensure()
    subject, total = "ctx.u.s.crash.tx", 2000
    followed: list[LogEntry] = []
    tailed: list[LogEntry] = []
    acked: dict[str, int] = {}

    async def follow() -> None:
        async for entry in follow_log.follow("ctx.*.*.*.tx"):
            followed.append(entry)

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        tg.start_soon(follow_log.tail, subject, 0, tailed.append)
        for i in range(total):
            if i == total // 2:
                server.kill()
                await anyio.sleep(0.3)  # appends in this gap must wait and retry
                await anyio.to_thread.run_sync(server.start)
            msg_id = f"m{i}"
            acked[msg_id] = await log.append(subject, msg_id.encode(), msg_id)
        with anyio.fail_after(30):
            while len(followed) < total or len(tailed) < total:
                await anyio.sleep(0.05)
        await anyio.sleep(1.5)  # room for a late duplicate to show up
        tg.cancel_scope.cancel()

    stored = [e async for e in log.read(subject)]
    assert len(stored) == total, "lost or duplicated appends"
    assert [e.msg_id for e in stored] == [f"m{i}" for i in range(total)]
    assert {e.msg_id: e.seq for e in stored} == acked
    assert [e.seq for e in followed] == [e.seq for e in stored], "follow skipped, repeated or reordered"
    assert [e.seq for e in tailed] == [e.seq for e in stored], "tail skipped, repeated or reordered"
    await writer.close()
    await reader.close()
