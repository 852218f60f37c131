"""An agent process for the convergence test: proposes random ops, then reports its hash.

Run as `python -m tests.brief._agent_worker URL DOMAIN AGENT OPS SEED OUT_DIR`. It writes
`OUT_DIR/AGENT.acks.json` (every reply it got) once done proposing, waits for
`OUT_DIR/final.json` (the log's final revision, written by the test), waits for its
replica to reach it, and writes `OUT_DIR/AGENT.hash`.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import anyio

from ctxbus.agents.brief import BriefReplica, Proposer
from ctxbus.bus import BusConfig, connect, run_async
from ctxbus.schemas import (
    AddBlocker,
    AddConstraint,
    AddDecision,
    AddNote,
    AddPending,
    BriefOp,
    Committed,
    Complete,
    Domain,
    Reject,
    RemoveConstraint,
    Reopen,
    ResolveBlocker,
    SetGoal,
    TaskBrief,
)

OPTIONS = ["redis lock", "local lock + unique index", "optimistic retry", "queue per key", "advisory lock"]


def random_op(rng: random.Random, brief: TaskBrief, agent: str, i: int) -> BriefOp:
    """A plausible op for `brief`: mostly valid, sometimes one the rules must refuse."""
    roll = rng.random()
    text = f"{agent} item {i}"
    if roll < 0.22:
        return AddPending(text=text)
    if roll < 0.34 and brief.pending:
        return Complete(item_id=rng.choice(brief.pending).id, outcome=f"done by {agent} in {i} steps")
    if roll < 0.44:
        return AddDecision(option=rng.choice(OPTIONS), rationale=f"{agent} prefers it")
    if roll < 0.54:
        return Reject(option=rng.choice(OPTIONS), reason=rng.choice(["too slow", "races", ""]))
    if roll < 0.60:
        return Reopen(option=rng.choice(OPTIONS), reason="new evidence")
    if roll < 0.68:
        return AddConstraint(text=f"never touch file {i % 7}")
    if roll < 0.72 and brief.constraints:
        return RemoveConstraint(item_id=rng.choice(brief.constraints).id, reason=rng.choice(["obsolete", ""]))
    if roll < 0.80:
        return AddBlocker(text=f"waiting on {agent} {i}")
    if roll < 0.86 and brief.blockers:
        return ResolveBlocker(item_id=rng.choice(brief.blockers).id)
    if roll < 0.90:
        return SetGoal(text=f"goal by {agent} at {i}")
    if roll < 0.95:
        return Complete(item_id=f"p{rng.randint(1, 10_000)}")  # usually unknown
    return AddNote(text=text)


async def main(url: str, domain_text: str, agent: str, ops: int, seed: int, out: Path) -> None:
    domain = Domain.parse(domain_text)
    rng = random.Random(seed)
    client = await connect(BusConfig(servers=[url], name=agent))
    replies: list[dict[str, object]] = []
    async with anyio.create_task_group() as tg:
        replica = BriefReplica(client, domain)
        await tg.start(replica.run)
        proposer = Proposer(client, domain, agent_id=agent)
        for i in range(ops):
            key = f"{agent}-{i}"
            reply = await proposer.propose(random_op(rng, replica.brief, agent, i), key=key, deadline=120)
            replies.append({"key": key, **reply.model_dump(mode="json")})
            if isinstance(reply, Committed):
                await replica.wait_for(reply.revision, timeout=60)
        (out / f"{agent}.acks.json").write_text(json.dumps(replies))
        final = out / "final.json"
        with anyio.fail_after(180):
            while not final.exists():
                await anyio.sleep(0.1)
        target = json.loads(final.read_text())[domain_text]
        await replica.wait_for(target, timeout=60)
        (out / f"{agent}.hash").write_text(json.dumps({"revision": replica.revision, "hash": replica.hash}))
        tg.cancel_scope.cancel()
    await client.close()


if __name__ == "__main__":
    url, domain_text, agent, ops, seed, out = sys.argv[1:7]
    run_async(main, url, domain_text, agent, int(ops), int(seed), Path(out))
