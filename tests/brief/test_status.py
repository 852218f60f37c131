"""What a coordinator tells operators: its status answer and its dead letters, as models.

Both cross a process boundary, so the reader validates them: `ctxbus status` must drop an
answer that is not a coordinator's status rather than print (or crash on) it, and a
dead letter reads the same whichever subject it came on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from nats.aio.msg import Msg

from ctxbus import coordinator
from ctxbus.agents.brief import Proposer
from ctxbus.bus import (
    GLOBAL_DLQ,
    METRICS_SUBJECT,
    STATUS_SUBJECT,
    BusConfig,
    Verb,
    connect,
    domain_of,
    request,
    routed,
    subject,
)
from ctxbus.bus.testing import ServerFactory
from ctxbus.coordinator.cli._status_cmds import _status
from ctxbus.schemas import (
    DEAD_LETTER_DETAIL_MAX,
    DEAD_LETTER_QUOTE_MAX,
    AddNote,
    Committed,
    CoordinatorStatus,
    DeadLetter,
    DeadLetterEnvelope,
    DecodeError,
    Envelope,
    EnvelopeInvalid,
    MessageType,
)
from tests._support import fresh_domain, running_coordinator

# -- the status answer -----------------------------------------------------------------


async def test_the_coordinators_answer_is_a_status_in_json(nats_url: str) -> None:
    domain = fresh_domain()
    async with running_coordinator(nats_url, coordinator_id="c-status") as (client, _):
        assert await Proposer(client, domain, agent_id="a").propose(AddNote(text="one")) == Committed(revision=1)
        raw = await request(client, STATUS_SUBJECT, b"", timeout=5)
    status = CoordinatorStatus.decode(raw)
    assert status.coordinator == "c-status" and status.commits == 1
    assert str(domain) in status.domains
    # JSON an operator can read with `nats req`, holding every field of the model and no other.
    assert json.loads(raw).keys() == CoordinatorStatus.model_fields.keys()


_STATUS = CoordinatorStatus(coordinator="c1", uptime_s=3.5, commits=2, domains=("a/b/c",))


@pytest.mark.parametrize(
    "answer",
    [
        b"hello",
        b"",
        b"[1, 2]",
        b'"c1"',
        b'{"coordinator": "c1"}',
        b'{"coordinator": "c1", "uptime_s": "a while", "commits": 2}',
        b'{"coordinator": "c1", "uptime_s": 3, "commits": -1}',
        b'{"coordinator": "c1", "uptime_s": 3, "commits": 2, "domains": "a/b/c"}',
        b'{"coordinator": "", "uptime_s": 3, "commits": 2}',
    ],
)
def test_an_answer_that_is_not_a_status_is_refused(answer: bytes) -> None:
    with pytest.raises((DecodeError, EnvelopeInvalid)):
        CoordinatorStatus.decode(answer)


def test_a_status_reads_back_and_fields_it_does_not_know_are_ignored() -> None:
    assert CoordinatorStatus.decode(_STATUS.encode()) == _STATUS
    newer = {**json.loads(_STATUS.encode()), "shards": 4}  # a newer coordinator's answer
    assert CoordinatorStatus.decode(json.dumps(newer).encode()) == _STATUS


async def test_status_lists_the_coordinators_and_skips_an_impostor(
    nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON object with the right keys but wrong values is not a coordinator: the
    command lists the real one only, and says what it ignored."""

    async def impostor(msg: Msg) -> None:
        await msg.respond(b'{"coordinator": "impostor", "uptime_s": "a while", "commits": 3}')

    other = await connect(BusConfig(servers=[nats_url]))
    try:
        sub = await other.subscribe(STATUS_SUBJECT, cb=impostor)
        await other.flush()
        assert not await _status(nats_url, None, True), "an impostor alone is no coordinator"
        alone, err = capsys.readouterr()
        async with running_coordinator(nats_url, coordinator_id="c-listed"):
            assert await _status(nats_url, None, True)
        await sub.unsubscribe()
    finally:
        await other.close()
    assert 'not a coordinator\'s status: b\'{"coordinator": "impostor"' in err, err
    assert "uptime_s" in err, "the note says what was wrong"
    assert all(c["state"] != "serving" for c in json.loads(alone)["coordinators"])
    out, _ = capsys.readouterr()
    serving = [c["coordinator"] for c in json.loads(out)["coordinators"] if c["state"] == "serving"]
    assert serving == ["c-listed"]


