"""`ctxbus swarm demo` end to end: NATS, a coordinator and agent processes, one killed;
and what its live view and report draw."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.swarm import (
    AgentResult,
    AgentStatus,
    Channel2Cycle,
    LogState,
    Note,
    SwarmConfig,
    SwarmReport,
    SwarmRunner,
    Tally,
)
from ctxbus.coordinator.cli._common import console
from ctxbus.coordinator.cli._swarm_cmds import _live_table, _print_events, _print_report
from ctxbus.schemas import Domain
from tests.cli._procs import READ_TIMEOUT, Command


def _env(tmp_path: Path) -> dict[str, str]:
    """State, and the temp data dir of a run without `--data-dir`, under the test's `tmp_path`."""
    return {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "TMPDIR": str(tmp_path), "COLUMNS": "400"}


def _demo(*args: str, tmp_path: Path, timeout: float = READ_TIMEOUT) -> tuple[int, str, str]:
    """Run `ctxbus swarm demo *args` to its end: exit code, stdout, stderr. Past `timeout`
    the test fails, and the demo's nats-server and agent workers are killed with it."""
    with Command("swarm", "demo", *args, env=_env(tmp_path)) as demo:
        out, err = demo.finish(timeout)
    assert demo.proc.returncode is not None
    return demo.proc.returncode, out, err


@pytest.mark.timeout(180)
def test_demo_report_holds_every_invariant(tmp_path: Path) -> None:
    code, out, err = _demo("--agents", "3", "--json", tmp_path=tmp_path, timeout=150)
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    report: dict[str, Any] = json.loads(out)
    assert report["ok"] is True and report["failures"] == []
    agents = {a["agent"]: a for a in report["agents"]}
    assert sorted(agents) == ["agent-1", "agent-2", "agent-3"]

    # One brief: every agent holds the log's revision and hash, which a joiner from the
    # snapshot and a replay of the whole log get too; nothing logged an error.
    assert {a["hash"] for a in agents.values()} == {report["log_hash"]} == {report["replay_hash"]}
    assert report["snapshot_revision"] > 0, "the joiner started from a snapshot, not from an empty brief"
    assert {a["revision"] for a in agents.values()} == {report["log_revision"]}
    assert report["errors_logged"] == []

    # The prompt cache: each agent's prompts measured against a provider's cache, and
    # cheaper than sending its whole history at every call, cached the same way.
    for a in agents.values():
        assert 0 < a["cached_share"] <= 1, a["cached_share"]
        assert set(a["cost"]) == set(a["full_cost"]) == {"anthropic", "openai"}
        assert 0 < a["cost"]["anthropic"] < a["full_cost"]["anthropic"], (a["cost"], a["full_cost"])

    # Channel 2: reached, and exactly one message per delivered cycle.
    assert any("channel2" in a["bands"] for a in agents.values())
    for a in agents.values():
        held = [c["cycle"] for c in a["channel2_cycles"] if c["in_host"]]
        delivered = [c["cycle"] for c in a["channel2_cycles"] if c["lease"] == "delivered"]
        assert set(delivered) <= set(held), a["channel2_cycles"]
        assert a["channel2_messages"] == len(held) >= 1
        assert a["reduces"] >= 1 and a["dropped"] >= 1
        assert a["prompt_tokens"] < a["history_tokens"]
        assert a["missing_constraints"] == [] and a["missing_from_brief"] == []

    # The rejected option: agent-1 rejected it, another agent was refused adopting it.
    [refusal] = report["refusals"]
    assert refusal["agent"] != "agent-1" and refusal["code"] == "rejected_option"
    assert "rejected at rev" in refusal["reason"] and "by agent-1" in refusal["reason"]

    # The victim was SIGKILLed, came back from its store, and finished its steps.
    victim = agents[report["victim"]]
    assert victim["starts"] == 2 and victim["killed_at"] is not None
    assert victim["resumed_from"] is not None and victim["resumed_from"] >= 1
    assert victim["steps"] == agents["agent-1"]["steps"]

    assert Path(report["data_dir"]).parent == tmp_path, "the temp data dir is made where TMPDIR says"
    assert not Path(report["data_dir"]).exists(), "a clean run removes its temp data dir"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--agents", "0"], ["--agents", "between 2 and 8, got 0"]),
        (["--steps", "5"], ["--steps", "at least 40, got 5"]),
        (["--kill-at", "75"], ["--kill-at", "between 1 and 74"]),
        (["--deadline", "0"], ["--deadline", "more than 0 seconds, got 0.0"]),
    ],
)
def test_bad_arguments_fail_fast_with_a_clear_message(args: list[str], words: list[str], tmp_path: Path) -> None:
    code, out, err = _demo(*args, tmp_path=tmp_path)
    assert code == 2
    assert all(w in err for w in words), err
    assert out == ""


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_every_process_keeps_the_data_and_a_new_run_there_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "run"
    with Command("swarm", "demo", "--data-dir", str(data), env=_env(tmp_path)) as demo:
        joined = 0
        while joined < 3:  # event lines scroll above the live table
            line = demo.readline(timeout=60)
            assert line, f"the demo ended before three agents joined; stderr:\n{demo.stderr}"
            joined += "joined the brief" in line
        assert _processes_using(data), "the agents and the NATS server should be running"
        demo.children()
        demo.proc.send_signal(signal.SIGINT)
        out, err = demo.finish()
        assert demo.proc.returncode == 130, err
        assert f"kept in {data}" in err
        assert _processes_using(data) == [] and demo.orphans() == []  # checked before the cleanup kills
    rows = [line.split("│") for line in out.splitlines() if "│" in line]  # the table, not the event lines
    assert [row[1].strip() for row in rows[-3:]] == ["stopped"] * 3, out
    assert sorted(p.name for p in (data / "agents").glob("*.db")) == ["agent-1.db", "agent-2.db", "agent-3.db"]

    # That directory holds a run now: a second demo there is refused before it starts anything.
    kept = sorted(p.relative_to(data) for p in data.rglob("*"))
    code, out, err = _demo("--data-dir", str(data), tmp_path=tmp_path)
    assert code == 2, err
    assert "--data-dir" in err and f"{data} already holds a swarm run; pass a new or empty directory" in err
    assert "Traceback" not in err and out == ""
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == kept, "nothing was written there"


