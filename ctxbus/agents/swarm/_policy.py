"""The scripted model's decisions, apart from how they are carried out.

The demo's `ScriptedModel` carries them out on an `Agent` in process; the tests'
OpenAI-compatible stand-in carries out the very same ones as tool calls over HTTP, so a
swarm driven through `ctxbus swarm run` tells the demo's story. Each decision is a pure
function of what the model can see: a step of the scenario, a tool result with its
reminder, a Channel 2 message, the brief. A step goes, in this order:

1. act on a Channel 2 message, if one came: `ctx_reduce` the tags it names and the
   spent outputs in view (`channel2_drops`);
2. call the step's tool (`Step.tool` on `Step.argument`);
3. act on a Channel 1 reminder in its result: `ctx_reduce` the tags it names
   (`reminder_drops`);
4. if the result was archived (shown compact), find the failure in it without loading
   it: `ctx_search` its run id (`dig_query`), then `ctx_read` the hit that is the log,
   lines matching `FAILURE`;
5. pursue the step's intents, in order (`intent_op`: the brief op each one proposes,
   once the brief shows what it needs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from ctxbus.agents.swarm._scenario import AdoptRejected, CompleteMine, Intent, Propose, pending_text
from ctxbus.schemas import AddDecision, BriefOp, Complete, TaskBrief, normalize

__all__ = [
    "DIG_HITS",
    "FAILURE",
    "channel2_drops",
    "dig_query",
    "intent_op",
    "reminder_drops",
    "spec",
    "tags",
]

FAILURE: Final = "TimeoutError"
"""The error every CI log of the corpus ends with."""
DIG_HITS: Final = 3
"""Hits the model asks `ctx_search` for when it digs in an archived log."""
_TAG: Final = re.compile(r"§(\d+)§")
_ERROR_MARK: Final = "##[error]"
_RUN_ID: Final = re.compile(r"\(run (\d+)\)$")


def tags(text: str) -> list[int]:
    """The `§N§` tags `text` names, sorted, each once."""
    return sorted({int(t) for t in _TAG.findall(text)})


def spec(chosen: Iterable[int]) -> str:
    """`ctx_reduce`'s `drop` argument for `chosen` tags."""
    return ",".join(map(str, chosen))


def reminder_drops(reminder: str) -> list[int]:
    """What to release after a Channel 1 reminder: the tags it names (none: nothing to do)."""
    return tags(reminder)


def channel2_drops(message: str, spent: Iterable[int]) -> list[int]:
    """What to release after a Channel 2 message: the spent tool outputs in view (not the
    model's own ctx_* calls) and whatever the message names."""
    return sorted(set(spent) | set(tags(message)))


def dig_query(output: str) -> str:
    """What the model searches an archived CI log with: the run id on its `##[error]`
    line (e.g. `4810027`, shown in the compact form), which no other log of the agent
    has. Not the failure: every earlier CI log, search and read holds the same
    TimeoutError, and BM25 ranks those short records above an 8k-token log. Not the run
    time either: two logs of one agent can take the same number of seconds."""
    error = next((line for line in reversed(output.splitlines()) if line.startswith(_ERROR_MARK)), "")
    run = _RUN_ID.search(error)
    return run.group(1) if run else FAILURE


def intent_op(intent: Intent, brief: TaskBrief, *, index: int) -> BriefOp | None:
    """The op agent `index` proposes for `intent`, given the brief it sees; None while the
    brief does not show what the intent needs yet (its pending item, the rejection)."""
    match intent:
        case Propose(op):
            return op
        case CompleteMine(outcome):
            text = pending_text(index)
            item_id = next((p.id for p in brief.pending if p.text == text), None)
            return None if item_id is None else Complete(item_id=item_id, outcome=outcome)
        case AdoptRejected(option, rationale):
            norm = normalize(option)
            if not any(r.norm == norm for r in brief.rejected):
                return None
            return AddDecision(option=option, rationale=rationale)
