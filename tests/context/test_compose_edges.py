"""Compose at its edges: expired constraints, an oversized system prompt, caller-edited
messages, and which soft pin goes first."""

from __future__ import annotations

import pytest

from ctxbus.agents.context import BUILTIN_MODES, Composition, InputTooLarge, InvalidConfig, ModeDescriptor
from tests.context.conftest import Clock, MakeContext


def _pinned_text(result: Composition) -> str:
    return "\n".join(item.text for view in result.layers if view.name == "pinned" for item in view.items)


def test_an_expired_constraint_is_not_pinned_again(make_ctx: MakeContext, clock: Clock) -> None:
    """A ttl on a constraint takes effect: expiry demotes it and no promotion brings it back."""
    ctx = make_ctx()
    ctx.add("user", "Goal: tidy the repo.")
    tag = ctx.add("user", "For the next 10 minutes do not push anything, CI is down.", ttl=600)
    for i in range(8):
        ctx.add("assistant", f"step {i}")
    assert "do not push anything" in _pinned_text(ctx.compose())

    clock.now += 3_600
    result = ctx.compose()
    assert "do not push anything" not in _pinned_text(result)
    assert result.report.promoted == ()
    moves = [(t.source, t.destination) for t in result.report.trims if t.tag == tag]
    assert moves == [("pinned", "rolling"), ("rolling", "summary")]
    assert "do not push anything" not in _pinned_text(ctx.compose()), "stays out on later composes"


def test_an_expired_long_message_takes_its_constraint_record_along(make_ctx: MakeContext, clock: Clock) -> None:
    """A long message is pinned as its constraint sentences, not whole: those expire too."""
    ctx = make_ctx()
    ctx.add("user", "Goal: tidy the repo.")
    background = " ".join(f"Module {i} was moved to the new layout last week." for i in range(20))
    ctx.add("user", f"{background} For the next 10 minutes do not push anything.", ttl=600)
    for i in range(8):
        ctx.add("assistant", f"step {i}")
    assert "do not push anything" in _pinned_text(ctx.compose())

    clock.now += 3_600
    assert "do not push anything" not in _pinned_text(ctx.compose())


def test_a_system_prompt_too_big_for_the_window_names_the_mode(make_ctx: MakeContext) -> None:
    """The mode is at fault, not the (empty) input: say so, with both sizes."""
    big = ModeDescriptor(
        name="big",
        system_template="Follow the handbook. " * 3_000,
        kinds=BUILTIN_MODES["task"].kinds,
        output_constraint="ok",
    )
    ctx = make_ctx(window=8_000, settings={"reserve_output": 2_000}, modes=[big], mode="big")
    ctx.add("user", "hi")
    with pytest.raises(InvalidConfig) as info:
        ctx.compose()
    message = str(info.value)
    assert not isinstance(info.value, InputTooLarge)
    assert "mode 'big'" in message and "system prompt" in message
    assert "over the 6,000 tokens the window leaves for it" in message
    assert "-" not in message.split("tokens")[0], "no negative sizes"


def test_a_system_prompt_that_fits_leaves_an_oversized_input_to_input_too_large(make_ctx: MakeContext) -> None:
    """The new check is on the system text alone: input that does not fit is still the input's fault."""
    ctx = make_ctx(window=2_000, settings={"reserve_system": 300, "reserve_output": 500})
    with pytest.raises(InputTooLarge):
        ctx.compose("word " * 2_000)


def test_inspect_does_not_follow_edits_to_the_returned_messages(make_ctx: MakeContext) -> None:
    """The caller owns `Composition.messages`; swapping or adding messages must not shift the views."""
    ctx = make_ctx()
    ctx.add("user", "Goal: tidy")
    ctx.add("assistant", "first reply")
    ctx.add("user", "second question")
    result = ctx.compose("now?")
    result.messages[0] = {"role": "system", "content": "my own system prompt"}
    result.messages.insert(1, {"role": "system", "content": "tool schema ..."})
    rolling = next(v for v in ctx.inspect() if v.name == "rolling")
    assert [(i.tag, i.text) for i in rolling.items] == [(2, "§2§ first reply"), (3, "§3§ second question")]


def test_inspect_survives_the_caller_trimming_the_messages(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Goal: tidy")
    ctx.add("assistant", "first reply")
    result = ctx.compose()
    result.messages.pop()
    rolling = next(v for v in ctx.inspect() if v.name == "rolling")
    assert [i.text for i in rolling.items] == ["§2§ first reply"]


@pytest.mark.parametrize("reopen", [False, True])
def test_the_assistants_soft_pin_is_demoted_before_the_users_older_goal(make_ctx: MakeContext, reopen: bool) -> None:
    """The user's goal outranks the assistant's narration (issue 21; it was oldest first),
    whatever order the pins were classified in (the goal is pinned after an important
    message added right behind it, until a reopen reloads them in tag order)."""
    ctx = make_ctx(window=700, settings={"reserve_system": 100, "reserve_output": 50})
    ctx.add("user", "Goal: port the billing service to Go and keep the public API unchanged.")
    ctx.add("assistant", "Plan agreed: inventory endpoints, write Go handlers, diff the responses.", importance=0.9)
    if reopen:
        ctx.close()
        ctx = make_ctx(window=700, settings={"reserve_system": 100, "reserve_output": 50})
    result = ctx.compose("y " * 290)
    demoted = [t.tag for t in result.report.trims if t.source == "pinned"]
    assert demoted == [2]
    assert "§1§ Goal: port the billing service" in _pinned_text(result)
