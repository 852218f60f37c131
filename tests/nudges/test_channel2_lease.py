"""The Channel 2 lease protocol against the session's real NATS server.

``'' -> pending -> claimed(token) -> delivered``: one send per cycle, failed sends back
to pending, dead claims expiring, sent-but-unconfirmed messages recovered rather than
sent again, and lease values we did not write handled without crashing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import anyio
import pytest
from nats.aio.client import Client

from ctxbus.agents.nudges import (
    DEFAULT_DELIVERED_TTL,
    SEND_WINDOW,
    Channel2Lease,
    Channel2LeaseConfig,
    DeliveryOutcome,
    DirectiveState,
    SyntheticMessage,
    directive_id,
)
from ctxbus.bus import LEASE_BUCKET, Bucket, BucketConfig, Leases
from ctxbus.schemas import Domain, InvalidDomain, LeaseRecord, UsageError

SHORT_TTL = 1.0
"""The shortest TTL a value can have: for values the tests wait out."""
SENDER_TTL = 2.0
"""Claim TTL of a lease that must still send: `SEND_WINDOW` of it (1 s) is what a KV
write may take between the claim and the send, however slow the machine."""
EXPIRY_WAIT = 30.0
"""Hang guard: seconds a test waits at most for a short-lived value to expire."""


class Host:
    """A host adapter at our own seam: keeps the messages it was given.

    `deliver` sets `entered` first, then awaits `hold()` if set: tests use it to keep a
    send in progress for as long as they need, instead of guessing how long a delay
    covers the KV writes before it.
    """

    def __init__(self, *, failures: int = 0) -> None:
        self.sent: list[SyntheticMessage] = []
        self.failures = failures
        self.check_delay = 0.0
        self.unreachable = False
        """`already_delivered` raises while set."""
        self.entered = anyio.Event()
        self.hold: Callable[[], Awaitable[object]] | None = None

    async def deliver(self, message: SyntheticMessage) -> None:
        self.entered.set()
        if self.hold is not None:
            await self.hold()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("host is offline")
        self.sent.append(message)

    async def already_delivered(self, directive_id: str) -> bool:
        await anyio.sleep(self.check_delay)
        if self.unreachable:
            raise ConnectionError("host is offline")
        return any(message.directive_id == directive_id for message in self.sent)


@pytest.fixture
async def leases(nats_client: Client) -> Leases:
    store = Leases(nats_client)
    await store.ensure()
    return store


@pytest.fixture
def domain() -> Domain:
    return Domain(user="u", session="s", task=f"t{uuid.uuid4().hex[:10]}")


def lease_for(
    leases: Leases, host: Host, domain: Domain, *, ttl: float = 60, holder: str | None = None
) -> Channel2Lease:
    config = Channel2LeaseConfig(claim_ttl=ttl)
    return Channel2Lease(leases, host, domain=domain, agent_id="a1", holder=holder, config=config)


async def wait_until_absent(lease: Channel2Lease, cycle: int) -> None:
    """Until the server expired the cycle's value (`EXPIRY_WAIT` is only a hang guard)."""
    with anyio.fail_after(EXPIRY_WAIT):
        while (await lease.inspect(cycle)).state is not DirectiveState.ABSENT:
            await anyio.sleep(0.05)


async def test_first_delivery_walks_pending_claimed_delivered(leases: Leases, domain: Domain) -> None:
    host = Host()
    lease = lease_for(leases, host, domain)
    assert (await lease.inspect(3)).state is DirectiveState.ABSENT
    armed = await lease.arm(3)
    assert armed.state is DirectiveState.PENDING
    assert (await lease.arm(3)).revision == armed.revision  # arming is idempotent

    delivery = await lease.deliver(3, text="prune now")

    assert (delivery.outcome, delivery.confirmed, delivery.done) == (DeliveryOutcome.SENT, True, True)
    assert delivery.directive_id == directive_id(domain, "a1", 3) == lease.directive_id(3)
    [message] = host.sent
    assert (message.directive_id, message.cycle, message.text) == (delivery.directive_id, 3, "prune now")
    assert message.role == "user" and message.synthetic and not message.counts_as_user_turn
    view = await lease.inspect(3)
    assert view.state is DirectiveState.DELIVERED and view.record is not None
    assert view.record.token and view.record.detail == {"directive": delivery.directive_id, "by": "sent"}


