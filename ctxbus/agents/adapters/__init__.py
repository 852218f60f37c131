"""Drop-in adapters: a ctxbus `Agent` behind the context seam of an agent framework.

One module per framework, each imported only when used and each needing its extra:

- `ctxbus.agents.adapters.langchain` (`ctxbus[langchain]`): `CtxbusMiddleware`, an
  `AgentMiddleware` for LangChain v1's `create_agent`;
- `ctxbus.agents.adapters.autogen` (`ctxbus[autogen]`): `CtxbusModelContext`, a
  `ChatCompletionContext` for AutoGen's `AssistantAgent`, and `ctxbus_tools`;
- `ctxbus.agents.adapters.openai_agents` (`ctxbus[openai-agents]`): `CtxbusSession`, a
  `Session` for the OpenAI Agents SDK's `Runner` (with its `call_model_input_filter`),
  and `ctxbus_tools`.

Each records what the framework's loop did into the agent's context (user messages, the
model's answers with their calls, the tools' results, where the nudges act) and hands
the model the agent's composed prompt instead of the framework's own history, so the
agent runs inside its window, is nudged, can release output with `ctx_reduce`, and
shares the brief with every other agent on its task. The built-in tools (`ctx_search`,
`ctx_read`, `ctx_reduce`, `brief_get`, `brief_propose`) come as the framework's tools,
with the agent loop's argument checks (`ctxbus.agents.loop.Toolbox`): a bad call is a result
that says what was wrong, never an exception.
"""
