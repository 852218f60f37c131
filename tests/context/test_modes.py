"""Modes: descriptors, switch with a snapshot, restore."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ctxbus.agents.context import BUILTIN_MODES, InvalidConfig, ModeDescriptor, UnknownMode
from tests.context.conftest import MakeContext


def _history(add: Callable[..., int]) -> None:
    add("user", "Refactor the importer. Do not change the public API.")
    for i in range(25):
        add("assistant", f"Reading importer part {i}.", tool_name="read", call_id=f"r{i}")
        add("tool", f"def part_{i}():\n    return {i}\n" * 8, tool_name="read", call_id=f"r{i}")
        add("assistant", f"Part {i} is fine.", kind="conclusion")


def test_switch_mode_changes_template_and_projection_then_restore(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=3_000, settings={"reserve_system": 400, "reserve_output": 300})
    _history(ctx.add)
    before = ctx.compose("status?")
    snapshot = ctx.switch_mode("chat")
    assert ctx.snapshots() == [snapshot] and ctx.mode.name == "chat"
    chat = ctx.compose("status?")
    assert chat.messages[0]["content"] == BUILTIN_MODES["chat"].system_text
    roles = {m["role"] for m in chat.messages}
    assert "tool" not in roles, "chat mode hides tool traffic"
    assert not any("Reading importer" in m["content"] for m in chat.messages[3:])

    assert ctx.restore() == "task"
    assert ctx.snapshots() == []
    after = ctx.compose("status?")
    assert after.messages == before.messages
    assert after.report.layers == before.report.layers


def test_mode_descriptor_rules() -> None:
    with pytest.raises(InvalidConfig, match="tool_call and tool_result"):
        ModeDescriptor(name="odd", system_template="x", kinds=frozenset({"chat", "tool_call"}), output_constraint="y")
    with pytest.raises(InvalidConfig, match="unknown kinds"):
        ModeDescriptor(name="odd", system_template="x", kinds=frozenset({"poems"}), output_constraint="y")


def test_custom_mode_and_restore_keeps_newer_messages(make_ctx: MakeContext) -> None:
    review = ModeDescriptor(
        name="review",
        system_template="You review code.",
        kinds=frozenset({"chat", "conclusion"}),
        output_constraint="List problems only.",
    )
    ctx = make_ctx(modes=[review])
    ctx.add("user", "Check the diff.")
    ctx.switch_mode("review")
    assert ctx.compose().messages[0]["content"] == "You review code.\n\nList problems only."
    later = ctx.add("assistant", "Found an off-by-one in pager.py.", kind="conclusion")
    ctx.restore()
    assert ctx.mode.name == "task"
    assert any(m["content"] == f"§{later}§ Found an off-by-one in pager.py." for m in ctx.compose().messages)


def test_a_constraint_stated_just_before_a_switch_is_still_pinned_after_restore(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Refactor the importer.")
    tag = ctx.add("user", "You must never push to the main branch.")
    ctx.switch_mode("chat")  # before any compose: the constraint is not classified yet
    ctx.restore()
    pinned = next(view for view in ctx.inspect() if view.name == "pinned")
    assert tag in [item.tag for item in pinned.items]


def test_restore_of_an_unknown_mode_keeps_the_snapshot(make_ctx: MakeContext) -> None:
    review = ModeDescriptor(name="review", system_template="x", kinds=frozenset({"chat"}), output_constraint="y")
    ctx = make_ctx(modes=[review], mode="review")
    ctx.add("user", "hello")
    snapshot = ctx.switch_mode("chat")
    ctx.close()

    ctx = make_ctx()  # reopened without the custom mode
    with pytest.raises(UnknownMode, match="'review'"):
        ctx.restore()
    assert ctx.snapshots() == [snapshot] and ctx.mode.name == "chat", "a failed restore changes nothing"
    ctx.close()

    ctx = make_ctx(modes=[review])
    assert ctx.restore() == "review"
    ctx.close()
    ctx = make_ctx(modes=[review])
    assert ctx.snapshots() == [] and ctx.mode.name == "review", "layers, mode and consumption written together"
