"""`judge_batch`, the one place a batch's brief is worked out, checked on random batches
against what every replica does: `apply` each commit in turn.

Batches mix ops that apply, ops the rules refuse, retries of keys committed earlier (in
the batch or batches before), keys reused for another op, and proposals past their
deadline; some batches are judged long after the keys they repeat were committed.
"""

from __future__ import annotations

from functools import reduce

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbus.schemas import Committed, Rejection, judge_batch
from ctxbus.schemas._brief import TaskBrief, brief_hash
from ctxbus.schemas._brief_messages import Proposal
from ctxbus.schemas._brief_rules import apply
from tests.brief.helpers import DOMAIN, NOW, TTL
from tests.brief.test_replay import AUTHORS, _draw_op

_BATCHES = st.integers(1, 12)
_BATCH_SIZE = st.integers(1, 10)


@st.composite
def _batch(draw: st.DrawFn, brief: TaskBrief, sent: list[Proposal], now: float) -> list[Proposal]:
    """Proposals as agents send them, judged together: mostly new ones, and some repeats
    of what was sent before (the same proposal retried, or its key reused for another op),
    some already past their deadline."""
    batch: list[Proposal] = []
    for _ in range(draw(_BATCH_SIZE)):
        earlier = [*sent, *batch]
        kind = draw(st.sampled_from(("new", "new", "new", "retry", "reuse", "late")))
        if kind in ("retry", "reuse") and earlier:
            again = draw(st.sampled_from(earlier))
            batch.append(again if kind == "retry" else again.model_copy(update={"op": _draw_op(draw, brief)}))
            continue
        deadline = now - 1 if kind == "late" else now + TTL
        key = f"k{len(earlier)}"
        author = draw(st.sampled_from(AUTHORS))
        batch.append(Proposal(domain=DOMAIN, author=author, op=_draw_op(draw, brief), key=key, deadline=deadline))
    return batch


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_brief_after_a_batch_is_apply_folded_over_its_commits(data: st.DataObject) -> None:
    brief = TaskBrief(domain=DOMAIN)
    replica = brief  # what an agent holds: every commit applied in turn, through `apply`
    sent: list[Proposal] = []
    for step in range(data.draw(_BATCHES)):
        now = NOW + step * 60.0  # batches a minute apart: retries of keys committed long ago
        batch = data.draw(_batch(brief, sent, now))
        judgement = judge_batch(brief, batch, now=now, committed_by="coord-1")

        assert len(judgement.replies) == len(batch)
        revisions = [commit.revision for commit in judgement.commits]
        assert revisions == list(range(brief.revision + 1, brief.revision + 1 + len(revisions)))
        fresh = [r for r in judgement.replies if isinstance(r, Committed) and not r.duplicate]
        assert [r.revision for r in fresh] == revisions, "one fresh Committed reply per commit, in order"
        for proposal, reply in zip(batch, judgement.replies, strict=True):
            if proposal.deadline < now:  # never committed now; a duplicate of an earlier commit at most
                assert isinstance(reply, Rejection) or reply.duplicate, reply
        keys = [(c.author, c.key) for c in judgement.commits]
        assert len(set(keys)) == len(keys), "a key committed twice in one batch"

        expected = reduce(apply, judgement.commits, brief)
        assert judgement.brief == expected
        assert brief_hash(judgement.brief) == brief_hash(expected)
        replica = reduce(apply, judgement.commits, replica)
        assert brief_hash(replica) == brief_hash(judgement.brief)
        # Judged again on the brief after it (a late copy of the batch), no commit is made twice.
        again = judge_batch(judgement.brief, batch, now=now, committed_by="coord-2")
        assert not {(c.author, c.key) for c in again.commits} & set(keys)
        for first, second in zip(judgement.replies, again.replies, strict=True):
            if isinstance(first, Committed):
                assert second == Committed(revision=first.revision, duplicate=True), (first, second)
        brief = judgement.brief
        sent.extend(batch)
