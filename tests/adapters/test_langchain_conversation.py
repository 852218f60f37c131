"""A LangChain conversation over several invocations: each human message is recorded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxbus.agents.adapters.langchain import CtxbusMiddleware
from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from tests._support import fresh_domain, running_coordinator
from tests.adapters._conversation import ANSWERED, ASKED, expected, said


class ToolCallingFake(GenericFakeChatModel):
    """langchain-core's fake chat model with `bind_tools` (it answers from its list)."""

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self


async def test_a_thread_invoked_twice_records_each_user_message_once(nats_url: str, tmp_path: Path) -> None:
    config = AgentConfig(
        agent_id="a1", domain=fresh_domain(), store=tmp_path / "a1.db", context=ContextConfig(system_prompt="Be brief.")
    )
    model = ToolCallingFake(messages=iter([AIMessage(content=ANSWERED[0]), AIMessage(content=ANSWERED[1])]))
    async with running_coordinator(nats_url) as (client, _), Agent.open(client, config) as agent:
        ctxbus = CtxbusMiddleware(agent)
        graph = create_agent(model, middleware=[ctxbus], checkpointer=InMemorySaver())
        thread = {"configurable": {"thread_id": "t1"}}
        await graph.ainvoke({"messages": [{"role": "user", "content": ASKED[0]}]}, thread)
        state = await graph.ainvoke({"messages": [{"role": "user", "content": ASKED[1]}]}, thread)
        assert len(state["messages"]) == 4  # the graph's history holds both exchanges
        assert agent.user_turns == 2
        assert said(agent) == expected()
        assert ctxbus.composition is not None and ASKED[1] in str(ctxbus.composition.to_openai()[-2:])
        with pytest.raises(NotImplementedError, match="ainvoke"):  # the hooks are async: LangChain says so
            graph.invoke({"messages": [{"role": "user", "content": "And again."}]}, thread)
