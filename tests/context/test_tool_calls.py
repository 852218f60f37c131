"""Tool calls as structure: every call of a turn recorded whole, given back exactly, kept
across restarts, and read back from stores written before calls had a structure."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.context import InvalidMessage, LocalContext, StoreError, Tokenizer
from ctxbus.schemas import ToolCall
from tests._providers import checked_renderings
from tests.context.conftest import MakeContext

FIXTURES = Path(__file__).with_name("fixtures")


def _calls(openai: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in openai
        if m["role"] == "assistant"
        for c in m.get("tool_calls", ())
    ]


def _answers(openai: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in openai if m["role"] == "tool"]


def test_a_turn_records_each_of_its_calls_in_any_shape_a_host_has(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Look around.")
    tag = ctx.add(
        "assistant",
        "Three at once.",
        tool_calls=[
            ToolCall(id="call_1", name="bash", arguments='{"cmd": "ls -la"}'),
            {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.py"}'}},
            {"type": "tool_use", "id": "toolu_3", "name": "grep", "input": {"q": "TODO", "n": 3}},
        ],
    )
    for call_id, output in (("call_1", "a.py b.py"), ("call_2", "print(1)"), ("toolu_3", "a.py:1: TODO")):
        ctx.add("tool", output, call_id=call_id)
    message = ctx.message(tag)
    assert message.kind == "tool_call" and (message.tool_name, message.call_id) == ("bash", "call_1")
    assert message.call_ids == ("call_1", "call_2", "toolu_3")
    want = [
        ("call_1", "bash", '{"cmd": "ls -la"}'),
        ("call_2", "read", '{"path":"a.py"}'),
        ("toolu_3", "grep", '{"q": "TODO", "n": 3}'),
    ]
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == want
    openai, anthropic = checked_renderings(ctx.compose())
    assert _calls(openai) == want, "the arguments byte for byte"
    assert [i for i, _ in _answers(openai)] == ["call_1", "call_2", "toolu_3"]
    turn = next(m for m in anthropic["messages"] if m["role"] == "assistant")
    uses = [(b["id"], b["name"], b["input"]) for b in turn["content"] if b["type"] == "tool_use"]
    assert uses == [(i, n, json.loads(a)) for i, n, a in want]
    results = next(m for m in anthropic["messages"][2:] if m["role"] == "user")["content"]
    assert [b["tool_use_id"] for b in results] == ["call_1", "call_2", "toolu_3"], "one turn holds all three"


def test_calls_as_the_providers_sdks_dump_them_are_taken_with_what_they_add_beside_the_call(
    make_ctx: MakeContext,
) -> None:
    """`call.model_dump()` of the openai and anthropic SDKs' own types, as the README
    records a model's reply, with the keys some servers add (a streaming `index`, a
    `caller`): the call is what is kept."""
    from anthropic.types import ToolUseBlock
    from openai.types.chat import ChatCompletionMessageToolCall

    openai_call = ChatCompletionMessageToolCall.model_validate(
        {"id": "call_9", "type": "function", "index": 0, "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}
    )
    anthropic_call = ToolUseBlock.model_validate(
        {"type": "tool_use", "id": "toolu_9", "name": "grep", "input": {"q": "x"}, "caller": {"type": "direct"}}
    )
    dumped = [openai_call.model_dump(), anthropic_call.model_dump()]
    assert "index" in dumped[0], "the SDK keeps what the server sent"
    ctx = make_ctx()
    ctx.add("user", "Go.")
    tag = ctx.add("assistant", "", tool_calls=dumped)
    assert [(c.id, c.name, c.arguments) for c in ctx.message(tag).tool_calls] == [
        ("call_9", "bash", '{"cmd":"ls"}'),
        ("toolu_9", "grep", '{"q": "x"}'),
    ]


def test_the_calls_count_in_the_budget(make_ctx: MakeContext, tokenizer: Tokenizer) -> None:
    ctx = make_ctx()
    arguments = json.dumps({"path": "notes.md", "text": "word " * 300})
    plain = ctx.message(ctx.add("assistant", "Writing the notes.")).tokens
    with_call = ctx.message(
        ctx.add("assistant", "Writing the notes.", tool_calls=[{"id": "w1", "name": "write", "arguments": arguments}])
    ).tokens
    assert with_call - plain >= tokenizer.count(arguments)


def test_the_single_call_form_keeps_working(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Run the tests.")
    tag = ctx.add("assistant", "pytest -q", tool_name="pytest", call_id="c1")
    ctx.add("tool", "3 passed", tool_name="pytest", call_id="c1")
    assert ctx.message(tag).tool_calls == (ToolCall(id="c1", name="pytest", arguments="{}"),)
    openai, _ = checked_renderings(ctx.compose())
    assert _calls(openai) == [("c1", "pytest", "{}")], "its arguments were never recorded"
    assert _answers(openai) == [("c1", f"§{tag + 1}§ 3 passed")]


def test_a_comma_joined_pair_is_read_as_the_calls_it_names(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Look.")
    tag = ctx.add("assistant", "Both.", tool_name="grep,read", call_id="a1, a2")
    ctx.add("tool", "hit", tool_name="grep", call_id="a1")
    ctx.add("tool", "text", tool_name="read", call_id="a2")
    message = ctx.message(tag)
    assert [(c.id, c.name) for c in message.tool_calls] == [("a1", "grep"), ("a2", "read")]
    assert (message.tool_name, message.call_id) == ("grep", "a1"), "no longer one joined name and id"
    openai, _ = checked_renderings(ctx.compose())
    assert [i for i, _ in _answers(openai)] == ["a1", "a2"]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param({"role": "user", "tool_calls": [{"id": "c", "name": "x"}]}, "only an assistant", id="user"),
        pytest.param({"kind": "conclusion", "tool_calls": [{"id": "c", "name": "x"}]}, "not kind", id="kind"),
        pytest.param({"tool_name": "x", "tool_calls": [{"id": "c", "name": "x"}]}, "not both", id="both-forms"),
        pytest.param({"tool_calls": {"id": "c", "name": "x"}}, "a list of calls", id="not-a-list"),
        pytest.param({"tool_calls": ["bash"]}, r"tool_calls\[0\] is a str", id="not-a-call"),
        pytest.param({"tool_calls": [{"id": "c", "name": ""}]}, r"tool_calls\[0\]", id="no-name"),
        pytest.param({"tool_calls": [{"id": "c", "name": "x", "extra": 1}]}, r"tool_calls\[0\]", id="unknown-key"),
        pytest.param({"tool_calls": [{"id": "c", "name": "x"}, {"id": "c", "name": "y"}]}, "twice", id="same-id"),
        pytest.param({"tool_calls": [{"id": "c\udcff", "name": "x"}]}, "undecodable", id="surrogate-id"),
        pytest.param(
            {"tool_calls": [{"id": "c", "type": "custom", "function": {"name": "x"}}]}, "not a function", id="custom"
        ),
    ],
)
def test_bad_calls_are_refused_and_nothing_is_added(make_ctx: MakeContext, fields: dict[str, Any], error: str) -> None:
    ctx = make_ctx()
    before = ctx.next_tag
    fields = {"role": "assistant", "content": "x", **fields}
    with pytest.raises(InvalidMessage, match=error):
        ctx.add(**fields)
    with pytest.raises(InvalidMessage, match=error):
        ctx.extend([{"role": "user", "content": "fine"}, fields])
    assert ctx.next_tag == before


def test_calls_and_notes_survive_a_reopen(make_ctx: MakeContext) -> None:
    ctx = make_ctx("r.db")
    ctx.add("user", "Go.")
    calls = [{"id": "k1", "name": "bash", "arguments": '{"cmd":"make"}'}, {"id": "k2", "name": "ls", "arguments": ""}]
    ctx.add("assistant", "", tool_calls=calls)
    ctx.add("tool", "built", call_id="k1")
    result = ctx.add("tool", "a b", call_id="k2")
    ctx.annotate(result, "\n\n<system-reminder>\ntidy up\n</system-reminder>")
    first = ctx.compose()
    ctx.close()
    again = make_ctx("r.db")
    second = again.compose()
    assert second.to_openai() == first.to_openai()
    assert second.to_anthropic() == first.to_anthropic()
    assert second.report == first.report


def test_a_store_written_before_tool_calls_opens_and_reads_its_calls(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """`fixtures/store-v1.sql` is the dump of a store the previous build wrote: calls as a
    comma-joined name and id pair, a call without an id, a dropped and an archived result."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / "store-v1.sql").read_text())
    ctx = LocalContext(path, "old/s1/t1", tokenizer=tokenizer)
    try:
        messages = ctx.messages()
        assert [(c.id, c.name, c.arguments) for c in messages[1].tool_calls] == [
            ("call_a", "grep", "{}"),
            ("call_b", "read_file", "{}"),
        ]
        assert [(c.id, c.name) for c in messages[4].tool_calls] == [("", "open")]
        assert {m.state for m in messages} == {"active", "dropped", "archived"}, "states as they were"
        openai, _ = checked_renderings(ctx.compose())
        answered = dict(_answers(openai))
        assert answered["call_a"].startswith("§3§ tests/test_cache.py") and answered["call_b"].startswith("§4§ def")
        (made_up,) = [i for i, n, _ in _calls(openai) if n == "open"]
        assert answered[made_up].startswith("§6§ [File: tests/test_cache.py"), "the id-less call keeps its result"
        ctx.add("assistant", "", tool_calls=[{"id": "n1", "name": "bash", "arguments": '{"cmd":"pytest"}'}])
        ctx.add("tool", "ok", call_id="n1")
    finally:
        ctx.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("2",)
    with LocalContext(path, "old/s1/t1", tokenizer=tokenizer) as reopened:
        assert reopened.messages()[-2].tool_calls == (ToolCall(id="n1", name="bash", arguments='{"cmd":"pytest"}'),)
        assert reopened.messages()[1].call_ids == ("call_a", "call_b")


