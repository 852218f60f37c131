"""A user's replicated stream, written to right after its leader died."""

import uuid

import pytest

pytestmark = pytest.mark.anyio


async def test_an_r3_write_goes_through_once_a_new_leader_is_elected(nats_cluster, nats_client_factory):
    client = await nats_client_factory(nats_cluster)
    js = client.jetstream()
    stream = f"EVENTS_{uuid.uuid4().hex[:8]}"
    await js.add_stream(name=stream, subjects=[f"{stream}.>"], num_replicas=3)
    await js.publish(f"{stream}.a", b"before")
    leader = await nats_cluster.wait_for_leader(stream)
    leader.kill()
    try:
        elected = await nats_cluster.wait_for_leader(stream)
        assert elected is not leader and elected.running
        # The client may have been on the dead node: it reconnects first, which on a busy
        # machine can take longer than a publish's default 5 s.
        assert (await js.publish(f"{stream}.a", b"after", timeout=15)).seq == 2
    finally:
        await leader.astart()  # the cluster is the session's: leave it whole
