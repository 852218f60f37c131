"""`ctxbus swarm run` end to end against the OpenAI-compatible stand-in: three agent loops
as processes on an embedded NATS, the demo's scenario played by the 'model' over HTTP."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.swarm import AgentResult, AgentStatus, Channel2Cycle, LogState, RunConfig, SwarmReport, Tally
from ctxbus.coordinator.cli._common import console
from ctxbus.coordinator.cli._swarm_cmds import _print_report
from ctxbus.schemas import Domain
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


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--agents", "9"], ["--agents", "between 1 and 8, got 9"]),
        (["--tools", "curl"], ["--tools", "unknown curl; the optional tools are: bash"]),
        (["--max-turns", "0"], ["--max-turns", "at least 1, got 0"]),
        (["--window", "100"], ["--window", "at least 4,096 tokens, got 100"]),
        (["--task", "missing.md"], ["--task", "missing.md is not a file"]),
    ],
)
def test_bad_arguments_fail_fast_with_a_clear_message(args: list[str], words: list[str], tmp_path: Path) -> None:
    task = tmp_path / "task.md"
    task.write_text("do it")
    given = ["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--task", str(task), *args]
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "TMPDIR": str(tmp_path), "COLUMNS": "200"}
    with Command("swarm", "run", *given, env=env, cwd=tmp_path) as run:
        out, err = run.finish(30)
    assert run.proc.returncode == 2 and out == ""
    assert all(w in " ".join(err.split()) for w in words), err


def test_the_report_of_a_run_shows_what_the_endpoint_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 300)
    task = tmp_path / "task.md"
    task.write_text("do it")
    config = RunConfig(
        nats_url="nats://127.0.0.1:1", domain=Domain.parse("t/s/run"), data_dir=tmp_path, base_url="http://x/v1",
        model="m", task=task, agents=1,
    )  # fmt: skip
    tally = Tally(
        step=12, starts=1, bands=["quiet", "urgent", "channel2"], reminders=2, reduces=3, stopped="final_answer",
        model_prompt_tokens=400_000, model_cached_tokens=300_000, model_completion_tokens=900,
    )  # fmt: skip
    result = AgentResult(
        agent="agent-1", tally=tally, prompt_tokens=30_000, history_tokens=120_000, synthetic_messages=1,
        cycles=[Channel2Cycle(cycle=0, lease="delivered", in_host=True)], missing_constraints=[], revision=7,
        hash="cd" * 32,
    )  # fmt: skip
    state = LogState(revision=7, hash="cd" * 32, replay_hash="cd" * 32)
    report = SwarmReport.build(config, [AgentStatus("agent-1", state="reported", result=result)], state, elapsed=3)
    assert report.ok and report.victim is None
    with console.capture() as capture:
        _print_report(report)
    text = capture.get()
    header = [cell.strip() for cell in next(line for line in text.splitlines() if "API cached" in line).split("┃")]
    row = [cell.strip() for cell in next(line for line in text.splitlines() if line.startswith(" agent-1")).split("│")]
    shown = dict(zip(header, row, strict=True))
    assert shown["API prompt"] == "400,000" and shown["API cached"] == "300,000 (75%)"
    assert shown["turns"] == "12" and shown["stopped"] == "final_answer" and shown["ctx_reduce"] == "3"
    assert (
        "300,000 of them cached (75%)" in text and "2 Channel 1 reminders shown, 1 Channel 2 cycles delivered" in text
    )
    assert "constraints:" not in text  # the demo's scripted promises are not a run's
    assert "all invariants hold" in text
