"""Tenants and roles the server enforces: the auth directory, and a permission matrix in
which every row is a real attempt against a nats-server started with the generated
configuration."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import nats
import pytest
from nats.aio.client import Client

from ctxbus.agents.brief import BriefReplica, PresenceBeacon, Proposer, read_presence
from ctxbus.bus import (
    AuthStore,
    BriefLog,
    BriefState,
    BusConfig,
    Credentials,
    CredentialsError,
    EmbeddedServer,
    Leases,
    Role,
    ServerError,
    Signer,
    TxLogConfig,
    Verb,
    Verifier,
    close_quietly,
    connect,
    kv_key,
    subject,
)
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from ctxbus.schemas import (
    AddNote,
    Commit,
    CommitBatch,
    CommitEnvelope,
    Committed,
    Domain,
    Presence,
    Proposal,
    ProposalEnvelope,
    TaskBrief,
    brief_hash,
)

# -- the directory -------------------------------------------------------------------


def test_a_store_keeps_tenants_principals_and_private_files_private(tmp_path: Path) -> None:
    store = AuthStore.init(tmp_path / "auth")
    store.add_tenant("acme")
    agent = store.add_principal("acme", "a1", Role.AGENT)
    store.add_principal("acme", "c1", Role.COORDINATOR)
    assert store.tenants() == {"acme": {"a1": Role.AGENT, "c1": Role.COORDINATOR}}
    for path in (agent, store.accounts_file, store.path / "registry.json", *store.path.glob("signing/*")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o700
    creds = Credentials.load(agent)
    assert (creds.tenant, creds.name, creds.role, creds.signing_seed) == ("acme", "a1", Role.AGENT, None)
    assert creds.inbox_prefix == "_INBOX.acme.a1"
    coordinator = store.credentials("acme", "c1")
    assert coordinator.signing_seed is not None, "coordinators sign the log"
    assert creds.trusted_signers == coordinator.trusted_signers
    assert creds.seed not in store.accounts_file.read_text(), "the server config holds public keys only"
    assert creds.public_key in store.accounts_file.read_text()
    assert "seed" not in repr(creds) and creds.seed not in repr(creds)


@pytest.mark.parametrize(
    ("step", "says"),
    [
        (lambda s: s.add_tenant("acme"), "tenant 'acme' exists already"),
        (lambda s: s.add_principal("bolt", "a1", Role.AGENT), "no tenant 'bolt'"),
        (lambda s: s.add_principal("acme", "a1", Role.AGENT), "has a principal named 'a1' already"),
        (lambda s: s.add_principal("acme", "a.b", Role.AGENT), "principal name 'a.b' contains '.'"),
        (lambda s: s.add_tenant("ac*me"), "tenant 'ac*me' contains '*'"),
    ],
)
def test_mistakes_in_the_directory_are_refused_with_a_reason(
    tmp_path: Path, step: Callable[[AuthStore], object], says: str
) -> None:
    store = AuthStore.init(tmp_path / "auth")
    store.add_tenant("acme")
    store.add_principal("acme", "a1", Role.AGENT)
    before = store.accounts_file.read_text()
    with pytest.raises(ValueError, match=re.escape(says)):  # CredentialsError and InvalidDomain are UsageErrors
        step(store)
    assert store.accounts_file.read_text() == before


def test_credentials_others_can_read_or_that_are_not_ours_are_refused(tmp_path: Path) -> None:
    store = AuthStore.init(tmp_path / "auth")
    store.add_tenant("acme")
    path = store.add_principal("acme", "a1", Role.AGENT)
    os.chmod(path, 0o644)
    with pytest.raises(CredentialsError, match=r"can be read by others \(mode 644\).*chmod 600"):
        Credentials.load(path)
    os.chmod(path, 0o600)
    path.write_text(json.dumps({"tenant": "acme"}))
    with pytest.raises(CredentialsError, match="not a ctxbus credentials file: field 'name': Field required"):
        Credentials.load(path)
    with pytest.raises(CredentialsError, match="cannot read credentials"):
        Credentials.load(tmp_path / "nowhere.json")
    with pytest.raises(CredentialsError, match="not empty"):
        AuthStore.init(store.path)
    with pytest.raises(CredentialsError, match="not a ctxbus auth directory"):
        AuthStore(tmp_path).tenants()


def test_a_server_without_auth_listens_on_loopback_only() -> None:
    with pytest.raises(ServerError, match="refusing to listen on 0.0.0.0 without auth"):
        EmbeddedServer(host="0.0.0.0")
    EmbeddedServer(host="::1")  # loopback is fine


# -- the matrix ------------------------------------------------------------------------

ACME = Domain.parse("acme/s1/t1")
BOLT = Domain.parse("bolt/s1/t1")
REFUSED_WITHIN = 5.0
"""Seconds for the server's refusal to reach the client: it comes back asynchronously."""


