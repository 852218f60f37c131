"""Constraints stated early survive verbatim to the last turn: long generated histories and
the real sessions of ../shared/anchors/transcripts at a 16k budget."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ctxbus.agents.context import Composition, ContextConfig, LocalContext, Tokenizer
from tests.context.conftest import MakeContext, add_raw, anchors_dir, load_session, probes_for

BUDGET = 16_000


def _sessions() -> list[Path]:
    """Sessions for which the anchors README lists early constraints.

    The anchors are required (see the `transcripts` fixture), so finding none fails
    collection rather than turning every case into one silent skip.
    """
    root = anchors_dir() / "transcripts"
    sessions = [p for p in sorted(root.glob("*/*.jsonl")) if probes_for(root, p)]
    if not sessions:
        pytest.fail(f"no anchor transcripts with probes under {root} (set CTXBUS_ANCHORS)", pytrace=False)
    return sessions


def _kept_layers(ctx: LocalContext) -> str:
    """Text of the layers that must hold early constraints at the end: pinned, authored (the user's words) and summary."""
    return "\n".join(
        item.text for view in ctx.inspect() if view.name in ("pinned", "authored", "summary") for item in view.items
    )


def _replay(ctx: LocalContext, messages: list[dict[str, object]]) -> Composition:
    """Compose before every model call (each assistant message), then at the final message;
    returns that last composition: the final prompt."""
    for index, message in enumerate(messages[:-1]):
        if message["role"] == "assistant" and index:
            report = ctx.compose().report
            assert report.total <= report.budget
        add_raw(ctx, message)
    return ctx.compose()


@pytest.mark.parametrize("path", _sessions(), ids=lambda p: p.stem[:48])
def test_early_constraints_survive_real_sessions_at_16k(
    transcripts: Path, path: Path, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    probes = probes_for(transcripts, path)
    messages = load_session(path)
    ctx = LocalContext(tmp_path / "s.db", "anchors/replay/s", config=ContextConfig(window=BUDGET), tokenizer=tokenizer)
    try:
        _replay(ctx, messages)
        total = sum(e.tokens for e in ctx._state.entries)
        assert total > BUDGET or len(messages) < 60, "a long session must be over budget to prove anything"
        kept = _kept_layers(ctx)
        missing = [probe for probe in probes if probe not in kept]
        assert not missing, f"lost at the final message: {missing}"
    finally:
        ctx.close()


def test_mini_swe_rules_are_in_every_final_prompt(transcripts: Path, tmp_path: Path, tokenizer: Tokenizer) -> None:
    """Each of the 17 mini-swe-agent sessions replayed at 16k: the messages of its final
    prompt, as sent to the model, hold every rule its first user message stated."""
    files = sorted((transcripts / "mini-swe-agent").glob("*.jsonl"))
    assert len(files) == 17, "the README lists 17 mini-swe-agent sessions"
    for path in files:
        rules = probes_for(transcripts, path)
        assert "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt" in rules
        ctx = LocalContext(
            tmp_path / f"{path.stem}.db", "anchors/mini-swe/s", config=ContextConfig(window=BUDGET), tokenizer=tokenizer
        )
        try:
            final = _replay(ctx, load_session(path))
            history = sum(e.tokens for e in ctx._state.entries)
        finally:
            ctx.close()
        assert history > final.report.budget >= final.report.total, f"{path.name}: nothing had to be trimmed"
        prompt = "\n".join(str(message["content"]) for message in final.messages)
        missing = [rule for rule in rules if rule not in prompt]
        assert not missing, f"{path.name}: not in the final prompt: {missing}"


def test_early_constraints_survive_long_generated_history(make_ctx: MakeContext) -> None:
    rnd = random.Random(11)
    ctx = make_ctx(window=8_000)
    rules = [
        "Never write to /etc/hosts.",
        "The budget is no more than $40 per run.",
        "记住：不要删除 /data/raw 目录。",
        "Remember that the release branch is release-2024.7.",
    ]
    ctx.add("user", "Migrate the ingest service to the new queue. " + rules[0])
    ctx.add("user", rules[1])
    vocab = "queue worker retry lag offset partition consumer ack batch commit topic schema".split()
    for turn in range(1_500):
        if turn == 3:
            ctx.add("user", rules[2])
        if turn == 5:
            ctx.add("user", rules[3])
        ctx.add("assistant", " ".join(rnd.choice(vocab) for _ in range(30)), tool_name="sh", call_id=f"c{turn}")
        ctx.add(
            "tool",
            "\n".join(" ".join(rnd.choice(vocab) for _ in range(12)) for _ in range(rnd.randint(1, 60))),
            tool_name="sh",
            call_id=f"c{turn}",
        )
        if turn % 10 == 0:
            ctx.compose()
    result = ctx.compose("What is left to do?")
    assert sum(e.tokens for e in ctx._state.entries) > 20 * 8_000
    kept = _kept_layers(ctx)
    for rule in rules:
        assert rule in kept
    assert result.report.total <= result.report.budget
