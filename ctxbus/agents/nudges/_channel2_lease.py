"""At most one Channel 2 message per tail cycle, however many processes may send it.

Every process of an agent that reaches the Channel 2 band races for one bus lease per
agent and cycle, whose value walks ``'' -> pending -> claimed(token) -> delivered`` by
compare-and-set, so one process at a time holds a cycle's claim. Pending and claimed
carry the claim TTL: a process that dies holding a claim blocks the cycle only until
the TTL runs out, then the key vanishes and anyone arms it again. Delivered carries a
TTL of its own, a week by default: far longer than a task, so a delivered cycle is not
armed again while it matters, and nothing else ever removes lease keys, so without it
the bucket would keep one key per agent and cycle for good. A cycle armed again after
that is still not sent twice: the host is asked for the directive first (below).

``delivered`` says the agent's host got the message, not that every conversation of
the agent id did: an agent started on a fresh store counts its cycles from 0 again and
meets the delivered values its earlier store left. So a caller that has no record of
the cycle being done asks its host, and if the host lacks the directive, claims the
delivered value and sends as from pending. Processes sharing a host see it there and
stop at `ALREADY`: one send per conversation and cycle still holds. If that send fails,
is cancelled or is given up, the claim goes back as the delivered value it was taken
from, with the delivered TTL: a delivered cycle is never re-armed.

A TTL cannot tell whether a dead sender died before or after its message left. So the
message carries a directive id derived from domain, agent and cycle, and the host is
asked whether it already holds that directive before every send. Crash windows:

- before the claim: nothing was sent; pending is claimed by the next caller, or
  expires and is armed again;
- after the claim: the cycle waits out the TTL, then another process sends;
- after the send, before ``delivered`` is written: the next claimer finds the
  directive at the host and only marks the cycle delivered (`RECOVERED`);
- after ``delivered`` is written, before the caller notes it: the next look finds
  ``delivered`` and the directive at the host (`ALREADY`).

A sender that stalls between claiming and sending could outlive its claim, so nobody
sends once `SEND_WINDOW` of the TTL has passed since the claim. A stall inside the
host's own send is beyond reach; hosts that can should also ignore a directive id
they already hold.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Final, assert_never

import anyio

from ctxbus.agents.nudges._channel2 import HostAdapter, SyntheticMessage, directive_id
from ctxbus.bus import BusError, CasConflict, LeaseHeld, kv_key
from ctxbus.schemas import Domain, LeaseRecord, UsageError, validate_token

if TYPE_CHECKING:
    from ctxbus.bus import Lease, Leases

__all__ = [
    "DEFAULT_CLAIM_TTL",
    "DEFAULT_DELIVERED_TTL",
    "SEND_WINDOW",
    "Channel2Lease",
    "Channel2LeaseConfig",
    "Delivery",
    "DeliveryOutcome",
    "DirectiveState",
    "DirectiveView",
]

log = logging.getLogger(__name__)

DEFAULT_CLAIM_TTL: Final = 600.0
"""Seconds a claim (or a pending value) lives: what a crashed sender costs a cycle."""
DEFAULT_DELIVERED_TTL: Final = 7 * 24 * 3600.0
"""Seconds a delivered value lives: bounds the bucket, outlives any task."""
SEND_WINDOW: Final = 0.5
"""Share of the claim TTL after which a claimer gives its claim back instead of sending."""
DEFAULT_MAX_STEPS: Final = 8
"""Compare-and-set rounds one `deliver` call tries before reporting the cycle busy."""
UNCLAIM_TIMEOUT: Final = 5.0
"""Seconds a cancelled sender spends handing its claim back (else the TTL does it)."""
CYCLE_KEY_PREFIX: Final = "c2-"


class DirectiveState(StrEnum):
    """What a cycle's lease value says, as read."""

    ABSENT = ""
    """No value: never armed, or a pending or claimed value expired."""
    PENDING = "pending"
    CLAIMED = "claimed"
    DELIVERED = "delivered"
    UNKNOWN = "unknown"
    """Garbled bytes or a value this protocol did not write: replaced by pending."""


