"""AutoGen agents on a ctxbus context: `CtxbusModelContext`, a `ChatCompletionContext`.

    async with Agent.open(client, config) as agent:
        assistant = AssistantAgent(
            "a1", model_client, tools=[my_tool, *ctxbus_tools(agent)],
            model_context=CtxbusModelContext(agent), system_message=None,
        )
        await assistant.run(task="Fix the flaky test.")

What maps onto what:

- `add_message` records what `AssistantAgent` adds: a `UserMessage` (the task, or
  another agent's message in a team) as a user turn (`Agent.user`), an
  `AssistantMessage` with its `FunctionCall`s (`Agent.assistant`), and each
  `FunctionExecutionResult` of a `FunctionExecutionResultMessage` as that call's tool
  result (`Agent.tool_result`, where the nudges act);
- `get_messages` is the agent's composition (`Agent.compose().to_openai()`, as AutoGen's
  `LLMMessage`s): one `SystemMessage` (the context's system prompt, so give the
  `AssistantAgent` `system_message=None`), the pinned block, summary and shared brief,
  then the tail inside the window, with queued `ctx_reduce` drops applied, Channel 1
  reminders inside their results and a Channel 2 message as a user turn;
- `ctxbus_tools(agent)`: `ctx_search`, `ctx_read`, `ctx_reduce`, `brief_get` and
  `brief_propose` as AutoGen tools, with the agent loop's argument checks.

The context lives in the agent's store: `save_state` names the agent and `load_state`
checks it is the same one (nothing else needs to travel), and `clear` (what
`AssistantAgent.on_reset` calls) keeps everything, since the store is the record the
brief and the nudges count on; open a new agent on a new store to start afresh.
The model's text next to its calls is kept where AutoGen keeps it (`thought`).
"""

from ctxbus.agents.adapters._extras import needs_extra as _needs_extra

with _needs_extra("autogen", "autogen_agentchat", "autogen_core", "autogen_ext"):
    from ctxbus.agents.adapters._autogen import CtxbusModelContext, CtxbusTool, ctxbus_tools, to_autogen

__all__ = ["CtxbusModelContext", "CtxbusTool", "ctxbus_tools", "to_autogen"]
