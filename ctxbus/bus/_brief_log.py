"""The brief's transaction log: commits on a domain's `tx` subject, snapshots in KV.

Coordinators and agent replicas both load a brief the same way (latest snapshot, then
the commits after it) and both must skip a malformed log entry the same way, or their
hashes would differ; so that logic lives here, once, below both of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn

from nats.aio.client import Client

from ctxbus.bus._errors import BusError, BusUnavailable, CasConflict, LogTruncated
from ctxbus.bus._keys import SIGNER_HEADER, Signer, Verifier, sealed_by
from ctxbus.bus._kv import Bucket, BucketConfig, KvEntry
from ctxbus.bus._retry import Retry
from ctxbus.bus._subjects import BRIEF_BUCKET, Verb, kv_key, subject
from ctxbus.bus._txlog import LogEntry, TxLog, TxLogConfig
from ctxbus.schemas import (
    DEFAULT_MAX_PAYLOAD,
    BriefSnapshot,
    Commit,
    CommitBatch,
    CommitEnvelope,
    Domain,
    ReplayError,
    TaskBrief,
    WireError,
    apply,
    op_fingerprint,
)

__all__ = ["BriefLog", "BriefState", "EntryOutcome", "batch_msg_id", "commits_of", "read_entry"]

log = logging.getLogger(__name__)

SNAPSHOT_KEY: Final = "brief"
_REVISION_LABEL: Final = "Ctxbus-Revision"
_SEQ_LABEL: Final = "Ctxbus-Seq"
"""Labels of a snapshot: its brief's revision, and the log sequence it reflects."""
_SNAPSHOT_ATTEMPTS: Final = 3
"""Compare-and-set rounds of one snapshot write before it gives up."""
HEADER_ROOM: Final = 1024
"""Bytes of an entry's size limit left for its headers (message id, expected sequence):
the server counts them in `max_payload`, and closes the connection of a client that
sends more, so a batch must be split before that."""


def batch_msg_id(commits: Sequence[Commit]) -> str:
    """The log message id of a batch: a digest of its revisions, authors, keys, ops and
    commit times.

    Deterministic, so a retried append of the same batch is recognised as already
    stored; different for any other batch, even one starting with the same proposal,
    even one whose author sent another op under the same key at the same revision
    through another coordinator (taken for our own append, it would be answered as
    committed and lost), and even the same proposals judged again later: the brief
    depends on the commit times (it forgets keys by them), so a coordinator that took
    such a batch for its own would hold a brief the log does not give.
    """
    digest = hashlib.sha256()
    for commit in commits:
        digest.update(
            f"{commit.revision}\x1f{commit.author}\x1f{commit.key}\x1f{op_fingerprint(commit.op)}"
            f"\x1f{commit.ts!r}\x1e".encode()
        )
    return f"{commits[0].domain.subject_prefix}:{commits[0].revision}:{digest.hexdigest()[:32]}"


@dataclass(frozen=True)
class BriefState:
    """A brief and the stream sequence of the last log entry applied to it."""

    brief: TaskBrief
    seq: int
    behind: int = field(default=0, compare=False)
    """Log entries known to follow `seq` and not applied yet (from the follower)."""
    last_writer: str | None = field(default=None, compare=False)
    """Sender of the entry at `seq`, when it was read from the log (None otherwise)."""

    @property
    def domain(self) -> Domain:
        return self.brief.domain


