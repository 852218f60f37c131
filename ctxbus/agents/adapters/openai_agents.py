"""OpenAI Agents SDK agents on a ctxbus context: `CtxbusSession`, a `Session`, and `ctxbus_tools`.

    async with Agent.open(client, config) as agent:
        session = CtxbusSession(agent)
        assistant = agents.Agent(name="a1", model=model, tools=[my_tool, *ctxbus_tools(agent)])
        run_config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
        await agents.Runner.run(assistant, "Fix the flaky test.", session=session, run_config=run_config)

What maps onto what:

- `add_items` records what the `Runner` adds to its session, which it does before each
  model call (a streamed run adds its input just after the first call's filter, which
  records it first; `add_items` then skips it): the user input (`Agent.user`), the
  model's message and its `function_call` items as one assistant turn
  (`Agent.assistant`), and each `function_call_output` as that call's tool result
  (`Agent.tool_result`, where the nudges act); a handoff is a function call like any
  other. Reasoning items are left out (the composed prompt has no place for them); any
  other item (a hosted tool's call, a computer or shell call) is refused with a
  `UsageError`, and nothing of its batch is recorded.
- `get_items` is the agent's composition (`Agent.compose().to_openai()` as the SDK's
  input items, without its system message), the latest `limit` items of it at most,
  never an output without its call. The `Runner` reads it once, when a run starts.
- `call_model_input_filter` (give it to `RunConfig`) is what keeps each model call of a
  run inside the window: the `Runner` otherwise sends the history it read plus every
  item of the run so far. Each call is sent the composition instead: inside the window,
  queued `ctx_reduce` drops applied, the shared brief in its head, Channel 1 reminders
  inside their `function_call_output`s, a Channel 2 message as a user turn, and the
  context's system prompt as the `instructions` (an `instructions` given to the SDK's
  `Agent` is replaced). Used without the session, it raises a `UsageError` once a tool's
  output (or the input it recorded ahead) has not reached the context.
- `ctxbus_tools(agent)`: `ctx_search`, `ctx_read`, `ctx_reduce`, `brief_get` and
  `brief_propose` as `FunctionTool`s, with the agent loop's argument checks (their JSON
  schemas as declared, not the SDK's strict mode, so optional arguments stay optional).

The context is the agent's store and is append-only: `clear_session` keeps everything
(the store is the record the brief and the nudges count on; open a new agent on a new
store to start afresh), and `pop_item` raises a `UsageError`. The `Runner`'s own
`RunResult` (`new_items`, `to_input_list()`) holds the tool outputs as the tools returned
them: the reminders are in what the model was sent, the composition (`composition`).
"""

from ctxbus.agents.adapters._extras import needs_extra as _needs_extra

with _needs_extra("openai-agents", "agents"):
    from ctxbus.agents.adapters._openai_agents import CtxbusSession, ctxbus_tools, to_openai_agents

__all__ = ["CtxbusSession", "ctxbus_tools", "to_openai_agents"]
