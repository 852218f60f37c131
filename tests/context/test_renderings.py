"""`to_openai()` and `to_anthropic()` on the histories hosts really record: parallel calls
one message each, calls without ids, console output no call asked for, a turn cut short,
ids and names a provider would refuse, a pinned turn, a prompt with nothing to open it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxbus.agents.context import ContextConfig, LocalContext
from tests._providers import checked_renderings
from tests.context.conftest import MakeContext, rendered_tokens


def _roles(openai: list[dict[str, Any]]) -> list[str]:
    return [m["role"] + ("+calls" if m.get("tool_calls") else "") for m in openai]


def _call(call_id: str, name: str = "bash", arguments: str = "{}") -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_parallel_calls_recorded_one_message_each_go_out_as_one_turn(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Check both services.")
    ctx.add("assistant", "", tool_calls=[_call("p1", "browser_navigate", '{"url": "http://a"}')])
    ctx.add("assistant", "", tool_calls=[_call("p2", "execute_bash", '{"command": "cat log"}')])
    ctx.add("tool", "Navigated", call_id="p1")
    ctx.add("tool", "log text", call_id="p2")
    openai, anthropic = checked_renderings(ctx.compose())
    assert _roles(openai) == ["system", "user", "assistant+calls", "tool", "tool"]
    assert [c["id"] for c in openai[2]["tool_calls"]] == ["p1", "p2"]
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]


def test_calls_without_ids_are_paired_with_the_results_after_them(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Fix the bug.")
    for name in ("create", "edit"):
        ctx.add("assistant", f"{name} reproduce.py", tool_name=name)
        ctx.add("tool", f"{name} done", tool_name=name)
    openai, _ = checked_renderings(ctx.compose())
    calls = [c["id"] for m in openai if m.get("tool_calls") for c in m["tool_calls"]]
    answers = [m["tool_call_id"] for m in openai if m["role"] == "tool"]
    assert calls == answers and len(set(calls)) == 2


def test_output_no_call_asked_for_goes_out_as_user_text(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "/hi is running…")
    orphan = ctx.add("tool", "Read TODO.md (39 lines)", tool_name="console_output")
    ctx.add("assistant", "Ok.", tool_calls=[_call("k1")])
    stray = ctx.add("tool", "answer to nothing", call_id="zz")
    ctx.add("tool", "done", call_id="k1")
    openai, _ = checked_renderings(ctx.compose())
    assert _roles(openai) == ["system", "user", "user", "assistant+calls", "tool", "user"]
    assert openai[2]["content"] == f"§{orphan}§ Read TODO.md (39 lines)"
    assert openai[5]["content"] == f"§{stray}§ answer to nothing", "its answer moves up to its call; the stray stays"


def test_a_turn_cut_short_gets_a_stand_in_result_counted_in_the_budget(make_ctx: MakeContext, tokenizer: Any) -> None:
    ctx = make_ctx()
    ctx.add("user", "Run both.")
    ctx.add("assistant", "", tool_calls=[_call("a"), _call("b")])
    ctx.add("tool", "a ok", call_id="a")  # the process died before b returned
    composition = ctx.compose()
    openai, _ = checked_renderings(composition)
    assert [(m["tool_call_id"], m["content"].endswith("a ok")) for m in openai if m["role"] == "tool"] == [
        ("a", True),
        ("b", False),
    ]
    assert rendered_tokens(tokenizer, composition.to_openai()) <= composition.report.total
    ctx.add("tool", "b ok", call_id="b")
    openai, _ = checked_renderings(ctx.compose())
    assert [m["content"][-4:] for m in openai if m["role"] == "tool"] == ["a ok", "b ok"]


def test_a_dropped_call_keeps_its_id_and_name_and_its_result_its_pair(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Write the file.")
    call = ctx.add("assistant", "", tool_calls=[_call("w", "write", json.dumps({"text": "x " * 400}))])
    ctx.add("tool", "written", call_id="w")
    for i in range(8):
        ctx.add("assistant", f"step {i}")
        ctx.add("user", "go on")
    before = ctx.compose()
    assert ctx.drop(call) == [call]
    openai, anthropic = checked_renderings(ctx.compose())
    (turn,) = [m for m in openai if m.get("tool_calls")]
    assert turn["content"] == f"[dropped §{call}§]"
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in turn["tool_calls"]] == [
        ("w", "write", "{}")
    ]
    assert "x x x" in json.dumps(before.to_openai()), "a composition is fixed when composed"


def test_a_reused_id_and_names_and_ids_a_provider_refuses_are_mapped_the_same_way_every_time(
    make_ctx: MakeContext,
) -> None:
    ctx = make_ctx()
    ctx.add("user", "Go.")
    long_id = "call_" + "x" * 60
    ctx.add("assistant", "", tool_calls=[_call(long_id, "Update Todos"), _call("call.1", "mcp:fs.read")])
    ctx.add("tool", "listed", call_id=long_id)
    ctx.add("tool", "read", call_id="call.1")
    ctx.add("assistant", "", tool_calls=[_call("call.1", "bash")])  # a host that reuses ids
    ctx.add("tool", "again", call_id="call.1")
    first, anthropic = checked_renderings(ctx.compose())
    second, _ = checked_renderings(ctx.compose())
    assert first == second
    names = [c["function"]["name"] for m in first if m.get("tool_calls") for c in m["tool_calls"]]
    assert names[0].startswith("Update_Todos_") and names[1].startswith("mcp_fs_read_") and names[2] == "bash"
    ids = [c["id"] for m in first if m.get("tool_calls") for c in m["tool_calls"]]
    assert ids[0] != long_id and len(ids[0]) <= 40 and ids[1] == "call.1" and ids[2] != "call.1"
    assert [m["tool_call_id"] for m in first if m["role"] == "tool"] == ids
    uses = [b["id"] for m in anthropic["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses[0] == long_id and len(set(uses)) == 3


def test_arguments_that_are_no_json_object_still_go_out(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Go.")
    ctx.add("assistant", "", tool_calls=[_call("j1", "bash", '{"cmd": "ls'), _call("j2", "bash", "[1, 2]")])
    ctx.add("tool", "error: the arguments are not JSON", call_id="j1")
    ctx.add("tool", "error: expected an object", call_id="j2")
    openai, anthropic = checked_renderings(ctx.compose())
    assert [c["function"]["arguments"] for c in openai[2]["tool_calls"]] == ['{"cmd": "ls', "[1, 2]"]
    uses = [b["input"] for b in anthropic["messages"][1]["content"] if b["type"] == "tool_use"]
    assert uses == [{"arguments": '{"cmd": "ls'}, {"arguments": "[1, 2]"}]


def test_a_pinned_turn_newer_than_the_tail_is_shown_at_its_place(make_ctx: MakeContext) -> None:
    """A recorded session (Claude Code, day 2): the user's newest turn states a rule, so it
    is pinned; it is still the last message, the one the model answers."""
    ctx = make_ctx()
    ctx.add("user", "Set up the project.")
    ctx.add("assistant", "I created bookminder/core and bookminder/conf.")
    turn = ctx.add("user", "Don't create packages without asking me first.")
    composition = ctx.compose()
    openai, anthropic = checked_renderings(composition)
    assert openai[-1] == {"role": "user", "content": f"§{turn}§ Don't create packages without asking me first."}
    assert "Don't create" not in openai[1]["content"], "not in the head as well"
    pinned = next(view for view in composition.layers if view.name == "pinned")
    assert turn in [item.tag for item in pinned.items], "still a pin: never evicted"
    assert anthropic["messages"][-1]["role"] == "user"


def test_a_prompt_with_nothing_before_an_assistant_turn_opens_with_a_line(
    make_ctx: MakeContext, tokenizer: Any
) -> None:
    ctx = make_ctx()
    ctx.add("assistant", "Hello! What shall we work on?")
    composition = ctx.compose("The flaky test, please.")
    openai, anthropic = checked_renderings(composition)
    assert _roles(openai) == ["system", "user", "assistant", "user"]
    assert composition.report.layers["pinned"] > 0, "the line is counted"
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]
    goal = ctx.add("user", "Fix the flaky cache test; never touch vendor/.")  # pinned, after the greeting
    composition = ctx.compose()
    openai, _ = checked_renderings(composition)
    assert _roles(openai) == ["system", "user", "assistant", "user"] and openai[-1]["content"].startswith(f"§{goal}§")
    assert rendered_tokens(tokenizer, openai) <= composition.report.total
    assert sum(view.tokens for view in composition.layers) == composition.report.total
    empty = make_ctx("empty.db").compose()
    assert [m["role"] for m in empty.to_anthropic()["messages"]] == ["user"], "a request needs a message"


def test_the_chat_mode_hides_calls_with_their_results(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Look, then tell me.")
    ctx.add("assistant", "", tool_calls=[_call("m1")])
    ctx.add("tool", "out", call_id="m1")
    ctx.add("assistant", "It is fine.")
    ctx.switch_mode("chat")
    openai, _ = checked_renderings(ctx.compose("And now?"))
    assert _roles(openai) == ["system", "user", "assistant", "user"]


def test_rendered_messages_are_shared_and_read_only(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Go.")
    ctx.add("assistant", "", tool_calls=[_call("r1")])
    ctx.add("tool", "out", call_id="r1")
    composition = ctx.compose()
    turn = composition.to_openai()[2]
    with pytest.raises(TypeError, match="read-only"):
        turn["content"] = "changed"
    with pytest.raises(TypeError, match="read-only"):
        turn["tool_calls"][0]["function"]["name"] = "changed"
    with pytest.raises(TypeError, match="read-only"):
        turn |= {"content": "changed"}
    assert ctx.compose().to_openai()[2] is turn, "the next compose shares it"
    assert turn["content"] != "changed"


try:  # the HTTP client the SDKs are built on: httpx2 in their newer releases
    import httpx2 as httpx
except ImportError:  # pragma: no cover - an older SDK
    import httpx  # type: ignore[no-redef]


def _sent(handler_body: dict[str, Any]) -> Any:
    def handle(request: Any) -> Any:
        handler_body["request"] = json.loads(request.content)
        return httpx.Response(200, json=handler_body["response"])

    return httpx.MockTransport(handle)


def test_the_official_clients_send_the_renderings_as_they_are(make_ctx: MakeContext) -> None:
    """Through each SDK's own request path (the HTTP seam replaced, no model here): the
    body it sends holds exactly the messages rendered."""
    import anthropic
    import openai

    ctx = make_ctx(config=ContextConfig(window=16_000, system_prompt="You are the build agent."))
    ctx.add("user", "Build it.")
    ctx.add("assistant", "Building.", tool_calls=[_call("b1", "bash", '{"cmd": "make"}')])
    ctx.add("tool", "ok", call_id="b1")
    composition = ctx.compose()

    seen: dict[str, Any] = {
        "response": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Built."}}],
        }
    }
    with httpx.Client(transport=_sent(seen)) as http:
        client = openai.OpenAI(api_key="none", base_url="http://model.invalid/v1", http_client=http)
        reply = client.chat.completions.create(model="m", messages=composition.to_openai())  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Built."
    assert seen["request"]["messages"] == json.loads(json.dumps(composition.to_openai()))

    seen["response"] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Built."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    with httpx.Client(transport=_sent(seen)) as http:
        claude = anthropic.Anthropic(api_key="none", base_url="http://model.invalid", http_client=http)
        message = claude.messages.create(model="m", max_tokens=64, **composition.to_anthropic())
    assert message.content[0].type == "text"
    sent = seen["request"]
    assert [sent["system"], sent["messages"]] == json.loads(json.dumps(list(composition.to_anthropic().values())))


def test_a_context_of_its_own_prompt_only_renders(tmp_path: Any, tokenizer: Any) -> None:
    with LocalContext(
        tmp_path / "p.db", "a/b/c", config=ContextConfig(window=4_000, system_prompt="Only me."), tokenizer=tokenizer
    ) as ctx:
        openai, anthropic = checked_renderings(ctx.compose("Hi."))
    assert openai == [{"role": "system", "content": "Only me."}, {"role": "user", "content": "Hi."}]
    assert anthropic == {
        "system": "Only me.",
        "messages": [{"role": "user", "content": ({"type": "text", "text": "Hi."},)}],
    }
