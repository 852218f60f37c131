"""Rendering a fitted plan: the prompt, the report, the layer views.

Kept apart from the planner: it reads the `Plan` alone (never the state, nor the
planner), and everything it emits comes from cached strings and counts, so it is linear
in the rolling layer with a small constant (no tokenizing, one shared view per entry).

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
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ctxbus.agents.context._authored import AUTHORED_HEADER
from ctxbus.agents.context._config import LayerBudgets
from ctxbus.agents.context._modes import ModeDescriptor
from ctxbus.agents.context._records import ConstraintRecord, Entry, Layer, Shown, SummaryEntry
from ctxbus.agents.context._report import ComposeReport, Composition, LayerItem, LayerView, Trim, logger
from ctxbus.agents.context._state import Delta, HeadState, Queued
from ctxbus.agents.context._wire import Prompt

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
    """What one compose decided, from a state it left as it was (`agents.context._compose.plan`):
    the changes `ContextState.apply` makes, and everything `render` reads.

    Two plans of the same state are equal. The layers here (`rolling` … `summaries`) are as
    the plan leaves them; after an append-only plan they are the state's own.
    """

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
    opening_cost: int
    standin_cost: int
    """What one stand-in result costs."""
    rebuild: str | None
    """Why this compose rebuilds the head, or None: it only appends."""
    stable: int
    """Tail messages the previous compose showed too (see `Prompt.stable`)."""
    head: HeadState
    """The head after this compose: where the tail starts, the opening line, the brief
    block, the hard constraints left out, the brief deltas, the drops still queued (none
    after a rebuild: it applies them)."""
    rolling: Sequence[Entry]
    """The rolling messages shown (of the mode's kinds), oldest first."""
    late: Sequence[Entry]
    """The pins shown at their place in the tail (`late_pins`)."""
    pinned: Sequence[Entry]
    authored_entries: Sequence[Entry]
    """The authored layer's messages, in tag order (shown as `head.authored`)."""
    hidden_records: frozenset[int]
    """Constraint records not shown: their message's every line is in the authored layer."""
    authored_cost: int
    records: Mapping[int, ConstraintRecord]
    record_keys: Mapping[str, int]
    """`ContextState.record_keys` with the records this plan made or forgot."""
    summaries: Sequence[SummaryEntry]
    next_summary: int
    """The id the next summary entry gets."""
    unanswered: Mapping[int, list[int]]
    """`ContextState.unanswered`: calls shown get a stand-in result each."""
    moves: Mapping[int, Layer]
    """Messages that change layer, by tag: evicted (to the summary, or gone) or demoted
    (to rolling; a demoted message may be evicted after)."""
    ttl_done: frozenset[int]
    """Messages with a ttl that left the layers: no longer checked for expiry."""
    rules_cost: int
    summary_cost: int
    brief_cost: int
    trims: tuple[Trim, ...]
    promoted: tuple[int, ...]
    notes: tuple[str, ...]
    merges: int
    pinned_overflow: int


def late_pins(pinned: Sequence[Entry], first: int, omitted: AbstractSet[int]) -> list[Entry]:
    """The pinned messages shown at their place in the tail: those from tag `first` (where
    the tail starts; see `HeadState.boundary`) on."""
    if not pinned or pinned[-1].tag < first:
        return []
    return [e for e in pinned if e.tag >= first and e.tag not in omitted]


def _in_order(rolling: Sequence[Entry], late: Sequence[Entry]) -> Sequence[Entry]:
    """`rolling` with the late pins put in at their places (both are in tag order)."""
    if not late:
        return rolling
    return sorted([*rolling, *late], key=lambda e: e.tag)


def _standins(unanswered: Mapping[int, list[int]], rolling: Sequence[Entry], cost: int) -> int:
    """What the stand-in results of the calls shown in `rolling` cost."""
    if not unanswered:
        return 0
    return sum(len(unanswered.get(e.tag) or ()) * cost for e in rolling)


def _view(e: Entry, queued: Mapping[int, Queued]) -> Shown:
    """What `e` shows: as it was before a drop queued until the next rebuild, or as it is."""
    if queued and (q := queued.get(e.tag)) is not None:
        return q.view
    return e.view or e.shown_view()


def _with_deltas(tail: list[Shown], deltas: tuple[Delta, ...]) -> list[Shown]:
    """`tail` with each brief delta put in, as a user message, after the message it
    followed (both in order)."""
    if not deltas:
        return tail
    out: list[Shown] = []
    i = 0
    for n, d in enumerate(deltas):
        while i < len(tail) and tail[i].tag <= d.after:
            out.append(tail[i])
            i += 1
        out.append(Shown.said(-1 - n, d.text))
    return out + tail[i:]


def render(run: Plan) -> Composition:
    """The prompt, report and (lazy) layer views of a plan."""
    rolling, late, head_state = run.rolling, run.late, run.head
    omitted = head_state.omitted
    in_tail = {e.tag for e in late}
    # Pinned whole, or shown whole in the authored layer: their records are not shown.
    whole = ({e.tag for e in run.pinned} | run.hidden_records) if run.records else set()
    pinned: list[tuple[int | None, str, str, int]] = sorted(
        [
            (e.tag, e.kind, e.shown, e.shown_tokens + (run.ov if e.tag in in_tail else 1))
            for e in run.pinned
            if e.tag not in omitted
        ]
        + [
            (tag, "constraint", record.text, record.tokens + 1)
            for tag, record in run.records.items()
            if tag not in omitted and tag not in whole
        ]
    )
    if head_state.opening:  # nothing pinned in the head: the line stands there, late pins stay in the tail
        pinned = [(None, "opening", OPENING, run.opening_cost), *(i for i in pinned if i[0] in in_tail)]
    summaries = [(s.text, s.tokens + 1) for s in run.summaries]
    brief, brief_tokens = head_state.brief_text, head_state.brief_tokens

    sections = [OPENING] if head_state.opening else []
    in_head = [i[2] for i in pinned if i[0] not in in_tail]
    if in_head and not head_state.opening:
        sections.append(PINNED_HEADER + "\n".join(in_head))
    authored = head_state.authored
    if authored:
        sections.append(AUTHORED_HEADER + "\n".join(i.text for i in authored))
    if summaries:
        sections.append(SUMMARY_HEADER + "\n".join(t for t, _ in summaries))
    if brief:
        sections.append(brief)
    head = HEAD_SEPARATOR.join(sections) if sections else None
    queued, deltas = head_state.queued, head_state.deltas
    tail = _with_deltas([_view(e, queued) for e in _in_order(rolling, late)], deltas)
    prompt = Prompt(run.sys_text, head, tail, run.user_input, run.stable)

    messages: list[dict[str, str]] = [{"role": "system", "content": run.sys_text}]
    if head is not None:
        messages.append({"role": "user", "content": head})
    messages += [view.chat for view in tail]
    shown = [_view(e, queued) for e in rolling] if late or deltas else tail
    rolling_tokens = array("l", [e.shown_tokens for e in rolling])
    if queued:
        for i, e in enumerate(rolling):
            if (q := queued.get(e.tag)) is not None:
                rolling_tokens[i] = q.tokens
    if run.user_input:
        messages.append({"role": "user", "content": run.user_input})

    layers = {
        "system": run.sys_cost,
        "pinned": run.rules_cost,
        "authored": run.authored_cost,
        "summary": run.summary_cost,
        "brief": run.brief_cost,
        "rolling": sum(rolling_tokens)
        + run.ov * len(rolling_tokens)
        + _standins(run.unanswered, rolling, run.standin_cost),
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
        hard_omitted=tuple(sorted(omitted)),
        notes=run.notes,
        rebuild=run.rebuild,
        authored=authored,
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
    ov = run.ov

    def views() -> tuple[LayerView, ...]:
        # Built on demand: compose itself never needs them, inspect() does.
        return (
            LayerView("system", sys_cost, sys_cost, (LayerItem(None, "system", sys_text, sys_cost),)),
            LayerView("pinned", b.pinned, layers["pinned"], tuple(LayerItem(*item) for item in pinned)),
            LayerView(
                "authored",
                b.authored,
                layers["authored"],
                tuple(
                    LayerItem(
                        i.tag,
                        i.kind,
                        i.text,
                        i.tokens + 1,
                        lines=i.lines,
                        folded=i.folded,
                        archived=i.archived,
                        deduped=i.deduped,
                    )
                    for i in authored
                ),
            ),
            LayerView(
                "summary", b.summary, layers["summary"], tuple(LayerItem(None, "summary", t, n) for t, n in summaries)
            ),
            LayerView(
                "brief",
                b.pinned,
                layers["brief"],
                ((LayerItem(None, "brief", brief, brief_tokens + 1),) if brief else ())
                + tuple(LayerItem(None, "brief_delta", d.text, d.tokens + ov) for d in deltas),
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