class DeliveryOutcome(StrEnum):
    """How one `Channel2Lease.deliver` call ended."""

    SENT = "sent"
    """This call sent the message."""
    RECOVERED = "recovered"
    """The host already held it (a sender died before confirming); marked delivered."""
    ALREADY = "already"
    """The lease already said delivered, and the host holds the directive."""
    BUSY = "busy"
    """Another process holds the claim, or this one gave it back unsent; try later."""
    FAILED = "failed"
    """The host raised; nothing was sent and any claim of ours is given back (to
    pending, or to delivered if it was taken from delivered)."""


_DONE: Final = frozenset({DeliveryOutcome.SENT, DeliveryOutcome.RECOVERED, DeliveryOutcome.ALREADY})


@dataclass(frozen=True, slots=True)
class Delivery:
    """The result of `Channel2Lease.deliver` for one cycle."""

    cycle: int
    directive_id: str
    outcome: DeliveryOutcome
    confirmed: bool = False
    """The lease now says delivered (False if the bus failed after a send)."""
    error: Exception | None = None
    """What the host raised, for FAILED."""

    @property
    def done(self) -> bool:
        """The host holds the message: the cycle needs nothing more."""
        return self.outcome in _DONE


@dataclass(frozen=True, slots=True)
class DirectiveView:
    """A cycle's lease as read: its state and the revision to compare-and-set against."""

    state: DirectiveState
    revision: int
    record: LeaseRecord | None = None


@dataclass(frozen=True, kw_only=True)
class Channel2LeaseConfig:
    """Timing of the Channel 2 lease protocol."""

    claim_ttl: float = DEFAULT_CLAIM_TTL
    """Seconds before a dead sender's claim frees the cycle; whole seconds, at least 1."""
    delivered_ttl: float = DEFAULT_DELIVERED_TTL
    """Seconds before a delivered cycle's key goes; whole seconds, at least 1."""
    max_steps: int = DEFAULT_MAX_STEPS

    def __post_init__(self) -> None:
        for name in ("claim_ttl", "delivered_ttl"):
            ttl = getattr(self, name)
            if not ttl >= 1:
                raise UsageError(f"{name} must be at least 1 second, got {ttl!r}")
        if self.max_steps < 1:
            raise UsageError(f"max_steps must be at least 1, got {self.max_steps!r}")


