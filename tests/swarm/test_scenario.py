"""The built-in scenario: deterministic, and shaped so the nudges have work to do."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from ctxbus.agents.context import Tokenizer
from ctxbus.agents.swarm import MAX_AGENTS
from ctxbus.agents.swarm._corpus import TOOLS, tool_output
from ctxbus.agents.swarm._policy import dig_query as _dig_query
from ctxbus.agents.swarm._scenario import ADOPTER, AdoptRejected, CompleteMine, Propose, agent_name, step
from ctxbus.agents.swarm._worker import SWARM_CONTEXT

REPO = Path(__file__).resolve().parents[2]


def run_digest(agents: int = 3, steps: int = 75) -> str:
    """sha256 of everything a run scripts: every agent's steps and the output of each tool call."""
    digest = hashlib.sha256()
    for index in range(agents):
        for number in range(steps):
            scripted = step(index, agents, number, steps)
            digest.update(repr(scripted).encode())
            digest.update(tool_output(scripted.tool, scripted.argument, agent=agent_name(index), step=number).encode())
    return digest.hexdigest()


def test_steps_and_outputs_are_the_same_on_every_run() -> None:
    # Another interpreter with another hash seed: set order or hash() leaking into the
    # script would change the digest, which comparing two calls in one process cannot see.
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    other = subprocess.run(
        [sys.executable, "-c", f"from {__name__} import run_digest; print(run_digest())"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": seed},
        timeout=120,
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == run_digest()
    assert tool_output("grep", "q", agent="agent-1", step=3) != tool_output("grep", "q", agent="agent-2", step=3)


def test_only_ci_logs_are_big_enough_to_be_archived() -> None:
    count = Tokenizer.load().count
    sizes = {tool: count(tool_output(tool, "service/cache/writer.py", agent="agent-1", step=9)) for tool in TOOLS}
    assert sizes.pop("ci_logs") > SWARM_CONTEXT.archive_threshold
    assert sizes.pop("edit") < 100
    assert all(2_000 < size < SWARM_CONTEXT.archive_threshold for size in sizes.values()), sizes


def test_the_story_every_run_tells() -> None:
    steps, agents = 75, 3
    intents = {(i, n): step(i, agents, n, steps).intents for i in range(agents) for n in range(steps)}
    adoptions = [key for key, found in intents.items() if any(isinstance(x, AdoptRejected) for x in found)]
    assert adoptions == [(ADOPTER, steps // 2)]
    assert all(i != 0 for i, _ in adoptions), "the lead rejects; another agent must try to adopt"
    rejects = [
        key for key, found in intents.items() if any(isinstance(x, Propose) and x.op.op == "reject" for x in found)
    ]
    assert rejects == [(0, 2)]
    completes = sorted(key for key, found in intents.items() if any(isinstance(x, CompleteMine) for x in found))
    assert completes == [(i, steps - 1) for i in range(agents)]
    assert "Never edit files under vendor/" in (step(0, agents, 0, steps).user or "")


def test_the_word_an_archived_ci_log_is_searched_by_is_in_that_output_alone() -> None:
    # The model finds its archived CI log with one word of the log's error line, and
    # reads it only if the log is among the top 3 hits: in a long run of the largest
    # swarm, no other output an agent's tools print may hold that word.
    agents, steps = MAX_AGENTS, 120
    shared = []
    for index in range(agents):
        holders: dict[str, list[int]] = {}
        queries = {}
        for number in range(steps):
            scripted = step(index, agents, number, steps)
            output = tool_output(scripted.tool, scripted.argument, agent=agent_name(index), step=number)
            for word in set(re.findall(r"\w+", output)):
                holders.setdefault(word, []).append(number)
            if scripted.tool == "ci_logs":
                queries[number] = _dig_query(output)
        shared += [f"{agent_name(index)} step {n}: {q!r} is in steps {holders[q]}" for n, q in queries.items()
                   if holders[q] != [n]]  # fmt: skip
    assert shared == []
