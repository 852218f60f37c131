"""One agent of `ctxbus swarm run` as an OS process: ``python -m ctxbus.agents.swarm._run_worker ...``.

It opens its agent, runs an `AgentLoop` against the model's endpoint until the loop
stops, then reports when the runner asks, in the line protocol of `schemas._swarm_events`
(the same as the demo's workers, so the runner, the live view and the report are the
same). Everything the loop did is in the agent's store: a process started again on it
carries on. A model that cannot be reached (after the loop's retries) or that refuses
the request ends the process with an error logged and exit code 2, the store intact.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.loop import (
    AgentLoop,
    BashTool,
    BuiltinTools,
    LoopConfig,
    LoopStats,
    ModelClient,
    ModelError,
    Toolbox,
    Turn,
    loop_system_prompt,
)
from ctxbus.agents.runtime import Agent
from ctxbus.agents.swarm._process import agent_result, connect_agent, emit, report_request, worker_main, worker_parser
from ctxbus.agents.swarm._scenario import agent_name
from ctxbus.bus import Leases, close_quietly
from ctxbus.schemas import AgentResult, Finished, Note, Progress, Tally

__all__ = ["main"]

log = logging.getLogger(__name__)

ARCHIVE_THRESHOLD: Final = 5_000
"""Tool output over this many tokens is shown compact (the demo's setting)."""
CLAIM_TTL: Final = 10.0


def main(argv: Sequence[str] | None = None) -> int:
    return worker_main(_parser(), _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = worker_parser("python -m ctxbus.agents.swarm._run_worker", __doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", required=True, type=Path)
    parser.add_argument("--window", type=int, default=128_000)
    parser.add_argument("--max-turns", type=int, default=50)
    parser.add_argument("--tools", default="")
    parser.add_argument("--workdir", type=Path)
    return parser


async def _run(args: argparse.Namespace) -> int:
    context = ContextConfig(
        window=args.window,
        archive_threshold=ARCHIVE_THRESHOLD,
        system_prompt=loop_system_prompt(agent_name(args.index), args.domain, agents=args.agents),
    )
    client, config = await connect_agent(args, context, claim_ttl=CLAIM_TTL)
    try:
        async with Agent.open(client, config) as agent:
            agent.measure_prompt_cache()  # the report's cached share and cost against the full history
            return await _play(agent, args, Leases(client))
    finally:
        await close_quietly(client)


async def _play(agent: Agent, args: argparse.Namespace, leases: Leases) -> int:
    tools = Toolbox()
    tools.add_builtins(BuiltinTools(agent))
    if "bash" in args.tools.split(","):
        tools.add(BashTool(args.workdir).run, name="bash")
    model = ModelClient(base_url=args.base_url, model=args.model, user=agent.id)

    def on_turn(turn: Turn) -> None:
        _progress(agent, turn.stats, args.max_turns)
        n = turn.record.turn
        if turn.reminders:
            emit(Note(agent=agent.id, step=n, text=f"Channel 1: reminder shown ({agent.status()['band']})"))
        if turn.delivered:
            emit(Note(agent=agent.id, step=n, text="Channel 2: synthetic message delivered"))
        for failure in turn.failures:
            emit(Note(agent=agent.id, step=n, text=f"tool call failed: {failure}"))

    loop = AgentLoop(agent, model, tools, config=LoopConfig(max_turns=args.max_turns), on_turn=on_turn)
    if loop.stats.turns:
        emit(Note(agent=agent.id, step=loop.stats.turns, text=f"restarted (pid {os.getpid()}) on its store"))
    try:
        stats = await loop.run(args.task.read_text(encoding="utf-8"))
    except ModelError as exc:
        log.error("%s stopped: %s", agent.id, exc)
        emit(Note(agent=agent.id, step=loop.stats.turns, text=f"[unexpected] stopped: {exc}"))
        return 2
    finally:
        await model.close()
    _progress(agent, stats, args.max_turns)
    emit(Note(agent=agent.id, step=stats.turns, text=f"stopped: {stats.stopped} after {stats.turns} turns"))
    emit(Finished(agent=agent.id))
    if not await report_request(agent):
        return 3
    emit(await _result(agent, stats, leases))
    return 0


def _progress(agent: Agent, stats: LoopStats, max_turns: int) -> None:
    measure = agent.measure()
    messages = agent.context.messages()
    emit(
        Progress(
            agent=agent.id,
            pid=os.getpid(),
            starts=stats.starts,
            step=stats.turns,
            steps=max_turns,
            band=str(measure.band),
            u=measure.u,
            t=measure.t,
            prompt_tokens=stats.history[-1].composed_tokens if stats.history else 0,
            history_tokens=sum(m.tokens for m in messages),
            revision=agent.replica.revision,
            channel2=sum(m.kind == "synthetic" for m in messages),
        )
    )


async def _result(agent: Agent, stats: LoopStats, leases: Leases) -> AgentResult:
    tally = Tally(
        step=stats.turns,
        starts=stats.starts,
        bands=stats.bands,
        reminders=stats.reminders,
        reduces=stats.reduces,
        peak_prompt_tokens=stats.peak_composed_tokens,
        model_prompt_tokens=stats.prompt_tokens,
        model_cached_tokens=stats.cached_tokens,
        model_completion_tokens=stats.completion_tokens,
        stopped=str(stats.stopped) if stats.stopped else None,
    )
    return await agent_result(agent, tally, leases)


if __name__ == "__main__":
    sys.exit(main())
