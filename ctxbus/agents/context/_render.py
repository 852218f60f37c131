"""Rendering a fitted plan: the prompt, the report, the layer views.

Kept apart from the planner: it only reads the plan's outcome, and everything it emits
comes from cached strings and counts, so it is linear in the rolling layer with a small
constant (no tokenizing, one shared view per entry).

The prompt has a head that changes rarely and a tail that grows (docs/ARCHITECTURE.md
section 3): the system message (the host's prompt verbatim, else the mode's template),
then one user message holding, in this order, the pinned block (goal, constraints), the
summary and the shared brief, then the rolling layer and the new input. The pinned rules
change least and come first; the brief, which other agents change, comes last.

A pinned message newer than the oldest message the rolling layer shows is shown at its
place in the tail rather than in the head: the user's newest turn is the one the model
answers, whatever it pinned, and a new pin then adds to the tail instead of rewriting
the head. It moves to the pinned block once the rolling layer has moved past it.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ctxbus.agents.context._config import LayerBudgets
from ctxbus.agents.context._modes import ModeDescriptor
from ctxbus.agents.context._records import Entry, Shown
from ctxbus.agents.context._report import ComposeReport, Composition, LayerItem, LayerView, Trim, logger
from ctxbus.agents.context._state import ContextState, Delta, Queued
from ctxbus.agents.context._wire import Prompt
from ctxbus.schemas import MESSAGE_KINDS

__all__ = [
    "HEAD_SEPARATOR",
    "OPENING",
    "PINNED_HEADER",
    "SUMMARY_HEADER",
    "Plan",
    "late_pins",
    "render",
]

PINNED_HEADER = "[pinned: goal and constraints]\n"
SUMMARY_HEADER = "[summary of earlier turns]\n"
HEAD_SEPARATOR = "\n\n"
"""Between the pinned block, the summary and the brief in the head message."""
OPENING = "[the conversation so far]"
"""The head when nothing is pinned, summarized or briefed and the rolling layer starts
with an assistant turn (or is empty): providers want a user message first."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What a compose decided, fixed once it has: the render reads this and the layers of
    the state the planner left (see `agents.context._compose`), never the planner."""

    st: ContextState
    mode: ModeDescriptor
    domain: str
    budget: int
    """The prompt's budget: the window less the output reserve."""
    ov: int
    b: LayerBudgets
    sys_text: str
    sys_cost: int
    user_input: str
    input_cost: int
    brief: str | None
    """The brief block of the head (headed, cut if it did not fit), or None."""
    brief_tokens: int
    opening: bool
    opening_cost: int
    omitted: frozenset[int]
    boundary: int
    """Where the tail starts (`HeadState.boundary`)."""
    rebuild: str | None
    deltas: tuple[Delta, ...]
    stable: int
    queued: Mapping[int, Queued]
    rules_cost: int
    summary_cost: int
    brief_cost: int
    standin_cost: int
    """What one stand-in result costs."""
    trims: tuple[Trim, ...]
    promoted: tuple[int, ...]
    notes: tuple[str, ...]
    merges: int
    pinned_overflow: int


def late_pins(st: ContextState, first: int, omitted: AbstractSet[int]) -> list[Entry]:
    """The pinned messages shown at their place in the tail: those from tag `first` (where
    the tail starts; see `HeadState.boundary`) on."""
    if not st.pinned or st.pinned[-1].tag < first:
        return []
    return [e for e in st.pinned if e.tag >= first and e.tag not in omitted]


def _in_order(rolling: list[Entry], late: list[Entry]) -> list[Entry]:
    """`rolling` with the late pins put in at their places (both are in tag order)."""
    if not late:
        return rolling
    return sorted([*rolling, *late], key=lambda e: e.tag)


def _standins(st: ContextState, rolling: list[Entry], cost: int) -> int:
    """What the stand-in results of the calls shown in `rolling` cost."""
    if not st.unanswered:
        return 0
    return sum(len(st.unanswered.get(e.tag) or ()) * cost for e in rolling)


def _view(e: Entry, queued: Mapping[int, Queued]) -> Shown:
    """What `e` shows: as it was before a drop queued until the next rebuild, or as it is."""
    if queued and (q := queued.get(e.tag)) is not None:
        return q.view
    return e.view or e.shown_view()


def _with_deltas(tail: list[Shown], deltas: tuple[Delta, ...]) -> list[Shown]:
    """`tail` with each brief delta put in after the message it followed (both in order)."""
    if not deltas:
        return tail
    out: list[Shown] = []
    i = 0
    for d in deltas:
        while i < len(tail) and tail[i].tag <= d.after:
            out.append(tail[i])
            i += 1
        out.append(d.shown)
    return out + tail[i:]


