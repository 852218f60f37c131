"""The scripted "model": plays one agent's turns against the real ctxbus runtime.

No LLM is involved, but everything around the model is real: the prompt is composed by
the context engine, reminders arrive in tool output (Channel 1) or as a synthetic user
message (Channel 2), and the model reacts the way a diligent agent would, by calling
`ctx_reduce` on the tags it was pointed at. Proposals go to the real coordinator.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final, TypeVar

import anyio

from ctxbus.agents.nudges import REDUCE_TOOL_NAME, REMINDER_OPEN, DeliveryOutcome, TailMeasure
from ctxbus.agents.runtime import Agent
from ctxbus.agents.swarm._corpus import tool_output
from ctxbus.agents.swarm._policy import (
    DIG_HITS,
    FAILURE,
    channel2_drops,
    dig_query,
    intent_op,
    reminder_drops,
    spec,
)
from ctxbus.agents.swarm._scenario import AdoptRejected, CompleteMine, Intent, Propose, Step, pending_text
from ctxbus.schemas import BriefOp, Committed, Complete, Refusal, Rejection, RejectionCode, Tally, UsageError

__all__ = ["ScriptedModel"]

_BRIEF_WAIT: Final = 20.0
"""Seconds to wait for another agent's commit to reach this replica."""
_SENT: Final = frozenset({DeliveryOutcome.SENT, DeliveryOutcome.RECOVERED})

T = TypeVar("T")