async def test_a_delivered_cycle_is_never_sent_again(leases: Leases, domain: Domain) -> None:
    host = Host()
    first = lease_for(leases, host, domain, holder="p1")
    second = lease_for(leases, host, domain, holder="p2")
    assert (await first.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    again = await second.deliver(0, text="x")
    assert (again.outcome, again.done) == (DeliveryOutcome.ALREADY, True)
    assert len(host.sent) == 1
    assert (await second.deliver(1, text="x")).outcome is DeliveryOutcome.SENT  # cycles are independent


async def test_a_host_that_lacks_a_delivered_directive_still_gets_it_once(leases: Leases, domain: Domain) -> None:
    """The same agent id on a fresh store (a new host) counts its cycles from 0 again
    and finds them delivered to its old host: it must still be asked to prune."""
    old_host, new_host = Host(), Host()
    assert (
        await lease_for(leases, old_host, domain, holder="old").deliver(0, text="x")
    ).outcome is DeliveryOutcome.SENT
    fresh = await lease_for(leases, new_host, domain, holder="new").deliver(0, text="y")
    assert (fresh.outcome, fresh.confirmed) == (DeliveryOutcome.SENT, True)
    assert [m.text for m in new_host.sent] == ["y"] and len(old_host.sent) == 1
    # Every process sharing either host now finds it there.
    for host in (old_host, new_host):
        assert (
            await lease_for(leases, host, domain, holder="p3").deliver(0, text="z")
        ).outcome is DeliveryOutcome.ALREADY
    assert len(new_host.sent) == len(old_host.sent) == 1
    assert (await lease_for(leases, new_host, domain).inspect(0)).state is DirectiveState.DELIVERED


async def _stored_ttl(nats_client: Client, lease: Channel2Lease, cycle: int) -> str | None:
    """The TTL header the server holds for the cycle's current value."""
    stored = await nats_client.jetstream().get_msg(
        f"KV_{LEASE_BUCKET}", subject=f"$KV.{LEASE_BUCKET}.{lease.key(cycle)}"
    )
    return (stored.headers or {}).get("Nats-TTL")


async def _delivered_by_old_host(leases: Leases, domain: Domain) -> LeaseRecord | None:
    old = lease_for(leases, Host(), domain, holder="old")
    assert (await old.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    return (await old.inspect(0)).record


async def _assert_still_delivered(nats_client: Client, lease: Channel2Lease, record: LeaseRecord | None) -> None:
    """The old delivered value is back, with the delivered TTL, not pending with the claim TTL."""
    view = await lease.inspect(0)
    assert (view.state, view.record) == (DirectiveState.DELIVERED, record)
    assert await _stored_ttl(nats_client, lease, 0) == f"{int(DEFAULT_DELIVERED_TTL)}s"


async def test_a_failed_resend_to_a_host_that_lacks_the_directive_leaves_the_cycle_delivered(
    leases: Leases, domain: Domain, nats_client: Client
) -> None:
    delivered = await _delivered_by_old_host(leases, domain)
    new_host = Host(failures=1)
    lease = lease_for(leases, new_host, domain, holder="new")
    failed = await lease.deliver(0, text="y")
    assert (failed.outcome, type(failed.error)) == (DeliveryOutcome.FAILED, ConnectionError)
    await _assert_still_delivered(nats_client, lease, delivered)
    again = await lease.deliver(0, text="y")
    assert (again.outcome, again.confirmed) == (DeliveryOutcome.SENT, True)
    assert [m.text for m in new_host.sent] == ["y"]
    assert (await lease.deliver(0, text="y")).outcome is DeliveryOutcome.ALREADY


async def test_a_cancelled_resend_to_a_host_that_lacks_the_directive_leaves_the_cycle_delivered(
    leases: Leases, domain: Domain, nats_client: Client
) -> None:
    delivered = await _delivered_by_old_host(leases, domain)
    new_host = Host()
    new_host.hold = anyio.sleep_forever
    lease = lease_for(leases, new_host, domain, holder="new")
    with anyio.fail_after(EXPIRY_WAIT):  # hang guard
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: lease.deliver(0, text="y"))
            await new_host.entered.wait()  # claimed from delivered, and the host is sending
            assert (await lease.inspect(0)).state is DirectiveState.CLAIMED
            tg.cancel_scope.cancel()
    await _assert_still_delivered(nats_client, lease, delivered)
    new_host.hold = None
    assert (await lease.deliver(0, text="y")).outcome is DeliveryOutcome.SENT
    assert len(new_host.sent) == 1


async def test_an_aged_resend_to_a_host_that_lacks_the_directive_leaves_the_cycle_delivered(
    leases: Leases, domain: Domain, nats_client: Client
) -> None:
    ttl = 4.0
    delivered = await _delivered_by_old_host(leases, domain)
    new_host = Host()
    new_host.check_delay = SEND_WINDOW * ttl + 0.2  # see test_a_claim_that_aged_before_sending_is_given_back_unsent
    lease = lease_for(leases, new_host, domain, ttl=ttl, holder="new")
    assert (await lease.deliver(0, text="y")).outcome is DeliveryOutcome.BUSY
    assert new_host.sent == []
    await _assert_still_delivered(nats_client, lease, delivered)


async def test_processes_sharing_a_fresh_host_resend_a_delivered_cycle_once(leases: Leases, domain: Domain) -> None:
    await lease_for(leases, Host(), domain, holder="old").deliver(3, text="x")
    await _sixteen_send_once(leases, Host(), domain, cycle=3)


async def test_a_host_that_fails_to_answer_about_a_delivered_cycle_is_asked_again(
    leases: Leases, domain: Domain
) -> None:
    await lease_for(leases, Host(), domain, holder="old").deliver(0, text="x")
    host = Host()
    host.unreachable = True
    lease = lease_for(leases, host, domain)
    failed = await lease.deliver(0, text="x")
    assert (failed.outcome, failed.done, type(failed.error)) == (DeliveryOutcome.FAILED, False, ConnectionError)
    assert (await lease.inspect(0)).state is DirectiveState.DELIVERED and host.sent == []
    host.unreachable = False
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT


async def test_delivered_does_not_expire_with_the_claim_ttl(leases: Leases, domain: Domain) -> None:
    lease = lease_for(leases, Host(), domain, ttl=SENDER_TTL)
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    # Control: written after cycle 0's last write, with the same claim TTL. The server
    # expires it no sooner than a value of cycle 0 carrying that TTL would have gone.
    await _leave_dead_claim(leases, lease, 1, ttl=SENDER_TTL)
    await wait_until_absent(lease, 1)
    assert (await lease.inspect(0)).state is DirectiveState.DELIVERED


async def test_a_delivered_value_expires_after_its_own_ttl(leases: Leases, domain: Domain, nats_client: Client) -> None:
    """Nothing else removes lease keys: without a TTL, every cycle would leave one for good."""
    host = Host()
    config = Channel2LeaseConfig(claim_ttl=60, delivered_ttl=SHORT_TTL)
    lease = Channel2Lease(leases, host, domain=domain, agent_id="a1", config=config)
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    bucket = Bucket(nats_client, BucketConfig(name=LEASE_BUCKET))
    with anyio.fail_after(EXPIRY_WAIT):
        while await bucket.get(lease.key(0)) is not None:  # no value, no marker: the key is gone
            await anyio.sleep(0.05)
    # Armed again after that, the cycle is still not sent twice: the host holds the directive.
    again = await lease.deliver(0, text="x")
    assert (again.outcome, again.confirmed) == (DeliveryOutcome.RECOVERED, True)
    assert len(host.sent) == 1


async def test_a_delivered_value_lives_a_week_by_default(leases: Leases, domain: Domain, nats_client: Client) -> None:
    lease = lease_for(leases, Host(), domain)
    await lease.deliver(0, text="x")
    stored = await nats_client.jetstream().get_msg(f"KV_{LEASE_BUCKET}", subject=f"$KV.{LEASE_BUCKET}.{lease.key(0)}")
    assert (stored.headers or {}).get("Nats-TTL") == f"{int(DEFAULT_DELIVERED_TTL)}s" == "604800s"


async def test_a_failed_send_goes_back_to_pending(leases: Leases, domain: Domain) -> None:
    host = Host(failures=1)
    lease = lease_for(leases, host, domain)
    failed = await lease.deliver(0, text="x")
    assert failed.outcome is DeliveryOutcome.FAILED and not failed.done
    assert isinstance(failed.error, ConnectionError)
    assert (await lease.inspect(0)).state is DirectiveState.PENDING
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    assert len(host.sent) == 1


async def test_a_live_claim_keeps_other_processes_out(leases: Leases, domain: Domain) -> None:
    host = Host()
    release = anyio.Event()

    async def hold_the_first_send() -> None:  # mid-send until the other process has tried
        host.hold = None
        await release.wait()

    host.hold = hold_the_first_send
    sender = lease_for(leases, host, domain, holder="sender")
    other = lease_for(leases, host, domain, holder="other")
    outcomes = {}

    async def send() -> None:
        outcomes["sender"] = (await sender.deliver(0, text="x")).outcome

    with anyio.fail_after(EXPIRY_WAIT):  # hang guard
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await host.entered.wait()
            assert (await other.inspect(0)).state is DirectiveState.CLAIMED
            outcomes["other"] = (await other.deliver(0, text="x")).outcome
            release.set()
    assert outcomes == {"sender": DeliveryOutcome.SENT, "other": DeliveryOutcome.BUSY}
    assert len(host.sent) == 1


async def test_sixteen_concurrent_senders_send_once(leases: Leases, domain: Domain) -> None:
    await _sixteen_send_once(leases, Host(), domain, cycle=7)


async def _sixteen_send_once(leases: Leases, host: Host, domain: Domain, *, cycle: int) -> None:
    """16 processes race to deliver `cycle` to one `host`: exactly one sends."""
    outcomes: list[DeliveryOutcome] = []

    async def one(i: int) -> None:
        outcomes.append((await lease_for(leases, host, domain, holder=f"p{i}").deliver(cycle, text="x")).outcome)

    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(one, i)
    assert outcomes.count(DeliveryOutcome.SENT) == 1 and len(host.sent) == 1
    assert set(outcomes) <= {DeliveryOutcome.SENT, DeliveryOutcome.ALREADY, DeliveryOutcome.BUSY}


async def _leave_dead_claim(leases: Leases, lease: Channel2Lease, cycle: int, *, ttl: float = SHORT_TTL) -> None:
    """What a process that died right after winning its claim leaves behind."""
    record = LeaseRecord(holder="dead", state="claimed", token="t0", detail={"directive": lease.directive_id(cycle)})
    await leases.claim(lease.key(cycle), "dead", ttl, record=record)


async def test_a_dead_claim_expires_and_another_process_sends(leases: Leases, domain: Domain) -> None:
    host = Host()
    lease = lease_for(leases, host, domain)  # the dead claim has the short TTL, not ours
    await _leave_dead_claim(leases, lease, 0)
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.BUSY
    await wait_until_absent(lease, 0)
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    assert len(host.sent) == 1


async def test_sent_but_unconfirmed_is_recovered_not_sent_again(leases: Leases, domain: Domain) -> None:
    host = Host()
    lease = lease_for(leases, host, domain, ttl=SHORT_TTL)
    # The dead process had sent before dying: the host holds the directive.
    host.sent.append(SyntheticMessage(directive_id=lease.directive_id(0), cycle=0, text="x"))
    await _leave_dead_claim(leases, lease, 0)
    await wait_until_absent(lease, 0)
    delivery = await lease.deliver(0, text="x")
    assert (delivery.outcome, delivery.confirmed) == (DeliveryOutcome.RECOVERED, True)
    assert len(host.sent) == 1
    view = await lease.inspect(0)
    assert view.state is DirectiveState.DELIVERED and view.record is not None
    assert view.record.detail["by"] == "recovered"


async def test_a_cancelled_send_hands_the_claim_back(leases: Leases, domain: Domain) -> None:
    host = Host()
    host.hold = anyio.sleep_forever
    lease = lease_for(leases, host, domain)
    with anyio.fail_after(EXPIRY_WAIT):  # hang guard
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: lease.deliver(0, text="x"))
            await host.entered.wait()  # claimed, and the host is sending
            assert (await lease.inspect(0)).state is DirectiveState.CLAIMED
            tg.cancel_scope.cancel()
    assert (await lease.inspect(0)).state is DirectiveState.PENDING
    host.hold = None
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    assert len(host.sent) == 1


