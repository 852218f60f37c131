"""The coordinator daemon: take proposals in, route them, and serve status.

Coordinators are stateless: the log is the state. Any member of the queue group may
take any proposal; two members can never both commit on one base, because every append
is a compare-and-set on the domain's last log sequence. Each cached domain has its own
committer (`coordinator._committer`), which owns that domain's state; this class keeps
intake (decoding and answering what cannot be queued), routing (which coordinator a
domain's proposals go to) and status.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from functools import partial
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ctxbus.bus import (
    BRIEF_BUCKET,
    COORDINATORS_BUCKET,
    LEASE_BUCKET,
    METRICS_SUBJECT,
    PRESENCE_BUCKET,
    PROPOSE_QUEUE,
    STATUS_SUBJECT,
    BriefLog,
    Bucket,
    BucketConfig,
    BusError,
    BusUnavailable,
    LeaseConfig,
    Leases,
    LogEntry,
    NatsClient,
    Request,
    Retry,
    TxLogConfig,
    Verb,
    all_domains,
    coordinator_key,
    domain_of,
    event_loop_name,
    listen,
    may_pass,
    publish,
    routed,
    serve,
    subject,
)
from ctxbus.bus import request as bus_request
from ctxbus.coordinator._committer import CommitterState, DomainCommitter, Pending
from ctxbus.coordinator._config import CoordinatorConfig
from ctxbus.coordinator._dead_letters import DeadLetters
from ctxbus.coordinator._metrics import Metrics
from ctxbus.schemas import (
    DEFAULT_MAX_PAYLOAD,
    BodyInvalid,
    CoordinatorPresence,
    Domain,
    Presence,
    Proposal,
    ProposalEnvelope,
    Rejection,
    RejectionCode,
    Reply,
    ReplyEnvelope,
    UsageError,
    WireError,
    WrongMessageType,
    refuse_agent_proposal,
)

__all__ = ["Coordinator"]

log = logging.getLogger(__name__)

_HEARTBEAT_TTL: Final = 600
"""Seconds a heartbeat is kept after it was written: so long, a coordinator that stopped
beating shows as not answering (frozen or killed) rather than vanishing."""
_GOODBYE_TTL: Final = 60
"""Seconds the heartbeat a coordinator writes on a clean stop is kept."""
_GOODBYE_TIMEOUT: Final = 2.0
"""Seconds a stopping coordinator waits to say so."""
_START_PATIENCE: Final = 30.0
"""Seconds a starting coordinator waits for the bus to accept the log's streams."""


class _Forwarded:
    """A proposal passed on to another coordinator: holds its place in the limiter."""

    __slots__ = ()