class BriefLog:
    """Load, extend and follow the briefs of any domain through one NATS client."""

    def __init__(
        self,
        client: Client,
        *,
        txlog: TxLogConfig | None = None,
        snapshots: BucketConfig | None = None,
        max_payload: int | None = None,
        signer: Signer | None = None,
        verifier: Verifier | None = None,
        on_refused: Callable[[LogEntry, str], object] | None = None,
        on_trouble: Callable[[str], object] | None = None,
    ) -> None:
        """:param signer: signs every entry appended (a coordinator's, with its tenant's key).
        :param verifier: only entries signed by a key it trusts are applied; any other is
            skipped (logged as an error, counted in `refused`, and passed to
            `on_refused` with the reason), identically by every reader that trusts the
            same keys.
        :param on_trouble: told of each failure an append rides out (`TxLog`).
        """
        self.txlog = TxLog(client, txlog, on_trouble=on_trouble)
        self.snapshots = Bucket(client, snapshots or BucketConfig(name=BRIEF_BUCKET))
        self._max_payload = max_payload or client.max_payload or DEFAULT_MAX_PAYLOAD
        self._signer = signer
        self._verifier = verifier
        self._on_refused = on_refused
        self.refused = 0
        """Entries skipped because no trusted key signed them."""

    def __repr__(self) -> str:
        return f"<BriefLog {self.txlog!r} {self.snapshots!r}>"

    async def ensure(self) -> None:
        """Create the log stream and the snapshot bucket if missing."""
        await self.txlog.ensure()
        await self.snapshots.ensure()

    async def load(self, domain: Domain) -> BriefState:
        """The domain's brief now: the latest snapshot plus every commit after it.

        A snapshot taken past the log's end (the log purged by hand, or its stream
        recreated, under a snapshot that survived) is taken as the brief before all the
        log holds now, which was written after the loss: every loader replays it all onto
        the snapshot's brief (commits at or below its revision change nothing), and the
        domain goes on from there, rather than every append missing its expected sequence
        for good. (A recreated stream whose new entries already reach past the snapshot's
        sequence cannot be told from the old one: its first entries are missed.)
        """
        state = await self.load_snapshot(domain)
        if state.seq and (end := await self.end(domain)) < state.seq:
            end = await self.end(domain, from_leader=True)  # a follower's answer may lag
            if end < state.seq:
                log.warning(
                    "the snapshot of %s is at sequence %d, past its log's end (%d): the log lost "
                    "entries; replaying what it holds onto the snapshot's brief (revision %d)",
                    domain,
                    state.seq,
                    end,
                    state.brief.revision,
                )
                state = BriefState(state.brief, 0)
        return await self.catch_up(state)

    async def load_snapshot(self, domain: Domain) -> BriefState:
        """The latest snapshot, or an empty brief at sequence 0 if none is usable."""
        entry = await self.snapshots.get(kv_key(domain, SNAPSHOT_KEY))
        state = None if entry is None or entry.value is None else self._decode_snapshot(domain, entry.value)
        return state or BriefState(TaskBrief(domain=domain), 0)

    async def _stored_position(self, domain: Domain) -> tuple[KvEntry | None, tuple[int, int] | None]:
        """The snapshot key's last entry, and the (revision, sequence) of the snapshot it
        holds if that is a usable one: from its labels, without decoding the brief."""
        entry = await self.snapshots.get(kv_key(domain, SNAPSHOT_KEY))
        if entry is None or entry.value is None:
            return entry, None
        try:
            return entry, (int(entry.labels[_REVISION_LABEL]), int(entry.labels[_SEQ_LABEL]))
        except (KeyError, ValueError):  # written before labels: decode it
            state = self._decode_snapshot(domain, entry.value)
            return entry, None if state is None else (state.brief.revision, state.seq)

    def _decode_snapshot(self, domain: Domain, value: bytes) -> BriefState | None:
        """The state a stored snapshot holds; None (logged) if it is not a usable one."""
        try:
            snap = BriefSnapshot.decode(value, max_size=self._max_payload)
        except WireError as exc:
            log.warning("ignoring unreadable snapshot of %s (%s); replaying the whole log", domain, exc)
            return None
        if snap.brief.domain != domain:
            log.warning("ignoring snapshot of %s stored under %s", snap.brief.domain, domain)
            return None
        return BriefState(snap.brief, snap.seq)

    async def catch_up(self, state: BriefState, *, until: int | None = None) -> BriefState:
        """`state` with every commit after `state.seq` applied, up to the log's end now,
        or up to the entry at sequence `until` (an earlier point of the log)."""
        entries = self.txlog.read(subject(state.domain, Verb.TX), state.seq + 1)
        async with contextlib.aclosing(entries):
            async for entry in entries:
                if until is not None and entry.seq > until:
                    break
                state = self.apply_trusted(state, entry)
        return state

    async def refresh(self, state: BriefState, log_end: int | None = None) -> BriefState:
        """`state` brought up to the log's end (`log_end`, if the caller knows it already).

        Normally the commits after `state.seq`; but a log that ends before `state.seq`
        no longer holds what `state` was built from (a closed domain purged, a stream
        recreated), and only loading the domain afresh tells what is left of it.
        """
        if log_end is None:
            log_end = await self.end(state.domain)
        if log_end < state.seq:
            log_end = await self.end(state.domain, from_leader=True)  # a follower's answer may lag
        if log_end < state.seq:
            log.info("the log of %s ends at %d, before %d; loading it afresh", state.domain, log_end, state.seq)
            return await self.load(state.domain)
        return await self.catch_up(state)

    async def end(self, domain: Domain, *, from_leader: bool = False) -> int:
        """Stream sequence of the domain's last log entry; 0 if its log is empty.

        `from_leader`: see `TxLog.last_seq`.
        """
        return await self.txlog.last_seq(subject(domain, Verb.TX), from_leader=from_leader)

    async def follow(self, state: BriefState, on_state: Callable[[BriefState], object]) -> NoReturn:
        """Call `on_state` with the state after each new commit after `state.seq`, in log
        order, until cancelled. `on_state` runs in a subscription's callback: it must not block.

        If the log turns out to have lost what `state` was built from (the domain was closed
        and purged while this process was away), `on_state` gets the domain loaded afresh.
        """

        def on_entry(entry: LogEntry) -> None:
            nonlocal state
            state = self.apply_trusted(state, entry)
            on_state(dataclasses.replace(state, behind=entry.pending) if entry.pending else state)

        while True:
            try:
                await self.txlog.tail(subject(state.domain, Verb.TX), state.seq, on_entry)
            except LogTruncated as exc:
                log.info("%s; loading %s afresh", exc, state.domain)
                state = await self._load_retrying(state.domain)
                on_state(state)

    async def _load_retrying(self, domain: Domain) -> BriefState:
        """`load`, tried again while the bus is away: a follower has nothing else to do."""
        retry = Retry(max_pause=1.0)
        while True:
            try:
                return await self.load(domain)
            except BusUnavailable as exc:
                log.debug("cannot load %s yet (%s); retrying", domain, exc)
                await retry.pause()

    async def append(self, state: BriefState, commits: Sequence[Commit], *, sender: str) -> int:
        """Append `commits` as one entry if the log is still at `state.seq`.

        Returns the entry's stream sequence; the caller already holds the brief after
        the commits (it built them by applying each in turn). No attempt is sent once the
        earliest deadline of the proposals the commits carry has passed.

        :raises CasConflict: if another writer appended since `state.seq`.
        :raises AppendExpired: if a deadline passed before the entry could be sent.
        :raises PayloadTooLarge: if the batch does not fit in one message.
        """
        envelope = CommitEnvelope(domain=state.domain, sender=sender, body=CommitBatch(commits=tuple(commits)))
        deadlines = [commit.deadline for commit in commits if commit.deadline is not None]
        payload = envelope.encode(max_size=self._max_payload - HEADER_ROOM)
        return await self.txlog.append(
            subject(state.domain, Verb.TX),
            payload,
            batch_msg_id(commits),
            expected_last_subject_seq=state.seq,
            not_after=min(deadlines, default=None),
            headers=None if self._signer is None else self._signer.seal(payload),
        )

    async def snapshot(self, state: BriefState) -> bool:
        """Store `state` as the domain's snapshot unless the one stored is newer; returns
        whether it was stored.

        Newer is a later revision, or the same one at a lower sequence (the purge's, of
        an empty log). The write is a compare-and-set on what was read, so a write held
        back (in a client's reconnect buffer) and sent after a newer one is refused by
        the server instead of replacing it: a closed domain's purge snapshot must stay.

        :raises CasConflict: if other writers kept moving the key meanwhile.
        """
        key = kv_key(state.domain, SNAPSHOT_KEY)
        data = BriefSnapshot(seq=state.seq, brief=state.brief).encode(max_size=self._max_payload)
        labels = {_REVISION_LABEL: str(state.brief.revision), _SEQ_LABEL: str(state.seq)}
        conflicts = 0
        while True:
            entry, stored = await self._stored_position(state.domain)
            if stored is not None and _supersedes(stored, (state.brief.revision, state.seq)):
                return False
            try:
                await self.snapshots.put(key, data, expected_revision=entry.revision if entry else 0, labels=labels)
                return True
            except CasConflict:
                conflicts += 1
                if conflicts == _SNAPSHOT_ATTEMPTS:
                    raise

    async def purge(self, state: BriefState) -> None:
        """Remove a closed domain's log for good, and replace its snapshot with what
        `TaskBrief.purged` keeps, so that the domain stays closed.

        `state` must be the domain's brief at the end of its log. The snapshot is of an
        empty log (sequence 0), and goes first: whoever loads the domain between the two
        steps replays the commits still there onto a brief past them, and finds it closed.
        """
        if not await self.snapshot(BriefState(state.brief.purged(), 0)):
            raise BusError(f"a snapshot of {state.domain} newer than its close is stored; not purging its log")
        await self.txlog.purge(subject(state.domain, Verb.TX))

    def apply_trusted(self, state: BriefState, entry: LogEntry) -> BriefState:
        """`apply_entry`, as this log's readers do: with a verifier, only for an entry a
        trusted key signed; any other is skipped, logged, counted and reported."""
        unsigned = self.unsigned(entry)
        if unsigned is None:
            return self.apply_entry(state, entry)
        self.refused += 1
        log.error(
            "skipping log entry %d of %s: %s (forged, or written by a coordinator of another tenant)",
            entry.seq,
            state.domain,
            unsigned,
            extra={"domain": str(state.domain), "seq": entry.seq},
        )
        if self._on_refused is not None:
            self._on_refused(entry, unsigned)
        return BriefState(state.brief, entry.seq)

    def unsigned(self, entry: LogEntry) -> str | None:
        """Why this log's readers do not trust `entry` (with a verifier: not signed by a
        key it trusts), or None if they do."""
        if self._verifier is None or sealed_by(self._verifier, entry.payload, entry.headers):
            return None
        return "unsigned" if not entry.headers or SIGNER_HEADER not in entry.headers else "not signed by a trusted key"

    @staticmethod
    def apply_entry(state: BriefState, entry: LogEntry) -> BriefState:
        """Apply one log entry; a malformed one is skipped, identically on every replica.

        A batch is all or nothing: if one commit cannot follow the brief, the brief
        stays as before the entry, on every replica alike.
        """
        outcome = read_entry(state, entry)
        if outcome.skipped is not None:
            log.error(
                "skipping log entry %d of %s: %s",
                entry.seq,
                state.domain,
                outcome.skipped,
                extra={"domain": str(state.domain), "seq": entry.seq},
            )
        return outcome.state


