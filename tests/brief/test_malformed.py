"""Proposals that fail to decode with a long explanation still get an answer."""

from __future__ import annotations

import time
import uuid

import msgpack

from ctxbus.bus import Verb, request, subject
from ctxbus.schemas import Domain, Envelope, Rejection, RejectionCode, ReplyAdapter
from tests._support import running_coordinator


async def test_an_envelope_whose_error_runs_long_is_answered_with_a_clipped_reason(nats_url: str) -> None:
    domain = Domain.parse(f"bad/s/{uuid.uuid4().hex[:8]}")
    raw = {
        "v": 1,
        "type": "proposal",
        "id": "x",
        "domain": str(domain),
        "sender": "raw",
        "ts": time.time(),
        "body": {"domain": str(domain), "author": "raw", "key": "k", "op": {"op": "add_note", "text": "hi"}},
        **{f"x{i}-" + "y" * 1000: i for i in range(20)},  # the error names the extra fields, at length
    }
    async with running_coordinator(nats_url, coordinator_id="c-long") as (client, _):
        answer = await request(client, subject(domain, Verb.PROPOSE), msgpack.packb(raw), timeout=5)
    rejection = ReplyAdapter.validate_python(Envelope.decode(answer).body)
    assert isinstance(rejection, Rejection) and rejection.code is RejectionCode.INVALID_OP
    assert rejection.reason.endswith("...") and "x19-" not in rejection.reason
