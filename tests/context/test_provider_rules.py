"""The provider checks of `tests._providers` refuse what the APIs refuse: each rule, broken
once, on an otherwise valid request (else a passing rendering test would prove nothing)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests._providers import Refused, SdkTypes, check_anthropic, check_openai, check_openai_layout


def _call(call_id: str, name: str = "bash", arguments: str = '{"cmd": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the test."},
    {"role": "assistant", "content": "Looking.", "tool_calls": [_call("c1"), _call("c2", "read", "{}")]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Thanks."},
]


def _use(use_id: str, name: str = "bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": {"cmd": "ls"}}


def _result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "a.py"}


ANTHROPIC: dict[str, Any] = {
    "system": "You are a coding agent.",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix the test."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, _use("t1"), _use("t2", "read")]},
        {"role": "user", "content": [_result("t1"), _result("t2"), {"type": "text", "text": "go on"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": "Thanks."},
    ],
}


def test_the_valid_requests_pass() -> None:
    check_openai_layout(OPENAI)
    check_openai(OPENAI)
    SdkTypes().openai(OPENAI)
    check_anthropic(ANTHROPIC)
    SdkTypes().anthropic(ANTHROPIC)


def _openai(change: Any) -> list[dict[str, Any]]:
    messages = copy.deepcopy(OPENAI)
    change(messages)
    return messages


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(lambda m: m.pop(3), "did not have response messages: c1", id="a-call-unanswered"),
        pytest.param(
            lambda m: m.insert(3, {"role": "user", "content": "x"}), "did not have response", id="user-between"
        ),
        pytest.param(lambda m: m.pop(2), "must be a response to a preceeding message", id="an-orphan-result"),
        pytest.param(lambda m: m[4].update(tool_call_id="c9"), "'c9' not found in 'tool_calls'", id="unknown-call-id"),
        pytest.param(lambda m: m[4].update(tool_call_id="c1"), "answered twice", id="answered-twice"),
        pytest.param(lambda m: m[2]["tool_calls"][1].update(id="c1"), "duplicate tool call id", id="duplicate-ids"),
        pytest.param(
            lambda m: m[2]["tool_calls"][0]["function"].update(name="Update Todos"), "does not match pattern", id="name"
        ),
        pytest.param(lambda m: m[2]["tool_calls"][0].update(id="c" * 41), "string too long", id="long-id"),
        pytest.param(lambda m: m[5].update(content=None), "expected a string, got null", id="no-content"),
        pytest.param(lambda m: m.append(m[2]), "did not have response messages", id="ends-with-calls"),
    ],
)
def test_openai_pairing_rules(change: Any, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        check_openai(_openai(change))


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(lambda m: m.insert(1, {"role": "system", "content": "more"}), "exactly one system", id="two"),
        pytest.param(lambda m: m.pop(0), "exactly one system", id="none"),
        pytest.param(lambda m: m.pop(1), "must be a user message", id="assistant-first"),
    ],
)
def test_openai_layout(change: Any, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        check_openai_layout(_openai(change))


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(lambda m: m[2]["tool_calls"][0].pop("function"), "not a valid", id="call-without-function"),
        pytest.param(lambda m: m[3].update(name_of_tool="bash"), "has no place for", id="unknown-key"),
        pytest.param(lambda m: m[3].update(content=3), "not a valid", id="content-not-text"),
        pytest.param(lambda m: m[1].update(role="narrator"), "Supported values", id="unknown-role"),
    ],
)
def test_openai_sdk_types(change: Any, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        SdkTypes().openai(_openai(change))


def _anthropic(change: Any) -> dict[str, Any]:
    request = copy.deepcopy(ANTHROPIC)
    change(request["messages"])
    return request


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(
            lambda m: m[2]["content"].pop(1), "without `tool_result` blocks immediately after: t2", id="unanswered"
        ),
        pytest.param(lambda m: m[2]["content"].reverse(), "at the beginning of this message", id="text-first"),
        pytest.param(lambda m: m[2]["content"][0].update(tool_use_id="t9"), "unexpected `tool_use_id`", id="unknown"),
        pytest.param(lambda m: m[2]["content"][1].update(tool_use_id="t1"), "more than one", id="answered-twice"),
        pytest.param(lambda m: m[1]["content"][2].update(id="t1"), "must be unique", id="duplicate-ids"),
        pytest.param(lambda m: m[1]["content"][1].update(id="call.1"), "String should match pattern", id="id"),
        pytest.param(lambda m: m[1]["content"][1].update(name="Update Todos"), "should match pattern", id="name"),
        pytest.param(lambda m: m[1]["content"][1].update(input="ls"), "valid dictionary", id="input"),
        pytest.param(lambda m: m.insert(1, {"role": "user", "content": "more"}), "must alternate", id="two-users"),
        pytest.param(lambda m: m.pop(0), 'first message must use the "user" role', id="assistant-first"),
        pytest.param(lambda m: m[0]["content"][0].update(text=" \n"), "non-whitespace", id="blank-text"),
        pytest.param(lambda m: m.pop(), "prefill", id="ends-with-assistant"),
        pytest.param(lambda m: m.clear(), "at least one message", id="empty"),
        pytest.param(lambda m: m[0]["content"].append(_use("t0")), "only appear in assistant", id="use-in-user"),
    ],
)
def test_anthropic_pairing_rules(change: Any, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        check_anthropic(_anthropic(change))


def test_a_prefill_that_ends_in_whitespace_is_refused() -> None:
    request = _anthropic(lambda m: m.pop())
    request["messages"][-1]["content"][0]["text"] = "Done. "
    with pytest.raises(Refused, match="trailing whitespace"):
        check_anthropic(request, prefill=True)
    request["messages"][-1]["content"][0]["text"] = "Done."
    check_anthropic(request, prefill=True)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        pytest.param(lambda m: m[1]["content"][1].pop("name"), "not a valid", id="use-without-name"),
        pytest.param(lambda m: m[2]["content"][0].update(tool_use="t1"), "has no place for", id="unknown-key"),
        pytest.param(lambda m: m[0]["content"][0].update(type="markdown"), "unexpected block type", id="block-type"),
        pytest.param(lambda m: m[0].update(name="me"), "a message is", id="message-key"),
    ],
)
def test_anthropic_sdk_types(change: Any, refusal: str) -> None:
    with pytest.raises(Refused, match=refusal):
        SdkTypes().anthropic(_anthropic(change))
