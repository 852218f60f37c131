"""`ctxbus swarm run` end to end against the OpenAI-compatible stand-in: three agent loops
as processes on an embedded NATS, the demo's scenario played by the 'model' over HTTP."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli._procs import Command
from tests.loop._standin import MODEL, StandIn, write_corpus

AGENTS = 3
STEPS = 40
"""Enough for Channel 2 in a 200k window (the demo's)."""


@pytest.mark.timeout(240)
def test_swarm_run_against_the_standin_holds_every_invariant(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    write_corpus(workdir, agents=AGENTS, steps=STEPS)
    task = tmp_path / "task.md"
    task.write_text("# Fix the flaky cache tests\n\nWork with the others through the brief.\n")
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "TMPDIR": str(tmp_path), "COLUMNS": "400"}
    env.pop("OPENAI_API_KEY", None)
    env["CTXBUS_MODEL_API_KEY"] = "sk-standin"
    with StandIn(agents=AGENTS, steps=STEPS) as standin:
        args = ["--base-url", standin.base_url, "--model", MODEL, "--agents", str(AGENTS), "--task", str(task)]
        args += ["--tools", "bash", "--workdir", str(workdir), "--window", "200000", "--max-turns", "300", "--json"]
        with Command("swarm", "run", *args, env=env) as run:
            out, err = run.finish(200)
        code = run.proc.returncode

    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    report: dict[str, Any] = json.loads(out)
    assert report["ok"] is True and report["failures"] == [] and report["errors_logged"] == []
    agents = {a["agent"]: a for a in report["agents"]}
    assert sorted(agents) == [f"agent-{i + 1}" for i in range(AGENTS)] and report["unreported"] == []

    # The endpoint refused nothing: every prompt was one the API takes.
    assert standin.refused() == []
    counts = standin.counts
    assert sorted(counts) == sorted(agents) and all(c.finished for c in counts.values())

    for name, a in agents.items():
        # Every agent finished its part, on the same brief as the log (a joiner and a replay too).
        assert a["stopped"] == "final_answer"
        assert (a["hash"], a["revision"]) == (report["log_hash"], report["log_revision"])
        # Channel 1: the model saw a reminder in a tool result and called ctx_reduce for it.
        assert a["reminders"] >= 1 and counts[name].reminders_seen >= 1
        assert counts[name].reminders_followed == counts[name].reminders_seen
        # Channel 2: exactly one message per delivered cycle, and the model acted on it.
        delivered = [c["cycle"] for c in a["channel2_cycles"] if c["lease"] == "delivered"]
        held = [c["cycle"] for c in a["channel2_cycles"] if c["in_host"]]
        assert delivered == held and a["channel2_messages"] == len(held) >= 1
        assert counts[name].channel2_followed >= 1
        assert "channel2" in a["bands"] and a["reduces"] >= 2
        # Usage as the endpoint reported it, cached tokens included; the prompt kept lean.
        assert a["model_prompt_tokens"] == counts[name].prompt_tokens
        assert 0 < a["model_cached_tokens"] == counts[name].cached_tokens < a["model_prompt_tokens"]
        assert a["prompt_tokens"] < a["history_tokens"]
    assert report["log_hash"] == report["replay_hash"]
    assert report["victim"] is None
