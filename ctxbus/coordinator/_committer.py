"""One domain's committer: its queue, its cached brief, and everything that writes its log.

The coordinator takes proposals in and hands each to the committer of its domain. The
committer owns that domain's state (the queue, the brief as of the log entry it last
appended or read, the counts that time snapshots and folds) and is the only writer of
it: it judges each batch with `schemas.judge_batch`, appends commits and folds through
one append path (`_append`), answers, and writes snapshots only once it has checked
that its brief is the one the log gives.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from ctxbus.bus import (
    AppendExpired,
    BriefLog,
    BriefState,
    BusError,
    BusUnavailable,
    CasConflict,
    Retry,
    StreamMissing,
    span,
)
from ctxbus.coordinator._config import FOLD_AUTHOR_SUFFIX, CoordinatorConfig
from ctxbus.coordinator._metrics import Metrics
from ctxbus.schemas import (
    Commit,
    Committed,
    Domain,
    Judgement,
    PayloadTooLarge,
    Proposal,
    Rejection,
    RejectionCode,
    Reply,
    TaskBrief,
    apply,
    brief_hash,
    fold_done_op,
    judge_batch,
    render_brief,
    render_growth_bound,
)

__all__ = ["CommitterState", "DomainCommitter", "Pending"]

log = logging.getLogger(__name__)

_BACKOFF_STEP: Final = 0.002
"""Seconds of random pause per lost compare-and-set, growing with each loss."""
_PURGE_RETRY_MAX_PAUSE: Final = 30.0
"""Longest pause, in seconds, between attempts to purge a closed domain."""
_FOLD_TTL: Final = 60.0
"""Seconds a fold the committer proposes to itself may take to be appended."""


class CommitterState(StrEnum):
    """What a domain's committer is doing."""

    UNLOADED = "unloaded"
    """Waiting for work; the brief is not loaded from the log yet (the next batch loads it)."""
    IDLE = "idle"
    """Waiting for work, with the brief cached."""
    COMMITTING = "committing"
    """Judging, appending and answering a batch, or the housekeeping after one."""
    RETIRED = "retired"
    """Dropped by the coordinator (idle too long, or its domain purged): it takes no
    more proposals, and ends once the ones it holds are answered."""


@dataclass(eq=False)
class Pending:
    """A proposal waiting for its domain's next batch, and where its answer goes.

    Compared by identity: it is also what holds the proposal's place in the
    coordinator's capacity limiter until it is answered.
    """

    proposal: Proposal
    reply_to: str | None
    taken_at: float = field(default_factory=time.monotonic)
    """When the coordinator took it in, for the commit latency it reports."""


Answer = Callable[[str | None, Domain, Reply], Awaitable[None]]
"""Sends one reply to a proposer (the coordinator's `_reply`)."""


@dataclass
class _FoldBudget:
    """When the brief is counted against its budget next."""

    room: int = 0
    """Tokens the brief can still grow by, by `render_growth_bound`, before it is counted
    again (0 or less: count at the next commit)."""
    told: bool = False
    """Whether the log said that folding cannot bring the brief within its budget."""


@dataclass
class _Snapshots:
    """When the next snapshot is due, and what it is checked against."""

    since: int = 0
    """Commits since the last snapshot was written (or the brief loaded)."""
    base: BriefState | None = None
    """The last snapshot written, as the log gives it: the start of `appended`. None once
    the brief was read from the log (loaded, or brought up to date after another writer
    appended), since the log then holds entries this committer did not write: the next
    check reads the log instead."""
    appended: list[tuple[tuple[Commit, ...], int]] = field(default_factory=list)
    """The entries this committer appended since `base`: their commits and sequences."""

    def start_from(self, state: BriefState | None) -> None:
        self.base = state
        self.appended.clear()

    def record(self, commits: tuple[Commit, ...], seq: int) -> None:
        if self.base is not None:
            self.appended.append((commits, seq))

    def replayed(self) -> BriefState | None:
        """`base` with the entries appended since applied as a replica applies them, or
        None if the log has entries this committer did not write."""
        if self.base is None:
            return None
        state = self.base
        for commits, seq in self.appended:
            brief = state.brief
            for commit in commits:
                brief = apply(brief, commit)
            state = BriefState(brief, seq)
        return state


