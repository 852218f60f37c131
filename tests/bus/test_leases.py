"""Leases against a real server: one winner, TTL expiry, compare-and-set transitions."""

from __future__ import annotations

import uuid

import anyio
import pytest
from nats.aio.client import Client

from ctxbus.bus import Bucket, BucketConfig, CasConflict, LeaseHeld, Leases
from ctxbus.schemas import LeaseRecord, UsageError


@pytest.fixture
async def leases(nats_client: Client) -> Leases:
    store = Leases(nats_client)
    await store.ensure()
    return store


def _key() -> str:
    return f"u.s.t.{uuid.uuid4().hex[:12]}"


async def test_sixteen_concurrent_claimers_one_winner(leases: Leases) -> None:
    key = _key()
    winners: list[str] = []
    losers: list[LeaseHeld] = []

    async def claimer(i: int) -> None:
        try:
            winners.append((await leases.claim(key, f"h{i}", ttl=30)).holder)
        except LeaseHeld as exc:
            losers.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(claimer, i)
    assert len(winners) == 1 and len(losers) == 15
    assert {exc.holder for exc in losers} == set(winners)
    current = await leases.read(key)
    assert current is not None and current.holder == winners[0]


async def test_claim_expires_after_its_ttl_and_can_be_claimed_again(leases: Leases) -> None:
    key = _key()
    await leases.claim(key, "crashed", ttl=1)
    with pytest.raises(LeaseHeld, match="held by crashed"):
        await leases.claim(key, "other", ttl=1)
    with anyio.fail_after(10):
        while await leases.read(key) is not None:
            await anyio.sleep(0.2)
    assert (await leases.claim(key, "other", ttl=5)).holder == "other"


async def test_transition_is_compare_and_set(leases: Leases) -> None:
    key = _key()
    lease = await leases.claim(key, "a", ttl=30, record=LeaseRecord(holder="a", state="pending"))
    moved = await leases.transition(key, lease.revision, LeaseRecord(holder="a", state="claimed", token="t1"))
    assert moved.revision > lease.revision
    with pytest.raises(CasConflict) as stale:
        await leases.transition(key, lease.revision, LeaseRecord(holder="b", state="claimed"))
    assert stale.value.actual == moved.revision
    current = await leases.read(key)
    assert current is not None and current.record.token == "t1"


async def test_transition_with_ttl_renews_and_expires(leases: Leases) -> None:
    key = _key()
    lease = await leases.claim(key, "a", ttl=60)
    await leases.transition(key, lease.revision, LeaseRecord(holder="a", state="renewed"), ttl=1)
    with anyio.fail_after(10):
        while await leases.read(key) is not None:
            await anyio.sleep(0.2)


async def test_release_frees_the_key(leases: Leases) -> None:
    key = _key()
    lease = await leases.claim(key, "a", ttl=30)
    with pytest.raises(CasConflict):
        await leases.release(key, expected_revision=lease.revision + 100)
    await leases.release(key, expected_revision=lease.revision)
    assert await leases.read(key) is None
    assert (await leases.claim(key, "b", ttl=30)).holder == "b"


async def test_sub_second_ttl_is_refused(leases: Leases) -> None:
    with pytest.raises(UsageError, match="ttl must be at least 1 second, got 0.5"):
        await leases.claim(_key(), "a", ttl=0.5)


async def test_a_foreign_value_is_neither_free_nor_anyones(leases: Leases, nats_client: Client) -> None:
    key = _key()
    await Bucket(nats_client, BucketConfig(name=leases.config.bucket)).put(key, b"\x00 not a lease record")
    with pytest.raises(LeaseHeld) as on_read:
        await leases.read(key)
    with pytest.raises(LeaseHeld) as on_claim:
        await leases.claim(key, "a", ttl=30)
    assert on_read.value.holder is None and on_claim.value.holder is None
    assert on_read.value.revision == on_claim.value.revision
