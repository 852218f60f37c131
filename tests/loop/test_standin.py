"""The stand-in refuses what the Chat Completions API refuses, in the API's error shape
(read here by the `openai` SDK itself), and reports cached tokens as the longest common
prefix with the caller's previous request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.loop._standin import MODEL, StandIn

SYSTEM = {"role": "system", "content": "You are a test."}
USER = {"role": "user", "content": "Say something useful about caches. " * 20}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
}
ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with StandIn(agents=1, steps=6, context_limit=400) as running:
        yield running


@pytest.fixture
def sdk(standin: StandIn) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=standin.base_url, api_key="sk-test", max_retries=0) as client:
        yield client


def refusal(sdk: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> str:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=MODEL, messages=messages, **extra)  # type: ignore[call-overload]
    assert refused.value.status_code == 400
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"  # the SDK unwraps `error`
    return str(body["message"])


@pytest.mark.parametrize(
    ("messages", "extra", "said"),
    [
        ([SYSTEM, USER, ANSWER], {"tools": TOOLS}, "messages with role 'tool' must be a response to a preceeding"),
        ([SYSTEM, USER, CALL], {"tools": TOOLS}, "did not have response messages: call_1"),
        ([SYSTEM, USER, CALL, ANSWER], {}, "messages with 'tool_calls' need 'tools' declared"),
        ([SYSTEM, {"role": "robot", "content": "beep"}], {}, "Invalid value: 'robot'"),
        ([SYSTEM, {"role": "user", "content": "cache " * 500}], {}, "maximum context length is 400 tokens"),
        (
            [SYSTEM, USER],
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}},
            "Invalid value for 'tool_choice'",
        ),
    ],
    ids=["tool-without-call", "unanswered-call", "calls-without-tools", "unknown-role", "over-the-limit", "undeclared"],
)
def test_the_standin_refuses_what_the_api_refuses(
    standin: StandIn, sdk: openai.OpenAI, messages: list[dict[str, Any]], extra: dict[str, Any], said: str
) -> None:
    assert said in refusal(sdk, messages, **extra)
    assert len(standin.refused()) == 1


def usage(reply: Any) -> tuple[int, int]:
    """(prompt tokens, cached tokens) as the SDK parsed them."""
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens


def test_cached_tokens_are_the_prefix_shared_with_the_callers_previous_request(
    standin: StandIn, sdk: openai.OpenAI
) -> None:
    def ask(messages: list[dict[str, Any]], user: str) -> Any:
        return sdk.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, user=user)  # type: ignore[arg-type]

    first = ask([SYSTEM, USER], "agent-1")
    again = ask([SYSTEM, USER], "agent-1")
    other = ask([SYSTEM, USER], "agent-2")
    grown = ask(
        [SYSTEM, USER, {"role": "assistant", "content": "thinking"}, {"role": "user", "content": "go"}], "agent-1"
    )
    assert usage(first) == (usage(first)[0], 0)
    assert usage(again) == (usage(first)[0], usage(first)[0])  # the whole prompt again
    assert usage(other)[1] == 0  # another caller's cache
    assert usage(grown)[1] == usage(first)[0] < usage(grown)[0]
    # The scenario's first move: the step's tool, as a call the SDK parses.
    [call] = first.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "bash" and first.choices[0].finish_reason == "tool_calls"