def test_a_store_of_an_unknown_schema_is_refused(tmp_path: Path, tokenizer: Tokenizer) -> None:
    path = tmp_path / "future.db"
    LocalContext(path, "a/b/c", tokenizer=tokenizer).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="has schema '9'; this build reads '2' and upgrades '1'"):
        LocalContext(path, "a/b/c", tokenizer=tokenizer)


def test_a_search_finds_a_call_by_its_arguments(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Go.")
    tag = ctx.add(
        "assistant", "", tool_calls=[{"id": "s1", "name": "bash", "arguments": '{"cmd": "grep -rn quux src/"}'}]
    )
    ctx.add("tool", "nothing found", call_id="s1")
    hits = ctx.search("quux")
    assert [hit.tag for hit in hits] == [tag] and "quux" in hits[0].snippet


def test_an_evicted_call_is_summarized_with_its_arguments(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=1_500, settings={"reserve_system": 100, "reserve_output": 100, "protected_recent": 2})
    ctx.add("user", "Make the cache tests pass.")
    call = ctx.add(
        "assistant", "", tool_calls=[{"id": "e1", "name": "bash", "arguments": '{"cmd": "pytest tests/test_cache.py"}'}]
    )
    ctx.add("tool", "1 failed, 3 passed", call_id="e1")
    for i in range(120):
        ctx.add("assistant", f"Step {i}: reading module m{i} of the cache layer and noting what it does.")
    composition = ctx.compose()
    assert call not in [item.tag for view in composition.layers if view.name == "rolling" for item in view.items]
    summary = "\n".join(item.text for view in composition.layers if view.name == "summary" for item in view.items)
    (line,) = [line for line in summary.splitlines() if line.startswith(f"§{call}§")]
    assert "bash" in line and "pytest tests/test_cache.py" in line, line
