"""Suite-wide settings. The real-NATS fixtures come from the `bus.testing` plugin."""

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """nats-py is asyncio-only, so every async test runs on asyncio."""
    return "asyncio"
