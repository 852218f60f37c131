"""Bad input is refused with an error that names the offending value."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ctxbus.agents.context import (
    ContextClosed,
    ContextConfig,
    InputTooLarge,
    InvalidConfig,
    InvalidMessage,
    UnknownMode,
    UnknownReference,
)
from ctxbus.schemas import UsageError
from ctxbus.schemas._message import Message, message_id
from tests.context.conftest import MakeContext


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"window": -8000}, ["window", "-8000"]),
        ({"window": 0}, ["window", ">= 1"]),
        ({"reserve_output": -1}, ["reserve_output", "-1"]),
        ({"window": 8000, "reserve_system": 5000, "reserve_output": 4000}, ["reserves", "5,000", "4,000", "8,000"]),
        ({"split": (1, 0, 2)}, ["split", "rolling"]),
        ({"split": (1, -3, 2)}, ["split", "-3"]),
        ({"archive_threshold": 0}, ["archive_threshold", "0"]),
        ({"window": "big"}, ["window", "'big'"]),
    ],
)
def test_bad_config_is_refused_naming_the_value(settings: dict[str, object], words: list[str]) -> None:
    with pytest.raises(InvalidConfig) as info:
        ContextConfig(**settings)  # type: ignore[arg-type]
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"role": "robot", "content": "hi"}, ["role", "'robot'", "assistant"]),
        ({"role": "user", "content": "hi", "kind": "gossip"}, ["kind", "'gossip'"]),
        ({"role": "user", "content": "hi", "importance": 1.5}, ["importance", "1.5"]),
        ({"role": "user", "content": "hi", "importance": -0.1}, ["importance", "-0.1"]),
        ({"role": "user", "content": "hi", "ttl": 0}, ["ttl", "0"]),
        ({"role": "user", "content": "hi", "kind": "tool_result"}, ["tool_result", "'user'"]),
        ({"role": "tool", "content": "out", "kind": "chat"}, ["'chat'", "'tool'"]),
        ({"role": "user", "content": "hi", "kind": "tool_call"}, ["tool_call", "'user'"]),
        ({"role": "user", "content": 42}, ["content", "int"]),
    ],
)
def test_bad_message_is_refused_naming_the_value(
    make_ctx: MakeContext, kwargs: dict[str, object], words: list[str]
) -> None:
    ctx = make_ctx()
    role, content = kwargs.pop("role"), kwargs.pop("content")
    with pytest.raises(InvalidMessage) as info:
        ctx.add(role, content, **kwargs)  # type: ignore[arg-type]
    for word in words:
        assert word in str(info.value)
    assert ctx.next_tag == 1, "a refused message must not take a tag"


def test_input_larger_than_the_window_is_refused(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=2_000, settings={"reserve_system": 200, "reserve_output": 200})
    with pytest.raises(InputTooLarge) as info:
        ctx.compose("word " * 3_000)
    assert info.value.tokens > info.value.available
    assert f"{info.value.tokens:,}" in str(info.value)


def test_unknown_references_modes_and_closed_use(make_ctx: MakeContext, tmp_path: Path) -> None:
    ctx = make_ctx()
    ctx.add("user", "hello")
    for ref in (0, 2, "§9§", "deadbeefdeadbeef-1", "nonsense"):
        with pytest.raises(UnknownReference):
            ctx.read(ref)
    with pytest.raises(UnknownReference):
        ctx.drop([1, 99])
    assert ctx.message(1).state == "active", "a failed drop drops nothing"
    with pytest.raises(UnknownMode, match="'poetry'.*chat, knowledge, task"):
        ctx.switch_mode("poetry")
    with pytest.raises(UnknownMode, match="no snapshot"):
        ctx.restore()
    with pytest.raises(UsageError, match="no words"):
        ctx.search("  --  ")
    with pytest.raises(UsageError, match="limit"):
        ctx.search("hello", limit=0)
    with pytest.raises(UsageError, match="line range"):
        ctx.read(1, lines=(5, 2))
    ctx.close()
    with pytest.raises(ContextClosed):
        ctx.add("user", "again")


def test_message_model_validates_its_fields() -> None:
    good = Message(id=message_id("hi", 3), tag=3, role="user", kind="chat", content="hi", created_at=0.0, tokens=4)
    assert good.id.endswith("-3") and len(good.id.split("-")[0]) == 16
    assert Message(**{**good.model_dump(), "call_id": "a, b"}).call_ids == ("a", "b")
    for bad in ({"role": "robot"}, {"kind": "gossip"}, {"importance": 2.0}, {"state": "lost"}, {"tag": 0}):
        with pytest.raises(ValidationError):
            Message(**{**good.model_dump(), **bad})
    with pytest.raises(ValidationError):
        good.model_copy(update={}).__setattr__("content", "changed")


def test_input_too_large_gives_advice_that_works() -> None:
    text = str(InputTooLarge(9_000, 2_000))
    assert "tool result" in text and "archive_threshold" in text
    assert "add it as a message" not in text, "user and assistant messages are never archived"


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"role": "user", "content": "hi", "colour": "red"}, ["unknown key", "'colour'"]),
        ({"role": "user"}, ["no 'content'"]),
        ({"role": "user", "content": "hi", "importance": 7}, ["importance", "7"]),
        (("user", "hi"), ["('user', 'hi')", "tuple", "mapping"]),
    ],
)
def test_extend_checks_every_item_before_adding_any(make_ctx: MakeContext, bad: object, words: list[str]) -> None:
    ctx = make_ctx()
    with pytest.raises(InvalidMessage) as info:
        ctx.extend([{"role": "user", "content": "first"}, bad])  # type: ignore[list-item]
    for word in words:
        assert word in str(info.value)
    assert ctx.next_tag == 1, "a refused batch adds nothing"
    assert ctx.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "kind": "chat"}]) == [
        1,
        2,
    ]


def test_closed_context_refuses_state_and_snapshots(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.set_state("nudges.band", "firm")
    ctx.close()
    with pytest.raises(ContextClosed):
        ctx.get_state("nudges.band")
    with pytest.raises(ContextClosed):
        ctx.snapshots()


@pytest.mark.parametrize(("method", "args"), [("message", (1,)), ("messages", ()), ("tail", ()), ("inspect", ())])
def test_closed_context_refuses_reads_too(make_ctx: MakeContext, method: str, args: tuple[object, ...]) -> None:
    ctx = make_ctx()
    ctx.add("user", "hello")
    ctx.compose()  # so inspect has a composition it could return
    ctx.close()
    with pytest.raises(ContextClosed, match="is closed"):
        getattr(ctx, method)(*args)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (1.5, "1.5 (float)"),
        (None, "None (NoneType)"),
        (True, "True (bool)"),
        (b"12", "b'12' (bytes)"),
        ([2, 1.5], "1.5"),
    ],
)
def test_drop_refuses_what_is_not_a_reference_naming_it(make_ctx: MakeContext, bad: object, named: str) -> None:
    ctx = make_ctx()
    ctx.extend({"role": "assistant", "content": f"step {i}"} for i in range(60))  # b"12" must not drop §49§, §50§
    with pytest.raises(UnknownReference, match="not a message reference; expected a tag") as info:
        ctx.drop(bad)  # type: ignore[arg-type]
    assert str(info.value).startswith(named)
    assert all(m.state == "active" for m in ctx.messages()), "a refused drop drops nothing"


@pytest.mark.parametrize("lines", [(1.5, 2), ("1", "2"), 3, (1,), (1, "end")])
def test_read_refuses_a_line_range_that_is_not_two_line_numbers(make_ctx: MakeContext, lines: object) -> None:
    ctx = make_ctx()
    ctx.add("user", "one line")
    with pytest.raises(UsageError, match=r"line range must be \(start, end\) with whole line numbers") as info:
        ctx.read(1, lines=lines)  # type: ignore[arg-type]
    assert f"got {lines!r}" in str(info.value)
