"""Compose: layer order, budget, brief, pins, eviction, expiry, logging, inspect."""

from __future__ import annotations

import logging

import pytest

from ctxbus.agents.context import LocalContext, Tokenizer
from tests.context.conftest import Clock, MakeContext, rendered_tokens


def _tool_turn(ctx: LocalContext, i: int, size: int = 40) -> tuple[int, int]:
    call = ctx.add("assistant", f"Looking at part {i}.", tool_name="bash", call_id=f"c{i}")
    result = ctx.add(
        "tool", "\n".join(f"line {j} of output {i}" for j in range(size)), tool_name="bash", call_id=f"c{i}"
    )
    return call, result


def test_prompt_order_and_layers(make_ctx: MakeContext, tokenizer: Tokenizer) -> None:
    ctx = make_ctx(window=4_000, settings={"reserve_system": 300, "reserve_output": 500})
    ctx.add("system", "You help with the billing service.")
    ctx.add("user", "Fix the invoice rounding bug.")
    ctx.add("user", "Do not touch the tax tables.")
    for i in range(30):
        _tool_turn(ctx, i)
    result = ctx.compose("What now?", brief="goal: fix rounding\nconstraint: no schema changes")
    roles = [m["role"] for m in result.messages]
    contents = [m["content"] for m in result.messages]
    assert roles[:2] == ["system", "user"] and "system" not in roles[1:]
    assert contents[0] == ctx.mode.system_text
    pinned, summary, brief = contents[1].split("\n\n")
    assert pinned.startswith("[pinned: goal and constraints]\n§1§ You help with the billing service.")
    assert "§3§ Do not touch the tax tables." in pinned
    assert "§2§ Fix the invoice rounding bug." in pinned, "the first user message is the goal"
    assert summary.startswith("[summary of earlier turns]\n")
    assert brief == "[shared brief]\ngoal: fix rounding\nconstraint: no schema changes", "last in the head"
    assert result.messages[-1] == {"role": "user", "content": "What now?"}
    rolling = result.messages[2:-1]
    assert rolling and all(m["content"].startswith("§") for m in rolling)
    assert [m["role"] for m in rolling[-2:]] == ["assistant", "tool"] and rolling[-1]["tool_call_id"] == "c29"

    report = result.report
    assert report.budget == 3_500
    assert report.total == sum(report.layers.values()) <= report.budget
    assert rendered_tokens(tokenizer, result.messages) <= report.total, "cached counts never under-count"
    assert report.layers["pinned"] <= report.budgets.pinned
    assert report.layers["summary"] <= report.budgets.summary
    assert report.trims and {t.reason for t in report.trims} <= {"low_value", "over_budget", "expired"}

    assert report.layers["pinned"] + report.layers["brief"] <= report.budgets.pinned, "the brief shares the cap"

    views = ctx.inspect()
    assert [v.name for v in views] == ["system", "pinned", "authored", "summary", "brief", "rolling", "input"]
    assert sum(v.tokens for v in views) == report.total
    rolling_view = views[5]
    assert [item.text for item in rolling_view.items] == [m["content"] for m in rolling]
    assert views[6].items[0].text == "What now?"


def test_everything_fits_nothing_is_trimmed(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=32_000)
    ctx.add("user", "hi there")
    for i in range(5):
        _tool_turn(ctx, i, size=5)
    result = ctx.compose()
    assert not result.report.trims
    assert len(result.messages) == 1 + 1 + 10, "system, pinned goal, five call/result pairs"


