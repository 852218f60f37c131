"""LangChain v1 agents on a ctxbus context: `CtxbusMiddleware` for `create_agent(...)`.

    async with Agent.open(client, config) as agent:
        ctxbus = CtxbusMiddleware(agent)
        graph = create_agent(model, tools=[my_tool], middleware=[ctxbus])
        await graph.ainvoke({"messages": [{"role": "user", "content": "Fix the flaky test."}]})

What maps onto what:

- `awrap_model_call` (the model hook): the human messages of the graph's state that the
  agent has not seen are recorded as user turns (`Agent.user`, once each, by message id,
  across restarts on the same store); the request's `system_message` and `messages` are
  then replaced by the agent's composition (`Agent.compose().to_openai()`, as LangChain
  messages): inside the window, queued `ctx_reduce` drops applied, the shared brief in
  its head, Channel 1 reminders inside their tool messages, a Channel 2 message as a user
  turn. The model's answer is recorded with its tool calls (`Agent.assistant`).
- `awrap_tool_call`: each tool's result (the agent's own tools and these) is recorded
  (`Agent.tool_result`, where the nudges act) and handed back with a due reminder
  appended, so the graph's state holds what the model will be shown.
- `tools`: the built-in tools `ctx_search`, `ctx_read`, `ctx_reduce`, `brief_get` and
  `brief_propose` as `StructuredTool`s, with the agent loop's argument checks.

The graph's own `messages` state keeps growing as LangGraph appends to it; only what
the model is sent is the ctxbus composition. The system prompt is the context's
(`ContextConfig.system_prompt`): a `system_prompt` given to `create_agent` is replaced.
Only the async API runs the hooks (`ainvoke`, `astream`): the agent's nudges and
brief live on the event loop, so a synchronous `invoke` raises LangChain's own
`NotImplementedError` naming the async methods.
"""

from ctxbus.agents.adapters._extras import needs_extra as _needs_extra

with _needs_extra("langchain", "langchain", "langchain_core"):
    from ctxbus.agents.adapters._langchain import CtxbusMiddleware, to_langchain

__all__ = ["CtxbusMiddleware", "to_langchain"]