def _default_holder() -> str:
    """Host, pid and a random suffix: unique per process even across pid reuse."""
    return f"{socket.gethostname()[:64]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Channel2Lease:
    """The Channel 2 lease of one agent: arm, claim, send and confirm each cycle once."""

    def __init__(
        self,
        leases: Leases,
        host: HostAdapter,
        *,
        domain: Domain,
        agent_id: str,
        holder: str | None = None,
        config: Channel2LeaseConfig | None = None,
    ) -> None:
        """
        :param leases: the bus lease store (its bucket must exist: `Leases.ensure`).
        :param holder: names this process in lease values; a host-pid-random name if None.
        :raises InvalidDomain: if `agent_id` is not a valid key token.
        """
        self.domain = domain
        self.agent_id = validate_token(agent_id, field="agent id")
        self.holder = holder or _default_holder()
        self.config = config or Channel2LeaseConfig()
        self._leases = leases
        self._host = host

    def __repr__(self) -> str:
        return f"<Channel2Lease {self.domain}/{self.agent_id} holder={self.holder!r}>"

    def key(self, cycle: int) -> str:
        """The lease key of `cycle`."""
        return kv_key(self.domain, self.agent_id, f"{CYCLE_KEY_PREFIX}{_checked(cycle)}")

    def directive_id(self, cycle: int) -> str:
        return directive_id(self.domain, self.agent_id, _checked(cycle))

    async def inspect(self, cycle: int) -> DirectiveView:
        """The cycle's lease as it stands."""
        return await self._view(cycle)

    async def arm(self, cycle: int) -> DirectiveView:
        """Write pending if the cycle has no value yet (or an unknown one); idempotent."""
        view = await self._view(cycle)
        if view.state is DirectiveState.ABSENT:
            return await self._arm(cycle)
        if view.state is DirectiveState.UNKNOWN:
            return await self._replace(cycle, view)
        return view

    async def deliver(self, cycle: int, *, text: str) -> Delivery:
        """Send the cycle's message unless this agent's host has it or another process
        is sending it.

        Call it only for a cycle the caller has no record of being done: a delivered
        lease is then checked against the host (see the module docstring).

        :param text: the message text, used only if this call ends up sending.
        :raises BusError: if the bus fails before anything was sent.
        """
        step: DirectiveView | Delivery = await self._view(cycle)
        for _ in range(self.config.max_steps):
            if isinstance(step, Delivery):
                return step
            view = step
            match view.state:
                case DirectiveState.DELIVERED:
                    try:
                        held = await self._host.already_delivered(self.directive_id(cycle))
                    except Exception as exc:  # noqa: BLE001 - the host may raise anything by contract
                        return self._result(cycle, DeliveryOutcome.FAILED, error=exc)
                    if held:
                        return self._result(cycle, DeliveryOutcome.ALREADY, confirmed=True)
                    log.info("channel 2 %s was delivered to another host; sending to this one", self.key(cycle))
                    step = await self._claim_and_send(cycle, view, text)
                case DirectiveState.CLAIMED:
                    return self._result(cycle, DeliveryOutcome.BUSY)
                case DirectiveState.ABSENT:
                    step = await self._arm(cycle)
                case DirectiveState.UNKNOWN:
                    step = await self._replace(cycle, view)
                case DirectiveState.PENDING:
                    step = await self._claim_and_send(cycle, view, text)
                case _:
                    assert_never(view.state)
        return step if isinstance(step, Delivery) else self._result(cycle, DeliveryOutcome.BUSY)

    async def _claim_and_send(self, cycle: int, view: DirectiveView, text: str) -> Delivery | DirectiveView:
        """The delivery if the claim was won, else the value that beat it."""
        claimed_at = time.monotonic()
        claim = await self._claim(cycle, view)
        if claim is None:
            return await self._view(cycle)
        # A claim taken from delivered (a host that lacks the directive) goes back as
        # that delivered value if unsent: a delivered cycle is never re-armed.
        delivered = view.record if view.state is DirectiveState.DELIVERED else None
        return await self._send(claim, self._message(cycle, text), claimed_at, delivered)

    async def _send(
        self, claim: Lease, message: SyntheticMessage, claimed_at: float, delivered: LeaseRecord | None
    ) -> Delivery:
        try:
            recovered = await self._host.already_delivered(message.directive_id)
            if not recovered:
                if time.monotonic() - claimed_at > SEND_WINDOW * self.config.claim_ttl:
                    log.warning("channel 2 claim on %s aged before sending; handing it back", claim.key)
                    await self._unclaim(claim, message, delivered)
                    return self._result(message.cycle, DeliveryOutcome.BUSY)
                await self._host.deliver(message)
        except Exception as exc:  # noqa: BLE001 - the host may raise anything by contract
            await self._unclaim(claim, message, delivered)
            return self._result(message.cycle, DeliveryOutcome.FAILED, error=exc)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(UNCLAIM_TIMEOUT):
                await self._unclaim(claim, message, delivered)
            raise
        outcome = DeliveryOutcome.RECOVERED if recovered else DeliveryOutcome.SENT
        return await self._confirm(claim, message, outcome)

    async def _confirm(self, claim: Lease, message: SyntheticMessage, outcome: DeliveryOutcome) -> Delivery:
        """Write delivered; the host holds the message, so whatever the key holds by now yields."""
        cycle = message.cycle
        record = self._record(DirectiveState.DELIVERED, cycle, token=claim.record.token, by=outcome.value)
        revision = claim.revision
        try:
            for _ in range(self.config.max_steps):
                try:
                    await self._leases.transition(claim.key, revision, record, ttl=self.config.delivered_ttl)
                    return self._result(cycle, outcome, confirmed=True)
                except CasConflict:
                    # Our claim ran out first. Nobody will send again (the host has the
                    # directive), so move whatever is there now to delivered.
                    view = await self._view(cycle)
                    if view.state is DirectiveState.DELIVERED:
                        return self._result(cycle, outcome, confirmed=True)
                    if view.state is DirectiveState.ABSENT:
                        view = await self._arm(cycle)
                    revision = view.revision
        except BusError as exc:
            log.warning("channel 2 %s sent but not confirmed on the bus: %r", message.directive_id, exc)
        return self._result(cycle, outcome)

    async def _view(self, cycle: int) -> DirectiveView:
        try:
            lease = await self._leases.read(self.key(cycle))
        except LeaseHeld as held:  # bytes nobody we know wrote
            return DirectiveView(DirectiveState.UNKNOWN, held.revision)
        if lease is None:
            return DirectiveView(DirectiveState.ABSENT, 0)
        return DirectiveView(self._classify(cycle, lease.record), lease.revision, lease.record)

    def _classify(self, cycle: int, record: LeaseRecord) -> DirectiveState:
        try:
            state = DirectiveState(record.state)
        except ValueError:
            return DirectiveState.UNKNOWN
        foreign = record.detail.get("directive") != self.directive_id(cycle)
        tokenless = state is DirectiveState.CLAIMED and not record.token
        if state in (DirectiveState.ABSENT, DirectiveState.UNKNOWN) or foreign or tokenless:
            return DirectiveState.UNKNOWN
        return state

    async def _arm(self, cycle: int) -> DirectiveView:
        record = self._record(DirectiveState.PENDING, cycle)
        try:
            lease = await self._leases.claim(self.key(cycle), self.holder, self.config.claim_ttl, record=record)
        except LeaseHeld as held:
            if held.holder is None:  # bytes nobody we know wrote
                return DirectiveView(DirectiveState.UNKNOWN, held.revision)
            return await self._view(cycle)
        except CasConflict:  # it kept changing under every attempt: see what it is now
            return await self._view(cycle)
        return DirectiveView(DirectiveState.PENDING, lease.revision, record)

    async def _replace(self, cycle: int, view: DirectiveView) -> DirectiveView:
        # Safe whatever the value was: every send first asks the host about the directive.
        log.warning("channel 2 lease %s holds an unknown value; re-arming it", self.key(cycle))
        record = self._record(DirectiveState.PENDING, cycle)
        try:
            lease = await self._leases.transition(self.key(cycle), view.revision, record, ttl=self.config.claim_ttl)
        except CasConflict:
            return await self._view(cycle)
        return DirectiveView(DirectiveState.PENDING, lease.revision, record)

    async def _claim(self, cycle: int, view: DirectiveView) -> Lease | None:
        record = self._record(DirectiveState.CLAIMED, cycle, token=uuid.uuid4().hex)
        try:
            return await self._leases.transition(self.key(cycle), view.revision, record, ttl=self.config.claim_ttl)
        except CasConflict:
            return None

    async def _unclaim(self, claim: Lease, message: SyntheticMessage, delivered: LeaseRecord | None) -> None:
        """Back to pending, or to `delivered` (the value the claim was taken from) with
        the delivered TTL; if that fails the claim simply expires."""
        if delivered is not None:
            record, ttl = delivered, self.config.delivered_ttl
        else:
            record, ttl = self._record(DirectiveState.PENDING, message.cycle), self.config.claim_ttl
        try:
            await self._leases.transition(claim.key, claim.revision, record, ttl=ttl)
        except BusError as exc:  # CasConflict included: the claim is gone already
            log.info("channel 2 claim on %s not handed back (%r); it will expire", claim.key, exc)

    def _record(self, state: DirectiveState, cycle: int, *, token: str | None = None, by: str = "") -> LeaseRecord:
        detail = {"directive": self.directive_id(cycle)} | ({"by": by} if by else {})
        return LeaseRecord(holder=self.holder, state=state.value, token=token, detail=detail)

    def _message(self, cycle: int, text: str) -> SyntheticMessage:
        return SyntheticMessage(directive_id=self.directive_id(cycle), cycle=cycle, text=text)

    def _result(
        self, cycle: int, outcome: DeliveryOutcome, *, confirmed: bool = False, error: Exception | None = None
    ) -> Delivery:
        return Delivery(cycle, self.directive_id(cycle), outcome, confirmed=confirmed, error=error)


def _checked(cycle: int) -> int:
    if isinstance(cycle, bool) or not isinstance(cycle, int) or cycle < 0:
        raise UsageError(f"cycle must be a non-negative integer, got {cycle!r}")
    return cycle
