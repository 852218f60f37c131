"""`ctxbus web` run as a tenant's operator on a server with auth: that tenant's domains,
agents and coordinators, its log checked against its coordinator's key; nothing of the
other tenant's."""

from __future__ import annotations

from pathlib import Path

import anyio

from ctxbus.agents.brief import PresenceBeacon, Proposer
from ctxbus.bus import (
    PRESENCE_BUCKET,
    AuthStore,
    Bucket,
    BucketConfig,
    BusConfig,
    BusError,
    EmbeddedServer,
    NatsClient,
    Role,
    Signer,
    Verb,
    Verifier,
    close_quietly,
    connect,
    kv_key,
    publish,
    subject,
)
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from ctxbus.coordinator.cli._web import read_store, serving_web
from ctxbus.schemas import AddNote, Committed, Domain, Presence
from tests.web._http import get, until

ACME = Domain.parse("acme/s1/t1")
BOLT = Domain.parse("bolt/s1/t1")


async def test_an_operators_page_shows_its_tenant_only(tmp_path: Path) -> None:
    store = AuthStore.init(tmp_path / "auth")
    for tenant, agent in (("acme", "a1"), ("bolt", "b1")):
        store.add_tenant(tenant)
        store.add_principal(tenant, "c1", Role.COORDINATOR)
        store.add_principal(tenant, agent, Role.AGENT)
    store.add_principal("acme", "ops", Role.OPERATOR)
    clients: list[NatsClient] = []
    agents: dict[Domain, NatsClient] = {}

    async def as_(tenant: str, name: str) -> NatsClient:
        clients.append(await connect(BusConfig(servers=[server.url], credentials=store.credentials(tenant, name))))
        return clients[-1]

    async with EmbeddedServer(tmp_path / "nats", auth=store) as server:
        try:
            async with anyio.create_task_group() as tg:
                for tenant, domain, agent in (("acme", ACME, "a1"), ("bolt", BOLT, "b1")):
                    signed = store.credentials(tenant, "c1")
                    assert signed.signing_seed is not None
                    config = CoordinatorConfig(coordinator_id=f"{tenant}-c1", signer=Signer(signed.signing_seed))
                    coordinating = await as_(tenant, "c1")
                    await tg.start(Coordinator(coordinating, config).run)
                    client = agents[domain] = await as_(tenant, agent)
                    reply = await Proposer(client, domain, agent_id=agent).propose(AddNote(text=tenant), deadline=10)
                    assert reply == Committed(revision=1)

                    async def bucket_made(client: NatsClient = coordinating, domain: Domain = domain) -> bool:
                        try:  # the coordinator makes it once it serves: an agent may not
                            await Bucket(client, BucketConfig(name=PRESENCE_BUCKET)).get(kv_key(domain, "none"))
                        except BusError:
                            return False
                        return True

                    await until(bucket_made, "the presence bucket")
                    beacon = PresenceBeacon(client, domain, agent, lambda a=agent: Presence(agent=a), interval=0.5)  # type: ignore[misc]
                    await tg.start(beacon.run)
                ops = store.credentials("acme", "ops")
                async with serving_web(
                    await as_("acme", "ops"), inspect=read_store, tenant="acme",
                    verifier=Verifier(ops.trusted_signers), interval=0.3,
                ) as base:  # fmt: skip

                    async def acme_seen() -> dict[str, object] | None:
                        _, swarm = await get(base + "/api/swarm")
                        return swarm if swarm["domains"] and swarm["coordinators"] else None

                    swarm = await until(acme_seen, "acme's domain and coordinator")
                    assert [d["domain"] for d in swarm["domains"]] == [str(ACME)]
                    assert [a["agent"] for a in swarm["domains"][0]["agents"]] == ["a1"]
                    assert [c["coordinator"] for c in swarm["coordinators"]] == ["acme-c1"]
                    status, brief = await get(f"{base}/api/brief?domain={ACME}")
                    assert status == 200 and [r["text"] for r in brief["timeline"]] == ["add_note by a1: text='acme'"]
                    status, refused = await get(f"{base}/api/brief?domain={BOLT}")
                    assert status == 404 and "unknown domain" in refused["error"]
                    status, refused = await get(f"{base}/api/agent?domain={BOLT}&agent=b1")
                    assert status == 404
                    status, health = await get(base + "/api/health")
                    assert status == 200 and [c["coordinator"] for c in health["coordinators"]] == ["acme-c1"]
                    for domain in (ACME, BOLT):  # each tenant's coordinator dead-letters its own
                        await publish(agents[domain], subject(domain, Verb.PROPOSE), b"\xc1")

                    async def letters() -> list[object] | None:
                        _, health = await get(base + "/api/health")
                        return health["recent_dead_letters"] or None

                    (letter,) = await until(letters, "acme's dead letter")
                    assert letter["domain"] == str(ACME)
                tg.cancel_scope.cancel()
        finally:
            for client in clients:
                await close_quietly(client)
