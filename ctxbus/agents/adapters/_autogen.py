"""The autogen adapter's implementation: see `agents.adapters.autogen`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autogen_core import CancellationToken, FunctionCall
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict

from ctxbus.agents.adapters._builtins import builtin_toolbox
from ctxbus.agents.loop import LOOP_BUILTINS, Toolbox
from ctxbus.agents.runtime import Agent
from ctxbus.agents.tools import PROPOSE_DEADLINE
from ctxbus.schemas import UsageError

__all__ = ["CtxbusModelContext", "CtxbusTool", "ctxbus_tools", "to_autogen"]


class CtxbusModelContext(ChatCompletionContext):
    """An `AssistantAgent`'s `model_context` backed by a ctxbus `Agent`.

    :param agent: an open agent (`Agent.open`); the context never closes it.
    """

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self.agent = agent

    def __repr__(self) -> str:
        return f"<CtxbusModelContext of {self.agent!r}>"

    async def add_message(self, message: LLMMessage) -> None:
        """Record one message of the agent's run in the ctxbus context."""
        agent = self.agent
        if isinstance(message, UserMessage):
            agent.user(_text(message.content))
        elif isinstance(message, AssistantMessage):
            if isinstance(message.content, str):
                agent.assistant(message.content)
            else:
                calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.content]
                agent.assistant(message.thought or "", tool_calls=calls)
        elif isinstance(message, FunctionExecutionResultMessage):
            for result in message.content:
                await agent.tool_result(result.name, result.content, call_id=result.call_id)
        else:  # a SystemMessage: ctxbus has one, the context's own
            agent.context.add("system", message.content)
        agent.context.flush()

    async def get_messages(self) -> list[LLMMessage]:
        """The prompt for the next model call, as ctxbus composes it."""
        return to_autogen(self.agent.compose().to_openai(), source=self.agent.id)

    async def clear(self) -> None:
        """Keep the context: it is the agent's store (see the module's docstring)."""

    async def save_state(self) -> Mapping[str, Any]:
        return {"agent": self.agent.id, "domain": str(self.agent.domain)}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """:raises UsageError: if `state` was saved by another agent."""
        if state.get("agent") != self.agent.id or state.get("domain") != str(self.agent.domain):
            raise UsageError(
                f"this model context is agent {self.agent.id!r} on {self.agent.domain}; "
                f"the state is {state.get('agent')!r} on {state.get('domain')}"
            )


def to_autogen(messages: Sequence[Mapping[str, Any]], *, source: str) -> list[LLMMessage]:
    """Chat Completions messages (`Composition.to_openai()`) as AutoGen's: consecutive
    tool messages are one `FunctionExecutionResultMessage`, each result named after its
    call; an assistant turn with calls keeps its text as `thought`."""
    names: dict[str, str] = {}
    out: list[LLMMessage] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            out.append(SystemMessage(content=content))
        elif role == "user":
            out.append(UserMessage(content=content, source="user"))
        elif role == "assistant" and message.get("tool_calls"):
            calls = [
                FunctionCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                for c in message["tool_calls"]
            ]
            names.update((call.id, call.name) for call in calls)
            out.append(AssistantMessage(content=calls, thought=content or None, source=source))
        elif role == "assistant":
            out.append(AssistantMessage(content=content, source=source))
        elif role == "tool":
            call_id = message["tool_call_id"]
            result = FunctionExecutionResult(content=content, name=names.get(call_id, ""), call_id=call_id)
            if out and isinstance(out[-1], FunctionExecutionResultMessage):
                out[-1].content.append(result)
            else:
                out.append(FunctionExecutionResultMessage(content=[result]))
        else:
            raise ValueError(f"a composed prompt has no {role!r} messages")
    return out


class _Text(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class CtxbusTool(BaseTool[BaseModel, _Text]):
    """One built-in tool as AutoGen's: its JSON schema as declared, each call run
    through `Toolbox.call` (a bad call comes back as a result saying what was wrong)."""

    def __init__(self, toolbox: Toolbox, function: Mapping[str, Any]) -> None:
        parameters: dict[str, Any] = dict(function["parameters"])
        super().__init__(BaseModel, _Text, function["name"], function["description"])
        self._toolbox = toolbox
        self._parameters = parameters

    @property
    def schema(self) -> Any:
        return {"name": self.name, "description": self.description, "parameters": self._parameters}

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> _Text:
        return _Text(text=await self._call(args.model_dump()))

    async def run_json(
        self, args: Mapping[str, Any], cancellation_token: CancellationToken, call_id: str | None = None
    ) -> Any:
        return await self._call(args)

    def return_value_as_string(self, value: Any) -> str:
        return value.text if isinstance(value, _Text) else str(value)

    async def _call(self, args: Mapping[str, Any]) -> str:
        text, _failed = await self._toolbox.call(self.name, json.dumps(dict(args)))
        return text


def ctxbus_tools(
    agent: Agent, *, names: Iterable[str] = LOOP_BUILTINS, propose_deadline: float = PROPOSE_DEADLINE
) -> list[CtxbusTool]:
    """The built-in tools `names` of `agent`, for `AssistantAgent(tools=...)`."""
    toolbox, functions = builtin_toolbox(agent, names, propose_deadline=propose_deadline)
    return [CtxbusTool(toolbox, function) for function in functions]


def _text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part for part in content if isinstance(part, str))