@dataclass
class _Tenancy:
    store: AuthStore
    url: str
    clients: list[Client] = field(default_factory=list)

    def config(self, tenant: str, name: str) -> BusConfig:
        return BusConfig(servers=[self.url], credentials=self.store.credentials(tenant, name))

    async def raw(self, tenant: str, name: str) -> _Raw:
        """A bare nats-py client as `name` of `tenant`, as an attacker would hold one."""
        creds = self.store.credentials(tenant, name)
        raw = _Raw()
        raw.client = await nats.connect(
            self.url,
            nkeys_seed_str=creds.seed,
            inbox_prefix=creds.inbox_prefix,
            error_cb=raw.on_error,
            max_reconnect_attempts=0,
        )
        self.clients.append(raw.client)
        return raw


@dataclass
class _Raw:
    client: Client = field(init=False)
    errors: list[str] = field(default_factory=list)

    async def on_error(self, exc: Exception) -> None:
        self.errors.append(str(exc).lower())

    async def refused(self, what: str) -> bool:
        """Whether the server said no to `what` (its permissions violation came back)."""
        with anyio.move_on_after(REFUSED_WITHIN):
            while not any("permissions violation" in e and what.lower() in e for e in self.errors):
                await anyio.sleep(0.02)
            return True
        return False


@pytest.fixture
async def tenancy(tmp_path: Path) -> AsyncIterator[_Tenancy]:
    """Two tenants on one server started with the generated config, each with a running
    coordinator; acme has two agents and an operator, bolt one agent."""
    store = AuthStore.init(tmp_path / "auth")
    for tenant in ("acme", "bolt"):
        store.add_tenant(tenant)
        store.add_principal(tenant, "c1", Role.COORDINATOR)
    for name, role in (("a1", Role.AGENT), ("a2", Role.AGENT), ("ops", Role.OPERATOR)):
        store.add_principal("acme", name, role)
    store.add_principal("bolt", "b1", Role.AGENT)
    store.add_principal("bolt", "ops", Role.OPERATOR)
    async with EmbeddedServer(tmp_path / "nats", auth=store) as server:
        tenancy = _Tenancy(store, server.url)
        coordinators = [await connect(tenancy.config(t, "c1")) for t in ("acme", "bolt")]
        try:
            async with anyio.create_task_group() as tg:
                for tenant, client in zip(("acme", "bolt"), coordinators, strict=True):
                    creds = store.credentials(tenant, "c1")
                    assert creds.signing_seed is not None
                    config = CoordinatorConfig(
                        coordinator_id=f"{tenant}-c1",
                        signer=Signer(creds.signing_seed),
                        verifier=Verifier(creds.trusted_signers),
                    )
                    await tg.start(Coordinator(client, config).run)
                yield tenancy
                tg.cancel_scope.cancel()
        finally:
            for client in [*coordinators, *tenancy.clients]:
                await close_quietly(client)


async def _agent(tenancy: _Tenancy, tenant: str, name: str) -> Client:
    client = await connect(tenancy.config(tenant, name))
    tenancy.clients.append(client)
    return client


async def _settled(tenancy: _Tenancy, domain: Domain, tenant: str) -> BriefState:
    """The domain's brief as its coordinator would load it, read with its credentials."""
    client = await _agent(tenancy, tenant, "c1")
    return await BriefLog(client).load(domain)


