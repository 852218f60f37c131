"""The composed prompt as each framework's messages: the same turns, calls and results as
`Composition.to_openai()`, in the types the framework checks."""

from __future__ import annotations

from pathlib import Path

from agents.models.chatcmpl_converter import Converter
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, SystemMessage, UserMessage
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from ctxbus.agents.adapters.autogen import to_autogen
from ctxbus.agents.adapters.langchain import to_langchain
from ctxbus.agents.adapters.openai_agents import to_openai_agents
from ctxbus.agents.context import ContextConfig, LocalContext
from ctxbus.agents.context._wire import STANDIN_RESULT  # the one rendering both frameworks get


def composed(tmp_path: Path) -> list[dict[str, object]]:
    """Two parallel calls, one answered, one cut short; the other with arguments that are not JSON."""
    context = LocalContext(tmp_path / "a.db", "u/s1/t1", config=ContextConfig(system_prompt="Be brief."))
    try:
        context.add("user", "Find the flaky test.")
        context.add(
            "assistant",
            "Looking.",
            tool_calls=[
                {"id": "call_a", "name": "grep", "arguments": '{"pattern": "ttl"}'},
                {"id": "call_b", "name": "read", "arguments": "{not json"},
            ],
        )
        context.add("tool", "tests/test_cache.py:12: ttl", tool_name="grep", call_id="call_a")
        return context.compose().to_openai()
    finally:
        context.close()


def test_langchain_messages_keep_the_calls_and_their_results(tmp_path: Path) -> None:
    system, messages = to_langchain(composed(tmp_path))
    assert system is not None and system.text == "Be brief."
    # The head (the pinned goal), the turn, each call's result.
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, ToolMessage]
    turn = messages[1]
    assert isinstance(turn, AIMessage)
    assert [(c["id"], c["name"], c["args"]) for c in turn.tool_calls] == [
        ("call_a", "grep", {"pattern": "ttl"}),
        ("call_b", "read", {"arguments": "{not json"}),  # the call as the model wrote it
    ]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ["call_a", "call_b"]
    assert "ttl" in results[0].text and results[1].text == STANDIN_RESULT


def test_autogen_messages_keep_the_calls_and_their_results(tmp_path: Path) -> None:
    messages = to_autogen(composed(tmp_path), source="a1")
    assert [type(m) for m in messages] == [
        SystemMessage, UserMessage, AssistantMessage, FunctionExecutionResultMessage
    ]  # fmt: skip
    turn = messages[2]
    assert isinstance(turn, AssistantMessage) and isinstance(turn.content, list)
    assert [(c.id, c.name, c.arguments) for c in turn.content] == [
        ("call_a", "grep", '{"pattern": "ttl"}'),
        ("call_b", "read", "{not json"),
    ]
    assert turn.thought is not None and "Looking." in turn.thought
    results = messages[3]
    assert isinstance(results, FunctionExecutionResultMessage)
    assert [(r.call_id, r.name) for r in results.content] == [("call_a", "grep"), ("call_b", "read")]
    assert results.content[1].content == STANDIN_RESULT


def test_openai_agents_items_keep_the_calls_and_their_results(tmp_path: Path) -> None:
    system, items = to_openai_agents(composed(tmp_path))
    assert system == "Be brief."
    TypeAdapter(list[ResponseInputItemParam]).validate_python(items)  # the Responses API's input items
    shown = [dict(item) for item in items]
    assert [(item.get("type"), item.get("role")) for item in shown] == [
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call", None),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in shown if i["type"] == "function_call"] == [
        ("call_a", "grep", '{"pattern": "ttl"}'),
        ("call_b", "read", "{not json"),
    ]
    outputs = [(i["call_id"], i["output"]) for i in shown if i["type"] == "function_call_output"]
    assert outputs[0][0] == "call_a" and "ttl" in outputs[0][1] and outputs[1] == ("call_b", STANDIN_RESULT)
    # Through the SDK's own Chat Completions conversion: one assistant turn with both calls.
    messages = Converter.items_to_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    turn = messages[1]
    assert "Looking." in str(turn.get("content")) and [c["id"] for c in turn.get("tool_calls", ())] == [
        "call_a",
        "call_b",
    ]
