"""Rendering a fitted plan: the chat messages, the report, the layer views.

Kept apart from the planner: it only reads the plan's outcome, and everything it emits
comes from cached strings and counts, so it is linear in the rolling layer with a small
constant (no tokenizing, one shared message object per entry).
"""

from __future__ import annotations

from array import array
from typing import Protocol

from agents.context._config import ContextConfig, LayerBudgets
from agents.context._modes import ModeDescriptor
from agents.context._report import ComposeReport, Composition, LayerItem, LayerView, Trim, logger
from agents.context._state import ContextState
from schemas import MESSAGE_KINDS

__all__ = ["PINNED_HEADER", "SUMMARY_HEADER", "Plan", "render"]

SUMMARY_HEADER = "[summary of earlier turns]\n"
PINNED_HEADER = "[pinned: goal, constraints, shared brief]\n"


class Plan(Protocol):
    """What the planner decided; see `agents.context._compose`."""

    st: ContextState
    cfg: ContextConfig
    mode: ModeDescriptor
    domain: str
    ov: int
    b: LayerBudgets
    sys_text: str
    sys_cost: int
    user_input: str
    input_cost: int
    brief: str | None
    brief_tokens: int
    omitted: set[int]
    trims: list[Trim]
    promoted: list[int]
    notes: list[str]
    merges: int
    pinned_overflow: int

    def pinned_cost(self) -> int: ...

    def summary_cost(self) -> int: ...


def render(run: Plan) -> Composition:
    """The prompt, report and (lazy) layer views of a finished plan."""
    st = run.st
    brief, brief_tokens = run.brief, run.brief_tokens
    pinned = sorted(
        [(e.tag, e.kind, e.shown, e.shown_tokens + 1) for e in st.pinned if e.tag not in run.omitted]
        + [
            (tag, "constraint", record.text, record.tokens + 1)
            for tag, record in st.records.items()
            if tag not in run.omitted and st.entries[tag - 1].layer != "pinned"
        ]
    )
    pinned_items: list[tuple[int | None, str, str, int]] = [(None, "brief", brief, brief_tokens + 1)] if brief else []
    pinned_items += pinned
    summaries = [(s.text, s.tokens + 1) for s in st.summaries]
    kinds = run.mode.kinds
    rolling = st.rolling if len(kinds) == len(MESSAGE_KINDS) else [e for e in st.rolling if e.kind in kinds]

    messages: list[dict[str, str]] = [{"role": "system", "content": run.sys_text}]
    if summaries:
        messages.append({"role": "system", "content": SUMMARY_HEADER + "\n".join(t for t, _ in summaries)})
    if pinned_items:
        messages.append({"role": "system", "content": PINNED_HEADER + "\n".join(i[2] for i in pinned_items)})
    # Kept for the views: the caller owns `messages` and may edit it before inspect().
    chats = [e.chat or e.chat_message() for e in rolling]
    messages += chats
    rolling_tokens = array("l", [e.shown_tokens for e in rolling])
    rolling = list(rolling) if rolling is st.rolling else rolling
    if run.user_input:
        messages.append({"role": "user", "content": run.user_input})

    layers = {
        "system": run.sys_cost,
        "summary": run.summary_cost(),
        "pinned": run.pinned_cost(),
        "rolling": sum(rolling_tokens) + run.ov * len(rolling_tokens),
        "input": run.input_cost,
    }
    report = ComposeReport(
        mode=run.mode.name,
        budget=run.cfg.window - run.cfg.reserve_output,
        total=sum(layers.values()),
        layers=layers,
        budgets=run.b,
        trims=tuple(run.trims),
        promoted=tuple(run.promoted),
        merges=run.merges,
        pinned_overflow=run.pinned_overflow,
        hard_omitted=tuple(sorted(run.omitted)),
        notes=tuple(run.notes),
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
        rolling_texts = [m["content"] for m in chats]
        return (
            LayerView("system", sys_cost, sys_cost, (LayerItem(None, "system", sys_text, sys_cost),)),
            LayerView(
                "summary", b.summary, layers["summary"], tuple(LayerItem(None, "summary", t, n) for t, n in summaries)
            ),
            LayerView("pinned", b.pinned, layers["pinned"], tuple(LayerItem(*item) for item in pinned_items)),
            LayerView(
                "rolling",
                b.rolling,
                layers["rolling"],
                tuple(
                    LayerItem(e.tag, e.kind, text, n + ov)
                    for e, text, n in zip(rolling, rolling_texts, rolling_tokens, strict=True)
                ),
            ),
            LayerView(
                "input",
                input_cost,
                input_cost,
                (LayerItem(None, "input", user_input, input_cost),) if user_input else (),
            ),
        )

    return Composition(messages, report, views)
