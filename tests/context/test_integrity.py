"""What a context stores stays usable: after odd input, a failed write, a restore or a reopen."""

from __future__ import annotations

import datetime
import logging
import math
import sqlite3
from pathlib import Path

import pytest

from ctxbus.agents.context import ContextClosed, ContextConfig, InvalidMessage, LocalContext, StoreError, Tokenizer
from ctxbus.agents.context._state import ContextState
from tests.context.conftest import Clock, MakeContext

RULE = "Never run migrations against the production database."
RULES = (
    "Never touch the billing cron by hand. Never rotate the billing keys yourself. Never share the billing "
    f"dashboards outside the team. {RULE}"
)
LONG_RULE = (
    "Some background first, the team discussed this at length last week and the notes are in the "
    f"wiki page about billing. {RULES}"
)
"""Longer than `SHORT_RULE_CHARS` (a shorter rule is never cut, issue 21) and mostly rule
(pinned whole); cut, it gives `RULES`."""
TIGHT = ContextConfig(window=1200, reserve_system=100, reserve_output=100)
"""A window where a long user input pushes pinned messages out."""


def _pinned(ctx: LocalContext, user_input: str = "") -> str:
    """The pinned layer of a compose, its items one a line ("" if there is none)."""
    layers = ctx.compose(user_input).layers
    return "\n".join(item.text for view in layers if view.name == "pinned" for item in view.items)


