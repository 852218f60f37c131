"""The coordinator daemon: validate proposals, order them, commit them to the log.

Coordinators are stateless: the log is the state. Any member of the queue group may
take any proposal; two members can never both commit on one base, because every append
is a compare-and-set on the domain's last log sequence. The per-domain cache here is
only a shortcut, refreshed whenever a compare-and-set says it is stale.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from bus import (
    BRIEF_BUCKET,
    LEASE_BUCKET,
    METRICS_SUBJECT,
    PRESENCE_BUCKET,
    PROPOSE_QUEUE,
    STATUS_SUBJECT,
    BriefLog,
    BriefState,
    Bucket,
    BucketConfig,
    BusError,
    BusUnavailable,
    CasConflict,
    LeaseConfig,
    Leases,
    NatsClient,
    Request,
    Retry,
    StreamMissing,
    TxLogConfig,
    Verb,
    all_domains,
    domain_of,
    event_loop_name,
    listen,
    publish,
    routed,
    serve,
    subject,
)
from bus import request as bus_request
from coordinator._config import FOLD_AUTHOR_SUFFIX, CoordinatorConfig
from coordinator._dead_letters import DeadLetters
from coordinator._metrics import Metrics
from schemas import (
    DEFAULT_MAX_PAYLOAD,
    Commit,
    Committed,
    Domain,
    Envelope,
    MessageType,
    PayloadTooLarge,
    Proposal,
    Rejection,
    RejectionCode,
    Reply,
    TaskBrief,
    UsageError,
    WireError,
    apply,
    apply_accepted,
    fold_done_op,
    parse_proposal,
    render_brief,
    render_growth_bound,
    resolve,
    triage,
)

__all__ = ["Coordinator"]

log = logging.getLogger(__name__)

_BACKOFF_STEP = 0.002
"""Seconds of random pause per lost compare-and-set, growing with each loss."""
_PURGE_RETRY_MAX_PAUSE = 30.0
"""Longest pause, in seconds, between attempts to purge a closed domain."""


@dataclass
class _Pending:
    """A proposal waiting for its domain's next batch, and where its answer goes."""

    proposal: Proposal
    reply_to: str | None
    reply: Reply | None = None


@dataclass
class _Domain:
    """One domain's cached state, and its queue of proposals waiting to be committed."""

    state: BriefState
    loaded: bool = False
    """Whether `state` was loaded from the log (until then it is an empty brief)."""
    queue: list[_Pending] = field(default_factory=list)
    wake: anyio.Event = field(default_factory=anyio.Event)
    """Set when something was queued or the domain was purged; the committer waits on it."""
    committer: bool = False
    """Whether the domain's committer task runs (parked while the queue is empty)."""
    parked: bool = False
    """Whether the committer waits for work (no batch under way)."""
    last_used: float = field(default_factory=time.monotonic)
    """When a proposal for the domain last came in (`time.monotonic`)."""
    last_batch: int = 0
    """Proposals in the last batch: more than one means the domain is busy."""
    since_snapshot: int = 0
    fold_room: int = 0
    """Tokens the brief can still grow by, by `render_growth_bound`, before its budget is
    checked again (0 or less: check at the next commit)."""
    over_budget_told: bool = False
    """Whether the log told that folding cannot bring the brief within its budget."""
    purge_scheduled: bool = False
    owner: str | None = None
    """Another coordinator this domain's proposals are passed to, see `_forward`."""