async def test_status_tells_a_frozen_coordinator_from_a_stopped_one(
    nats_server_factory: ServerFactory, tmp_path: Path
) -> None:
    """SIGSTOP a coordinator process: `status` shows it not answering, with how long
    since its last heartbeat; SIGCONT, and it serves again; stopped, it says so."""
    nats_url = nats_server_factory().url  # its own: no other coordinator may serve there
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "ctxbus.coordinator.cli", "coordinator", "--nats", nats_url, "--id", "c-frozen"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def state() -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "ctxbus.coordinator.cli", "status", "--json", "--nats", nats_url],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        return next(c for c in json.loads(done.stdout)["coordinators"] if c["coordinator"] == "c-frozen")

    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # serving
        assert state()["state"] == "serving"
        proc.send_signal(signal.SIGSTOP)
        frozen = state()
        assert frozen["state"] == "not answering", frozen
        assert isinstance(frozen["last_heartbeat_s"], float)
        told = subprocess.run(
            [sys.executable, "-m", "ctxbus.coordinator.cli", "status", "--nats", nats_url],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert told.returncode == 1, told.stderr
        assert "coordinator c-frozen not answering (last heartbeat" in told.stdout, told.stdout
        assert "not answering (below): wake or restart it" in told.stdout, told.stdout
        proc.send_signal(signal.SIGCONT)
        assert state()["state"] == "serving"
        readable = subprocess.run(
            [sys.executable, "-m", "ctxbus.coordinator.cli", "status", "--nats", nats_url],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert "coordinator c-frozen serving" in readable.stdout and "last error: none" in readable.stdout
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert state()["state"] == "stopped"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# -- dead letters ----------------------------------------------------------------------


async def test_dead_letters_are_reports_on_either_subject(nats_url: str) -> None:
    domain = fresh_domain()
    garbage = b"\xc1" + b"x" * (2 * DEAD_LETTER_QUOTE_MAX)
    async with running_coordinator(nats_url, coordinator_id="c-dlq") as (client, _):
        dlq = await client.subscribe(subject(domain, Verb.DLQ))
        global_dlq = await client.subscribe(GLOBAL_DLQ)
        await request(client, subject(domain, Verb.PROPOSE), garbage, timeout=5)
        await client.publish("ctx.bad\u00e9.s.t.propose", b"x")
        in_domain = (await dlq.next_msg(timeout=5)).data
        outside = (await global_dlq.next_msg(timeout=5)).data

    envelope = DeadLetterEnvelope.decode(in_domain)
    assert envelope.type is MessageType.DEAD_LETTER and envelope.sender == "c-dlq" and envelope.domain == domain
    letter = envelope.body
    assert letter.reason == "DecodeError" and letter.subject == subject(domain, Verb.PROPOSE)
    assert letter.size == len(garbage) and letter.payload_head == garbage[:DEAD_LETTER_QUOTE_MAX]
    plain = msgpack.unpackb(in_domain)["body"]
    assert plain["reason"] == "DecodeError", "readers of the plain body still find its fields"
    assert plain["payload_head"] == garbage[:DEAD_LETTER_QUOTE_MAX], "the quoted bytes stay bytes on the wire"

    bare = DeadLetter.decode(outside)
    assert bare.reason == "bad_subject" and bare.subject == "ctx.bad\u00e9.s.t.propose" and bare.payload_head == b"x"
    assert msgpack.unpackb(outside)["reason"] == "bad_subject", "still a plain msgpack map"


async def test_a_message_whose_error_would_quote_a_megabyte_still_makes_a_dead_letter(nats_url: str) -> None:
    domain = fresh_domain()
    junk = msgpack.packb({"v": "\x00" * 300_000, "type": "proposal"})
    async with running_coordinator(nats_url, coordinator_id="c-dlq-big") as (client, _):
        dlq = await client.subscribe(subject(domain, Verb.DLQ))
        await request(client, subject(domain, Verb.PROPOSE), junk, timeout=5)
        letter = DeadLetterEnvelope.decode((await dlq.next_msg(timeout=5)).data).body
    assert letter.reason == "SchemaVersionError" and letter.size == len(junk)
    assert len(letter.detail) < 300, letter.detail


def test_a_dead_letter_quotes_only_the_head_and_refuses_what_is_not_one() -> None:
    letter = DeadLetter.of(reason="r", detail="d", subject="s", payload=b"y" * (DEAD_LETTER_QUOTE_MAX + 1))
    assert letter.size == DEAD_LETTER_QUOTE_MAX + 1 and len(letter.payload_head) == DEAD_LETTER_QUOTE_MAX
    long = DeadLetter.of(reason="r", detail="e" * 100_000, subject="s", payload=b"")
    assert len(long.detail) == DEAD_LETTER_DETAIL_MAX and long.detail.endswith("...")
    assert DeadLetter.decode(letter.encode()) == letter
    domain = fresh_domain()
    assert DeadLetterEnvelope.decode(letter.envelope(domain=domain, sender="c").encode()).body == letter

    AnyEnvelope = Envelope[dict[str, Any]]
    reply = AnyEnvelope(type=MessageType.REPLY, domain=domain, sender="c", body=letter.model_dump())
    with pytest.raises(EnvelopeInvalid, match="expected a dead_letter envelope"):
        DeadLetterEnvelope.decode(reply.encode())
    incomplete = AnyEnvelope(type=MessageType.DEAD_LETTER, domain=domain, sender="c", body={"reason": "r"})
    with pytest.raises(EnvelopeInvalid, match="dead_letter body is invalid"):
        DeadLetterEnvelope.decode(incomplete.encode())
    with pytest.raises(EnvelopeInvalid):
        DeadLetter.decode(msgpack.packb({**letter.model_dump(), "payload_head": b"z" * (DEAD_LETTER_QUOTE_MAX + 1)}))
    with pytest.raises(DecodeError):
        DeadLetter.decode(b"\xc1")


# -- the subjects ----------------------------------------------------------------------


def test_the_operator_subjects_are_global_and_the_coordinator_names_the_same() -> None:
    """Operators and `docs/operations.md` name these subjects: they must not move."""
    assert (STATUS_SUBJECT, METRICS_SUBJECT, GLOBAL_DLQ) == ("ctxbus.status", "ctxbus.metrics", "ctxbus.dlq")
    assert (coordinator.STATUS_SUBJECT, coordinator.METRICS_SUBJECT, coordinator.GLOBAL_DLQ) == (
        STATUS_SUBJECT,
        METRICS_SUBJECT,
        GLOBAL_DLQ,
    )
    for name in (STATUS_SUBJECT, METRICS_SUBJECT, GLOBAL_DLQ):
        assert domain_of(name) is None


@pytest.mark.parametrize("verb", list(Verb))
def test_domain_of_reads_back_every_domain_subject(verb: Verb) -> None:
    domain = fresh_domain()
    assert domain_of(subject(domain, verb)) == domain
    assert domain_of(routed(subject(domain, verb), "coord-a")) == domain


@pytest.mark.parametrize(
    "name",
    [
        "ctx.u.s.propose",  # a token short
        "ctx.u.s.t.propose.r.extra",  # a token long
        "ctx.bad\u00e9.s.t.propose",  # a token no domain may have
        "ctxbus.live.CTXBUS_TX.ctx.u",  # five valid tokens, but not under `ctx`
        "other.u.s.t.propose",
    ],
)
def test_domain_of_names_no_domain_for_other_subjects(name: str) -> None:
    assert domain_of(name) is None