def test_messages_are_shared_read_only(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("assistant", "hello")
    message = ctx.compose().messages[-1]
    with pytest.raises(TypeError, match="read-only"):
        message["content"] = "changed"
    copy = dict(message)
    copy["content"] = "changed"
    assert ctx.compose().messages[-1]["content"] == "§1§ hello"


def test_soft_pins_are_demoted_before_hard_constraints(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=2_000, settings={"reserve_system": 300, "reserve_output": 300})
    rule = ctx.add("user", "Never delete rows from the audit table.")
    notes = [ctx.add("assistant", f"Important finding {i}: " + "detail " * 25, importance=0.9) for i in range(8)]
    report = ctx.compose().report
    demoted = [t.tag for t in report.trims if t.source == "pinned" and t.destination == "rolling" and t.tag]
    assert demoted and demoted == sorted(demoted) and set(demoted) <= set(notes), "oldest soft pins go first"
    pinned = next(v for v in ctx.inspect() if v.name == "pinned")
    assert any(item.tag == rule for item in pinned.items)


def test_a_long_hard_pin_cut_to_its_constraint_is_reported_as_such(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=1_900, settings={"reserve_system": 300, "reserve_output": 300})
    # Mostly rule (else only its rules are pinned, issue 21) and longer than SHORT_RULE_CHARS
    # (else it is never cut): pinned whole, then cut to its rules.
    background = "Some background on the module layout and how it grew over the years. " * 2
    rule = (
        "Never edit vendor{i}/ by hand. Never reformat its files, never bump its pinned versions, and never "
        "delete its license headers or its changelog, whatever a linter says about them."
    )
    rules = [ctx.add("user", background + rule.format(i=i)) for i in range(3)]
    trims = ctx.compose().report.trims
    assert [(t.tag, t.source, t.destination) for t in trims] == [(rules[0], "pinned", "constraint")]
    pinned = next(v for v in ctx.inspect() if v.name == "pinned")
    assert [(item.tag, item.kind) for item in pinned.items] == [
        (rules[0], "constraint"),
        (rules[1], "chat"),
        (rules[2], "chat"),
    ]
    assert pinned.items[0].text == f"§{rules[0]}§ {rule.format(i=0)}"


def test_hard_constraints_that_alone_exceed_the_budget_are_reported(
    make_ctx: MakeContext, tokenizer: Tokenizer
) -> None:
    ctx = make_ctx(window=700, settings={"reserve_system": 100, "reserve_output": 100})
    rules = [ctx.add("user", f"Rule {i}: never use library number {i} in module m{i}.py.") for i in range(40)]
    result = ctx.compose()
    report = result.report
    assert report.total <= report.budget
    assert rendered_tokens(tokenizer, result.messages) <= report.budget
    assert report.hard_omitted and set(report.hard_omitted) <= set(rules)
    assert min(report.hard_omitted) > max(set(rules) - set(report.hard_omitted)), "the newest are left out"
    assert any("hard constraints" in note for note in report.notes)
    assert "§1§ Rule 0: never use library number 0" in result.messages[-1]["content"]


def test_eviction_keeps_the_protected_window_and_call_result_pairs(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=3_000, settings={"reserve_system": 300, "reserve_output": 300, "protected_recent": 4})
    pairs = [_tool_turn(ctx, i) for i in range(40)]
    result = ctx.compose()
    shown = {item.tag for item in next(v for v in result.layers if v.name == "rolling").items}
    for call, res in pairs:
        assert (call in shown) == (res in shown), f"pair §{call}§/§{res}§ split"
    assert {pairs[-1][0], pairs[-1][1], pairs[-2][0], pairs[-2][1]} <= shown
    assert all(t.destination == "summary" for t in result.report.trims if t.source == "rolling")


def test_expired_low_value_chat_is_dropped_the_rest_summarized(make_ctx: MakeContext, clock: Clock) -> None:
    ctx = make_ctx(settings={"protected_recent": 1})
    chat = ctx.add("assistant", "brb, grabbing coffee", ttl=60)
    fact = ctx.add("assistant", "The deploy key expires at 18:00.", kind="knowledge", ttl=60)
    ctx.add("assistant", "still here")
    ctx.compose()
    clock.now += 61
    report = ctx.compose().report
    by_tag = {t.tag: t for t in report.trims}
    assert by_tag[chat].reason == "expired" and by_tag[chat].destination == "dropped"
    assert by_tag[fact].reason == "expired" and by_tag[fact].destination == "summary"
    summary = next(v for v in ctx.inspect() if v.name == "summary")
    assert "18:00" in summary.items[0].text


def test_every_trim_and_compose_is_logged_with_extras(make_ctx: MakeContext, caplog: pytest.LogCaptureFixture) -> None:
    ctx = make_ctx(window=2_000, settings={"reserve_system": 300, "reserve_output": 300})
    for i in range(30):
        _tool_turn(ctx, i)
    with caplog.at_level(logging.INFO, logger="ctxbus.agents.context"):
        report = ctx.compose().report
        ctx.switch_mode("chat")
    trims = [r for r in caplog.records if getattr(r, "event", None) == "trim"]
    assert len(trims) == len(report.trims) > 0
    for record, trim in zip(trims, report.trims, strict=True):
        assert (record.msg_id, record.tag, record.reason, record.destination) == (  # type: ignore[attr-defined]
            trim.id,
            trim.tag,
            trim.reason,
            trim.destination,
        )
        assert record.domain == "alice/s1/t1"  # type: ignore[attr-defined]
    composed = [r for r in caplog.records if getattr(r, "event", None) == "compose"]
    assert composed[0].layer_tokens == report.layers and composed[0].budget == report.budget  # type: ignore[attr-defined]
    switched = [r for r in caplog.records if getattr(r, "event", None) == "mode_switch"]
    assert switched and switched[0].to == "chat"  # type: ignore[attr-defined]


def test_counts_are_cached_never_recounted(make_ctx: MakeContext, tokenizer: Tokenizer) -> None:
    calls: list[str] = []

    class Counting(Tokenizer):
        def count(self, text: str) -> int:
            calls.append(text)
            return super().count(text)

    counting = Counting(tokenizer._encoding)
    ctx = make_ctx(tokenizer=counting)
    for i in range(20):
        ctx.add("assistant", f"message number {i} with a little text")
    ctx.compose()
    calls.clear()
    for _ in range(3):
        ctx.compose()
    assert not calls, f"idle composes recounted {len(calls)} texts"
    ctx.add("assistant", "one more")
    assert len(calls) == 1, "a message is counted once, at ingest"


@pytest.mark.parametrize("reopen", [False, True])
def test_a_synthetic_user_message_does_not_take_the_goals_place(make_ctx: MakeContext, reopen: bool) -> None:
    ctx = make_ctx()
    ctx.add("user", "Context is getting full: prune now with ctx_reduce.", kind="synthetic")
    if reopen:
        ctx.close()
        ctx = make_ctx()
    goal = ctx.add("user", "Migrate the billing service to Postgres 16.")
    assert ctx.message(goal).importance == 0.8
    pinned = next(view for view in ctx.inspect() if view.name == "pinned")
    assert [item.tag for item in pinned.items] == [goal]
