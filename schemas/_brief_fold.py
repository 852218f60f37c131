"""Keeping the brief inside its token budget by folding old done items.

Only done items are ever folded, and folding keeps each one's text and outcome as a fact
in `TaskBrief.done_summary`; what goes is the per-item id, author and revisions.
Decisions, rejections and constraints are never touched: they are what stops agents
from redoing or undoing settled work. If the brief is still over budget after folding
every done item, it stays over budget.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas._brief import DoneSummary, TaskBrief
from schemas._brief_ops import FOLD_MAX, FoldDone
from schemas._brief_render import render_brief

__all__ = ["fold_done_op", "fold_updates"]


def fold_updates(brief: TaskBrief, item_ids: tuple[str, ...], *, rev: int) -> dict[str, object]:
    """The fields a fold of `item_ids` at `rev` changes, for `model_copy(update=...)`.

    Facts are appended in completion order, after those of earlier folds.
    """
    chosen = frozenset(item_ids)
    facts = tuple(d.fact for d in brief.done if d.id in chosen)
    earlier = () if brief.done_summary is None else brief.done_summary.facts
    return {
        "done": tuple(d for d in brief.done if d.id not in chosen),
        "done_summary": DoneSummary(facts=(*earlier, *facts), through_rev=rev),
    }


def fold_done_op(brief: TaskBrief, budget_tokens: int, count_tokens: Callable[[str], int]) -> FoldDone | None:
    """The fold that brings the rendered brief within `budget_tokens`, or `None`.

    `None` when the brief fits already, has nothing done to fold, or is closed.
    Otherwise folds the fewest, oldest done items that make it fit, or all of them if nothing
    makes it fit. `count_tokens` is passed in because `schemas` does not depend on a
    tokenizer; it is called O(log n) times for n done items.
    """
    if brief.closed is not None or not brief.done:
        return None
    if count_tokens(render_brief(brief)) <= budget_tokens:
        return None
    ids = tuple(d.id for d in brief.done[:FOLD_MAX])  # the rest at the next commit

    def fits(n: int) -> bool:
        draft = brief.model_copy(update=fold_updates(brief, ids[:n], rev=brief.revision + 1))
        return count_tokens(render_brief(draft)) <= budget_tokens

    if not fits(len(ids)):  # kept over budget by what is never folded: fold all we may
        return FoldDone(item_ids=ids)
    # Each folded item loses its id and author, so folding more never renders longer:
    # binary search finds the fewest.
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return FoldDone(item_ids=ids[:low])
