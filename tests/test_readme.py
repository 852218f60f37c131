"""The README's library example, run as a user would paste it: it must keep working."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.cli._procs import Command

REPO = Path(__file__).resolve().parents[1]


def _python_block_after(heading: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("```python\n", text.index(heading)) + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_library_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_python_block_after("## As a library"))
    # The example's EmbeddedServer keeps its store in a temp dir: under tmp_path here. Should
    # the example hang, its nats-server (in a session of its own) is killed with it.
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    env.pop("OPENAI_API_KEY", None)  # no model can run here: the example composes, and sends only with a key
    with Command(str(script), env=env, program=[sys.executable], cwd=tmp_path) as example:
        out, err = example.finish(timeout=120)
    assert example.proc.returncode == 0, err
    assert "ToolOutcome(" in out
    assert (tmp_path / "a1.db").is_file(), "the agent keeps its store where the example says"


def test_the_library_example_sends_its_prompts_to_a_chat_completions_endpoint(tmp_path: Path) -> None:
    """With a key and an OpenAI-compatible endpoint (the stand-in, which refuses what the
    API refuses), the example's loop sends every prompt, and none is refused."""
    from tests.loop._standin import StandIn

    script = tmp_path / "example.py"
    script.write_text(_python_block_after("## As a library"))
    with StandIn(agents=1, steps=6) as standin:
        env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
        env |= {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": standin.base_url}
        with Command(str(script), env=env, program=[sys.executable], cwd=tmp_path) as example:
            out, err = example.finish(timeout=180)
        assert example.proc.returncode == 0, err
        requests = sum(counts.requests for counts in standin.counts.values())
        assert requests >= 1 and standin.refused() == [], standin.refused()
    stopped, prompt_tokens, cached_tokens = out.splitlines()[-1].split()
    assert stopped in ("final_answer", "max_turns") and int(prompt_tokens) > 0, out
    assert int(cached_tokens) > 0, "the stand-in reports the prefix its previous request shared"
