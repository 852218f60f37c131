"""The swarm report's judge: each broken invariant is named, a clean run has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbus.agents.swarm import (
    AgentResult,
    AgentStatus,
    Channel2Cycle,
    InvalidSwarmConfig,
    LogState,
    Refusal,
    SwarmConfig,
    SwarmReport,
    Tally,
    UnreportedAgent,
)
from ctxbus.schemas import Domain

CONFIG = SwarmConfig(nats_url="nats://127.0.0.1:1", domain=Domain.parse("t/s/swarm"), data_dir=Path("/nowhere"))
HASH = "ab" * 32
REFUSAL = Refusal(option="Redis distributed lock", code="rejected_option", reason="rejected at rev 8 by agent-1: no")


def _status(name: str, **changes: object) -> AgentStatus:
    victim = name == CONFIG.victim
    tally = Tally(
        step=CONFIG.steps,
        starts=2 if victim else 1,
        resumed_from=30 if victim else None,
        bands=["quiet", "urgent", "channel2"],
        refusals=[REFUSAL] if victim else [],
    )
    fields: dict[str, object] = {
        "agent": name,
        "tally": tally,
        "prompt_tokens": 50_000,
        "history_tokens": 230_000,
        "synthetic_messages": 1,
        "cycles": [Channel2Cycle(cycle=0, lease="delivered", in_host=True)],
        "missing_constraints": [],
        "revision": 15,
        "hash": HASH,
    }
    result = AgentResult.model_validate({**fields, **changes})
    return AgentStatus(name, state="reported", result=result, killed_at=30 if victim else None)


def _judge(*statuses: AgentStatus) -> list[str]:
    return SwarmReport.build(CONFIG, statuses, LogState(revision=15, hash=HASH, replay_hash=HASH), elapsed=1.0).failures


def test_a_clean_run_holds() -> None:
    report = SwarmReport.build(
        CONFIG,
        [_status("agent-1"), _status("agent-2")],
        LogState(revision=15, hash=HASH, replay_hash=HASH),
        elapsed=1.0,
    )
    assert report.ok and report.failures == []
    assert [r.agent for r in report.refusals] == ["agent-2"]
    assert report.model_dump(mode="json")["ok"] is True


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"hash": "cd" * 32}, "agent-1 holds brief rev 15 hash cdcdcdcdcdcd"),
        ({"revision": 14}, "agent-1 holds brief rev 14"),
        ({"synthetic_messages": 2}, "agent-1 holds 2 Channel 2 messages for 1 delivered cycles"),
        ({"cycles": [Channel2Cycle(cycle=0, lease="delivered", in_host=False)]}, "[0] are marked delivered"),
        ({"prompt_tokens": 300_000}, "is not smaller than its history"),
        (
            {"missing_constraints": ["Never edit files under vendor/"]},
            "agent-1's pinned context (brief block aside) lost constraints its user stated: ['Never edit",
        ),
        (
            {"missing_from_brief": ["Do not add new dependencies"]},
            "the brief in agent-1's final prompt lacks the constraints ['Do not add new dependencies']",
        ),
    ],
)
def test_each_broken_invariant_is_named(changes: dict[str, object], words: str) -> None:
    failures = _judge(_status("agent-1", **changes), _status("agent-2"))
    assert any(words in f for f in failures), failures


def test_no_channel2_no_refusal_no_restart_and_a_silent_agent_all_fail() -> None:
    quiet = Tally(step=CONFIG.steps, starts=1, bands=["quiet"])
    lone = AgentStatus("agent-2", state="failed", exit_codes=[1])
    calm = _status("agent-1", tally=quiet, synthetic_messages=0, cycles=[])
    failures = _judge(calm, lone)
    assert "agent-2 never reported (exit codes [1], state failed)" in failures
    assert "no agent reached Channel 2" in failures
    assert "nobody was refused when re-adopting the rejected option" in failures
    assert "agent-2 was not killed and resumed from its store" in failures


def test_a_snapshot_that_is_not_what_the_log_gives_fails_the_run() -> None:
    """Every agent agrees with the joiner's view, but a replay of the whole log gives
    another brief: the snapshot joiners start from went wrong."""
    log = LogState(revision=15, hash=HASH, replay_hash="cd" * 32)
    report = SwarmReport.build(CONFIG, [_status("agent-1"), _status("agent-2")], log, elapsed=1.0)
    assert report.failures == [
        "the brief a joiner loads (from the snapshot) has hash abababababab, the log replayed from its start cdcdcdcdcdcd"
    ]


def test_any_error_logged_fails_the_run_and_is_quoted() -> None:
    logged = [f"agent-{i % 2 + 1}: 2026-12-04 ERROR agents.x: boom {i}" for i in range(12)]
    log = LogState(revision=15, hash=HASH, replay_hash=HASH)
    report = SwarmReport.build(CONFIG, [_status("agent-1"), _status("agent-2")], log, logged, elapsed=1.0)
    [failure] = report.failures
    assert failure.startswith("12 errors were logged during the run: agent-1: 2026-12-04 ERROR agents.x: boom 0; ")
    assert failure.endswith("boom 9 (and 2 more)")
    assert not report.ok and report.errors_logged == logged


def test_a_failure_found_by_the_caller_is_added_to_the_report() -> None:
    log = LogState(revision=15, hash=HASH, replay_hash=HASH)
    report = SwarmReport.build(CONFIG, [_status("agent-1"), _status("agent-2")], log, elapsed=1.0)
    assert report.failing() is report
    failed = report.failing("the coordinator's cached brief has hash 0000")
    assert not failed.ok and failed.failures == ["the coordinator's cached brief has hash 0000"]
    assert report.ok, "the report itself is left as it was"


def test_an_agent_that_never_reported_is_listed_with_how_it_was_last_seen() -> None:
    crashed = AgentStatus("agent-2", state="failed", exit_codes=[-9, 1], killed_at=30)
    report = SwarmReport.build(
        CONFIG, [_status("agent-1"), crashed], LogState(revision=15, hash=HASH, replay_hash=HASH), elapsed=1.0
    )
    assert [a.agent for a in report.agents] == ["agent-1"]
    assert report.unreported == [UnreportedAgent(agent="agent-2", state="failed", exit_codes=[-9, 1], killed_at=30)]
    assert report.model_dump(mode="json")["unreported"] == [
        {"agent": "agent-2", "state": "failed", "exit_codes": [-9, 1], "killed_at": 30}
    ]


@pytest.mark.parametrize(
    ("settings", "option"),
    [({"agents": 1}, "--agents"), ({"agents": 9}, "--agents"), ({"steps": 39}, "--steps"),
     ({"step_delay": -1.0}, "--step-delay"), ({"kill_at": 0}, "--kill-at")],
)  # fmt: skip
def test_settings_are_checked_where_they_are_made(settings: dict[str, object], option: str) -> None:
    with pytest.raises(InvalidSwarmConfig) as caught:
        SwarmConfig(nats_url="nats://x:1", domain=CONFIG.domain, data_dir=Path("."), **settings)  # type: ignore[arg-type]
    assert caught.value.option == option
