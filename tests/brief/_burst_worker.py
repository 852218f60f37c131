"""An agent process for the frozen-coordinator test: adds work and completes it, flat out.

Run as `python -m tests.brief._burst_worker URL DOMAIN AGENT OUT_DIR`. Until
`OUT_DIR/stop` appears it adds a pending item and completes it, each proposal with a
short per-attempt timeout, half of them with a deadline shorter than the freeze the test
injects (so their copies held by the frozen coordinator are past it when it wakes), half
with a longer one (so those copies must be recognised by their keys). It writes
`OUT_DIR/AGENT.acks.json` (every answer, and the proposals nobody answered in time),
waits for `OUT_DIR/final.json` (the log's final revision), waits for its replica to
reach it, and writes `OUT_DIR/AGENT.hash`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from ctxbus.agents.brief import BriefReplica, ProposalUnanswered, Proposer
from ctxbus.bus import BusConfig, connect, run_async
from ctxbus.schemas import AddPending, BriefOp, Committed, Complete, Domain

SHORT_DEADLINE = 2.0
LONG_DEADLINE = 30.0
ATTEMPT_TIMEOUT = 0.5


async def main(url: str, domain_text: str, agent: str, out: Path) -> None:
    domain = Domain.parse(domain_text)
    client = await connect(BusConfig(servers=[url], name=agent))
    answers: list[dict[str, object]] = []
    async with anyio.create_task_group() as tg:
        replica = BriefReplica(client, domain)
        await tg.start(replica.run)
        proposer = Proposer(client, domain, agent_id=agent)

        async def propose(op: BriefOp, key: str, deadline: float) -> Committed | None:
            try:
                reply = await proposer.propose(op, key=key, deadline=deadline, attempt_timeout=ATTEMPT_TIMEOUT)
            except ProposalUnanswered:
                answers.append({"key": key, "status": "unanswered"})
                return None
            answers.append({"key": key, **reply.model_dump(mode="json")})
            return reply if isinstance(reply, Committed) else None

        i = 0
        while not (out / "stop").exists():
            deadline = SHORT_DEADLINE if i % 2 else LONG_DEADLINE
            added = await propose(AddPending(text=f"{agent} task {i}"), f"{agent}-add-{i}", deadline)
            if added is not None:
                done = Complete(item_id=f"p{added.revision}", outcome=f"done by {agent}")
                await propose(done, f"{agent}-done-{i}", deadline)
            i += 1
        (out / f"{agent}.acks.json").write_text(json.dumps(answers))
        final = out / "final.json"
        with anyio.fail_after(120):
            while not final.exists():
                await anyio.sleep(0.1)
        target = json.loads(final.read_text())["revision"]
        await replica.wait_for(target, timeout=60)
        (out / f"{agent}.hash").write_text(json.dumps({"revision": replica.revision, "hash": replica.hash}))
        tg.cancel_scope.cancel()
    await client.close()


if __name__ == "__main__":
    url, domain_text, agent, out = sys.argv[1:5]
    run_async(main, url, domain_text, agent, Path(out))
