"""Keeping the brief inside its token budget by folding old done items.

Only done items are ever folded, and folding keeps each one's text and outcome as a fact
in `TaskBrief.done_summary`; what goes is the per-item id, author and revisions.
Decisions, rejections and constraints are never touched: they are what stops agents
from redoing or undoing settled work. If the brief is still over budget after folding
every done item, it stays over budget.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate

from ctxbus.schemas._brief import DoneSummary, TaskBrief
from ctxbus.schemas._brief_ops import FOLD_MAX, FoldDone
from ctxbus.schemas._brief_render import done_line, render_brief, summary_line

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


def fold_done_op(
    brief: TaskBrief, budget_tokens: int, count_tokens: Callable[[str], int], *, counted: int | None = None
) -> FoldDone | None:
    """The fold that brings the rendered brief within `budget_tokens`, or `None`.

    `None` when the brief fits already, has nothing done to fold, or is closed.
    Otherwise folds the fewest, oldest done items that make it fit, or all of them if nothing
    makes it fit. `count_tokens` is passed in because `schemas` does not depend on a
    tokenizer; `counted` is the rendered brief's count, if the caller has it already.

    A fold changes only the summary line and the done lines it takes, so a draft is
    weighed by those lines, each counted with its line break, rather than rendered and
    counted whole: the brief is counted once, its done lines once each (a line-caching
    counter has them already), and the summary line a few times (O(log n) at worst).
    With a counter that adds up over lines, as `Tokenizer.count_lines` does, the figure
    is the whole count's, but for a line break at the very end of the text.
    """
    if brief.closed is not None or not brief.done:
        return None
    whole = count_tokens(render_brief(brief)) if counted is None else counted
    if whole <= budget_tokens:
        return None
    candidates = brief.done[:FOLD_MAX]  # the rest at the next commit

    def tokens(line: str) -> int:
        return count_tokens(line + "\n")

    freed = (0, *accumulate(tokens(done_line(d)) for d in candidates))
    earlier = () if brief.done_summary is None else brief.done_summary.facts
    summary_now = tokens(summary_line(earlier)) if earlier else 0

    def fits(n: int) -> bool:
        facts = (*earlier, *(d.fact for d in candidates[:n]))
        return whole - freed[n] - summary_now + tokens(summary_line(facts)) <= budget_tokens

    ids = tuple(d.id for d in candidates)
    all_facts = (*earlier, *(d.fact for d in candidates))
    summary_all = tokens(summary_line(all_facts))
    if whole - freed[-1] - summary_now + summary_all > budget_tokens:  # kept over budget by what is
        return FoldDone(item_ids=ids)  # never folded: fold all we may
    # Each folded item loses its id and author, so folding more never renders longer: the
    # fewest that fit are found by search. The summary line shows only its newest facts, so
    # its size barely moves with n: taking it at its final size puts a first guess within an
    # item or two of the answer, and a search out from there counts it a few times, not
    # log n times (each count of a new summary line encodes its 1,500 characters anew).
    guess = min(max(bisect_left(freed, whole - summary_now + summary_all - budget_tokens), 1), len(ids))
    low, high = _bracket(fits, guess, len(ids))
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return FoldDone(item_ids=ids[:low])


def _bracket(fits: Callable[[int], bool], guess: int, most: int) -> tuple[int, int]:
    """`(low, high)` with the fewest n that fits in between, `fits(most)` being true:
    steps out from `guess`, doubling the step, as a galloping search does."""
    if fits(guess):
        high, step = guess, 1
        while high > 1 and fits(max(high - step, 1)):
            high, step = max(high - step, 1), step * 2
        return max(high - step + 1, 1), high
    low, step = guess + 1, 1
    while not fits(min(low + step - 1, most)):
        low, step = min(low + step, most), step * 2
    return low, min(low + step - 1, most)
