"""The wire envelope: round trips and every way a message can be rejected."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbus.schemas import (
    DEFAULT_MAX_PAYLOAD,
    AddNote,
    BodyInvalid,
    BriefSnapshot,
    Commit,
    CommitBatch,
    CommitEnvelope,
    Committed,
    DeadLetter,
    DeadLetterEnvelope,
    DecodeError,
    Domain,
    Envelope,
    EnvelopeInvalid,
    MessageType,
    PayloadTooLarge,
    Proposal,
    ProposalEnvelope,
    Rejection,
    RejectionCode,
    ReplyEnvelope,
    SchemaVersionError,
    SnapshotEnvelope,
    TaskBrief,
    WireError,
    WrongMessageType,
)
from ctxbus.schemas._ids import unique_id

DOMAIN = Domain.parse("alice/s1/t1")
AnyEnvelope = Envelope[dict[str, Any]]
"""An envelope of any kind with a map for a body, as a tool reading every subject sees it."""


def _raw(**changes: object) -> bytes:
    fields = AnyEnvelope(type=MessageType.COMMIT, domain=DOMAIN, sender="agent-a", body={}).model_dump(mode="python")
    fields.update(changes)
    return msgpack.packb(fields, use_bin_type=True)


tokens = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
bodies = st.dictionaries(
    st.text(max_size=20),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=10,
    ),
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(
    user=tokens,
    session=tokens,
    task=tokens,
    sender=st.text(min_size=1, max_size=128),
    kind=st.sampled_from(list(MessageType)),
    body=bodies,
    ts=st.floats(allow_nan=False, allow_infinity=False),
)
def test_round_trip(user: str, session: str, task: str, sender: str, kind: MessageType, body: dict, ts: float) -> None:
    envelope = AnyEnvelope(
        type=kind, domain=Domain(user=user, session=session, task=task), sender=sender, body=body, ts=ts
    )
    assert AnyEnvelope.decode(envelope.encode()) == envelope
    # `encode` packs the fields itself: it must write exactly what the model holds.
    assert msgpack.unpackb(envelope.encode(), raw=False) == envelope.model_dump(mode="python")


def test_message_ids_are_unique_and_a_forked_child_starts_afresh() -> None:
    ids = {AnyEnvelope(type=MessageType.REPLY, domain=DOMAIN, sender="a", body={}).id for _ in range(10_000)}
    assert len(ids) == 10_000
    unique_id.reset()  # what a forked child runs: its ids cannot repeat its parent's
    assert AnyEnvelope(type=MessageType.REPLY, domain=DOMAIN, sender="a", body={}).id not in ids


def test_domain_travels_in_display_form() -> None:
    raw = msgpack.unpackb(_raw())
    assert raw["domain"] == "alice/s1/t1"
    assert raw["v"] == 1


@pytest.mark.parametrize(
    ("data", "error", "says"),
    [
        (b"", DecodeError, "empty"),
        (_raw()[:-4], DecodeError, "not valid msgpack"),
        (_raw() + b"\x01", DecodeError, "1 trailing bytes"),
        (msgpack.packb([1, 2]), DecodeError, "msgpack list, expected a map"),
        (b"\xc1", DecodeError, "not valid msgpack"),
        (_raw(v=2), SchemaVersionError, "unsupported envelope version 2; this build speaks v1"),
        (_raw(v="1"), SchemaVersionError, "version '1'"),
        (_raw(v=True), SchemaVersionError, "version True"),
        (_raw(v=None), SchemaVersionError, "unsupported envelope version None"),
        (msgpack.packb({"type": "commit"}), SchemaVersionError, "the envelope has no version field 'v'"),
        (_raw(type="gossip"), EnvelopeInvalid, "field 'type'"),
        (_raw(ts="yesterday"), EnvelopeInvalid, "field 'ts'"),
        (_raw(sender=""), EnvelopeInvalid, "field 'sender'"),
        (_raw(body=[1]), BodyInvalid, "commit body is invalid: Input should be a valid dictionary"),
        (_raw(extra=1), EnvelopeInvalid, "field 'extra'"),
        (_raw(domain="alice/s1"), EnvelopeInvalid, "3 parts, got 2"),
        (_raw(domain="alice/s.1/t1"), EnvelopeInvalid, "session 's.1' contains '.'"),
        (_raw(domain="alice/s1/" + "t" * 65), EnvelopeInvalid, "over the limit of 64"),
        (_raw(domain="alice/*/t1"), EnvelopeInvalid, "contains '*'"),
    ],
)
def test_rejections_name_what_was_wrong(data: bytes, error: type[WireError], says: str) -> None:
    with pytest.raises(error) as caught:
        AnyEnvelope.decode(data)
    assert says in str(caught.value)


@pytest.mark.parametrize("field", ["v", "domain", "type"])
def test_a_huge_bad_value_makes_a_short_error(field: str) -> None:
    with pytest.raises(WireError) as caught:
        AnyEnvelope.decode(_raw(**{field: "\x00" * 300_000}), max_size=None)
    assert len(str(caught.value)) < 300


def test_missing_field_is_named() -> None:
    fields = msgpack.unpackb(_raw())
    del fields["sender"]
    with pytest.raises(EnvelopeInvalid, match="field 'sender': Field required"):
        AnyEnvelope.decode(msgpack.packb(fields))


def test_oversize_is_refused_on_both_ends() -> None:
    big = AnyEnvelope(type=MessageType.REPLY, domain=DOMAIN, sender="a", body={"x": "y" * DEFAULT_MAX_PAYLOAD})
    with pytest.raises(PayloadTooLarge, match=r"over the limit of 1,048,576 bytes") as caught:
        big.encode()
    assert caught.value.limit == DEFAULT_MAX_PAYLOAD
    assert caught.value.size > DEFAULT_MAX_PAYLOAD
    small_limit = AnyEnvelope(type=MessageType.REPLY, domain=DOMAIN, sender="a", body={}).encode()
    with pytest.raises(PayloadTooLarge):
        AnyEnvelope.decode(small_limit, max_size=len(small_limit) - 1)
    assert AnyEnvelope.decode(small_limit, max_size=len(small_limit)).sender == "a"


def test_every_wire_error_is_a_ctxbus_error() -> None:
    from ctxbus.schemas import CtxbusError

    for error in (DecodeError, SchemaVersionError, EnvelopeInvalid, PayloadTooLarge):
        assert issubclass(error, WireError)
        assert issubclass(error, CtxbusError)


def _proposal() -> Proposal:
    return Proposal(domain=DOMAIN, author="agent-a", op=AddNote(text="hi"), key="k1", deadline=1e9)


def _commit() -> Commit:
    return Commit.of(_proposal(), revision=1, ts=1.5, committed_by="c1")


@pytest.mark.parametrize(
    "envelope",
    [
        ProposalEnvelope(domain=DOMAIN, sender="agent-a", body=_proposal()),
        ReplyEnvelope(domain=DOMAIN, sender="c1", body=Committed(revision=3)),
        ReplyEnvelope(domain=DOMAIN, sender="c1", body=Rejection(code=RejectionCode.DUPLICATE, reason="twice")),
        CommitEnvelope(domain=DOMAIN, sender="c1", body=CommitBatch(commits=(_commit(),))),
        SnapshotEnvelope(domain=DOMAIN, sender="c1", body=BriefSnapshot(seq=4, brief=TaskBrief(domain=DOMAIN))),
        DeadLetterEnvelope(
            domain=DOMAIN, sender="c1", body=DeadLetter.of(reason="r", detail="d", subject="s", payload=b"\x00\xff")
        ),
    ],
    ids=lambda e: e.type.value,
)
def test_each_kind_round_trips_with_its_typed_body(envelope: Envelope[Any]) -> None:
    decoded = type(envelope).decode(envelope.encode())
    assert decoded == envelope
    assert type(decoded.body) is type(envelope.body)  # a model, not a map checked later by hand


def test_a_message_of_another_kind_is_refused_before_its_body_is_read() -> None:
    commit = CommitEnvelope(domain=DOMAIN, sender="c1", body=CommitBatch(commits=(_commit(),))).encode()
    with pytest.raises(WrongMessageType, match="expected a proposal envelope, got a 'commit' envelope") as caught:
        ProposalEnvelope.decode(commit)
    assert isinstance(caught.value, EnvelopeInvalid)


def test_a_bad_body_is_told_apart_from_a_bad_envelope() -> None:
    body = {**_proposal().model_dump(mode="python"), "op": {"op": "add_note", "text": "x" * 3000}}
    data = AnyEnvelope(type=MessageType.PROPOSAL, domain=DOMAIN, sender="agent-a", body=body).encode()
    with pytest.raises(BodyInvalid) as caught:
        ProposalEnvelope.decode(data)
    assert str(caught.value) == (
        "proposal body is invalid: field 'op.add_note.text' is 3,000 characters long, over the limit of 2,000"
    )
    assert [e["loc"][0] for e in caught.value.validation_error.errors()] == ["body"]
    no_sender = AnyEnvelope(type=MessageType.PROPOSAL, domain=DOMAIN, sender="a", body=body).model_dump()
    del no_sender["sender"]
    with pytest.raises(EnvelopeInvalid) as bad_envelope:
        ProposalEnvelope.decode(msgpack.packb(no_sender))
    assert not isinstance(bad_envelope.value, BodyInvalid)


def test_only_the_kinds_something_sends_are_named() -> None:
    assert {kind.value for kind in MessageType} == {"proposal", "reply", "commit", "snapshot", "dead_letter"}