async def _following(
    a1: Client, tg: anyio.abc.TaskGroup, verifier: Verifier | None = None
) -> tuple[BriefReplica, Proposer]:
    """a1's replica of acme's brief, running, and its proposer, with one note committed."""
    replica = BriefReplica(a1, ACME, verifier=verifier)
    await tg.start(replica.run)
    honest = Proposer(a1, ACME, agent_id="a1")
    assert await honest.propose(AddNote(text="before"), deadline=10) == Committed(revision=1)
    await replica.wait_for(1, timeout=10)
    return replica, honest


async def test_the_roles_that_work_do_their_work(tenancy: _Tenancy) -> None:
    """Agents propose, follow the log, claim their Channel 2 leases and beat; operators
    read; each tenant's coordinator commits its own tenant's proposals."""
    a1 = await _agent(tenancy, "acme", "a1")
    b1 = await _agent(tenancy, "bolt", "b1")
    async with anyio.create_task_group() as tg:
        replica = BriefReplica(a1, ACME)
        await tg.start(replica.run)
        assert await Proposer(a1, ACME, agent_id="a1").propose(AddNote(text="acme's"), deadline=10) == Committed(
            revision=1
        )
        assert await Proposer(b1, BOLT, agent_id="b1").propose(AddNote(text="bolt's"), deadline=10) == Committed(
            revision=1
        )
        await replica.wait_for(1, timeout=10)
        leases = Leases(a1)
        await leases.ensure()
        assert (await leases.claim(kv_key(ACME, "a1", "cycle-1"), "a1", 5)).record.holder == "a1"
        beacon = PresenceBeacon(a1, ACME, "a1", lambda: Presence(agent="a1"))
        await tg.start(beacon.run)
        ops = await _agent(tenancy, "acme", "ops")
        assert (await BriefLog(ops).load(ACME)).brief.revision == 1
        following = BriefLog(ops).txlog.follow(subject(ACME, Verb.TX))  # `ctxbus log --follow`
        async with contextlib.aclosing(following):
            with anyio.fail_after(10):
                assert (await anext(following)).seq >= 1
        with anyio.fail_after(10):
            while [p.agent for p in await read_presence(ops, ACME)] != ["a1"]:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert [n.text for n in (await _settled(tenancy, BOLT, "bolt")).brief.notes] == ["bolt's"]


async def test_every_attack_is_refused_by_the_server_and_nothing_changes(tenancy: _Tenancy) -> None:
    a1 = await _agent(tenancy, "acme", "a1")
    async with anyio.create_task_group() as tg:
        replica, honest = await _following(a1, tg)
        before = (await _settled(tenancy, ACME, "acme")).brief

        mallory = await tenancy.raw("acme", "a2")
        js = mallory.client.jetstream(timeout=1)
        attacks: dict[str, Callable[[], Awaitable[object]]] = {
            # A well-formed commit straight on the log subject, as if from a coordinator.
            'publish to "ctx.acme.s1.t1.tx"': lambda: mallory.client.publish(subject(ACME, Verb.TX), _forged(before)),
            'publish to "$js.api.stream.purge.ctxbus_tx"': lambda: _try(js.purge_stream("CTXBUS_TX")),
            'publish to "$js.api.stream.delete.kv_ctxbus_briefs"': lambda: _try(js.delete_stream("KV_ctxbus_briefs")),
            'publish to "$kv.ctxbus_briefs.acme.s1.t1.brief"': lambda: mallory.client.publish(
                "$KV.ctxbus_briefs.acme.s1.t1.brief", b"", headers={"KV-Operation": "PURGE"}
            ),
            'publish to "$kv.ctxbus_leases.acme.s1.t1.a1.cycle-1"': lambda: mallory.client.publish(
                "$KV.ctxbus_leases.acme.s1.t1.a1.cycle-1", b"mine now"
            ),
            'publish to "$kv.ctxbus_presence.acme.s1.t1.a1"': lambda: mallory.client.publish(
                "$KV.ctxbus_presence.acme.s1.t1.a1", b"gone"
            ),
            'subscription to "ctx.*.*.*.propose"': lambda: mallory.client.subscribe(
                "ctx.*.*.*.propose", queue="ctxbus-coordinators"
            ),
            'subscription to "ctx.acme.s1.t1.propose"': lambda: mallory.client.subscribe(subject(ACME, Verb.PROPOSE)),
            'subscription to "_inbox.acme.a1.>"': lambda: mallory.client.subscribe("_INBOX.acme.a1.>"),
            'publish to "_inbox.acme.a1.x"': lambda: mallory.client.publish(
                "_INBOX.acme.a1.x", b"committed rev 999999"
            ),
            'publish to "ctx.bolt.s1.t1.propose"': lambda: mallory.client.publish(subject(BOLT, Verb.PROPOSE), b"x"),
        }
        refused = {}
        for what, attack in attacks.items():
            await attack()
            await mallory.client.flush()
            refused[what] = await mallory.refused(what.split(" ", 2)[-1].strip('"'))
        assert refused == dict.fromkeys(attacks, True), refused

        # Another tenant's log, snapshots and presence cannot even be named: bolt's
        # agent reads its own account's (acme's entries are not there).
        bolt = await _agent(tenancy, "bolt", "b1")
        assert (await BriefLog(bolt).load(ACME)).brief.revision == 0
        bolt_leases = Leases(bolt)
        await bolt_leases.ensure()
        assert await bolt_leases.read(kv_key(ACME, "a1", "cycle-1")) is None

        # Unaffected: the coordinator commits on, every reader agrees.
        assert await honest.propose(AddNote(text="after"), deadline=10) == Committed(revision=2)
        await replica.wait_for(2, timeout=10)
        settled = await _settled(tenancy, ACME, "acme")
        assert replica.hash == brief_hash(settled.brief)
        assert [n.text for n in settled.brief.notes] == ["before", "after"]
        tg.cancel_scope.cancel()