def _agent_workers(demo: Command) -> list[int]:
    """The demo's agent processes now running (its other child is its nats-server)."""
    return [pid for pid in demo.children() if b"ctxbus.agents.swarm._worker" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone already
        return b""


@pytest.mark.timeout(120)
def test_a_run_past_its_deadline_is_given_up_and_its_data_kept(tmp_path: Path) -> None:
    """The run cannot end before its 5 s deadline (40 steps of 1 s). The demo is frozen
    (SIGSTOP) as soon as its agents are spawned, and thawed once both have created their
    stores: its deadline runs on while it is frozen, so it fires after the stores exist
    however slowly a loaded machine starts the agents, and with them there to be kept
    (in a temporary data dir, which a clean run removes)."""
    args = ("-n", "2", "--steps", "40", "--step-delay", "1", "--deadline", "5", "--json")

    def stores() -> list[str]:  # in the run's temp dir, made under TMPDIR (tmp_path)
        return sorted(p.name for p in tmp_path.glob("ctxbus-swarm-*/agents/*.db"))

    with Command("swarm", "demo", *args, env=_env(tmp_path)) as demo:
        deadline = time.monotonic() + READ_TIMEOUT
        while len(_agent_workers(demo)) < 2 and demo.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(demo.proc.pid, signal.SIGSTOP)
        try:
            while stores() != ["agent-1.db", "agent-2.db"] and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            os.kill(demo.proc.pid, signal.SIGCONT)
        assert stores() == ["agent-1.db", "agent-2.db"], f"the agents made no stores; stderr:\n{demo.stderr}"
        out, err = demo.finish()
    assert demo.proc.returncode == 1 and out == "", err
    assert "the swarm did not finish within 5s (--deadline); agent logs are in " in err
    logs = Path(err.rsplit("agent logs are in ", 1)[1].split()[0])
    assert sorted(p.name for p in logs.glob("*.db")) == ["agent-1.db", "agent-2.db"]
    assert sorted(p.name for p in logs.glob("*.log")) == ["agent-1.log", "agent-2.log"]


CONFIG = SwarmConfig(nats_url="nats://127.0.0.1:1", domain=Domain.parse("t/s/swarm"), data_dir=Path("/nowhere"))


def test_the_live_view_prints_every_event_even_once_the_runner_keeps_only_the_latest() -> None:
    runner, printed, sent = SwarmRunner(CONFIG), 0, 0
    with console.capture() as capture:
        for burst in (300, 300, 300, 700):  # the runner keeps 500; a frame is drawn after each burst
            for _ in range(burst):
                runner._record(Note(agent="agent-1", step=1, text=f"event #{sent}"))
                sent += 1
            printed = _print_events(console, runner, printed)
    lines = capture.get().splitlines()
    assert lines[:900] == [f" agent-1 step   1  event #{i}" for i in range(900)]
    assert lines[900:] == ["... 200 earlier events not shown"] + [
        f" agent-1 step   1  event #{i}" for i in range(1100, 1600)
    ]


def _reported(name: str) -> AgentStatus:
    result = AgentResult(
        agent=name,
        tally=Tally(step=CONFIG.steps, starts=1, bands=["quiet", "channel2"]),
        prompt_tokens=50_000,
        history_tokens=230_000,
        synthetic_messages=1,
        cycles=[Channel2Cycle(cycle=0, lease="delivered", in_host=True)],
        missing_constraints=[],
        revision=15,
        hash="ab" * 32,
    )
    return AgentStatus(name, state="reported", result=result)


def test_the_report_has_a_row_for_an_agent_that_never_reported_and_says_who_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "width", 300)  # the whole table, whatever runs the tests
    statuses = [_reported("agent-1"), AgentStatus("agent-2", state="failed", exit_codes=[1]), _reported("agent-3")]
    report = SwarmReport.build(
        CONFIG, statuses, LogState(revision=15, hash="ab" * 32, replay_hash="ab" * 32), elapsed=1.0
    )
    with console.capture() as capture:
        _print_report(report)
    text = capture.get()
    rows = [line.split("│") for line in text.splitlines() if line.startswith(" agent-")]
    assert [row[0].strip() for row in rows] == ["agent-1", "agent-2", "agent-3"]
    assert rows[1][1].strip() == "no report (failed)"
    header = [cell.strip() for cell in next(line for line in text.splitlines() if "ch2 msgs" in line).split("┃")]
    delivered, messages = header.index("ch2 delivered"), header.index("ch2 msgs")
    assert [(row[delivered].strip(), row[messages].strip()) for row in (rows[0], rows[2])] == [("1", "1")] * 2
    assert "brief: rev 15, hash abababababab, the same on every reporting agent (2 of 3)" in text


def test_a_screen_too_narrow_for_the_tables_shows_every_name_and_figure_uncut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "width", 80)  # as on a terminal of 80 columns
    monkeypatch.setattr(console, "soft_wrap", False)
    statuses = [_reported("agent-1"), AgentStatus("agent-2", state="failed", exit_codes=[1])]
    report = SwarmReport.build(
        CONFIG, statuses, LogState(revision=15, hash="ab" * 32, replay_hash="ab" * 32), elapsed=1.0
    )
    with console.capture() as capture:
        _print_report(report)
        console.print(_live_table(SwarmRunner(CONFIG)))
    text = capture.get()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80, text
    for figure in ("50,000", "230,000", "78% saved", "quiet > channel2", "abababababab", "no report (failed)"):
        assert figure in text
    assert "starting" in text and "brief rev" in text


def _processes_using(path: Path) -> list[str]:
    """Command lines of live processes that mention `path` (workers, nats-server)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in text:
            found.append(text)
    return found
