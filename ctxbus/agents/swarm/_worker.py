"""One swarm agent as an OS process: ``python -m ctxbus.agents.swarm._worker --nats URL ...``.

The worker runs its scripted steps, saving its tally in its own SQLite store after each
one, so a process started on the same store after a SIGKILL resumes where the last one
stopped: same context, same nudge state, same brief (caught up from the log). It speaks
the `schemas._swarm_events` line protocol on stdout and logs on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

import anyio

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent
from ctxbus.agents.swarm._constraints import missing_from_brief, missing_from_pinned
from ctxbus.agents.swarm._model import ScriptedModel
from ctxbus.agents.swarm._process import agent_result, connect_agent, emit, report_request, worker_main, worker_parser
from ctxbus.agents.swarm._scenario import CONSTRAINTS, step, user_constraints
from ctxbus.bus import Leases, close_quietly
from ctxbus.schemas import (
    AgentResult,
    Finished,
    Note,
    Progress,
    Tally,
)

__all__ = ["SWARM_CONTEXT", "main"]

log = logging.getLogger(__name__)

SWARM_CONTEXT: Final = ContextConfig(window=200_000, archive_threshold=5_000)
"""A 200k window, so the tail can grow past the Channel 2 thresholds; CI logs (~8k
tokens) are archived, everything else (~3k) stays inline until dropped."""
CLAIM_TTL: Final = 2.0
"""Channel 2 claim TTL: a claim left by the killed agent frees its cycle quickly."""
_TALLY_KEY: Final = "swarm:tally"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one agent; exit code 0 once it has printed its result."""
    return worker_main(_parser(), _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = worker_parser("python -m ctxbus.agents.swarm._worker", __doc__)
    parser.add_argument("--steps", required=True, type=int)
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds the 'model' thinks per step")
    return parser


async def _run(args: argparse.Namespace) -> int:
    client, config = await connect_agent(args, SWARM_CONTEXT, claim_ttl=CLAIM_TTL)
    agent = Agent(client, config)
    agent.measure_prompt_cache()  # the report's cached share and cost against the full history
    saved_revision = agent.status()["brief_revision"]  # resumed from the store, before the bus
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(agent.run)
            code = await _play(agent, args, Leases(client), saved_revision=saved_revision)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            agent.close()
            await close_quietly(client)
    return code


async def _play(agent: Agent, args: argparse.Namespace, leases: Leases, *, saved_revision: object) -> int:
    """Run the remaining steps, then report when the runner asks; returns the exit code."""
    tally = _load_tally(agent)
    tally.starts += 1
    tally.resumed_from = tally.step or None
    _save_tally(agent, tally)

    def say(n: int, text: str) -> None:
        emit(Note(agent=agent.id, step=n + 1, text=text))

    if tally.resumed_from is not None:
        say(tally.step - 1, f"restarted (pid {os.getpid()}): resumed at step {tally.step} from its store, "
            f"brief rev {saved_revision} -> {agent.replica.revision} after catching up")  # fmt: skip
    else:
        say(0, f"joined the brief at rev {agent.replica.revision}")
    model = ScriptedModel(agent, tally, index=args.index, say=say)
    for n in range(tally.step, args.steps):
        measure = await model.run_step(step(args.index, args.agents, n, args.steps))
        agent.context.flush()  # the step's messages first, then the step counter
        tally.step = n + 1
        _save_tally(agent, tally)
        messages = agent.context.messages()
        emit(
            Progress(
                agent=agent.id,
                pid=os.getpid(),
                starts=tally.starts,
                step=n + 1,
                steps=args.steps,
                band=str(measure.band),
                u=measure.u,
                t=measure.t,
                prompt_tokens=model.prompt_tokens,
                history_tokens=sum(m.tokens for m in messages),
                revision=agent.replica.revision,
                channel2=sum(m.kind == "synthetic" for m in messages),
            )
        )
        await anyio.sleep(args.step_delay)
    emit(Finished(agent=agent.id))
    if not await report_request(agent):
        return 3
    emit(await _result(agent, tally, leases, own=user_constraints(args.index, args.steps)))
    return 0


async def _result(agent: Agent, tally: Tally, leases: Leases, *, own: Sequence[str]) -> AgentResult:
    """The final report, with each Channel 2 cycle checked on the bus and in the host.

    :param own: the constraints this agent's own user stated; they must be in its
        pinned layer, and the lead's `CONSTRAINTS` in the brief block, each apart.
    """
    layers = agent.compose().layers
    return await agent_result(
        agent,
        tally,
        leases,
        missing_constraints=missing_from_pinned(layers, own),
        missing_from_brief=missing_from_brief(layers, CONSTRAINTS),
    )


def _load_tally(agent: Agent) -> Tally:
    raw = agent.context.get_state(_TALLY_KEY)
    return Tally.model_validate_json(raw) if raw else Tally()


def _save_tally(agent: Agent, tally: Tally) -> None:
    agent.context.set_state(_TALLY_KEY, tally.model_dump_json())


if __name__ == "__main__":
    sys.exit(main())