async def test_a_claim_that_aged_before_sending_is_given_back_unsent(leases: Leases, domain: Domain) -> None:
    ttl = 4.0
    host = Host()
    # The host is asked only after the claim was written, so the claim is older than
    # SEND_WINDOW of its TTL whatever the writes took; the 1.8 s left before the server
    # expires it are for the write that hands it back.
    host.check_delay = SEND_WINDOW * ttl + 0.2
    lease = lease_for(leases, host, domain, ttl=ttl)
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.BUSY
    assert host.sent == []
    assert (await lease.inspect(0)).state is DirectiveState.PENDING


async def test_a_send_that_outlived_its_claim_is_still_confirmed(leases: Leases, domain: Domain) -> None:
    host = Host()
    lease = lease_for(leases, host, domain, ttl=SENDER_TTL)
    host.hold = lambda: wait_until_absent(lease, 0)  # the claim expires while the host is sending
    delivery = await lease.deliver(0, text="x")
    assert (delivery.outcome, delivery.confirmed) == (DeliveryOutcome.SENT, True)
    assert (await lease.inspect(0)).state is DirectiveState.DELIVERED
    assert len(host.sent) == 1


def _record(state: str, **fields: object) -> bytes:
    return LeaseRecord.model_validate({"holder": "someone", "state": state, **fields}).encode()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"\xc1\xff not msgpack", id="garbled"),
        pytest.param(b"\x01", id="msgpack-not-a-map"),
        pytest.param(b"", id="empty"),
        pytest.param(_record("exploded"), id="unknown-state"),
        pytest.param(_record("claimed"), id="claim-without-token"),
        pytest.param(_record("delivered", detail={"directive": "c2-elsewhere"}), id="foreign-directive"),
        pytest.param(_record("pending"), id="no-directive"),
    ],
)
async def test_values_we_did_not_write_are_replaced_without_crashing(
    leases: Leases, domain: Domain, nats_client: Client, value: bytes
) -> None:
    host = Host()
    lease = lease_for(leases, host, domain)
    await Bucket(nats_client, BucketConfig(name=LEASE_BUCKET)).put(lease.key(0), value)
    before = (await lease.inspect(0)).state
    assert before in (DirectiveState.UNKNOWN, DirectiveState.ABSENT)  # garbled bytes read as no lease
    assert (await lease.deliver(0, text="x")).outcome is DeliveryOutcome.SENT
    assert (await lease.inspect(0)).state is DirectiveState.DELIVERED
    assert len(host.sent) == 1


