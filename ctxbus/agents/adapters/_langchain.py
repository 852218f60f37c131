"""The langchain adapter's implementation: see `agents.adapters.langchain`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ctxbus.agents.adapters._builtins import builtin_toolbox
from ctxbus.agents.context import Composition
from ctxbus.agents.context._wire import tool_input  # not exported by agents.context (yet): one reading of arguments
from ctxbus.agents.loop import LOOP_BUILTINS, Toolbox
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import PROPOSE_DEADLINE

__all__ = ["CtxbusMiddleware", "to_langchain"]

_RECORDED_KEY: Final = "langchain:recorded"
"""Agent state: ids of the graph's human messages already recorded as user turns."""


class CtxbusMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Runs a `create_agent` graph on a ctxbus `Agent`'s context, nudges and brief.

    :param agent: an open agent (`Agent.open`); the middleware never closes it.
    :param builtins: which built-in tools to offer the model (all five by default).
    """

    def __init__(
        self,
        agent: Agent,
        *,
        builtins: Iterable[str] = LOOP_BUILTINS,
        propose_deadline: float = PROPOSE_DEADLINE,
    ) -> None:
        super().__init__()
        self.agent = agent
        toolbox, functions = builtin_toolbox(agent, builtins, propose_deadline=propose_deadline)
        self.tools: Sequence[BaseTool] = [_structured(toolbox, function) for function in functions]
        self.composition: Composition | None = None
        """The latest prompt sent, as ctxbus composed it (its report counts the tokens)."""
        raw = agent.context.get_state(_RECORDED_KEY)
        self._recorded: set[str] = set(json.loads(raw)) if raw else set()

    @property
    def name(self) -> str:
        return "ctxbus"

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Record new user input, send the composed prompt, record the answer."""
        self._record_user(request.messages)
        composition = self.agent.compose()
        self.composition = composition
        system, messages = to_langchain(composition.to_openai())
        response = await handler(request.override(system_message=system, messages=messages))
        for message in response.result:
            if isinstance(message, AIMessage):
                self._record_answer(message)
        self.agent.context.flush()
        return response

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool, record its result where the nudges see it, return it as shown."""
        call = request.tool_call
        try:
            result = await handler(request)
        except Exception as exc:  # recorded, so the next prompt still answers the call
            await self.agent.tool_result(call["name"], f"error: {type(exc).__name__}: {exc}", call_id=call["id"])
            raise
        message = result if isinstance(result, ToolMessage) else _tool_message_of(result)
        if message is None:  # a Command without a ToolMessage: the call is answered by the stand-in
            return result
        outcome = await self.agent.tool_result(call["name"], message.text, call_id=call["id"])
        if message is not result or outcome.text == message.text:
            return result
        return message.model_copy(update={"content": outcome.text})

    def _record_user(self, messages: Sequence[AnyMessage]) -> None:
        new = [m for m in messages if isinstance(m, HumanMessage) and m.id not in self._recorded]
        for message in new:
            self.agent.user(message.text)
            if message.id is not None:
                self._recorded.add(message.id)
        if new:
            self.agent.context.set_state(_RECORDED_KEY, json.dumps(sorted(self._recorded)))

    def _record_answer(self, message: AIMessage) -> None:
        calls = [
            {"id": call["id"] or "", "name": call["name"], "arguments": json.dumps(call["args"])}
            for call in message.tool_calls
        ]
        self.agent.assistant(message.text, tool_calls=calls)


def to_langchain(messages: Sequence[Mapping[str, Any]]) -> tuple[SystemMessage | None, list[AnyMessage]]:
    """Chat Completions messages (`Composition.to_openai()`) as LangChain messages: the
    system message apart (a `ModelRequest` keeps it apart), then the rest in order."""
    system: SystemMessage | None = None
    out: list[AnyMessage] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            system = SystemMessage(content=content)
        elif role == "user":
            out.append(HumanMessage(content=content))
        elif role == "assistant":
            calls = [
                ToolCall(
                    name=call["function"]["name"],
                    args=tool_input(call["function"]["arguments"]),
                    id=call["id"],
                    type="tool_call",
                )
                for call in message.get("tool_calls") or ()
            ]
            out.append(AIMessage(content=content, tool_calls=calls))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=message["tool_call_id"]))
        else:
            raise ValueError(f"a composed prompt has no {role!r} messages")
    return system, out


def _tool_message_of(command: Command[Any]) -> ToolMessage | None:
    update = command.update
    found = update.get("messages", ()) if isinstance(update, Mapping) else ()
    return next((m for m in found if isinstance(m, ToolMessage)), None)


def _structured(toolbox: Toolbox, function: Mapping[str, Any]) -> StructuredTool:
    """A built-in tool as LangChain's: its JSON schema, run through `Toolbox.call`."""
    name: str = function["name"]

    async def run(**arguments: Any) -> str:
        text, _failed = await toolbox.call(name, json.dumps(arguments))
        return text

    return StructuredTool(
        name=name, description=function["description"], args_schema=dict(function["parameters"]), coroutine=run
    )
