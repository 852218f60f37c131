"""The brief as pinned text, and folding done items to fit a token budget."""

from __future__ import annotations

from schemas._brief import TaskBrief
from schemas._brief_fold import fold_done_op
from schemas._brief_ops import FOLD_MAX, AddPending, Close, Complete, FoldDone
from schemas._brief_render import render_brief
from tests.brief.helpers import DOMAIN, accept, seeded, words


def test_render_shows_what_agents_need() -> None:
    brief = seeded()
    text = render_brief(brief)
    expected = [
        f"Task brief {DOMAIN} @ rev {brief.revision}",
        f"Goal: {brief.goal.text if brief.goal else ''}",
        f"[{brief.constraints[0].id}] {brief.constraints[0].text}",
        f"[{brief.rejected[0].id}] {brief.rejected[0].option}: {brief.rejected[0].reason}",
        f"[{brief.decisions[0].id}] (superseded by {brief.decisions[0].superseded_by})",
        f"[{brief.done[0].id}] {brief.done[0].text} -> {brief.done[0].outcome} (by agent-a)",
        f"[{brief.pending[0].id}] {brief.pending[0].text}",
        f"[{brief.blockers[0].id}] {brief.blockers[0].text}",
    ]
    assert [line for line in expected if line not in text] == []
    assert "CLOSED" not in text
    closed = render_brief(accept(brief, Close(reason="shipped"), author="agent-c"))
    assert f"(CLOSED at rev {brief.revision + 1} by agent-c: shipped)" in closed


def test_render_leaves_out_empty_sections() -> None:
    assert render_brief(TaskBrief(domain=DOMAIN)) == f"Task brief {DOMAIN} @ rev 0"


def _with_done(count: int) -> TaskBrief:
    brief = seeded()
    for i in range(count):
        brief = accept(brief, AddPending(text=f"task number {i} with a longer description"))
        brief = accept(brief, Complete(item_id=brief.pending[-1].id, outcome=f"result {i}"))
    return brief


def test_fold_is_not_needed_within_budget() -> None:
    brief = _with_done(5)
    assert fold_done_op(brief, words(render_brief(brief)), words) is None


def test_fold_takes_the_fewest_oldest_done_items_that_fit() -> None:
    brief = _with_done(12)
    budget = words(render_brief(brief)) - 10
    op = fold_done_op(brief, budget, words)
    assert op is not None
    assert op.item_ids == tuple(d.id for d in brief.done[: len(op.item_ids)])
    after = accept(brief, op, author="coord-1")
    assert words(render_brief(after)) <= budget
    shorter = FoldDone(item_ids=op.item_ids[:-1])
    if shorter.item_ids:
        assert words(render_brief(accept(brief, shorter, author="coord-1"))) > budget


def test_fold_folds_everything_when_nothing_fits() -> None:
    brief = _with_done(3)
    op = fold_done_op(brief, 1, words)
    assert op is not None and op.item_ids == tuple(d.id for d in brief.done)
    assert fold_done_op(accept(brief, op), 1, words) is None


def test_one_fold_takes_at_most_fold_max_items_and_the_next_takes_the_rest() -> None:
    brief = _with_done(FOLD_MAX + 3)
    op = fold_done_op(brief, 1, words)
    assert op is not None and op.item_ids == tuple(d.id for d in brief.done[:FOLD_MAX])
    rest = fold_done_op(accept(brief, op, author="coord-1"), 1, words)
    assert rest is not None and rest.item_ids == tuple(d.id for d in brief.done[FOLD_MAX:])
