"""The one setting a user's project needs besides installing ctxbus: the event loop its
async tests run on. anyio runs each async test on every backend it finds installed, trio
too when a package pulled it in, and nats-py (so every ctxbus fixture) runs on asyncio
alone: pick asyncio, through uvloop as ctxbus's own processes do."""

import pytest

from ctxbus import bus


@pytest.fixture(scope="session")
def anyio_backend():
    return bus.anyio_backend()