async def test_an_unknown_value_is_re_armed_by_arm(leases: Leases, domain: Domain, nats_client: Client) -> None:
    lease = lease_for(leases, Host(), domain)
    await Bucket(nats_client, BucketConfig(name=LEASE_BUCKET)).put(lease.key(0), _record("exploded"))
    assert (await lease.arm(0)).state is DirectiveState.PENDING


async def test_bad_arguments_are_caller_errors(leases: Leases, domain: Domain) -> None:
    with pytest.raises(UsageError, match="claim_ttl must be at least 1 second, got 0.5"):
        Channel2LeaseConfig(claim_ttl=0.5)
    with pytest.raises(UsageError, match="delivered_ttl must be at least 1 second, got 0"):
        Channel2LeaseConfig(delivered_ttl=0)
    with pytest.raises(InvalidDomain, match="agent id"):
        Channel2Lease(leases, Host(), domain=domain, agent_id="a.b")
    lease = lease_for(leases, Host(), domain)
    with pytest.raises(UsageError, match="cycle must be a non-negative integer, got -1"):
        await lease.deliver(-1, text="x")
    assert "a1" in repr(lease) and str(domain) in repr(lease)


def test_directive_ids_are_deterministic_and_distinct() -> None:
    domain = Domain.parse("u/s/t")
    assert directive_id(domain, "a", 1) == directive_id(Domain.parse("u/s/t"), "a", 1)
    others = {directive_id(domain, "a", 2), directive_id(domain, "b", 1), directive_id(Domain.parse("u/s/x"), "a", 1)}
    assert directive_id(domain, "a", 1) not in others and len(others) == 3
