"""A user's client, and the coordinator, riding out a server crash and restart."""

import uuid

import nats
import pytest

from ctxbus.agents.brief import Proposer
from ctxbus.schemas import AddPending, Domain

pytestmark = pytest.mark.anyio


async def test_a_fixture_client_sends_its_next_request_after_a_restart(nats_server_factory, nats_client_factory):
    server = nats_server_factory()
    client = await nats_client_factory(server)
    js = client.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.publish("orders.new", b"before")
    await server.arestart(hard=True)  # SIGKILL, as a crash, and back on the same port and store
    assert (await js.publish("orders.new", b"after")).seq == 2  # nats-py's own timeout, no retry


async def test_a_plain_nats_client_with_the_documented_settings_too(nats_server_factory):
    server = nats_server_factory()
    client = await nats.connect(server.url, reconnect_time_wait=0.25, max_reconnect_attempts=-1)
    try:
        js = client.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await server.arestart(hard=True)
        assert (await js.publish("orders.new", b"after", timeout=5)).seq == 1
        await server.arestart()  # SIGTERM this time
        assert (await js.publish("orders.new", b"again", timeout=5)).seq == 2
    finally:
        await client.close()


async def test_the_coordinator_serves_on_after_its_server_restarts(
    nats_server_factory, nats_client_factory, ctxbus_coordinator_factory
):
    server = nats_server_factory()
    coordinator = ctxbus_coordinator_factory(server)
    client = await nats_client_factory(server)
    proposer = Proposer(client, Domain.parse(f"me/s1/{uuid.uuid4().hex[:8]}"), agent_id="me")
    assert (await proposer.propose(AddPending(text="one"))).revision == 1
    await server.arestart(hard=True)
    assert (await proposer.propose(AddPending(text="two"))).revision == 2
    assert (await coordinator.status(client)).commits == 2


def test_a_sync_test_kills_and_starts_a_server(nats_server_factory):
    server = nats_server_factory()
    port = server.port
    server.kill()
    assert not server.running
    server.start()
    assert server.running and server.port == port
