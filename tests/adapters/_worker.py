"""One agent of an adapter test, in a process of its own: a framework's real agent loop on
a ctxbus `Agent`, its model the framework's own shipped test model, played by `Policy`.

    python -m tests.adapters._worker langchain --nats URL --domain D --agent lead \
        --store DIR/lead.db --role lead --steps 12 --window 8000 --out lead.json

`Policy` is the model's mind: it decides each answer from the prompt the model was
shown (nothing else of ctxbus): a `read_log` call per step (a source file of ~2,800 tokens) (a long, tool-heavy run),
`ctx_reduce` on the tags a `<system-reminder>` in the newest tool results names, and
the brief. The lead rejects an option; the follower waits until the brief shows the
rejection, then tries to adopt it anyway. What the model was shown, prompt by prompt,
goes to `--out` as JSON for the test to check.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.swarm._corpus import tool_output
from ctxbus.agents.swarm._policy import reminder_drops, spec, tags
from ctxbus.bus import BusConfig, connect, run_async
from ctxbus.schemas import Domain

REJECTED: Final = "redis lock"
REMINDER: Final = "<system-reminder>"
SYSTEM: Final = "You are a test agent: read the logs, share what you decide in the brief."
TASK: Final = "Find why the cache test is flaky; read the cache sources one by one."
_POLL: Final = 0.2
_POLLS: Final = 100


def log_text(agent: str, step: int) -> str:
    """A source file of about 2,800 tokens, different for every agent and step (the demo's corpus)."""
    return tool_output("read_file", f"src/cache_{step}.py", agent=agent, step=step)


class Policy:
    """The scripted model: the calls of its next answer, from the prompt it was shown."""

    def __init__(self, agent: str, role: str, steps: int) -> None:
        self.agent, self.role, self.steps = agent, role, steps
        self.step = 0
        self.turn = 0
        self.waiting = False
        self.polls = 0
        self.reduced: set[int] = set()
        self.prompts: list[list[dict[str, Any]]] = []
        self.reduces: list[tuple[int, list[int]]] = []
        """(prompt index, tags) of each ctx_reduce the model asked for."""
        self.bad_call: str | None = None
        """The call id of the follower's call with a bad argument."""
        self.adoption: str | None = None
        """The call id of the follower's attempt to adopt the rejected option."""

    def decide(self, prompt: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, dict[str, Any]]] | None:
        """The calls to make as (id, name, arguments); None for the final answer."""
        self.prompts.append([dict(m) for m in prompt])
        self.turn += 1
        newest = _newest_results(prompt)
        hinted = sorted({t for text in newest for t in reminder_drops(text.partition(REMINDER)[2])} - self.reduced)
        if hinted:
            self.reduced.update(hinted)
            self.reduces.append((len(self.prompts) - 1, hinted))
            return [self._call("ctx_reduce", {"drop": spec(hinted)})]
        if self.waiting:
            if any(REJECTED in _rejected_in(text) for text in newest):
                self.waiting = False
                op = {"op": "add_decision", "option": REJECTED, "rationale": "simplest lock we know"}
                call = self._call("brief_propose", {"op": op, "key": f"{self.agent}-adopt"})
                self.adoption = call[0]
                return [call]
            self.polls += 1
            if self.polls > _POLLS:
                raise RuntimeError("the brief never showed the lead's rejection")
            time.sleep(_POLL)
            return [self._call("brief_get", {"view": "json"})]
        if self.step >= self.steps:
            return None
        calls = [self._call("read_log", {"step": self.step})]
        if self.role == "lead" and self.step == 1:
            op = {"op": "reject", "option": REJECTED, "reason": "no redis in production"}
            calls.append(self._call("brief_propose", {"op": op, "key": f"{self.agent}-reject"}))
        if self.role == "follower" and self.step == 0:
            bad = self._call("ctx_read", {"tag": True})
            self.bad_call = bad[0]
            calls.append(bad)
        if self.role == "follower" and self.step == 2:
            self.waiting = True
            calls.append(self._call("brief_get", {"view": "json"}))
        self.step += 1
        return calls

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return f"call-{self.agent}-{self.turn}-{name}-{time.monotonic_ns() % 100_000}", name, arguments