def render(run: Plan) -> Composition:
    """The prompt, report and (lazy) layer views of a finished plan."""
    st = run.st
    kinds = run.mode.kinds
    rolling = st.rolling if len(kinds) == len(MESSAGE_KINDS) else [e for e in st.rolling if e.kind in kinds]
    late = late_pins(st, run.boundary, run.omitted)
    in_tail = {e.tag for e in late}
    pinned: list[tuple[int | None, str, str, int]] = sorted(
        [
            (e.tag, e.kind, e.shown, e.shown_tokens + (run.ov if e.tag in in_tail else 1))
            for e in st.pinned
            if e.tag not in run.omitted
        ]
        + [
            (tag, "constraint", record.text, record.tokens + 1)
            for tag, record in st.records.items()
            if tag not in run.omitted and st.entries[tag - 1].layer != "pinned"
        ]
    )
    if run.opening:  # nothing pinned in the head: the line stands there, late pins stay in the tail
        pinned = [(None, "opening", OPENING, run.opening_cost), *(i for i in pinned if i[0] in in_tail)]
    summaries = [(s.text, s.tokens + 1) for s in st.summaries]
    brief, brief_tokens = run.brief, run.brief_tokens

    sections = [OPENING] if run.opening else []
    in_head = [i[2] for i in pinned if i[0] not in in_tail]
    if in_head and not run.opening:
        sections.append(PINNED_HEADER + "\n".join(in_head))
    if summaries:
        sections.append(SUMMARY_HEADER + "\n".join(t for t, _ in summaries))
    if brief:
        sections.append(brief)
    head = HEAD_SEPARATOR.join(sections) if sections else None
    queued = run.queued
    tail = _with_deltas([_view(e, queued) for e in _in_order(rolling, late)], run.deltas)
    prompt = Prompt(run.sys_text, head, tail, run.user_input, run.stable)

    messages: list[dict[str, str]] = [{"role": "system", "content": run.sys_text}]
    if head is not None:
        messages.append({"role": "user", "content": head})
    messages += [view.chat for view in tail]
    shown = [_view(e, queued) for e in rolling] if late or run.deltas else tail
    rolling_tokens = array("l", [e.shown_tokens for e in rolling])
    if queued:
        for i, e in enumerate(rolling):
            if (q := queued.get(e.tag)) is not None:
                rolling_tokens[i] = q.tokens
    rolling = list(rolling) if rolling is st.rolling else rolling
    if run.user_input:
        messages.append({"role": "user", "content": run.user_input})

    layers = {
        "system": run.sys_cost,
        "pinned": run.rules_cost,
        "summary": run.summary_cost,
        "brief": run.brief_cost,
        "rolling": sum(rolling_tokens) + run.ov * len(rolling_tokens) + _standins(st, rolling, run.standin_cost),
        "input": run.input_cost,
    }
    report = ComposeReport(
        mode=run.mode.name,
        budget=run.budget,
        total=sum(layers.values()),
        layers=layers,
        budgets=run.b,
        trims=run.trims,
        promoted=run.promoted,
        merges=run.merges,
        pinned_overflow=run.pinned_overflow,
        hard_omitted=tuple(sorted(run.omitted)),
        notes=run.notes,
        rebuild=run.rebuild,
    )
    logger.info(
        "context compose: %s of %s tokens",
        report.total,
        report.budget,
        extra={
            "event": "compose",
            "domain": run.domain,
            "mode": run.mode.name,
            "budget": report.budget,
            "total": report.total,
            "layer_tokens": layers,
            "trims": len(run.trims),
        },
    )
    b, sys_text, sys_cost, user_input, input_cost = run.b, run.sys_text, run.sys_cost, run.user_input, run.input_cost
    deltas = run.deltas
    ov = run.ov

    def views() -> tuple[LayerView, ...]:
        # Built on demand: compose itself never needs them, inspect() does.
        return (
            LayerView("system", sys_cost, sys_cost, (LayerItem(None, "system", sys_text, sys_cost),)),
            LayerView("pinned", b.pinned, layers["pinned"], tuple(LayerItem(*item) for item in pinned)),
            LayerView(
                "summary", b.summary, layers["summary"], tuple(LayerItem(None, "summary", t, n) for t, n in summaries)
            ),
            LayerView(
                "brief",
                b.pinned,
                layers["brief"],
                ((LayerItem(None, "brief", brief, brief_tokens + 1),) if brief else ())
                + tuple(LayerItem(None, "brief_delta", d.shown.text, d.tokens + ov) for d in deltas),
            ),
            LayerView(
                "rolling",
                b.rolling,
                layers["rolling"],
                tuple(
                    LayerItem(e.tag, e.kind, view.text, n + ov, tuple(c.to_tool_call() for c in e.calls))
                    for e, view, n in zip(rolling, shown, rolling_tokens, strict=True)
                ),
            ),
            LayerView(
                "input",
                input_cost,
                input_cost,
                (LayerItem(None, "input", user_input, input_cost),) if user_input else (),
            ),
        )

    return Composition(messages, report, views, prompt, prompt_cache_key(run.domain))


def prompt_cache_key(domain: str) -> str:
    """A stable, opaque key per agent for OpenAI's `prompt_cache_key`."""
    return "ctxbus-" + hashlib.sha256(domain.encode()).hexdigest()[:24]
