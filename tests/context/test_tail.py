"""Hooks for tail hygiene: the rendered tail and drop-by-tag."""

from __future__ import annotations

import pytest

from ctxbus.agents import nudges
from ctxbus.agents.context import drop_placeholder
from tests.context.conftest import MakeContext


def test_drop_leaves_exactly_a_placeholder_and_tail_reports_it(make_ctx: MakeContext) -> None:
    ctx = make_ctx(settings={"protected_recent": 2})
    ctx.add("user", "Investigate the crash.")
    call = ctx.add("assistant", "Reading the log.", tool_name="cat", call_id="k1")
    result = ctx.add("tool", "Traceback ...\n" * 50, tool_name="cat", call_id="k1")
    ctx.add("assistant", "Found it.")
    ctx.add("assistant", "Fixing.")

    tail = ctx.tail()
    assert [(t.tag, t.kind, t.tool_name, t.state, t.protected) for t in tail] == [
        (call, "tool_call", "cat", "active", False),
        (result, "tool_result", "cat", "active", False),
        (4, "chat", None, "active", True),
        (5, "chat", None, "active", True),
    ]
    before = {t.tag: t.tokens for t in tail}

    assert ctx.drop([result, result, 1]) == [result], "pinned and already dropped tags are skipped"
    contents = [m["content"] for m in ctx.compose().messages]
    assert f"[dropped §{result}§]" in contents
    assert drop_placeholder(result) in contents
    after = {t.tag: t for t in ctx.tail()}
    assert after[result].state == "dropped" and after[result].tokens < before[result]
    assert ctx.message(result).state == "dropped"
    assert ctx.read(result).startswith("Traceback"), "the full text stays readable"


def test_drop_right_after_add_never_loses_a_user_constraint(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Investigate the crash.")
    short = ctx.add("user", "Never force-push to main.")
    long = ctx.add("user", "Some background on the repository layout. " * 30 + "Do not edit vendor/ at all.")

    assert ctx.drop([short, long]) == [long], "a constraint pinned whole is not in rolling, so not dropped"
    pinned = "\n".join(item.text for view in ctx.inspect() if view.name == "pinned" for item in view.items)
    assert "Never force-push to main." in pinned
    assert "Do not edit vendor/ at all." in pinned, "a dropped long message keeps its constraint record"


def test_the_placeholder_the_tail_walk_recognises_is_the_one_drop_writes(make_ctx: MakeContext) -> None:
    assert nudges.drop_placeholder is drop_placeholder, "one home for the placeholder text"
    ctx = make_ctx(settings={"protected_recent": 0})
    ctx.add("user", "Investigate the crash.")
    ctx.add("assistant", "Reading the log.", tool_name="cat", call_id="k1")
    result = ctx.add("tool", "Traceback ...\n" * 50, tool_name="cat", call_id="k1")
    ctx.drop([result])
    shown = [item.text for view in ctx.inspect() for item in view.items if item.tag == result]
    assert shown == [drop_placeholder(result)]
    assert nudges.is_drop_placeholder(shown[0])


@pytest.mark.parametrize("ref", [12, "12", "§12§", " 12 "])
def test_drop_takes_a_single_reference_as_one_tag(make_ctx: MakeContext, ref: int | str) -> None:
    ctx = make_ctx()
    ctx.extend({"role": "assistant", "content": f"step {i}"} for i in range(12))
    assert ctx.drop(ref) == [12], "a str is one reference, not one tag per character"
    assert [m.tag for m in ctx.messages() if m.state == "dropped"] == [12]


def test_drop_takes_a_message_id_and_a_mixed_list(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.extend({"role": "assistant", "content": f"step {i}"} for i in range(12))
    assert ctx.drop(ctx.message(11).id) == [11]
    assert ctx.drop([3, "§4§", "12"]) == [3, 4, 12]