class ScriptedModel:
    """Runs `Step`s for one agent; `say` receives one line per notable event.

    What it decides comes from `agents.swarm._policy` (shared with the tests' model
    stand-in); here it is carried out on the agent directly, step by step in the
    policy's order."""

    def __init__(self, agent: Agent, tally: Tally, *, index: int, say: Callable[[int, str], None]) -> None:
        self.agent = agent
        self.tally = tally
        self.index = index
        self.prompt_tokens = 0
        self._say = say
        # Call ids differ per process: a call cut short by a SIGKILL stays an orphan, as
        # it would for a real agent, instead of sharing its id with the re-run call.
        self._calls = f"{agent.id}-p{tally.starts}"

    async def run_step(self, step: Step) -> TailMeasure:
        """One turn: read the user, compose, act on what the prompt says, call a tool.

        Returns the tail as it stands at the end of the turn.
        """
        n = step.number
        if step.user:
            self.agent.user(step.user)
        composition = self.agent.compose()
        self.prompt_tokens = composition.report.total
        self.tally.peak_prompt_tokens = max(self.tally.peak_prompt_tokens, self.prompt_tokens)
        await self._answer_channel2(n)
        self.agent.assistant(step.thought)
        await self._call(n, step.tool, step.argument)
        for i, intent in enumerate(step.intents):
            await self._pursue(n, i, intent)
        return self.agent.measure()

    # -- tools -----------------------------------------------------------------------------

    async def _call(self, n: int, tool: str, argument: str) -> None:
        call_id = f"{self._calls}-{n}"
        self._make_call(tool, json.dumps({"argument": argument}), call_id)
        output = tool_output(tool, argument, agent=self.agent.id, step=n)
        tag = self.agent.context.next_tag
        outcome = await self.agent.tool_result(tool, output, call_id=call_id)
        self._note_band(str(outcome.measure.band))
        if outcome.delivery is not None and outcome.delivery.outcome in _SENT:
            self._say(
                n,
                f"Channel 2: synthetic message delivered for cycle {outcome.delivery.cycle} ({outcome.delivery.outcome})",
            )
        reminder = outcome.text[len(output) :]
        if REMINDER_OPEN.strip() in reminder:
            self.tally.reminders += 1
            hinted = reminder_drops(reminder)
            self._say(n, f"Channel 1 ({outcome.measure.band}): reminder names {spec(hinted) or 'no tags'}")
            if hinted:
                await self._reduce(n, hinted, why="Channel 1 reminder")
        if self.agent.context.message(tag).state == "archived":
            await self._dig(n, tag, dig_query(output))

    async def _dig(self, n: int, tag: int, query: str) -> None:
        """The prompt shows the archived log §tag§ compact; find the failure without loading it.

        The model searches, then reads the hit that is that log. Hits without it are
        reported as unexpected, not papered over by reading the tag it already knew.
        """
        hits = self.agent.search(query, limit=DIG_HITS)
        self.tally.searches += 1
        listing = "\n".join(f"§{h.tag}§ {h.tool_name or h.kind} ({h.layer}) {h.snippet}" for h in hits) or "no hits"
        arguments = json.dumps({"query": query, "limit": DIG_HITS})
        await self._record("ctx_search", arguments, listing, f"{self._calls}-{n}-s")
        found = next((h.tag for h in hits if h.tag == tag), None)
        if found is None:
            returned = ", ".join(f"§{h.tag}§ {h.tool_name or h.kind}" for h in hits) or "no hits"
            self._unexpected(n, f"ctx_search did not return the archived CI log §{tag}§ (it returned {returned})")
            return
        lines = self.agent.read(found, query=FAILURE)
        self.tally.reads += 1
        await self._record("ctx_read", json.dumps({"ref": found, "query": FAILURE}), lines, f"{self._calls}-{n}-r")
        if FAILURE not in lines:
            self._unexpected(n, f"ctx_read of the archived CI log §{found}§ shows no {FAILURE} line")
            return
        self._say(n, f"archived CI log §{found}§: found the failure with ctx_search + ctx_read")

    def _unexpected(self, n: int, what: str) -> None:
        self.tally.unexpected.append(f"step {n}: {what}")
        self._say(n, f"[unexpected] {what}")

    async def _record(self, tool: str, args: str, output: str, call_id: str) -> None:
        self._make_call(tool, args, call_id)
        await self.agent.tool_result(tool, output, call_id=call_id)

    def _make_call(self, tool: str, arguments: str, call_id: str) -> None:
        """Record the assistant turn that calls `tool`, as a model's would be: no text, one call."""
        self.agent.assistant("", tool_calls=[{"id": call_id, "name": tool, "arguments": arguments}])

    # -- nudges ----------------------------------------------------------------------------

    async def _answer_channel2(self, n: int) -> None:
        """A Channel 2 message in the prompt asks for a prune before anything else."""
        fresh = [
            m for m in self.agent.context.messages() if m.kind == "synthetic" and m.tag > self.tally.handled_synthetic
        ]
        if not fresh:
            return
        self.tally.handled_synthetic = max(m.tag for m in fresh)
        spent = {
            item.tag
            for item in self.agent.context.tail()
            if item.kind == "tool_result" and item.state == "active" and not item.protected
            and not (item.tool_name or "").startswith("ctx_")
        }  # fmt: skip
        await self._reduce(n, channel2_drops("\n".join(m.content for m in fresh), spent), why="Channel 2 message")

    async def _reduce(self, n: int, chosen: list[int], *, why: str) -> None:
        drop = spec(chosen)
        call_id = f"{self._calls}-{n}-reduce{self.tally.reduces}"
        self._make_call(REDUCE_TOOL_NAME, json.dumps({"drop": drop}), call_id)
        try:
            plan = self.agent.ctx_reduce(drop)
        except UsageError as exc:  # DropSpecError, UnknownDropTags: a failed tool call, not a dead worker
            self.tally.unexpected.append(f"step {n}: ctx_reduce({drop!r}) failed: {exc}")
            await self.agent.tool_result(REDUCE_TOOL_NAME, f"error: {exc}", call_id=call_id)
            return
        await self.agent.tool_result(REDUCE_TOOL_NAME, plan.summary(), call_id=call_id)
        self.tally.reduces += 1
        self.tally.dropped += len(plan.queued)
        self._say(n, f"ctx_reduce after {why}: {len(plan.queued)} outputs queued, {len(plan.deferred)} deferred")

    def _note_band(self, band: str) -> None:
        if band not in self.tally.bands:
            self.tally.bands.append(band)

    # -- the shared brief ------------------------------------------------------------------

    async def _pursue(self, n: int, i: int, intent: Intent) -> None:
        key = f"{self.agent.id}-{n}-{i}"
        match intent:
            case Propose(op):
                reply = await self.agent.propose(op, key=key)
                if isinstance(reply, Rejection):
                    self.tally.unexpected.append(f"step {n}: {op.op} refused: {reply.reason}")
                    self._say(n, f"[unexpected] {op.op} refused: {reply.reason}")
                else:
                    # Counted either way: a killed process never saved the tally of the
                    # step it died in, so its commit is this process's to count.
                    self.tally.committed += 1
                    self._say(n, f"brief rev {reply.revision}: {op.op} committed{self._how(n, reply)}")
            case CompleteMine():
                await self._complete_mine(n, key, intent)
            case AdoptRejected():
                await self._adopt_rejected(n, key, intent)

    def _how(self, n: int, reply: Committed) -> str:
        """How a commit came about, when not at the first try: a duplicate answers a key
        committed earlier, by the process killed in this very step or by a try whose
        reply was lost (the proposer then sends the same key again)."""
        if not reply.duplicate:
            return ""
        if n == self.tally.resumed_from:  # the step the killed process died in
            return " before the restart"
        return " (confirmed on retry)"

    def _op(self, intent: Intent) -> BriefOp | None:
        return intent_op(intent, self.agent.brief, index=self.index)

    async def _complete_mine(self, n: int, key: str, intent: CompleteMine) -> None:
        text = pending_text(self.index)
        op = await self._wait_for(lambda: self._op(intent))
        if not isinstance(op, Complete):
            if not any(d.text == text for d in self.agent.brief.done):
                self.tally.unexpected.append(f"step {n}: pending item {text!r} never reached the brief")
            return
        reply = await self.agent.propose(op, key=key)
        if isinstance(reply, Committed):
            self.tally.committed += 1
            self._say(n, f"brief rev {reply.revision}: completed {op.item_id}{self._how(n, reply)}")
        else:
            self.tally.unexpected.append(f"step {n}: complete refused: {reply.reason}")

    async def _adopt_rejected(self, n: int, key: str, intent: AdoptRejected) -> None:
        """Propose a rejected option as if the brief had not been read; expect a refusal."""
        option = intent.option
        op: BriefOp | None = await self._wait_for(lambda: self._op(intent))
        if op is None:
            self.tally.unexpected.append(f"step {n}: {option!r} was never rejected in the brief")
            return
        reply = await self.agent.propose(op, key=key)
        if isinstance(reply, Rejection) and reply.code is RejectionCode.REJECTED_OPTION:
            self.tally.refusals.append(Refusal(option=option, code=str(reply.code), reason=reply.reason))
            self._say(n, f"tried to adopt {option!r}: refused: {reply.reason}")
        else:
            self.tally.unexpected.append(f"step {n}: adopting the rejected {option!r} was not refused: {reply!r}")

    async def _wait_for(self, probe: Callable[[], T | None]) -> T | None:
        with anyio.move_on_after(_BRIEF_WAIT):
            while (found := probe()) is None:
                await anyio.sleep(0.05)
            return found
        return None
