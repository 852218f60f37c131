"""A user's agent code proposing to a real coordinator."""

import uuid

import pytest

from ctxbus.agents.brief import Proposer
from ctxbus.schemas import AddPending, Committed, Domain

pytestmark = pytest.mark.anyio


def _domain() -> Domain:
    return Domain.parse(f"me/s1/{uuid.uuid4().hex[:8]}")


async def test_a_proposal_is_committed_by_the_session_coordinator(ctxbus_coordinator, nats_client, nats_url):
    assert ctxbus_coordinator.servers == [nats_url]
    domain = _domain()
    reply = await Proposer(nats_client, domain, agent_id="me").propose(AddPending(text="write the test"))
    assert isinstance(reply, Committed) and reply.revision == 1
    status = await ctxbus_coordinator.status(nats_client)
    assert status.coordinator == ctxbus_coordinator.coordinator_id
    assert str(domain) in status.domains


async def test_a_killed_coordinator_leaves_the_work_to_another(
    nats_server_factory, nats_client_factory, ctxbus_coordinator_factory
):
    server = nats_server_factory()
    first = ctxbus_coordinator_factory(server)
    client = await nats_client_factory(server)
    proposer = Proposer(client, _domain(), agent_id="me")
    assert (await proposer.propose(AddPending(text="one"))).revision == 1
    first.kill()
    second = ctxbus_coordinator_factory(server, coordinator_id="second")
    assert (await proposer.propose(AddPending(text="two"))).revision == 2
    assert (await second.status(client)).commits == 1
