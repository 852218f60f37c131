"""One agent of the OpenAI Agents SDK adapter test, in a process of its own: the SDK's real
`Runner` on a ctxbus `Agent` (`CtxbusSession`, `ctxbus_tools`), its model the SDK's
`OpenAIChatCompletionsModel` on the OpenAI-compatible stand-in (`tests.loop._standin`),
which plays the demo's scripted scenario: a `bash` call per step reading the step's
corpus file, `ctx_reduce` on the tags a `<system-reminder>` names, the brief's intents
(the lead rejects an option; the adopter later tries to adopt it anyway).

    python -m tests.adapters._sdk_worker --nats URL --domain D --agent agent-1 \
        --store DIR/agent-1.db --base-url URL --workdir DIR --window 16000 --out agent-1.json

What the model was shown, request by request as it went over the wire, goes to `--out`
as JSON for the test to check (`_worker.summary`'s shape).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import httpx2
from agents import Agent as SdkAgent
from agents import ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from ctxbus.agents.adapters.openai_agents import CtxbusSession, ctxbus_tools
from ctxbus.agents.context import ContextConfig
from ctxbus.agents.loop import BashTool
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.swarm._policy import reminder_drops
from ctxbus.agents.swarm._scenario import REJECTED_OPTION
from ctxbus.bus import BusConfig, connect, run_async
from ctxbus.schemas import Domain
from tests.adapters._worker import REMINDER, SYSTEM, _newest_results, summary, worker_parser
from tests.loop._standin import MODEL

TASK: Final = "Fix the flaky cache tests (see the brief)."
MAX_TURNS: Final = 1_000


def reduces(prompts: Sequence[Sequence[Mapping[str, Any]]]) -> list[tuple[int, list[int]]]:
    """(prompt index, tags) for each prompt whose newest results carry a reminder naming
    tags and whose answer (the next prompt's last turn) is a `ctx_reduce` call."""
    found = []
    for index, prompt in enumerate(prompts[:-1]):
        hinted = sorted({t for text in _newest_results(prompt) for t in reminder_drops(text.partition(REMINDER)[2])})
        turn = next((m for m in reversed(prompts[index + 1]) if m["role"] == "assistant"), {})
        if hinted and any(c["function"]["name"] == "ctx_reduce" for c in turn.get("tool_calls") or ()):
            found.append((index, hinted))
    return found


def adoption(prompts: Sequence[Sequence[Mapping[str, Any]]]) -> str | None:
    """The id of the call proposing the rejected option as a decision, if the model made one."""
    for prompt in prompts:
        for message in prompt:
            for call in message.get("tool_calls") or ():
                arguments = call["function"]["arguments"]
                if call["function"]["name"] == "brief_propose" and "add_decision" in arguments:
                    if REJECTED_OPTION in arguments:
                        return str(call["id"])
    return None


async def main(args: argparse.Namespace) -> None:
    set_tracing_disabled(True)  # no trace goes to OpenAI's servers from a test
    client = await connect(BusConfig(servers=[args.nats]))
    prompts: list[list[dict[str, Any]]] = []

    async def shown(request: httpx2.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            prompts.append(json.loads(request.content)["messages"])

    try:
        context = ContextConfig(window=args.window, system_prompt=SYSTEM, archive_threshold=5_000)
        config = AgentConfig(agent_id=args.agent, domain=Domain.parse(args.domain), store=args.store, context=context)
        bash = BashTool(args.workdir)

        @function_tool(name_override="bash")
        async def run_bash(command: str) -> str:
            """Run a shell command in the task's working directory.

            Args:
                command: The command line, run by bash -c.
            """
            return await bash.run(command)

        async with (
            Agent.open(client, config) as agent,
            httpx2.AsyncClient(event_hooks={"request": [shown]}) as http,
        ):
            session = CtxbusSession(agent)
            openai = AsyncOpenAI(base_url=args.base_url, api_key="standin", http_client=http, max_retries=0)
            assistant = SdkAgent(
                name=agent.id,
                model=OpenAIChatCompletionsModel(model=MODEL, openai_client=openai),
                tools=[run_bash, *ctxbus_tools(agent)],
                model_settings=ModelSettings(extra_args={"user": agent.id}),  # the stand-in's caller
            )
            run_config = RunConfig(call_model_input_filter=session.call_model_input_filter)
            result = await Runner.run(assistant, TASK, session=session, run_config=run_config, max_turns=MAX_TURNS)
            history = sum(agent.context.tokenizer.count(m.content) for m in agent.context.messages())
            output = {
                "final": str(result.final_output),
                "window": args.window,
                "history_tokens": history,
                "user_turns": agent.user_turns,
                "prompts": summary(agent, prompts, rejected=REJECTED_OPTION),
                "reduces": reduces(prompts),
                "adoption": adoption(prompts),
                "brief_hash": agent.replica.hash,
                "revision": agent.replica.revision,
            }
        args.out.write_text(json.dumps(output), encoding="utf-8")
    finally:
        await client.close()


if __name__ == "__main__":
    parser = worker_parser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parsed = parser.parse_args()
    run_async(lambda: main(parsed))
