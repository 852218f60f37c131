"""The brief as pinned text, and folding done items to fit a token budget."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ctxbus.agents.context import Tokenizer
from ctxbus.schemas import Commit, Proposal, apply
from ctxbus.schemas._brief import TaskBrief
from ctxbus.schemas._brief_fold import fold_done_op
from ctxbus.schemas._brief_ops import (
    FOLD_MAX,
    AddBlocker,
    AddConstraint,
    AddDecision,
    AddNote,
    AddPending,
    BriefOp,
    Close,
    Complete,
    FoldDone,
    Reject,
    SetGoal,
)
from ctxbus.schemas._brief_render import SUMMARY_SHOWN_CHARS, render_brief, render_growth_bound
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


@pytest.mark.parametrize("count", [words, Tokenizer.load().count_lines], ids=["words", "cl100k"])
@pytest.mark.parametrize(("done", "over"), [(12, 10), (40, 150), (400, 2_000)])
def test_fold_takes_the_fewest_oldest_done_items_that_fit(count: Callable[[str], int], done: int, over: int) -> None:
    """The fold weighs drafts by the lines they change; the figures here are whole counts."""
    brief = _with_done(done)
    budget = count(render_brief(brief)) - over
    op = fold_done_op(brief, budget, count)
    assert op is not None
    assert op.item_ids == tuple(d.id for d in brief.done[: len(op.item_ids)])
    after = accept(brief, op, author="coord-1")
    assert count(render_brief(after)) <= budget
    shorter = FoldDone(item_ids=op.item_ids[:-1])
    if shorter.item_ids:
        assert count(render_brief(accept(brief, shorter, author="coord-1"))) > budget
    if len(op.item_ids) > 1:  # a second fold over a summary already there
        again = fold_done_op(after, count(render_brief(after)) - over // 2, count)
        assert again is not None
        folded = accept(after, again, author="coord-1")
        assert count(render_brief(folded)) <= count(render_brief(after)) - over // 2
        if len(again.item_ids) > 1:
            less = accept(after, FoldDone(item_ids=again.item_ids[:-1]), author="coord-1")
            assert count(render_brief(less)) > count(render_brief(after)) - over // 2


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


def test_a_commit_adds_no_more_tokens_than_its_growth_bound() -> None:
    """The coordinator skips counting while the bounds fit in the room: they must hold
    for the real tokenizer, whatever the text."""
    count = Tokenizer.load().count
    brief = seeded()
    ops: list[BriefOp] = [
        AddNote(text="数据库连接超时：重试三次后放弃"),
        AddPending(text="a" * 300),
        AddDecision(option="🚀 ship it", rationale="ok 👍", supersedes=brief.decisions[-1].id),
        Reject(option="local lock", reason="x" * 500),
        AddConstraint(text="never\u200b edit vendor/ \u0301\u0301"),
        AddBlocker(text="ERROR: " + "éa" * 200),
        SetGoal(text="the goal, restated"),
        Complete(item_id=brief.pending[0].id, outcome="done in 3 ms; 100% of tests pass"),
        Close(reason="shipped"),
    ]
    for i, op in enumerate(ops):
        proposal = Proposal(deadline=2e9, domain=DOMAIN, author=f"agent-{'ü' * i}", op=op, key=f"g{i}")
        commit = Commit.of(proposal, revision=brief.revision + 1, ts=0.0, committed_by="c")
        after = apply(brief, commit)
        assert count(render_brief(after)) - count(render_brief(brief)) <= render_growth_bound(commit), op
        brief = after


def test_the_summary_shows_its_newest_facts_and_counts_the_rest() -> None:
    """Every fold adds facts: shown whole, the summary would outgrow any budget."""
    brief = seeded()
    for i in range(400):
        brief = accept(brief, AddPending(text=f"task {i}"))
        brief = accept(brief, Complete(item_id=brief.pending[-1].id, outcome="ok"))
        if len(brief.done) == 50:
            brief = accept(brief, FoldDone(item_ids=tuple(d.id for d in brief.done)))
    assert brief.done_summary is not None
    facts = brief.done_summary.facts
    assert len(facts) + len(brief.done) == 401, "every fact is kept (the seeded brief had one done)"
    (line,) = [line for line in render_brief(brief).splitlines() if "earlier:" in line]
    assert len(line) < SUMMARY_SHOWN_CHARS + 100
    assert facts[-1] in line and facts[0] not in line
    assert line.endswith(f"(and {len(facts) - line.count(' -> '):,} earlier)")
    assert fold_done_op(brief, words(render_brief(brief)), words) is None
