"""The demo's scripted scenario, played over HTTP by the stand-in through real agent loops,
reaches the brief the demo's in-process model reaches."""

from __future__ import annotations

from pathlib import Path

from tests._support import fresh_domain, running_coordinator
from tests.loop._standin import StandIn, write_corpus
from tests.loop._swarm import brief_content, play_in_process, play_over_http

AGENTS = 2
STEPS = 8


async def test_in_process_and_over_http_reach_the_same_brief(nats_url: str, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    write_corpus(workdir, agents=AGENTS, steps=STEPS)
    async with running_coordinator(nats_url, coordinator_id="loop-scenario") as (client, _):
        with StandIn(agents=AGENTS, steps=STEPS) as standin:
            over_http, stats = await play_over_http(client, fresh_domain(), tmp_path / "http", standin, workdir)
        in_process = await play_in_process(client, fresh_domain(), tmp_path / "demo", agents=AGENTS, steps=STEPS)

    assert standin.refused() == []
    assert all(s.stopped == "final_answer" for s in stats), stats
    assert all(c.finished for c in standin.counts.values())
    content = brief_content(over_http)
    assert content == brief_content(in_process)
    # What the scenario commits: the goal, three constraints, a rejection, a decision, a
    # note and a completed item per agent; the re-adoption of the rejected option refused.
    assert content["goal"] and len(content["constraints"]) == 3 and len(content["rejected"]) == 1
    assert len(content["done"]) == AGENTS and content["pending"] == [] and len(content["notes"]) == AGENTS
    assert [d[0] for d in content["decisions"]] == ["fcntl file lock around CacheWriter.flush"]
    assert sum(s.failed_calls for s in stats) == 1  # the refused re-adoption, and nothing else
