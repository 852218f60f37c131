"""Suite-wide settings. The real-NATS fixtures come from the `bus.testing` plugin."""

from typing import Any

import pytest

import bus


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """The event loop ctxbus runs on in production (asyncio, through uvloop where installed)."""
    return bus.anyio_backend()


collect_ignore = ["plugin_project"]
"""A user's project with its own settings, run by `test_plugin_project.py` in a pytest of its own."""
