"""Agents of the scripted scenario, played two ways on one coordinator: in process (the
demo's `ScriptedModel`) and over HTTP (an `AgentLoop` asking the stand-in)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.loop import (
    AgentLoop,
    BashTool,
    BuiltinTools,
    LoopConfig,
    LoopStats,
    ModelClient,
    RetryPolicy,
    Toolbox,
)
from ctxbus.agents.loop import loop_system_prompt as system_prompt
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.agents.swarm._model import ScriptedModel
from ctxbus.agents.swarm._scenario import agent_name, step
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain, Tally, TaskBrief
from tests.loop._standin import MODEL, StandIn

__all__ = ["FAST_RETRY", "brief_content", "context_config", "looping", "play_in_process", "play_over_http"]

FAST_RETRY = RetryPolicy(attempts=3, initial=0.05, maximum=0.2, timeout=60)
"""Retries for tests: a down endpoint is given up in a fraction of a second."""


def context_config(agent: str, domain: Domain, agents: int, *, window: int = 200_000) -> ContextConfig:
    """The demo's context shape (CI logs archived, the rest inline), with the loop's prompt."""
    return ContextConfig(
        window=window, archive_threshold=5_000, system_prompt=system_prompt(agent, domain, agents=agents)
    )


@asynccontextmanager
async def looping(agent: Agent, workdir: Path, *, base_url: str, max_turns: int = 400) -> AsyncIterator[AgentLoop]:
    """A loop for `agent` on the endpoint at `base_url`, with the built-in tools and bash
    in `workdir`; its model client is closed after."""
    tools = Toolbox()
    tools.add_builtins(BuiltinTools(agent))
    tools.add(BashTool(workdir).run, name="bash")
    async with ModelClient(base_url=base_url, model=MODEL, user=agent.id, retry=FAST_RETRY) as model:
        yield AgentLoop(agent, model, tools, config=LoopConfig(max_turns=max_turns))


async def play_over_http(
    client: NatsClient, domain: Domain, store: Path, standin: StandIn, workdir: Path
) -> tuple[TaskBrief, list[LoopStats]]:
    """Every agent of the stand-in's swarm as an AgentLoop, to the end; the brief after."""
    stats: list[LoopStats] = []

    async def one(index: int) -> None:
        name = agent_name(index)
        config = AgentConfig(
            agent_id=name,
            domain=domain,
            store=store / f"{name}.db",
            context=context_config(name, domain, standin.agents),
        )
        async with Agent.open(client, config) as agent:
            async with looping(agent, workdir, base_url=standin.base_url) as loop:
                stats.append(await loop.run("Fix the flaky cache tests (see the brief)."))
            await _settle(agent)
            brief.append(agent.brief)

    brief: list[TaskBrief] = []
    async with anyio.create_task_group() as tg:
        for index in range(standin.agents):
            tg.start_soon(one, index)
    return max(brief, key=lambda b: b.revision), stats


async def play_in_process(client: NatsClient, domain: Domain, store: Path, *, agents: int, steps: int) -> TaskBrief:
    """Every agent of the scenario driven by the demo's ScriptedModel, to the end; the brief after."""
    briefs: list[TaskBrief] = []

    async def one(index: int) -> None:
        name = agent_name(index)
        config = AgentConfig(
            agent_id=name, domain=domain, store=store / f"{name}.db", context=context_config(name, domain, agents)
        )
        async with Agent.open(client, config) as agent:
            model = ScriptedModel(agent, Tally(), index=index, say=lambda *_: None)
            for number in range(steps):
                await model.run_step(step(index, agents, number, steps))
            await _settle(agent)
            briefs.append(agent.brief)

    async with anyio.create_task_group() as tg:
        for index in range(agents):
            tg.start_soon(one, index)
    return max(briefs, key=lambda b: b.revision)


async def _settle(agent: Agent) -> None:
    """Give the other agents' last commits a moment to reach this replica."""
    await anyio.sleep(0.5)


def brief_content(brief: TaskBrief) -> dict[str, Any]:
    """What the brief says, without who said it when (ids, revisions, keys, authors)."""
    return {
        "goal": brief.goal.text if brief.goal else None,
        "pending": sorted(item.text for item in brief.pending),
        "done": sorted((item.text, item.outcome) for item in brief.done),
        "decisions": sorted((d.option, d.rationale) for d in brief.decisions),
        "rejected": sorted((r.option, r.reason) for r in brief.rejected),
        "constraints": sorted(item.text for item in brief.constraints),
        "blockers": sorted(item.text for item in brief.blockers),
        "notes": sorted(item.text for item in brief.notes),
        "closed": brief.closed is not None,
    }