@dataclass(frozen=True)
class EntryOutcome:
    """What one log entry does to a brief, as every replica applies it."""

    state: BriefState
    """The state after the entry (the same brief, at the entry's sequence, if skipped)."""
    commits: tuple[Commit, ...] = ()
    """The commits it carries that changed the brief; empty if skipped."""
    idle: tuple[Commit, ...] = ()
    """The commits it carries that changed nothing but the revision (a key already
    committed, an item gone, a closed domain), or not even that (at or below the
    brief's revision)."""
    skipped: str | None = None
    """Why every replica skips the whole entry (malformed, of another domain, after a
    gap); None if it was applied."""


def read_entry(state: BriefState, entry: LogEntry) -> EntryOutcome:
    """Apply one log entry to `state`, saying what became of each of its commits; the
    pure core of `BriefLog.apply_entry`, for tools that show the log as replicas see it."""
    try:
        envelope = _commit_envelope(entry)
        brief = state.brief
        applied: list[Commit] = []
        idle: list[Commit] = []
        for commit in envelope.body.commits:
            after = apply(brief, commit)
            # A commit that took effect is remembered by its key; one that could not only
            # moved the revision on (or, at or below it, changed nothing at all).
            took_effect = commit.key in after.applied_keys.get(commit.author, {}) and commit.key not in (
                brief.applied_keys.get(commit.author, {})
            )
            (applied if took_effect else idle).append(commit)
            brief = after
        return EntryOutcome(BriefState(brief, entry.seq, last_writer=envelope.sender), tuple(applied), tuple(idle))
    except (WireError, ReplayError) as exc:
        return EntryOutcome(BriefState(state.brief, entry.seq), skipped=" ".join(str(exc).split()))


def commits_of(entry: LogEntry) -> tuple[Commit, ...]:
    """The commits one log entry carries, for tools that inspect the log.

    :raises WireError: if the entry is not a commit envelope, or its body not a batch.
    """
    return _commit_envelope(entry).body.commits


def _commit_envelope(entry: LogEntry) -> CommitEnvelope:
    # No size limit: the server checked it when it stored the entry, against its own
    # max_payload, which may be larger than the default; a replica must not skip what
    # the coordinator applied.
    return CommitEnvelope.decode(entry.payload, max_size=None)


def _supersedes(stored: tuple[int, int], new: tuple[int, int]) -> bool:
    """Whether a stored snapshot, at (revision, sequence), is newer than `new`, which
    must then not replace it."""
    (stored_revision, stored_seq), (new_revision, new_seq) = stored, new
    if stored_revision != new_revision:
        return stored_revision > new_revision
    return stored_seq < new_seq
