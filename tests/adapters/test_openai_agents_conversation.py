"""An OpenAI Agents SDK session over several runs, on the SDK's own shipped test model
(`agents.testing.ScriptedModel`): what the Runner adds is recorded once, each model call is
sent the composition, and the session refuses what the context cannot do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import RunConfig, Runner
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

from ctxbus.agents.adapters.openai_agents import CtxbusSession, ctxbus_tools
from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.tools import BUILTIN_TOOLS
from ctxbus.schemas import UsageError
from tests._support import fresh_domain, running_coordinator
from tests.adapters._conversation import ANSWERED, ASKED, expected, said


def config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        agent_id="a1", domain=fresh_domain(), store=tmp_path / "a1.db", context=ContextConfig(system_prompt="Be brief.")
    )


def run_config(session: CtxbusSession) -> RunConfig:
    return RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)


async def test_two_runs_on_one_session_record_each_user_message_once(nats_url: str, tmp_path: Path) -> None:
    model = ScriptedModel([[assistant_message(ANSWERED[0])], [assistant_message(ANSWERED[1])]])
    async with running_coordinator(nats_url) as (client, _), Agent.open(client, config(tmp_path)) as agent:
        session = CtxbusSession(agent)
        assert isinstance(session, Session)
        assistant = SdkAgent(name="a1", model=model, instructions="Replaced by the context's system prompt.")
        for asked in ASKED:
            result = await Runner.run(assistant, asked, session=session, run_config=run_config(session))
        assert result.final_output == ANSWERED[1]
        assert agent.user_turns == 2 and said(agent) == expected()
        shown = model.calls[-1]
        assert shown.system_instructions == "Be brief."
        assert ANSWERED[0] in str(shown.input) and str(shown.input).count(ASKED[1]) == 1

        # The session's own protocol: the composed history, append-only.
        items = await session.get_items()
        assert ANSWERED[1] in str(items[-1]) and await session.get_items(limit=1) == items[-1:]
        with pytest.raises(UsageError, match="append-only"):
            await session.pop_item()
        await session.clear_session()  # keeps the agent's record
        hosted = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}
        with pytest.raises(UsageError, match="'web_search_call'"):
            await session.add_items([{"role": "user", "content": "Lost?"}, hosted])  # type: ignore[list-item]
        assert said(agent) == expected()  # nothing of the refused batch was recorded


async def test_a_streamed_run_is_sent_its_input_and_records_it_once(nats_url: str, tmp_path: Path) -> None:
    """A streamed run adds its input to the session after the first model call's filter."""
    asked = "Read the brief.\nThen say done.\n"
    model = ScriptedModel([[function_call("brief_get", {}, call_id="call_1")], [assistant_message(ANSWERED[0])]])
    async with running_coordinator(nats_url) as (client, _), Agent.open(client, config(tmp_path)) as agent:
        session = CtxbusSession(agent)
        assistant = SdkAgent(name="a1", model=model, tools=ctxbus_tools(agent))
        result = Runner.run_streamed(assistant, asked, session=session, run_config=run_config(session))
        async for _event in result.stream_events():
            pass
        assert result.final_output == ANSWERED[0]
        assert (
            agent.user_turns == 1
            and said(agent)[0] == ("user", asked)
            and said(agent)[-1] == ("assistant", ANSWERED[0])
        )
        first, second = (str(call.input) for call in model.calls)
        assert first.count("Then say done.") == 1 and second.count("Then say done.") == 1
        assert "call_1" in second and "(hash " in second


async def test_the_filter_without_its_session_is_refused(nats_url: str, tmp_path: Path) -> None:
    model = ScriptedModel([[function_call("brief_get", {}, call_id="call_1")], [assistant_message(ANSWERED[0])]])
    async with running_coordinator(nats_url) as (client, _), Agent.open(client, config(tmp_path)) as agent:
        session = CtxbusSession(agent)
        assistant = SdkAgent(name="a1", model=model, tools=ctxbus_tools(agent))
        with pytest.raises(UsageError, match="as its session"):  # the tool's output never reached the context
            await Runner.run(assistant, ASKED[0], run_config=run_config(session))
        assert len(model.calls) == 1


async def test_a_bad_call_is_answered_with_what_was_wrong_and_the_pair_holds(nats_url: str, tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            [
                function_call("ctx_read", '{"tag": true}', call_id="call_bad"),
                function_call("ctx_status", {}, call_id="call_ok"),
            ],
            [assistant_message("Read it.")],
        ]
    )
    async with running_coordinator(nats_url) as (client, _), Agent.open(client, config(tmp_path)) as agent:
        session = CtxbusSession(agent)
        assistant = SdkAgent(name="a1", model=model, tools=ctxbus_tools(agent, names=BUILTIN_TOOLS))
        await Runner.run(assistant, ASKED[0], session=session, run_config=run_config(session))
        shown = [dict(item) for item in model.calls[-1].input]
        outputs = {item["call_id"]: item["output"] for item in shown if item.get("type") == "function_call_output"}
        assert outputs["call_bad"].endswith(
            "error: argument 'tag' must be a tag: a whole number such as 12, or a string such as \"§12§\", got true"
        )
        assert '"agent": "a1"' in outputs["call_ok"]  # ctx_status, offered on request
        # The calls as one turn, answered in order; a cut that leaves a call out leaves its output out too.
        kinds = [(item.get("type"), item.get("call_id")) for item in shown[-4:]]
        assert kinds == [
            ("function_call", "call_bad"),
            ("function_call", "call_ok"),
            ("function_call_output", "call_bad"),
            ("function_call_output", "call_ok"),
        ]

        def cut(items: list[Any]) -> list[tuple[str | None, str | None]]:
            return [(item.get("type"), item.get("call_id")) for item in items]

        assert cut(await session.get_items(limit=3)) == [("message", None)]  # both outputs' calls cut off
        assert cut(await session.get_items(limit=4)) == [
            ("function_call", "call_ok"),
            ("function_call_output", "call_ok"),
            ("message", None),
        ]
