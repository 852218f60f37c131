"""Fuzzing the coordinator with arbitrary proposal bodies: it answers, and keeps serving."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbus.agents.brief import Proposer
from ctxbus.bus import NatsClient, Verb, request, subject
from ctxbus.schemas import AddNote, Committed, Domain, Envelope, MessageType, Rejection, ReplyAdapter
from tests._support import running_coordinator

DOMAIN = Domain.parse(f"fuzz/s/{uuid.uuid4().hex[:8]}")

wire_ints = st.integers(-(2**63), 2**64 - 1)
"""Every integer msgpack can carry: a bigger one cannot be sent at all, so it proves nothing."""
scalars = (
    st.none() | st.booleans() | wire_ints | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
ops = st.sampled_from(
    [
        "set_goal",
        "add_pending",
        "complete",
        "add_decision",
        "reject",
        "reopen",
        "add_constraint",
        "remove_constraint",
        "add_blocker",
        "resolve_blocker",
        "add_note",
        "close",
        "fold_done",
        "drop_table",
        "",
    ]
)
op_bodies = st.fixed_dictionaries(
    {"op": ops},
    optional={
        "text": values,
        "item_id": values,
        "option": values,
        "reason": values,
        "outcome": values,
        "rationale": values,
        "supersedes": values,
        "item_ids": values,
    },
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "domain": st.sampled_from([str(DOMAIN), "a/b", "x/y/z"]) | values,
        "author": st.text(max_size=200) | values,
        "key": st.text(max_size=200) | values,
        "base_revision": wire_ints | values,
        "op": op_bodies | values,
        "extra": values,
    },
)


@pytest.fixture(scope="module")
async def served(nats_url: str) -> AsyncIterator[NatsClient]:
    async with running_coordinator(nats_url, coordinator_id="fuzz") as (client, _):
        yield client


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
async def test_any_body_gets_an_answer(served: NatsClient, body: dict[str, Any]) -> None:
    data = Envelope(type=MessageType.PROPOSAL, domain=DOMAIN, sender="fuzzer", body=body).encode()  # every body fits
    reply = ReplyAdapter.validate_python(
        Envelope.decode(await request(served, subject(DOMAIN, Verb.PROPOSE), data, timeout=5)).body
    )
    assert isinstance(reply, (Committed, Rejection))
    if isinstance(reply, Rejection):
        assert reply.reason.strip()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300) | values.map(lambda v: msgpack.packb(v, use_bin_type=True)))
async def test_any_bytes_get_an_answer(served: NatsClient, raw: bytes) -> None:
    reply = ReplyAdapter.validate_python(
        Envelope.decode(await request(served, subject(DOMAIN, Verb.PROPOSE), raw, timeout=5)).body
    )
    assert isinstance(reply, Rejection) and reply.code == "invalid_op"


async def test_still_serving_after_the_fuzz(served: NatsClient) -> None:
    reply = await Proposer(served, Domain.parse(f"fuzz/after/{uuid.uuid4().hex[:6]}"), agent_id="a").propose(
        AddNote(text="alive")
    )
    assert reply == Committed(revision=1)
