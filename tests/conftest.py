"""Suite-wide settings. The real-NATS fixtures come from the `bus.testing` plugin."""

from typing import Any

import pytest

import bus


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """The event loop ctxbus runs on in production (asyncio, through uvloop where installed)."""
    return bus.anyio_backend()
