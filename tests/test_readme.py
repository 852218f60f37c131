"""The README's library example, run as a user would paste it: it must keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python_block_after(heading: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("```python\n", text.index(heading)) + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_library_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_python_block_after("## As a library"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ToolOutcome(" in done.stdout
    assert (tmp_path / "a1.db").is_file(), "the agent keeps its store where the example says"