async def test_an_agent_can_neither_create_nor_delete_a_consumer_on_the_log(tenancy: _Tenancy) -> None:
    """A push consumer delivers wherever its creator says, and no permission can restrict
    that: so an agent may create none (it reads the log with direct gets), in any of the
    forms the JetStream API has, nor delete one."""
    a1 = await _agent(tenancy, "acme", "a1")
    coordinator = await _agent(tenancy, "acme", "c1")
    trap = "_INBOX.acme.a1.trap"  # a1's own inbox: mallory wants log entries delivered there
    delivered: list[str] = []

    async def heard(msg: nats.aio.msg.Msg) -> None:
        delivered.append(msg.subject)

    await a1.subscribe(trap, cb=heard)
    async with anyio.create_task_group() as tg:
        replica, honest = await _following(a1, tg)
        kept = await coordinator.jetstream().add_consumer("CTXBUS_TX", durable_name="kept", ack_policy="none")

        def create(deliver_to: str, **config: object) -> bytes:
            body = {"deliver_subject": deliver_to, "deliver_policy": "all", "ack_policy": "none", **config}
            return json.dumps({"stream_name": "CTXBUS_TX", "config": body}).encode()

        propose = subject(ACME, Verb.PROPOSE)
        rows = {
            "into the proposal queue": ("$JS.API.CONSUMER.CREATE.CTXBUS_TX", create(propose)),
            "into another's inbox": ("$JS.API.CONSUMER.CREATE.CTXBUS_TX", create(trap)),
            "named, into another's inbox": ("$JS.API.CONSUMER.CREATE.CTXBUS_TX.evil", create(trap, name="evil")),
            "named and filtered": (
                f"$JS.API.CONSUMER.CREATE.CTXBUS_TX.evil.{subject(ACME, Verb.TX)}",
                create(propose, name="evil", filter_subject=subject(ACME, Verb.TX)),
            ),
            "durable": ("$JS.API.CONSUMER.DURABLE.CREATE.CTXBUS_TX.evil", create(trap, durable_name="evil")),
            "delete": ("$JS.API.CONSUMER.DELETE.CTXBUS_TX.kept", b""),
        }
        refused = {}
        for row, (api, body) in rows.items():
            mallory = await tenancy.raw("acme", "a2")  # one each, so every refusal is its row's
            await mallory.client.publish(api, body, reply=mallory.client.new_inbox())
            await mallory.client.flush()
            refused[row] = await mallory.refused(api)
        assert refused == dict.fromkeys(rows, True), refused

        consumers = await coordinator.jetstream().consumers_info("CTXBUS_TX")
        assert kept.name in {c.name for c in consumers}, "the consumer is still there"
        assert {c.config.deliver_subject for c in consumers} & {propose, trap} == set()
        assert await honest.propose(AddNote(text="after"), deadline=10) == Committed(revision=2)
        await replica.wait_for(2, timeout=10)  # the agent follows the log without a consumer
        assert delivered == [], "nothing reached a1's inbox"
        tg.cancel_scope.cancel()


