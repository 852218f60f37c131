"""Signed commits and answers: defence in depth behind the server's permissions.

On a server that checks no one (as if a principal's permissions were too wide, or a
coordinator's connection were hijacked), a forger appends a well-formed commit to a
domain's log and answers proposals from the coordinators' queue group. Replicas that
trust only the tenant's signing key skip the forged entry (counted, and dead-lettered
by the coordinator), and proposers that check answers ignore the forged ones: the
brief every reader holds is what the real coordinator committed.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
from nats.aio.msg import Msg

from agents.brief import BriefReplica, Proposer
from bus import (
    AuthStore,
    BriefLog,
    BriefState,
    Credentials,
    NatsClient,
    Role,
    Signer,
    Verb,
    Verifier,
    subject,
)
from schemas import (
    AddNote,
    Commit,
    Committed,
    DeadLetterEnvelope,
    Proposal,
    ReplyEnvelope,
    TaskBrief,
    brief_hash,
)
from tests._support import fresh_domain, serving_coordinator


def _tenant_keys(tmp_path: Path, tenant: str) -> tuple[Signer, Verifier]:
    store = AuthStore.init(tmp_path / "auth")
    store.add_tenant(tenant)
    coordinator = Credentials.load(store.add_principal(tenant, "coordinator", Role.COORDINATOR))
    assert coordinator.signing_seed is not None
    return Signer(coordinator.signing_seed), Verifier(coordinator.trusted_signers)


async def _forge_commit(client: NatsClient, state: BriefState, text: str) -> int:
    """Append a commit at the log's next revision, unsigned, as a coordinator would."""
    proposal = Proposal(
        domain=state.domain, author="mallory", op=AddNote(text=text), key=text, deadline=time.time() + 60
    )
    commit = Commit.of(proposal, revision=state.brief.revision + 1, ts=time.time(), committed_by="coordinator")
    return await BriefLog(client).append(state, [commit], sender="coordinator")


async def test_a_forged_entry_is_skipped_by_every_reader_that_checks_signatures(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain("signed")
    signer, verifier = _tenant_keys(tmp_path, domain.user)
    config = {"coordinator_id": "c-signed", "signer": signer, "verifier": verifier}
    async with serving_coordinator(nats_url, **config) as (client, tg, coordinator):
        dlq = await client.subscribe(subject(domain, Verb.DLQ))
        replica = BriefReplica(client, domain, verifier=verifier)
        await tg.start(replica.run)
        agent = Proposer(client, domain, agent_id="a", verifier=verifier)
        assert await agent.propose(AddNote(text="real"), deadline=10) == Committed(revision=1)
        await replica.wait_for(1, timeout=10)

        forged_at = await _forge_commit(client, replica.state, "forged")
        assert await agent.propose(AddNote(text="after"), deadline=10) == Committed(revision=2)
        await replica.wait_for(2, timeout=10)
        assert [n.text for n in replica.brief.notes] == ["real", "after"]
        assert replica.refused_entries == 1

        # The coordinator met the forged entry when its append lost to it, skipped it too,
        # and dead-lettered it for an operator.
        letter = DeadLetterEnvelope.decode((await dlq.next_msg(timeout=10)).data).body
        assert (letter.reason, letter.detail) == ("unsigned_entry", "unsigned")
        committer = coordinator.committer(domain)
        assert committer is not None and committer.brief is not None
        assert brief_hash(committer.brief) == replica.hash

        # A joiner that checks agrees; one that does not (an older build) would not.
        checked = await BriefLog(client, verifier=verifier).load(domain)
        assert brief_hash(checked.brief) == replica.hash and checked.seq > forged_at
        unchecked = await BriefLog(client).catch_up(BriefState(TaskBrief(domain=domain), 0))
        assert "forged" in [n.text for n in unchecked.brief.notes], "the forgery is in the log; only checks skip it"


async def test_a_forged_answer_is_not_believed(nats_url: str, tmp_path: Path) -> None:
    """A client in the coordinators' queue group answers every proposal it gets with
    "committed at rev 999999": a proposer that checks signatures asks again until the
    real coordinator answers, and every proposal is in the log, at its real revision.
    (Twenty first attempts through the group: the impostor is picked for none of them
    once in a million runs.)"""
    domain = fresh_domain("signed")
    signer, verifier = _tenant_keys(tmp_path, domain.user)
    forged = ReplyEnvelope(domain=domain, sender="coordinator", body=Committed(revision=999_999)).encode()
    async with serving_coordinator(nats_url, coordinator_id="c-signed", signer=signer, verifier=verifier) as serving:
        client = serving.client
        lies = 0

        async def lie(msg: Msg) -> None:
            nonlocal lies
            lies += 1
            await client.publish(msg.reply, forged)

        impostor = await client.subscribe(subject(domain, Verb.PROPOSE), queue="ctxbus-coordinators", cb=lie)
        try:
            with anyio.fail_after(60):
                replies = []
                for i in range(20):  # each from a new proposer: its first attempt goes to the group
                    agent = Proposer(client, domain, agent_id=f"a{i}", verifier=verifier)
                    replies.append(await agent.propose(AddNote(text=f"n{i}"), attempt_timeout=0.5))
        finally:
            await impostor.unsubscribe()
        assert lies > 0, "the impostor took some of the proposals"
        assert replies == [Committed(revision=i + 1) for i in range(20)]
        state = await BriefLog(client, verifier=verifier).load(domain)
        assert [n.text for n in state.brief.notes] == [f"n{i}" for i in range(20)]
