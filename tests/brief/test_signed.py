"""Signed commits: defence in depth behind the server's permissions.

On a server that checks no one (as if a principal's permissions were too wide, or a
coordinator's connection were hijacked), a forger appends a well-formed commit to a
domain's log. Replicas that trust only the tenant's signing key skip the forged entry
(counted, and dead-lettered by the coordinator): the brief every reader holds is what
the real coordinator committed. (Answers are not signed: signing them cost 15 % of the
commit median; the server lets only coordinators answer, which tests/bus/test_auth.py
checks, queue group and inboxes alike.)
"""

from __future__ import annotations

import time
from pathlib import Path

from ctxbus.agents.brief import BriefReplica, Proposer
from ctxbus.bus import (
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
from ctxbus.schemas import (
    AddNote,
    Commit,
    Committed,
    DeadLetterEnvelope,
    Proposal,
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
        agent = Proposer(client, domain, agent_id="a")
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
