"""An AutoGen assistant over several runs: the context is the agent's store, and stays so."""

from __future__ import annotations

from pathlib import Path

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import CancellationToken
from autogen_ext.models.replay import ReplayChatCompletionClient

from ctxbus.agents.adapters.autogen import CtxbusModelContext
from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.schemas import UsageError
from tests._support import fresh_domain, running_coordinator
from tests.adapters._conversation import ANSWERED, ASKED, expected, said


async def test_runs_record_the_conversation_and_state_names_the_agent(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain()
    config = AgentConfig(
        agent_id="a1", domain=domain, store=tmp_path / "a1.db", context=ContextConfig(system_prompt="Be brief.")
    )
    other = AgentConfig(agent_id="a2", domain=domain, store=tmp_path / "a2.db")
    async with (
        running_coordinator(nats_url) as (client, _),
        Agent.open(client, config) as agent,
        Agent.open(client, other) as stranger,
    ):
        client_model = ReplayChatCompletionClient([ANSWERED[0], ANSWERED[1]])
        context = CtxbusModelContext(agent)
        assistant = AssistantAgent("a1", client_model, model_context=context, system_message=None)
        await assistant.run(task=ASKED[0])
        await assistant.on_reset(CancellationToken())  # clear() keeps the agent's record
        await assistant.run(task=ASKED[1])
        assert said(agent) == expected()
        shown = client_model.create_calls[-1]["messages"]
        assert [type(m).__name__ for m in shown][0] == "SystemMessage" and shown[0].content == "Be brief."
        assert ANSWERED[0] in str(shown)  # the reset kept the first exchange
        state = await assistant.save_state()
        await assistant.load_state(state)
        with pytest.raises(UsageError, match="agent 'a2'"):
            await CtxbusModelContext(stranger).load_state(state["llm_context"])