def test_undecodable_content_is_stored_with_replacement_characters(
    make_ctx: MakeContext, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_ctx("u.db")
    ctx.add("user", "List the files.")
    with caplog.at_level(logging.WARNING, logger="ctxbus.agents.context"):
        tag = ctx.add("tool", "report_\udcff.txt\n", tool_name="ls")  # os.listdir of a non-UTF-8 name
    assert "undecodable" in caplog.text
    ctx.add("user", "Next turn.")
    ctx.compose()
    stored_id = ctx.message(tag).id
    ctx.close()
    again = make_ctx("u.db")
    assert [m.content for m in again.messages()] == ["List the files.", "report_\ufffd.txt\n", "Next turn."]
    assert again.message(tag).id == stored_id, "the id is of the text stored"


@pytest.mark.parametrize("field", ["tool_name", "call_id"])
def test_an_undecodable_identifier_is_refused_naming_field_and_position(make_ctx: MakeContext, field: str) -> None:
    ctx = make_ctx()
    with pytest.raises(InvalidMessage, match=rf"{field} .*'\\udcff' at position 3"):
        ctx.extend([{"role": "assistant", "content": "ok"}, {"role": "tool", "content": "x", field: "abc\udcff"}])
    assert ctx.next_tag == 1, "nothing of the batch was added"


def test_close_closes_the_file_even_when_the_last_flush_fails(make_ctx: MakeContext, tmp_path: Path) -> None:
    ctx = make_ctx("c.db")
    ctx.add("user", "Keep the retry budget at 3.")
    blocker = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    blocker.execute("CREATE TRIGGER refuse BEFORE INSERT ON messages BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(StoreError, match="disk full"):
        ctx.close()
    blocker.close()
    with pytest.raises(ContextClosed):
        ctx.add("user", "more")
    assert make_ctx("c.db").messages() == [], "the file was let go: it opens again"


def test_restore_keeps_the_constraint_of_a_message_dropped_since(make_ctx: MakeContext) -> None:
    ctx = make_ctx("r.db", config=TIGHT)
    ctx.add("user", "Goal: migrate the billing service.")
    rule = ctx.add("user", LONG_RULE)
    ctx.add("assistant", "ok")
    ctx.switch_mode("task")  # the snapshot has the rule pinned whole
    assert _pinned(ctx, "x " * 800).endswith(f"§{rule}§ {RULES}"), "pressure cut it to its constraints"
    assert ctx.drop([rule]) == [rule]
    ctx.restore()
    composed = ctx.compose()
    assert f"§{rule}§ {RULES}" in composed.messages[1]["content"]
    assert f"[dropped §{rule}§]" in [m["content"] for m in composed.messages[2:]], "the drop stays, in rolling"


def test_restored_messages_still_expire(make_ctx: MakeContext, clock: Clock) -> None:
    ctx = make_ctx("t.db")
    ctx.add("user", "Goal: fix the bug.")
    ctx.add("assistant", "scratch note, valid for 60 s", ttl=60)
    for i in range(8):
        ctx.add("assistant", f"step {i}")
    ctx.switch_mode("chat")  # the snapshot holds the note in rolling
    clock.now += 100
    ctx.compose()  # the note expires and is dropped
    ctx.compose()
    ctx.restore()  # back in rolling, still expired
    assert not any("scratch note" in m["content"] for m in ctx.compose().messages)


@pytest.mark.parametrize(
    "created_at", [datetime.datetime(2024, 5, 1), "2024-05-01T10:00:00Z", True, math.nan, math.inf]
)
def test_created_at_must_be_a_finite_number(make_ctx: MakeContext, created_at: object) -> None:
    ctx = make_ctx()
    with pytest.raises(InvalidMessage, match="created_at must be seconds since the epoch"):
        ctx.extend([{"role": "user", "content": "hi"}, {"role": "user", "content": "bye", "created_at": created_at}])
    with pytest.raises(InvalidMessage, match="created_at"):
        ctx.add("user", "hi", created_at=created_at, ttl=60)  # type: ignore[arg-type]
    assert ctx.next_tag == 1
    assert ctx.add("user", "hi", created_at=1_700_000_000) == 1


def test_a_blank_first_user_message_is_not_the_goal(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "  \n")  # an image-only turn's text part
    goal = ctx.add("user", "Migrate the billing service to Postgres 16.")
    assert _pinned(ctx).endswith(f"§{goal}§ Migrate the billing service to Postgres 16.")
    assert ctx.message(goal).importance == 0.8


def test_the_starting_mode_is_kept_on_reopen(make_ctx: MakeContext) -> None:
    make_ctx("m.db", mode="chat").close()
    assert make_ctx("m.db").mode.name == "chat"


def test_pins_are_kept_in_tag_order_however_late_they_are_classified(tokenizer: Tokenizer) -> None:
    """Demotion takes the oldest pins first (DESIGN section 3), and a reopen loads them by tag."""
    state = ContextState(ContextConfig(), tokenizer)
    for role, content, importance in [
        ("user", "Goal: port the billing service to Go.", None),  # pinned when classified
        ("assistant", "Plan agreed: inventory endpoints, then Go handlers.", 0.9),  # pinned at once
        ("system", "Remember: keep the public API unchanged.", None),
    ]:
        state.add(role, content, kind=None, tool_name=None, call_id=None, importance=importance, ttl=None, created_at=0)
    state.classify_pending()
    assert [(e.tag, e.pin) for e in state.pinned] == [(1, "soft"), (2, "soft"), (3, "hard")]


@pytest.mark.parametrize("reopen", [False, True])
def test_a_restated_rule_cut_to_its_constraint_is_not_pinned_twice(make_ctx: MakeContext, reopen: bool) -> None:
    ctx = make_ctx("k.db", config=TIGHT)
    ctx.add("user", "Goal: migrate the billing service.")
    ctx.add("user", LONG_RULE)
    ctx.add("assistant", "ok")
    ctx.compose("x " * 800)  # the rule is cut to its constraint sentence
    if reopen:
        ctx.close()
        ctx = make_ctx("k.db", config=TIGHT)
    ctx.add("user", LONG_RULE)  # repeated word for word
    assert _pinned(ctx).count(RULE) == 1


def test_a_second_context_on_one_store_is_told_what_happened(make_ctx: MakeContext) -> None:
    first = make_ctx("two.db")
    second = make_ctx("two.db")
    first.add("user", "from the first")
    first.flush()
    second.add("user", "from the second")
    with pytest.raises(StoreError, match="another LocalContext wrote the same message tags"):
        second.close()
    first.close()
    assert [m.content for m in make_ctx("two.db").messages()] == ["from the first"]
