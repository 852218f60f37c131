"""An adapter whose framework is not installed says which extra brings it."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("langchain", "langchain", "langchain"),
        ("autogen", "autogen_core", "autogen"),
        ("openai_agents", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_names_the_extra(module: str, framework: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"  # what an environment without it gives
        f"import ctxbus.agents.adapters.{module}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: "), done.stderr
    assert f"pip install 'ctxbus[{extra}]'" in last, last


def test_a_missing_module_of_our_own_is_not_blamed_on_the_extra() -> None:
    code = (
        "import sys; sys.modules['ctxbus.agents.adapters._builtins'] = None\n"
        "import ctxbus.agents.adapters.openai_agents"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "pip install" not in done.stderr, done.stderr