async def test_another_tenants_presence_cannot_be_read(tenancy: _Tenancy) -> None:
    a1 = await _agent(tenancy, "acme", "a1")
    async with anyio.create_task_group() as tg:
        await tg.start(PresenceBeacon(a1, ACME, "a1", lambda: Presence(agent="a1")).run)
        acme_ops = await _agent(tenancy, "acme", "ops")
        with anyio.fail_after(10):
            while [p.agent for p in await read_presence(acme_ops, ACME)] != ["a1"]:
                await anyio.sleep(0.05)
        # bolt's operator reads presence, but only its own account's: acme's is not there.
        bolt_ops = await _agent(tenancy, "bolt", "ops")
        assert await read_presence(bolt_ops, ACME) == []
        # An agent reads no presence at all, its own tenant's or another's.
        b1 = await tenancy.raw("bolt", "b1")
        api = "$JS.API.DIRECT.GET.KV_ctxbus_presence"
        await b1.client.publish(api, b'{"last_by_subj": "$KV.ctxbus_presence.acme.s1.t1.a1"}', reply="_INBOX.bolt.b1.x")
        await b1.client.flush()
        assert await b1.refused(api)
        tg.cancel_scope.cancel()


async def test_an_entry_signed_by_a_key_the_tenant_does_not_trust_is_skipped(tenancy: _Tenancy) -> None:
    """A coordinator's credentials misused with another key (bolt's, here): the entry is
    in acme's log, and every acme reader that checks signatures skips it."""
    a1 = await _agent(tenancy, "acme", "a1")
    trusted = Verifier(tenancy.store.credentials("acme", "a1").trusted_signers)
    async with anyio.create_task_group() as tg:
        replica, honest = await _following(a1, tg, verifier=trusted)

        bolts_key = tenancy.store.credentials("bolt", "c1").signing_seed
        assert bolts_key is not None
        misused = await _agent(tenancy, "acme", "c1")
        proposal = Proposal(
            domain=ACME, author="mallory", op=AddNote(text="forged"), key="f", deadline=time.time() + 60
        )
        commit = Commit.of(proposal, revision=2, ts=time.time(), committed_by="acme-c1")
        await BriefLog(misused, signer=Signer(bolts_key)).append(replica.state, [commit], sender="acme-c1")

        assert await honest.propose(AddNote(text="after"), deadline=10) == Committed(revision=2)
        await replica.wait_for(2, timeout=10)
        assert [n.text for n in replica.brief.notes] == ["before", "after"]
        assert replica.refused_entries == 1
        joined = await BriefLog(a1, verifier=trusted, txlog=TxLogConfig(consumers=False)).load(ACME)
        assert brief_hash(joined.brief) == replica.hash
        tg.cancel_scope.cancel()


async def _try(request: Awaitable[object]) -> None:
    """A JetStream request the server refuses never gets an answer: it times out."""
    try:
        await request
    except (nats.errors.Error, TimeoutError):
        pass
    else:
        raise AssertionError("the server carried out a request it should have refused")


def _forged(brief: TaskBrief) -> bytes:
    proposal = Proposal(
        domain=ACME, author="mallory", op=AddNote(text="forged"), key="forged", deadline=time.time() + 60
    )
    commit = Commit.of(proposal, revision=brief.revision + 1, ts=time.time(), committed_by="acme-c1")
    return CommitEnvelope(domain=ACME, sender="acme-c1", body=CommitBatch(commits=(commit,))).encode()


def test_an_envelope_module_is_not_needed_to_forge_one() -> None:
    """The forged commit above is exactly what a coordinator appends: only the server's
    permissions stop it."""
    data = _forged(TaskBrief(domain=ACME))
    assert CommitEnvelope.decode(data).body.commits[0].author == "mallory"
    assert ProposalEnvelope  # the other kinds are as easy to build