class DomainCommitter:
    """Commits one domain's proposals, batch by batch; run it with `run()`.

    Group commit: proposals that arrive while a batch is being appended wait in the
    queue, and the next batch takes them all, so a burst costs one compare-and-set
    round trip, not one per proposal; the whole batch is answered at once. A batch that
    cannot be committed gets no answer: its proposers retry with the same keys.

    While the queue is empty the committer waits to be woken, rather than ending:
    starting a task costs anyio ~45 µs, waking one ~9 µs, and on a quiet domain that is
    paid on every proposal, in its latency.
    """

    def __init__(
        self,
        domain: Domain,
        *,
        brief_log: BriefLog,
        config: CoordinatorConfig,
        metrics: Metrics,
        answer: Answer,
        release: Callable[[Pending], None],
        lost_race: Callable[[Domain, str | None], None],
    ) -> None:
        """:param answer: sends a reply to a proposer.
        :param release: called once for every proposal taken in, when it is answered or
            given up (its place in the coordinator's limiter).
        :param lost_race: told the writer that appended before us after a lost
            compare-and-set (the coordinator decides whether to pass proposals to it).
        """
        self.domain = domain
        self._log = brief_log
        self._config = config
        self._id = config.coordinator_id
        self._metrics = metrics
        self._answer_one = answer
        self._release = release
        self._lost_race = lost_race
        self._state = CommitterState.UNLOADED
        self._cache: BriefState | None = None
        self._queue: list[Pending] = []
        self._wake = anyio.Event()
        self._last_batch = 0
        self._fold = _FoldBudget()
        self._snapshots = _Snapshots()
        self._purge: anyio.CancelScope | None = None
        self._tg: TaskGroup | None = None
        self.last_used = time.monotonic()
        """When a proposal for the domain last came in (`time.monotonic`)."""

    def __repr__(self) -> str:
        revision = "-" if self._cache is None else self._cache.brief.revision
        return f"<DomainCommitter {self.domain} {self._state} rev={revision} queued={len(self._queue)}>"

    @property
    def state(self) -> CommitterState:
        """What the committer is doing now."""
        return self._state

    @property
    def brief(self) -> TaskBrief | None:
        """The cached brief, as of the log entry last appended or read; None until loaded."""
        return None if self._cache is None else self._cache.brief

    @property
    def queued(self) -> int:
        """Proposals waiting for the next batch."""
        return len(self._queue)

    @property
    def purge_pending(self) -> bool:
        """Whether the domain is closed and its purge is waiting for the grace to pass."""
        return self._purge is not None

    def touch(self) -> None:
        """Note that a proposal for the domain came in (it keeps the domain cached)."""
        self.last_used = time.monotonic()

    def submit(self, pending: Pending) -> None:
        """Queue a proposal for the next batch; its answer comes from the committer."""
        self.last_used = time.monotonic()
        self._queue.append(pending)
        self._wake.set()

    def retire(self) -> None:
        """Take no more work: the committer ends once what it holds is answered."""
        self._state = CommitterState.RETIRED
        self._wake.set()

    async def run(self) -> None:
        """Commit what is queued until retired, then return."""
        async with anyio.create_task_group() as self._tg:
            try:
                await self._commit_queued()
            finally:
                self._state = CommitterState.RETIRED
                self._tg.cancel_scope.cancel()  # a pending purge is left to the next loader

    async def _commit_queued(self) -> None:
        while True:
            if not self._queue:
                if self._state is CommitterState.RETIRED:
                    return
                self._state = CommitterState.UNLOADED if self._cache is None else CommitterState.IDLE
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if self._last_batch > 1 and self._config.batch_linger > 0:
                # Under load, those just answered are about to propose again: let them in.
                await anyio.sleep(self._config.batch_linger)
            batch = self._queue[: self._config.max_batch]
            del self._queue[: len(batch)]
            self._last_batch = len(batch)
            if self._state is not CommitterState.RETIRED:
                self._state = CommitterState.COMMITTING
            committed = 0
            try:
                with span("ctxbus.commit", {"ctxbus.domain": str(self.domain), "ctxbus.batch": len(batch)}) as current:
                    if self._cache is None:
                        await self._load()
                    committed = await self._commit_batch(batch)
                    current.set_attribute("ctxbus.commits", committed)
                    if self._cache is not None:
                        current.set_attribute("ctxbus.revision", self._cache.brief.revision)
            except Exception as exc:  # the bus, or a bug: the next batch may fare better
                self._metrics.error(f"{self.domain}: a batch of {len(batch)} failed: {exc!r}")
                log.log(
                    logging.WARNING if isinstance(exc, BusError) else logging.ERROR,
                    "%s: a batch of %d proposals failed (%r); those not answered will ask again",
                    self.domain,
                    len(batch),
                    exc,
                    exc_info=not isinstance(exc, BusError),  # a bug: show where
                )
                if isinstance(exc, StreamMissing):
                    await self._recreate_streams()
            finally:
                for pending in batch:
                    self._release(pending)
            if committed:
                await self._after_commit(committed)

    async def _recreate_streams(self) -> None:
        """Create the log and the snapshots' bucket again, after a read found one missing:
        a server that came back with an empty store would otherwise refuse every batch."""
        log.warning("a stream of the brief log is missing (a server that lost its store?); creating it again")
        try:
            await self._log.ensure()
        except BusError as exc:  # not ready yet: the next failed batch tries again
            log.warning("cannot create the brief log's streams yet: %s", exc)

    async def _load(self) -> None:
        self._reloaded(await self._log.load(self.domain))
        assert self._cache is not None
        log.info("loaded %s at revision %d", self.domain, self._cache.brief.revision)
        if self._cache.brief.is_closed and await self._log.end(self.domain):
            self._schedule_purge()  # whoever committed the close may have died since

    def _appended(self, judgement: Judgement, seq: int) -> None:
        """Take the brief after what this committer just appended at `seq`."""
        self._cache = BriefState(judgement.brief, seq)
        self._snapshots.record(judgement.commits, seq)

    def _reloaded(self, state: BriefState) -> None:
        """Take a brief read from the log."""
        self._cache = state
        self._snapshots.start_from(None)

    @property
    def _cached(self) -> BriefState:
        assert self._cache is not None, "loaded before every batch"
        return self._cache

    # -- the commit path -------------------------------------------------------------------

    async def _commit_batch(self, batch: list[Pending]) -> int:
        """Judge `batch`, append its commits and answer it; reload and redo on every CAS miss.

        Returns how many commits were appended.
        """
        proposals = [pending.proposal for pending in batch]
        for attempt in range(1, self._config.cas_retries + 1):
            judged_on = self._cached
            judgement = judge_batch(judged_on.brief, proposals, now=time.time(), committed_by=self._id)
            if not judgement.commits:
                if await self._refusals_need_proof(judged_on, judgement):
                    continue
                await self._answer(batch, judgement.replies)
                return 0
            try:
                seq = await self._append(judged_on, judgement)
            except PayloadTooLarge:
                if len(batch) == 1:
                    raise  # a single commit always fits: its fields are bounded
                half = len(batch) // 2
                return await self._commit_batch(batch[:half]) + await self._commit_batch(batch[half:])
            except AppendExpired as exc:
                # Nothing of this attempt was sent: judged again now, what is past its
                # deadline is refused, and the rest committed.
                log.info("%s: %s; judging the batch again", self.domain, exc)
                continue
            if seq is None:
                # Coordinators that lose a race to each other in step would keep losing;
                # a random pause of up to a few appends breaks the lockstep.
                await anyio.sleep(random.uniform(0, _BACKOFF_STEP * attempt))
                continue
            await self._answer(batch, judgement.replies)
            # Only now, with the answers gone: nobody but the next batch waits for it.
            self._appended(judgement, seq)
            self._fold.room -= sum(map(render_growth_bound, judgement.commits))
            self._metrics.committed(len(judgement.commits))
            self._metrics.batch(len(judgement.commits))
            return len(judgement.commits)
        self._metrics.error(f"{self.domain}: gave up after {self._config.cas_retries} conflicts")
        busy = Rejection(
            code=RejectionCode.BUSY,
            reason=f"the log of {self.domain} kept moving during {self._config.cas_retries} attempts; retry",
        )
        await self._answer(batch, [busy] * len(batch))
        return 0

    async def _refusals_need_proof(self, judged_on: BriefState, judgement: Judgement) -> bool:
        """Whether a batch with nothing to append was judged on a stale brief (it is
        then brought up to date, and the batch must be judged again).

        A successful append proves the batch was judged on the latest brief; with
        nothing to append, a refusal needs that proof some other way, or a coordinator
        that missed another's commits would refuse valid proposals. A proposal past its
        deadline is refused on any brief.
        """
        refused = any(isinstance(r, Rejection) and r.code is not RejectionCode.EXPIRED for r in judgement.replies)
        if not refused or (end := await self._log.end(self.domain)) == judged_on.seq:
            return False
        self._reloaded(await self._log.refresh(judged_on, end))
        return True

    async def _append(self, judged_on: BriefState, judgement: Judgement) -> int | None:
        """Append `judgement`'s commits as one log entry if the log is still where the
        judgement was made; returns its sequence, or None if another writer got there
        first (the cached brief is then brought up to the log's end).

        The one way this committer writes its log: batches and folds alike.
        """
        try:
            return await self._log.append(judged_on, judgement.commits, sender=self._id)
        except CasConflict as exc:
            self._metrics.cas_retry()
            self._reloaded(await self._log.refresh(judged_on, exc.actual))
            self._fold.room = 0  # others' commits grew the brief by who knows how much
            self._lost_race(self.domain, self._cached.last_writer)
            return None

    async def _answer(self, batch: list[Pending], replies: tuple[Reply, ...] | list[Reply]) -> None:
        """Answer every proposal of `batch`, and let the answers leave before the caller
        goes on: nats-py only queues them, and what follows (applying the last commit, a
        snapshot that encodes the whole brief) would hold them back."""
        now = time.monotonic()
        for pending, reply in zip(batch, replies, strict=True):
            if isinstance(reply, Committed):
                if reply.duplicate:
                    self._metrics.duplicate()
                else:
                    self._metrics.answered(now - pending.taken_at)
            elif reply.code is RejectionCode.EXPIRED:
                late = pending.proposal.deadline < time.time()
                self._metrics.expire("late" if late else "unrecognisable")
            await self._answer_one(pending.reply_to, self.domain, reply)
        await anyio.lowlevel.checkpoint()

    # -- housekeeping ------------------------------------------------------------------------

    async def _after_commit(self, count: int) -> None:
        """Housekeeping commits can trigger: folding, snapshots, purge of a closed domain.

        Each step reports its own failures and is tried again after a later commit; the
        batch that triggered them is committed and answered whatever happens here.
        """
        try:
            await self._fold_if_over_budget()
            self._snapshots.since += count
            if self._snapshots.since >= self._config.snapshot_every:
                self._snapshots.since = 0
                await self._snapshot()
            if self._cached.brief.is_closed:
                self._schedule_purge()
        except Exception:  # a bug: keep serving, and show where
            self._metrics.error(f"{self.domain}: housekeeping after a commit failed")
            log.exception("%s: housekeeping after a commit failed", self.domain)

    async def _fold_if_over_budget(self) -> None:
        """Fold old done items if the brief is over its budget: counted only once the
        commits since the last count could have used the room it left."""
        budget, count = self._config.brief_budget_tokens, self._config.count_tokens
        if budget is None or count is None or self._fold.room > 0:
            return
        state = self._cached
        tokens = count(render_brief(state.brief))
        # Down to three quarters of the budget: folding just under the line would fold
        # again a few commits later.
        op = None if tokens <= budget else fold_done_op(state.brief, budget - budget // 4, count, counted=tokens)
        if op is None:
            self._leave_room(budget, tokens)
            return
        self._fold.room = 0  # whatever happens below, count again at the next commit
        now = time.time()
        fold = Proposal(
            domain=self.domain,
            author=f"{self._id}{FOLD_AUTHOR_SUFFIX}",
            op=op,
            key=f"fold-{state.brief.revision + 1}",
            deadline=now + _FOLD_TTL,
        )
        judgement = judge_batch(state.brief, [fold], now=now, committed_by=self._id)
        if not judgement.commits:  # a fold of this revision's key was committed already
            return
        try:
            seq = await self._append(state, judgement)
        except BusError as exc:  # the brief stays over budget until the next commit folds it
            self._metrics.error(f"fold of {self.domain} failed: {exc}")
            log.warning("fold of %s failed: %s", self.domain, exc)
            return
        if seq is None:  # another writer moved on: fold after its commits, next time
            return
        self._appended(judgement, seq)
        self._metrics.committed()
        self._metrics.batch(1)
        self._snapshots.since += 1
        self._leave_room(budget, count(render_brief(judgement.brief)))

    def _leave_room(self, budget: int, tokens: int) -> None:
        """Set how far the brief, now at `tokens`, may grow before it is counted again.

        Over budget with no done item left to fold, it is kept there by what is never
        folded: it is counted again only after some growth (and the log says so, once),
        rather than folded after every completion, a log entry each time.
        """
        self._fold.room = budget - tokens
        if self._fold.room >= 0 or self._cached.brief.done:
            return  # within budget, or more to fold (a fold takes `FOLD_MAX` at most) next time
        self._fold.room = budget // 8
        if not self._fold.told:
            self._fold.told = True
            log.warning(
                "the brief of %s is %d tokens with every done item folded, over its budget of %d: "
                "pending items, decisions, rejections and constraints are never folded; give "
                "coordinators a larger budget (--brief-budget)",
                self.domain,
                tokens,
                budget,
            )

    async def _snapshot(self) -> None:
        """Store the brief as the domain's snapshot, once it is shown to be what the log
        gives: the last snapshot with the log entries since applied to it, as a replica
        applies them (from the entries this committer appended, kept in memory; or, if
        the log holds entries of another writer since, read from the log).

        A snapshot is what every joiner starts from; one written from a brief that went
        wrong in this process's cache would spread the error to all of them. A brief
        that disagrees is not stored: it is reported (an ERROR, counted in
        `Metrics.self_check_failures`) and loaded again from the log.
        """
        cached = self._cached
        try:
            truth = self._snapshots.replayed()
            if truth is None:
                base = await self._log.load_snapshot(self.domain)
                if base.seq >= cached.seq:
                    return  # one as new is stored already (another coordinator's)
                truth = await self._log.catch_up(base, until=cached.seq)
            if truth.seq != cached.seq:
                # The log no longer holds the entry the brief was built to (purged, or its
                # stream recreated): nothing to check against, and the next append, which
                # cannot find its base either, loads the domain afresh.
                log.warning(
                    "%s: the log no longer reaches sequence %d (it ends at %d); not writing a snapshot",
                    self.domain,
                    cached.seq,
                    truth.seq,
                )
                return
            if truth.brief != cached.brief:  # field by field: what the canonical hash covers
                self._metrics.self_check_failed()
                self._metrics.error(f"{self.domain}: cached brief disagrees with the log at sequence {cached.seq}")
                log.error(
                    "%s: the cached brief (rev %d, hash %s) is not what the log gives at sequence %d "
                    "(rev %d, hash %s): not writing the snapshot; loading the brief again from the log",
                    self.domain,
                    cached.brief.revision,
                    brief_hash(cached.brief)[:12],
                    cached.seq,
                    truth.brief.revision,
                    brief_hash(truth.brief)[:12],
                )
                await self._load()
                return
            await self._log.snapshot(truth)
            self._snapshots.start_from(truth)
        except PayloadTooLarge as exc:
            self._metrics.error(f"snapshot of {self.domain} failed: {exc}")
            log.error(
                "the brief of %s is too large to snapshot (%s): agents that join replay its whole log. "
                "Give coordinators a brief budget (--brief-budget) so that old done items are folded",
                self.domain,
                exc,
            )
        except BusError as exc:  # a missed snapshot only makes the next join longer
            self._metrics.error(f"snapshot of {self.domain} failed: {exc}")
            log.warning("snapshot of %s failed: %s", self.domain, exc)

    def _schedule_purge(self) -> None:
        if self._purge is None and self._tg is not None:
            self._purge = anyio.CancelScope()
            self._tg.start_soon(self._purge_later, self._purge)

    async def _purge_later(self, scope: anyio.CancelScope) -> None:
        """Purge a closed domain after the grace; retried while the bus is away, given up
        (and left to the next coordinator that loads the domain) if the bus refuses."""
        with scope:
            await anyio.sleep(self._config.close_grace)
            started = anyio.current_time()
            retry = Retry(max_pause=_PURGE_RETRY_MAX_PAUSE)
            while True:
                try:
                    state = await self._log.catch_up(self._cached)
                    await self._log.purge(state)
                    break
                except BusUnavailable as exc:
                    self._metrics.error(f"purge of {self.domain} failed: {exc}")
                    self._metrics.purge_failures += 1
                    log.warning("purge of closed domain %s failed (%s); trying again", self.domain, exc)
                    await retry.pause()
                except Exception as exc:  # refused, or a bug: keep serving, and show why
                    self._metrics.error(f"purge of {self.domain} failed: {exc!r}")
                    self._metrics.purge_failures += 1
                    log.exception("purge of closed domain %s failed; not trying again", self.domain)
                    self._purge = None
                    return
            self._metrics.purges += 1
            took = anyio.current_time() - started
            log.info(
                "purged closed domain %s (grace %.0fs; the purge took %.1fs)",
                self.domain,
                self._config.close_grace,
                took,
            )
            self.retire()