def _newest_results(prompt: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tool results at the end of the prompt (the answers to the model's last turn)."""
    found: list[str] = []
    for message in reversed(prompt):
        if message.get("role") != "tool":
            break
        found.append(_content(message))
    return found


def _rejected_in(text: str) -> list[str]:
    """The rejected options of a `brief_get` json result (none for any other text)."""
    body = text[text.find("{") :].partition(REMINDER)[0]
    try:
        brief = json.loads(body)["brief"]
    except (ValueError, KeyError, TypeError):
        return []
    return [item["option"] for item in brief.get("rejected", [])]


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


# -- the frameworks ----------------------------------------------------------------------


async def run_langchain(agent: Agent, policy: Policy) -> str:
    from langchain.agents import create_agent
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.tools import StructuredTool

    from ctxbus.agents.adapters.langchain import CtxbusMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        """langchain-core's fake chat model, which has no `bind_tools`: the tools are the
        policy's to know, so binding them changes nothing."""

        def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
            return self

    seen: list[list[BaseMessage]] = []

    class Seen(BaseCallbackHandler):
        run_inline = True

        def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
            seen.append(messages[0])

    def answers() -> Any:
        while True:
            prompt = convert_to_openai_messages(seen[-1])
            calls = policy.decide(prompt)
            if calls is None:
                yield AIMessage(content="Done: the sources are read.")
                return
            yield AIMessage(
                content="", tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in calls]
            )

    async def read_log(step: int) -> str:
        return log_text(agent.id, step)

    tool = StructuredTool.from_function(coroutine=read_log, name="read_log", description="Read one source file.")
    graph = create_agent(ToolCallingFake(messages=answers()), tools=[tool], middleware=[CtxbusMiddleware(agent)])
    state = await graph.ainvoke(
        {"messages": [{"role": "user", "content": TASK}]}, {"callbacks": [Seen()], "recursion_limit": 500}
    )
    return str(state["messages"][-1].text)


async def run_autogen(agent: Agent, policy: Policy) -> str:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from ctxbus.agents.adapters.autogen import CtxbusModelContext, ctxbus_tools

    async def read_log(step: int) -> str:
        """Read one source file."""
        return log_text(agent.id, step)

    info = ModelInfo(
        vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
    )
    client = ReplayChatCompletionClient([], model_info=info)
    context = CtxbusModelContext(agent)
    assistant = AssistantAgent(
        agent.id.replace("-", "_"),
        client,
        tools=[FunctionTool(read_log, description="Read one source file."), *ctxbus_tools(agent)],
        model_context=context,
        system_message=None,
        max_tool_iterations=1,
    )
    task: str | None = TASK
    while True:
        # The replay client answers from its list: the policy adds the next answer,
        # decided on the prompt the model is about to be shown (the context composes the
        # same prompt again for the call: nothing changes in between). The first one is
        # decided before the task is recorded, so it is shown the task on its own.
        upcoming = _flatten(await context.get_messages())
        if task is not None:
            upcoming.append({"role": "user", "content": task})
        calls = policy.decide(upcoming)
        usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        content: str | list[FunctionCall] = (
            "Done: the sources are read."
            if calls is None
            else [FunctionCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls]
        )
        finish = "stop" if calls is None else "function_calls"
        client.chat_completions.append(CreateResult(finish_reason=finish, content=content, usage=usage, cached=False))
        result = await assistant.run(task=task)
        shown = _flatten(client.create_calls[-1]["messages"])
        if task is None and shown != upcoming:
            raise AssertionError("the model was shown another prompt than the context composed")
        policy.prompts[-1] = shown
        task = None
        if calls is None:
            return str(result.messages[-1].to_text())


def _from_autogen(message: Any) -> dict[str, Any]:
    """An AutoGen `LLMMessage` as a Chat Completions message (for the policy and the checks)."""
    kind = type(message).__name__
    if kind == "SystemMessage":
        return {"role": "system", "content": message.content}
    if kind == "UserMessage":
        return {"role": "user", "content": message.content}
    if kind == "AssistantMessage":
        if isinstance(message.content, str):
            return {"role": "assistant", "content": message.content}
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.content
        ]
        return {"role": "assistant", "content": message.thought or "", "tool_calls": calls}
    raise AssertionError(f"unexpected {kind}")


def _flatten(messages: Sequence[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if type(message).__name__ == "FunctionExecutionResultMessage":
            out.extend({"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in message.content)
        else:
            out.append(_from_autogen(message))
    return out


RUNNERS = {"langchain": run_langchain, "autogen": run_autogen}


# -- the process ---------------------------------------------------------------------------


def summary(
    agent: Agent, prompts: Sequence[Sequence[Mapping[str, Any]]], *, rejected: str = REJECTED
) -> list[list[dict[str, Any]]]:
    """Each prompt the model was shown, message by message: role, the tag it opens with,
    its tokens, its calls or the call it answers, whether it carries a reminder or names
    the `rejected` option."""
    count = agent.context.tokenizer.count
    out = []
    for prompt in prompts:
        rows = []
        for m in prompt:
            text = _content(m)
            calls = [c["id"] for c in m.get("tool_calls") or ()]
            args = "".join(c["function"]["arguments"] for c in m.get("tool_calls") or ())
            found = tags(text[:12])
            rows.append(
                {
                    "role": m["role"],
                    "tag": found[0] if found else None,
                    "tokens": count(text + args) + 4,
                    "calls": calls,
                    "answers": m.get("tool_call_id"),
                    "reminder": REMINDER in text,
                    "names_rejected": rejected in text,
                    "text": text if m["role"] == "tool" and len(text) < 2000 else "",
                }
            )
        out.append(rows)
    return out


async def main(args: argparse.Namespace) -> None:
    client = await connect(BusConfig(servers=[args.nats]))
    try:
        # Outputs stay whole in the tail (under 5,000 tokens), as the demo's do, for the nudges to weigh.
        context = ContextConfig(window=args.window, system_prompt=SYSTEM, archive_threshold=5_000)
        config = AgentConfig(agent_id=args.agent, domain=Domain.parse(args.domain), store=args.store, context=context)
        policy = Policy(args.agent, args.role, args.steps)
        async with Agent.open(client, config) as agent:
            final = await RUNNERS[args.framework](agent, policy)
            history = sum(agent.context.tokenizer.count(m.content) for m in agent.context.messages())
            result = {
                "final": final,
                "window": args.window,
                "history_tokens": history,
                "prompts": summary(agent, policy.prompts),
                "reduces": policy.reduces,
                "adoption": policy.adoption,
                "bad_call": policy.bad_call,
                "brief_hash": agent.replica.hash,
                "revision": agent.replica.revision,
            }
        args.out.write_text(json.dumps(result), encoding="utf-8")
    finally:
        await client.close()


def worker_parser() -> argparse.ArgumentParser:
    """The arguments every adapter test's worker takes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--nats", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser


if __name__ == "__main__":
    parser = worker_parser()
    parser.add_argument("framework", choices=sorted(RUNNERS))
    parser.add_argument("--role", choices=("lead", "follower"), required=True)
    parser.add_argument("--steps", type=int, required=True)
    parsed = parser.parse_args()
    run_async(lambda: main(parsed))
