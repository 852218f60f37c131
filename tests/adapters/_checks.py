"""Checks every adapter's run is held to, on the prompts the model was shown (`_worker.summary`),
and how a test runs a worker process and reads what it reports."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ctxbus.agents.brief import BriefReplica
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain, TaskBrief

PLACEHOLDER_MAX = 60
"""Tokens a released output is shown in at most (its placeholder)."""


def calls_and_answers(prompt: list[dict[str, Any]]) -> None:
    """Every call is answered right after its turn, and every result answers one."""
    i = 0
    while i < len(prompt):
        message = prompt[i]
        assert message["role"] != "tool", f"a result answering no call of the turn before it: {message}"
        calls = message["calls"]
        answered = [m["answers"] for m in prompt[i + 1 : i + 1 + len(calls)]]
        assert answered == calls, f"calls {calls} answered by {answered}"
        i += 1 + len(calls)


def reduces_taking_effect(
    prompts: list[list[dict[str, Any]]], reduces: Sequence[tuple[int, list[int]]]
) -> tuple[list[int], list[int]]:
    """The prompt indexes of the `ctx_reduce`s that took effect, and of those whose tags
    the prompt no longer showed (a rebuild had folded them already).

    A reduce asked for on prompt `index` releases whole outputs shown there; below urgent
    the drop waits for the context's next rebuild (the cached prefix is kept): until then
    the messages are shown as they were, then as placeholders.
    """
    took_effect: list[int] = []
    out_of_view: list[int] = []
    for index, dropped in reduces:
        before = {m["tag"]: m["tokens"] for m in prompts[index] if m["tag"] in dropped}
        if not before:
            out_of_view.append(index)
            continue
        assert any(tokens > 500 for tokens in before.values()), before  # whole outputs were shown
        for prompt in prompts[index + 1 :]:
            after = {m["tag"]: m["tokens"] for m in prompt if m["tag"] in dropped}
            if all(after.get(tag, 0) < PLACEHOLDER_MAX for tag in dropped):
                took_effect.append(index)
                break
            assert after == before, (before, after)
    return took_effect, out_of_view


def adoption_refused(
    adopter: dict[str, Any], results: Sequence[dict[str, Any]], brief: TaskBrief, rejected: str
) -> None:
    """The adopter's call adopting the `rejected` option was answered with the refusal;
    the brief, in the head of each model's last prompt, names the rejection; the brief
    (read afresh) holds the rejection and no decision for it."""
    adoption = adopter["adoption"]
    assert adoption is not None, "the adopter never tried the rejected option"
    answers = [m["text"] for p in adopter["prompts"] for m in p if m["answers"] == adoption]
    assert answers and "rejected (rejected_option)" in answers[-1], answers
    for result in results:
        head = result["prompts"][-1][1]
        assert head["role"] == "user" and head["names_rejected"]
    assert [r.option for r in brief.rejected] == [rejected]
    assert all(d.option != rejected for d in brief.decisions)


async def read_afresh(client: NatsClient, domain: Domain) -> dict[str, Any]:
    """The brief as a fresh reader of the log replays it: `brief`, `hash`, `revision`."""
    replica = BriefReplica(client, domain)
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        read = {"brief": replica.brief, "hash": replica.hash, "revision": replica.revision}
        tg.cancel_scope.cancel()
    return read


@dataclass(frozen=True)
class Workers:
    """How a test runs its agents' workers: `python -m module` with `_worker.worker_parser`'s arguments."""

    module: str
    nats: str
    domain: str
    tmp: Path
    window: int

    async def run(self, agent: str, *args: str) -> Any:
        """Run `agent`'s worker, with `args` besides the common ones, to its end; what it wrote to `--out`."""
        out = self.tmp / f"{agent}.json"
        command = [
            sys.executable, "-m", self.module, "--nats", self.nats, "--domain", self.domain, "--agent", agent,
            "--store", str(self.tmp / f"{agent}.db"), "--window", str(self.window), "--out", str(out), *args,
        ]  # fmt: skip
        done = await anyio.run_process(command, check=False, cwd=Path(__file__).parents[2])
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        return json.loads(out.read_text(encoding="utf-8"))
