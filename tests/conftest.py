"""Suite-wide settings. The real-NATS fixtures come from the `ctxbus.bus.testing` plugin."""

from typing import Any

import pytest
from hypothesis import Phase, settings

from ctxbus import bus

# Hypothesis's "explain" phase traces every line of every run to say where a failure
# comes from: on the heavier properties (a context composed many times) it turns a
# failure found in seconds into ten minutes of tracing, and the suite's timeout hides
# the failure itself. Everything else is the default; a failure prints its blob to
# reproduce it with `@reproduce_failure`.
settings.register_profile(
    "ctxbus",
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    print_blob=True,
)
settings.load_profile("ctxbus")


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """The event loop ctxbus runs on in production (asyncio, through uvloop where installed)."""
    return bus.anyio_backend()


collect_ignore = ["plugin_project"]
"""A user's project with its own settings, run by `test_plugin_project.py` in a pytest of its own."""