class Coordinator:
    """Serves proposals for every domain; run it with `await coordinator.run()`."""

    def __init__(self, client: NatsClient, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.id = self.config.coordinator_id
        self.metrics = Metrics(coordinator_id=self.id)
        self._client = client
        self._log = BriefLog(
            client,
            txlog=TxLogConfig(replicas=self.config.replicas),
            snapshots=BucketConfig(name=BRIEF_BUCKET, replicas=self.config.replicas),
            signer=self.config.signer,
            verifier=self.config.verifier,
            on_refused=self._refused_entry,
            on_trouble=self.metrics.error,
        )
        self._committers: dict[Domain, DomainCommitter] = {}
        self._owners: dict[Domain, str] = {}
        """Domains whose proposals go to another coordinator, see `_forward`."""
        self._limiter = anyio.CapacityLimiter(self.config.max_in_flight)
        """One token per proposal taken in and not answered yet (queued, committing or
        forwarded): beyond `max_in_flight`, proposals are answered `busy`."""
        self._dead_letters = DeadLetters(client, sender=self.id, metrics=self.metrics)
        self._tg: TaskGroup | None = None

    def __repr__(self) -> str:
        return f"<Coordinator {self.id!r} domains={len(self._committers)} commits={self.metrics.commits}>"

    def committer(self, domain: Domain | str) -> DomainCommitter | None:
        """The committer of `domain` while the domain is cached, for its state and brief."""
        return self._committers.get(Domain.of(domain))

    @property
    def in_flight(self) -> int:
        """Proposals taken in and not answered yet."""
        return int(self._limiter.borrowed_tokens)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Create the streams, then serve until cancelled; reports ready via `task_status`.

        Besides the log and the snapshots, it creates the lease and presence buckets the
        agents use, with the same number of copies, once serving (`_ensure_agent_buckets`):
        an agent knows nothing of the cluster and creates a missing one with a single copy
        (which this raises, never lowers).
        """
        await self._create_log()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(partial(listen, self._client, all_domains(Verb.PROPOSE), self._take, queue=PROPOSE_QUEUE))
            await tg.start(partial(listen, self._client, routed(all_domains(Verb.PROPOSE), self.id), self._take))
            await tg.start(partial(serve, self._client, STATUS_SUBJECT, self._on_status))
            await tg.start(partial(serve, self._client, METRICS_SUBJECT, self._on_metrics))
            tg.start_soon(self._evict_idle_domains)
            tg.start_soon(self._ensure_agent_buckets)
            await tg.start(self._beat)
            tg.start_soon(self._scan_agents)
            log.info("coordinator %s serving proposals (event loop: %s)", self.id, event_loop_name())
            task_status.started()

    async def _create_log(self) -> None:
        """Create the log's streams, waiting up to `_START_PATIENCE` for a bus that cannot
        yet: a cluster that has just elected its metadata leader may not have heard from
        every node, and a loaded one answers late. What waiting cannot mend (no JetStream,
        a config the server refuses) is raised at once.

        :raises BusError: if the streams cannot be created, or not within the patience.
        """
        retry, told = Retry(_START_PATIENCE, max_pause=1.0), False
        while True:
            try:
                await self._log.ensure()
                return
            except BusError as exc:
                if not may_pass(exc) or retry.left() <= 0:
                    raise
                if not told:
                    log.warning("cannot create the brief log yet (%s); trying again for %gs", exc, _START_PATIENCE)
                    told = True
                await retry.pause()

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

    async def _beat(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Say, every `heartbeat` seconds, that this coordinator serves; on a clean stop,
        that it stopped. A heartbeat lives long after it stops coming (`_HEARTBEAT_TTL`),
        so `ctxbus status` can tell a coordinator that stopped answering (frozen, or
        killed) from one that stopped."""
        bucket = Bucket(self._client, BucketConfig(name=COORDINATORS_BUCKET, replicas=self.config.replicas))
        key = coordinator_key(self.id)
        me = CoordinatorPresence(
            coordinator=self.id,
            started=self.metrics.started,
            interval=self.config.heartbeat,
            pid=os.getpid(),
            host=socket.gethostname(),
        )
        try:
            await bucket.ensure()
        except BusError as exc:  # the heartbeats wait for the bus; serving does not
            log.warning("cannot create %s yet: %s", COORDINATORS_BUCKET, exc)
        task_status.started()
        told = False
        try:
            while True:
                try:
                    await bucket.put(key, me.model_copy(update={"at": time.time()}).encode(), ttl=_HEARTBEAT_TTL)
                    told = False
                except BusError as exc:
                    log.log(logging.DEBUG if told else logging.WARNING, "heartbeat of %s skipped: %s", self.id, exc)
                    told = True
                await anyio.sleep(self.config.heartbeat)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_GOODBYE_TIMEOUT):
                with contextlib.suppress(BusError):
                    stopped = me.model_copy(update={"at": time.time(), "stopped": True})
                    await bucket.put(key, stopped.encode(), ttl=_GOODBYE_TTL)

    async def _scan_agents(self) -> None:
        """Read the agents' heartbeats every `agent_scan` seconds, for the metrics."""
        presence = Bucket(self._client, BucketConfig(name=PRESENCE_BUCKET))
        while True:
            try:
                found = []
                for entry in await presence.entries():
                    domain, _, _ = entry.key.rpartition(".")
                    if entry.value is not None:
                        with contextlib.suppress(WireError):
                            found.append((domain.replace(".", "/"), Presence.decode(entry.value)))
                self.metrics.set_agents(found)
            except BusError as exc:
                log.debug("cannot read the agents' heartbeats: %s", exc)
            self.metrics.set_domains(len(self._committers))
            await anyio.sleep(self.config.agent_scan)

    # -- intake and routing ------------------------------------------------------------------

    async def _take(self, request: Request) -> None:
        """Take one proposal in: answer it at once if it can be, else queue it with its
        domain's committer (or pass it to the domain's owner).

        Runs inside the subscription, one message at a time, so nothing here waits on the
        log: the domain's committer does that for everything queued. A proposal
        therefore costs no task of its own, which under load is a good part of the
        coordinator's CPU.
        """
        domain = domain_of(request.subject)
        if domain is None:
            await self._dead_letters.send(request, None, "bad_subject", f"{request.subject!r} names no valid domain")
            return
        committer = self._committers.get(domain)
        if committer is not None:
            committer.touch()
        owner = self._owners.get(domain)
        if owner is not None:
            ticket = _Forwarded()
            if await self._admit(ticket, request, domain):
                self._task_group.start_soon(self._forward, request, domain, owner, ticket)
            return
        proposal = await self._decode(request, domain)
        if proposal is None:
            return
        pending = Pending(proposal, request.reply)
        if await self._admit(pending, request, domain):
            self._committer_for(domain).submit(pending)

    async def _admit(self, ticket: object, request: Request, domain: Domain) -> bool:
        """Give `ticket` a place in the limiter, or answer `busy` if there is none."""
        try:
            # Not `acquire_on_behalf_of`: a free token costs no trip through the event loop.
            self._limiter.acquire_on_behalf_of_nowait(ticket)
        except anyio.WouldBlock:
            busy = f"coordinator {self.id} holds {self.in_flight} proposals already; retry"
            await self._reply(request.reply, domain, Rejection(code=RejectionCode.BUSY, reason=busy))
            return False
        return True

    async def _decode(self, request: Request, domain: Domain) -> Proposal | None:
        """The proposal `request` carries, or None once it is answered (and, if it is no
        proposal envelope at all, dead-lettered)."""
        try:
            envelope = ProposalEnvelope.decode(request.data, max_size=self._client.max_payload or DEFAULT_MAX_PAYLOAD)
        except BodyInvalid as exc:  # the proposer's mistake: answered, not dead-lettered
            await self._reply(request.reply, domain, Rejection.from_validation_error(exc.validation_error, skip=1))
            return None
        except WrongMessageType as exc:
            await self._dead_letters.send(request, domain, "wrong_type", str(exc))
            await self._reply(request.reply, domain, Rejection(code=RejectionCode.INVALID_OP, reason=str(exc)))
            return None
        except WireError as exc:
            await self._dead_letters.send(request, domain, type(exc).__name__, str(exc))
            await self._reply(request.reply, domain, Rejection.clipped(RejectionCode.INVALID_OP, str(exc)))
            return None
        if envelope.domain != domain:
            rejection = Rejection(
                code=RejectionCode.WRONG_DOMAIN,
                reason=f"the envelope is for domain {envelope.domain} but was sent on {request.subject}",
            )
            await self._reply(request.reply, domain, rejection)
            return None
        refused = refuse_agent_proposal(envelope.body)
        if refused is not None:
            await self._reply(request.reply, domain, refused)
            return None
        return envelope.body

    def _committer_for(self, domain: Domain) -> DomainCommitter:
        """The domain's committer, started if the domain is not cached (or its last
        committer retired)."""
        committer = self._committers.get(domain)
        if committer is None or committer.state is CommitterState.RETIRED:
            committer = self._committers[domain] = DomainCommitter(
                domain,
                brief_log=self._log,
                config=self.config,
                metrics=self.metrics,
                answer=self._reply,
                release=self._limiter.release_on_behalf_of,
                lost_race=self._learn_owner,
            )
            self._task_group.start_soon(self._run_committer, committer)
        return committer

    async def _run_committer(self, committer: DomainCommitter) -> None:
        try:
            await committer.run()
        finally:
            if self._committers.get(committer.domain) is committer:
                del self._committers[committer.domain]
                self._owners.pop(committer.domain, None)

    async def _forward(self, request: Request, domain: Domain, owner: str, ticket: _Forwarded) -> None:
        """Pass a proposal to the domain's owner and relay its answer; commit it here if
        the owner does not answer.

        Two coordinators taking turns on one domain would lose every other append to each
        other; passing proposals to the one that won keeps a domain's commits in one
        place, so they batch. Any coordinator can still commit: an owner that does not
        answer is forgotten and the proposal is committed here.

        `owner` is the one known when the proposal was taken in: by the time this task
        runs, another forward may have forgotten it.
        """
        target = routed(subject(domain, Verb.PROPOSE), owner)
        try:
            try:
                answer: bytes | None = await bus_request(
                    self._client,
                    target,
                    request.data,
                    timeout=self.config.forward_timeout,
                )
            except BusUnavailable as exc:
                answer = None
                if self._owners.get(domain) == owner:
                    log.info("%s: owner %s did not answer (%s); committing here", domain, owner, exc)
                    del self._owners[domain]
            finally:
                self._limiter.release_on_behalf_of(ticket)
            if answer is None:
                await self._take(request)
            else:
                self.metrics.forward()
                if request.reply:
                    await self._send(request.reply, answer)
        except Exception:  # a task of the coordinator's own: one proposal must not stop it
            log.exception("%s: passing a proposal to %s failed", domain, owner)

    def _learn_owner(self, domain: Domain, winner: str | None) -> None:
        """After losing an append: pass this domain's proposals to the winner from now on.

        Only to a winner that ranks before us for this domain, so that of two contenders
        exactly one defers, and a proposal passed on and on reaches an end. The rank is
        per domain, so busy domains spread over the coordinators rather than all going
        to one of them.
        """
        if winner is None or winner == self._owners.get(domain) or domain not in self._committers:
            return
        if _rank(domain, winner) < _rank(domain, self.id):
            self._owners[domain] = winner
            log.info("%s: %s commits here too; passing its proposals to it", domain, winner)

    async def _evict_idle_domains(self) -> None:
        """Drop domains idle for `idle_evict` seconds from the cache, so that a long-lived
        coordinator holds the briefs of active domains only, not of every one it served."""
        while True:
            await anyio.sleep(self.config.idle_evict / 2)
            cutoff = time.monotonic() - self.config.idle_evict
            idle = [
                domain
                for domain, committer in self._committers.items()
                if committer.last_used < cutoff
                and committer.state in (CommitterState.IDLE, CommitterState.UNLOADED)
                and not committer.queued
                and not committer.purge_pending  # its purge ends it soon anyway
            ]
            for domain in idle:
                self._committers.pop(domain).retire()
                self._owners.pop(domain, None)
            if idle:
                log.info("dropped %d idle domains from the cache; %d remain", len(idle), len(self._committers))

    async def _reply(self, reply_to: str | None, domain: Domain, reply: Reply) -> None:
        if isinstance(reply, Rejection):
            self.metrics.rejected(reply.code)
        if reply_to:
            await self._send(reply_to, ReplyEnvelope(domain=domain, sender=self.id, body=reply).encode())

    def _refused_entry(self, entry: LogEntry, reason: str) -> None:
        """A log entry no trusted key signed: dead-lettered, for an operator to look at."""
        domain = domain_of(entry.subject)
        request = Request(subject=entry.subject, data=entry.payload, reply=None)
        self._task_group.start_soon(self._dead_letters.send, request, domain, "unsigned_entry", reason)

    async def _send(self, reply_to: str, data: bytes) -> None:
        try:
            # Unsigned: the server already lets only coordinators answer, and a signature here
            # cost 15 % of the commit median (bench/brief.py); log entries stay signed.
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
        domains = sorted(str(d) for d in self._committers)
        return self.metrics.status(domains=domains).encode()

    async def _on_metrics(self, request: Request) -> bytes:
        self.metrics.set_domains(len(self._committers))
        return self.metrics.prometheus().encode()


def _rank(domain: Domain, coordinator_id: str) -> bytes:
    """A coordinator's place in the order of who defers to whom on `domain`."""
    return hashlib.sha256(f"{domain}\x1f{coordinator_id}".encode()).digest()