class Coordinator:
    """Serves proposals for every domain; run it with `await coordinator.run()`."""

    def __init__(self, client: NatsClient, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.id = self.config.coordinator_id
        self.metrics = Metrics()
        self._client = client
        self._log = BriefLog(
            client,
            txlog=TxLogConfig(replicas=self.config.replicas),
            snapshots=BucketConfig(name=BRIEF_BUCKET, replicas=self.config.replicas),
        )
        self._domains: dict[Domain, _Domain] = {}
        self._held = 0
        """Proposals taken in and not answered yet (queued, committing or forwarded)."""
        self._dead_letters = DeadLetters(client, sender=self.id, metrics=self.metrics)
        self._tg: TaskGroup | None = None

    def __repr__(self) -> str:
        return f"<Coordinator {self.id!r} domains={len(self._domains)} commits={self.metrics.commits}>"

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Create the streams, then serve until cancelled; reports ready via `task_status`.

        Besides the log and the snapshots, it creates the lease and presence buckets the
        agents use, with the same number of copies, once serving (`_ensure_agent_buckets`):
        an agent knows nothing of the cluster and creates a missing one with a single copy
        (which this raises, never lowers).
        """
        await self._log.ensure()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(partial(listen, self._client, all_domains(Verb.PROPOSE), self._take, queue=PROPOSE_QUEUE))
            await tg.start(partial(listen, self._client, routed(all_domains(Verb.PROPOSE), self.id), self._take))
            await tg.start(partial(serve, self._client, STATUS_SUBJECT, self._on_status))
            await tg.start(partial(serve, self._client, METRICS_SUBJECT, self._on_metrics))
            tg.start_soon(self._evict_idle_domains)
            tg.start_soon(self._ensure_agent_buckets)
            log.info("coordinator %s serving proposals (event loop: %s)", self.id, event_loop_name())
            task_status.started()

    async def _ensure_agent_buckets(self) -> None:
        """Create the lease and presence buckets with this coordinator's copies, in the
        background, retrying until done. Not worth delaying proposals for: agents create
        a missing one themselves, and raising a bucket's copies on a busy cluster can
        outlast a request."""
        replicas = self.config.replicas
        leases = Leases(self._client, LeaseConfig(replicas=replicas))
        presence = Bucket(self._client, BucketConfig(name=PRESENCE_BUCKET, replicas=replicas))
        for name, ensure in ((LEASE_BUCKET, leases.ensure), (PRESENCE_BUCKET, presence.ensure)):
            retry, told = Retry(max_pause=5.0), False
            while True:
                try:
                    await ensure()
                    break
                except BusError as exc:
                    log.log(logging.DEBUG if told else logging.WARNING, "cannot create %s yet: %s", name, exc)
                    told = True
                    await retry.pause()

    # -- proposals -----------------------------------------------------------------------

    async def _take(self, request: Request) -> None:
        """Take one proposal in: answer it at once if it can be, else queue it.

        Runs inside the subscription, one message at a time, so nothing here waits on the
        log: the domain's committer task does that for everything queued. A proposal
        therefore costs no task of its own, which under load is a good part of the
        coordinator's CPU.
        """
        domain = domain_of(request.subject)
        if domain is None:
            await self._dead_letters.send(request, None, "bad_subject", f"{request.subject!r} names no valid domain")
            return
        cached = self._domains.get(domain)
        if cached is not None:
            cached.last_used = time.monotonic()
        if self._held >= self.config.max_in_flight:
            busy = f"coordinator {self.id} holds {self._held} proposals already; retry"
            await self._reply(request.reply, domain, Rejection(code=RejectionCode.BUSY, reason=busy))
            return
        if cached is not None and cached.owner is not None:
            self._held += 1
            self._task_group.start_soon(self._forward, request, cached, cached.owner)
            return
        try:
            envelope = Envelope.decode(request.data, max_size=self._client.max_payload or DEFAULT_MAX_PAYLOAD)
        except WireError as exc:
            await self._dead_letters.send(request, domain, type(exc).__name__, str(exc))
            await self._reply(request.reply, domain, Rejection.clipped(RejectionCode.INVALID_OP, str(exc)))
            return
        if envelope.type is not MessageType.PROPOSAL:
            reason = f"a {envelope.type} envelope is not a proposal"
            await self._dead_letters.send(request, domain, "wrong_type", reason)
            await self._reply(request.reply, domain, Rejection(code=RejectionCode.INVALID_OP, reason=reason))
            return
        if envelope.domain != domain:
            rejection = Rejection(
                code=RejectionCode.WRONG_DOMAIN,
                reason=f"the envelope is for domain {envelope.domain} but was sent on {request.subject}",
            )
            await self._reply(request.reply, domain, rejection)
            return
        parsed = parse_proposal(envelope.body)
        if isinstance(parsed, Rejection):
            await self._reply(request.reply, domain, parsed)
            return
        if cached is None:
            cached = self._domains[domain] = _Domain(BriefState(TaskBrief(domain=domain), 0))
        self._held += 1
        cached.queue.append(_Pending(parsed, request.reply))
        if not cached.committer:
            cached.committer = True
            self._task_group.start_soon(self._commit_queued, cached)
        cached.wake.set()

    async def _forward(self, request: Request, cached: _Domain, owner: str) -> None:
        """Pass a proposal to the domain's owner and relay its answer; commit it here if
        the owner does not answer.

        Two coordinators taking turns on one domain would lose every other append to each
        other; passing proposals to the one that won keeps a domain's commits in one
        place, so they batch. Any coordinator can still commit: an owner that does not
        answer is forgotten and the proposal is committed here.

        `owner` is the one known when the proposal was taken in: by the time this task
        runs, another forward may have forgotten it.
        """
        target = routed(subject(cached.state.domain, Verb.PROPOSE), owner)
        try:
            try:
                answer: bytes | None = await bus_request(
                    self._client, target, request.data, timeout=self.config.forward_timeout
                )
            except BusUnavailable as exc:
                answer = None
                if cached.owner == owner:
                    log.info("%s: owner %s did not answer (%s); committing here", cached.state.domain, owner, exc)
                    cached.owner = None
            finally:
                self._held -= 1
            if answer is None:
                await self._take(request)
            else:
                self.metrics.forwarded += 1
                if request.reply:
                    await self._send(request.reply, answer)
        except Exception:  # a task of the coordinator's own: one proposal must not stop it
            log.exception("%s: passing a proposal to %s failed", cached.state.domain, owner)

    async def _commit_queued(self, cached: _Domain) -> None:
        """The domain's committer: commit what is queued, batch by batch, for as long as
        the domain is cached.

        Group commit: proposals that arrive while a batch is being appended wait in the
        queue, and the next batch takes them all, so a burst costs one compare-and-set
        round trip, not one per proposal; the whole batch is answered at once. A batch
        that cannot be committed gets no answer: its proposers retry with the same keys.

        While the queue is empty the committer waits for `_take` to wake it, rather than
        ending: starting a task costs anyio ~45 µs, waking one ~9 µs, and on a quiet
        domain that is paid on every proposal, in its latency.
        """
        try:
            while True:
                if not cached.queue:
                    if self._domains.get(cached.state.domain) is not cached:
                        return  # purged or evicted: the domain is no longer cached
                    cached.wake = anyio.Event()
                    cached.parked = True
                    try:
                        await cached.wake.wait()
                    finally:
                        cached.parked = False
                    continue
                if cached.last_batch > 1 and self.config.batch_linger > 0:
                    # Under load, those just answered are about to propose again: let them in.
                    await anyio.sleep(self.config.batch_linger)
                batch = cached.queue[: self.config.max_batch]
                del cached.queue[: len(batch)]
                cached.last_batch = len(batch)
                committed = 0
                try:
                    if not cached.loaded:
                        await self._load(cached)
                    committed = await self._commit_batch(cached, batch)
                except Exception as exc:  # the bus, or a bug: the next batch may fare better
                    self.metrics.error(f"{cached.state.domain}: a batch of {len(batch)} failed: {exc!r}")
                    log.log(
                        logging.WARNING if isinstance(exc, BusError) else logging.ERROR,
                        "%s: a batch of %d proposals failed (%r); those not answered will ask again",
                        cached.state.domain,
                        len(batch),
                        exc,
                        exc_info=not isinstance(exc, BusError),  # a bug: show where
                    )
                    if isinstance(exc, StreamMissing):
                        await self._recreate_streams()
                finally:
                    self._held -= len(batch)
                if committed:
                    await self._after_commit(cached, committed)
        finally:
            cached.committer = False

    async def _recreate_streams(self) -> None:
        """Create the log and the snapshots' bucket again, after a read found one missing:
        a server that came back with an empty store would otherwise refuse every batch."""
        log.warning("a stream of the brief log is missing (a server that lost its store?); creating it again")
        try:
            await self._log.ensure()
        except BusError as exc:  # not ready yet: the next failed batch tries again
            log.warning("cannot create the brief log's streams yet: %s", exc)

    async def _load(self, cached: _Domain) -> None:
        cached.state = await self._log.load(cached.state.domain)
        cached.loaded = True
        log.info("loaded %s at revision %d", cached.state.domain, cached.state.brief.revision)
        if cached.state.brief.is_closed and await self._log.end(cached.state.domain):
            self._schedule_purge(cached)  # whoever committed the close may have died since

    async def _commit_batch(self, cached: _Domain, batch: list[_Pending]) -> int:
        """Judge `batch` in order, append it and answer it; reload and redo on every CAS miss.

        Returns how many commits were appended. The brief after the batch's last commit
        is worked out only once the answers have left: nobody waits for it but the next
        batch.
        """
        for attempt in range(1, self.config.cas_retries + 1):
            state = cached.state
            brief, commits = self._judge(state.brief, batch)
            if not commits:
                # A successful append proves the batch was judged on the latest brief;
                # with nothing to append, a refusal needs that proof some other way, or a
                # coordinator that missed another's commits would refuse valid proposals.
                refused = any(isinstance(pending.reply, Rejection) for pending in batch)
                if refused and (end := await self._log.end(state.domain)) != state.seq:
                    cached.state = await self._log.refresh(state, end)
                    continue
                await self._answer(cached.state.domain, batch)
                return 0
            try:
                seq = await self._log.append(state, commits, sender=self.id)
            except CasConflict as exc:
                self.metrics.cas_retries += 1
                cached.state = await self._log.refresh(state, exc.actual)
                cached.fold_room = 0  # others' commits grew the brief by who knows how much
                self._learn_owner(cached)
                # Coordinators that lose a race to each other in step would keep losing;
                # a random pause of up to a few appends breaks the lockstep.
                await anyio.sleep(random.uniform(0, _BACKOFF_STEP * attempt))
                continue
            except PayloadTooLarge:
                if len(batch) == 1:
                    raise  # a single commit always fits: its fields are bounded
                half = len(batch) // 2
                return await self._commit_batch(cached, batch[:half]) + await self._commit_batch(cached, batch[half:])
            await self._answer(cached.state.domain, batch)
            cached.state = BriefState(apply_accepted(brief, commits[-1]), seq)
            cached.fold_room -= sum(map(render_growth_bound, commits))
            for _commit in commits:
                self.metrics.committed()
            return len(commits)
        self.metrics.error(f"{cached.state.domain}: gave up after {self.config.cas_retries} conflicts")
        busy = Rejection(
            code=RejectionCode.BUSY,
            reason=f"the log of {cached.state.domain} kept moving during {self.config.cas_retries} attempts; retry",
        )
        for pending in batch:
            pending.reply = busy
        await self._answer(cached.state.domain, batch)
        return 0

    def _judge(self, brief: TaskBrief, batch: list[_Pending]) -> tuple[TaskBrief, list[Commit]]:
        """Set each proposal's reply, judging each on the brief after the ones before it.

        Returns the commits, and the brief after all of them but the last: the caller
        applies that one once the batch is answered.
        """
        commits: list[Commit] = []
        for pending in batch:
            if commits and commits[-1].revision > brief.revision:
                brief = apply_accepted(brief, commits[-1])
            verdict = triage(brief, pending.proposal)
            if verdict is None:
                commit = Commit.of(
                    pending.proposal,
                    revision=brief.revision + 1,
                    ts=time.time(),
                    committed_by=self.id,
                    resolved=resolve(brief, pending.proposal.op),
                )
                commits.append(commit)
                verdict = Committed(revision=commit.revision)
            pending.reply = verdict
        return brief, commits

    async def _answer(self, domain: Domain, batch: list[_Pending]) -> None:
        """Answer every proposal of `batch`, and let the answers leave before the caller
        goes on: nats-py only queues them, and what follows (applying the last commit, a
        snapshot that encodes the whole brief) would hold them back."""
        for pending in batch:
            assert pending.reply is not None
            if isinstance(pending.reply, Committed) and pending.reply.duplicate:
                self.metrics.duplicates += 1
            await self._reply(pending.reply_to, domain, pending.reply)
        await anyio.lowlevel.checkpoint()

    def _learn_owner(self, cached: _Domain) -> None:
        """After losing an append: pass this domain's proposals to the winner from now on.

        Only to a winner that ranks before us for this domain, so that of two contenders
        exactly one defers, and a proposal passed on and on reaches an end. The rank is
        per domain, so busy domains spread over the coordinators rather than all going
        to one of them.
        """
        winner = cached.state.last_writer
        domain = cached.state.domain
        if winner is not None and winner != cached.owner and _rank(domain, winner) < _rank(domain, self.id):
            cached.owner = winner
            log.info("%s: %s commits here too; passing its proposals to it", cached.state.domain, winner)

    async def _after_commit(self, cached: _Domain, count: int) -> None:
        """Housekeeping commits can trigger: folding, snapshots, purge of a closed domain.

        Each step reports its own failures and is tried again after a later commit; the
        batch that triggered them is committed and answered whatever happens here.
        """
        try:
            await self._fold_if_over_budget(cached)
            cached.since_snapshot += count
            if cached.since_snapshot >= self.config.snapshot_every:
                cached.since_snapshot = 0
                await self._snapshot(cached.state)
            if cached.state.brief.is_closed:
                self._schedule_purge(cached)
        except Exception:  # a bug: keep serving, and show where
            self.metrics.error(f"{cached.state.domain}: housekeeping after a commit failed")
            log.exception("%s: housekeeping after a commit failed", cached.state.domain)

    async def _fold_if_over_budget(self, cached: _Domain) -> None:
        """Fold old done items if the brief is over its budget: counted only once the
        commits since the last count could have used the room it left."""
        budget, count = self.config.brief_budget_tokens, self.config.count_tokens
        if budget is None or count is None or cached.fold_room > 0:
            return
        tokens = count(render_brief(cached.state.brief))
        # Down to three quarters of the budget: folding just under the line would fold
        # again a few commits later.
        op = None if tokens <= budget else fold_done_op(cached.state.brief, budget - budget // 4, count, counted=tokens)
        if op is None:
            self._leave_room(cached, budget, tokens)
            return
        cached.fold_room = 0  # whatever happens below, count again at the next commit
        proposal = Proposal(
            domain=cached.state.domain,
            author=f"{self.id}{FOLD_AUTHOR_SUFFIX}",
            op=op,
            key=f"fold-{cached.state.brief.revision + 1}",
        )
        commit = Commit.of(proposal, revision=cached.state.brief.revision + 1, ts=time.time(), committed_by=self.id)
        try:
            try:
                seq = await self._log.append(cached.state, [commit], sender=self.id)
            except CasConflict as exc:  # another writer folds or moves on: fold after its commit
                cached.state = await self._log.refresh(cached.state, exc.actual)
                return
            cached.state = BriefState(apply(cached.state.brief, commit), seq)
            self.metrics.committed()
        except BusError as exc:  # the brief stays over budget until the next commit folds it
            self.metrics.error(f"fold of {cached.state.domain} failed: {exc}")
            log.warning("fold of %s failed: %s", cached.state.domain, exc)
            return
        self._leave_room(cached, budget, count(render_brief(cached.state.brief)))

    def _leave_room(self, cached: _Domain, budget: int, tokens: int) -> None:
        """Set how far the brief, now at `tokens`, may grow before it is counted again.

        Over budget with no done item left to fold, it is kept there by what is never
        folded: it is counted again only after some growth (and the log says so, once),
        rather than folded after every completion, a log entry each time.
        """
        cached.fold_room = budget - tokens
        if cached.fold_room >= 0 or cached.state.brief.done:
            return  # within budget, or more to fold (a fold takes `FOLD_MAX` at most) next time
        cached.fold_room = budget // 8
        if not cached.over_budget_told:
            cached.over_budget_told = True
            log.warning(
                "the brief of %s is %d tokens with every done item folded, over its budget of %d: "
                "pending items, decisions, rejections and constraints are never folded; give "
                "coordinators a larger budget (--brief-budget)",
                cached.state.domain,
                tokens,
                budget,
            )

    async def _snapshot(self, state: BriefState) -> None:
        try:
            await self._log.snapshot(state)
        except PayloadTooLarge as exc:
            self.metrics.error(f"snapshot of {state.domain} failed: {exc}")
            log.error(
                "the brief of %s is too large to snapshot (%s): agents that join replay its whole log. "
                "Give coordinators a brief budget (--brief-budget) so that old done items are folded",
                state.domain,
                exc,
            )
        except BusError as exc:  # a missed snapshot only makes the next join longer
            self.metrics.error(f"snapshot of {state.domain} failed: {exc}")
            log.warning("snapshot of %s failed: %s", state.domain, exc)

    def _schedule_purge(self, cached: _Domain) -> None:
        if not cached.purge_scheduled:
            cached.purge_scheduled = True
            self._task_group.start_soon(self._purge_later, cached)

    async def _purge_later(self, cached: _Domain) -> None:
        """Purge a closed domain after the grace; retried while the bus is away, given up
        (and left to the next coordinator that loads the domain) if the bus refuses."""
        domain = cached.state.domain
        await anyio.sleep(self.config.close_grace)
        started = anyio.current_time()
        retry = Retry(max_pause=_PURGE_RETRY_MAX_PAUSE)
        while True:
            try:
                state = await self._log.catch_up(cached.state)
                await self._log.purge(state)
                break
            except BusUnavailable as exc:
                self.metrics.error(f"purge of {domain} failed: {exc}")
                log.warning("purge of closed domain %s failed (%s); trying again", domain, exc)
                await retry.pause()
            except Exception as exc:  # refused, or a bug: keep serving, and show why
                self.metrics.error(f"purge of {domain} failed: {exc!r}")
                log.exception("purge of closed domain %s failed; not trying again", domain)
                cached.purge_scheduled = False
                return
        if self._domains.get(domain) is cached:
            del self._domains[domain]
            cached.wake.set()  # its committer ends once the queue is empty
        took = anyio.current_time() - started
        log.info("purged closed domain %s (grace %.0fs; the purge took %.1fs)", domain, self.config.close_grace, took)

    async def _evict_idle_domains(self) -> None:
        """Drop domains idle for `idle_evict` seconds from the cache, so that a long-lived
        coordinator holds the briefs of active domains only, not of every one it served."""
        while True:
            await anyio.sleep(self.config.idle_evict / 2)
            cutoff = time.monotonic() - self.config.idle_evict
            idle = [
                domain
                for domain, cached in self._domains.items()
                if cached.last_used < cutoff
                and not cached.queue
                and (cached.parked or not cached.committer)
                and not cached.purge_scheduled  # its purge ends it soon anyway
            ]
            for domain in idle:
                self._domains.pop(domain).wake.set()  # a parked committer ends
            if idle:
                log.info("dropped %d idle domains from the cache; %d remain", len(idle), len(self._domains))

    async def _reply(self, reply_to: str | None, domain: Domain, reply: Reply) -> None:
        if isinstance(reply, Rejection):
            self.metrics.rejected(reply.code)
        if reply_to:
            envelope = Envelope(
                type=MessageType.REPLY, domain=domain, sender=self.id, body=reply.model_dump(mode="json")
            )
            await self._send(reply_to, envelope.encode())

    async def _send(self, reply_to: str, data: bytes) -> None:
        try:
            await publish(self._client, reply_to, data)
        except BusError as exc:  # the proposer asks again, with the same key
            log.debug("could not answer on %s: %s", reply_to, exc)

    @property
    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise UsageError("the coordinator is not running; start run() first")
        return self._tg

    # -- status --------------------------------------------------------------------------

    async def _on_status(self, request: Request) -> bytes:
        """A `CoordinatorStatus` as JSON, which operators can read with `nats req` too."""
        domains = sorted(str(d) for d in self._domains)
        return self.metrics.status(coordinator_id=self.id, domains=domains).encode()

    async def _on_metrics(self, request: Request) -> bytes:
        return self.metrics.prometheus(coordinator_id=self.id, domains=len(self._domains)).encode()


def _rank(domain: Domain, coordinator_id: str) -> bytes:
    """A coordinator's place in the order of who defers to whom on `domain`."""
    return hashlib.sha256(f"{domain}\x1f{coordinator_id}".encode()).digest()
