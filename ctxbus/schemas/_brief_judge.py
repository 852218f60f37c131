"""Judging a batch of proposals: the one place the brief after a batch is worked out.

A coordinator takes every proposal waiting for a domain as one batch and appends their
commits as one log entry. Each proposal must be judged on the brief after the ones
before it in the batch, and the brief after the whole batch is what the next batch is
judged on. Deriving either by hand is how a commit came to be applied twice; here it
is done once, so that `Judgement.brief` is `apply`'s fold over `Judgement.commits` by
construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxbus.schemas._brief import TaskBrief
from ctxbus.schemas._brief_messages import Commit, Committed, Proposal, Reply
from ctxbus.schemas._brief_rules import apply_accepted, resolve, triage

__all__ = ["Judgement", "judge_batch"]


class Judgement:
    """What a batch of proposals comes to on one brief: a reply for each proposal, the
    commits to append, and the brief after them.

    The brief after the batch is worked out when first asked for, if the batch ended on
    a commit: a coordinator answers the batch first (the proposers wait for that), and
    only the next batch needs the brief.
    """

    __slots__ = ("replies", "commits", "_brief", "_unapplied")

    def __init__(
        self, replies: tuple[Reply, ...], commits: tuple[Commit, ...], brief: TaskBrief, unapplied: Commit | None
    ) -> None:
        self.replies = replies
        """One per proposal, in the batch's order."""
        self.commits = commits
        """The accepted proposals, at consecutive revisions from the judged brief's next."""
        self._brief = brief
        self._unapplied = unapplied
        """The last commit, if `_brief` does not hold it yet."""

    def __repr__(self) -> str:
        return f"<Judgement replies={len(self.replies)} commits={len(self.commits)}>"

    @property
    def brief(self) -> TaskBrief:
        """The brief after every commit of the batch (the brief judged, if none)."""
        if self._unapplied is not None:
            self._brief, self._unapplied = apply_accepted(self._brief, self._unapplied), None
        return self._brief


def judge_batch(brief: TaskBrief, proposals: Sequence[Proposal], *, now: float, committed_by: str) -> Judgement:
    """Judge `proposals` in order, each on the brief after the commits before it.

    `now` is the judging coordinator's clock (Unix seconds): it stamps the commits and
    decides which proposals are past their deadline. A proposal that repeats the key of
    one earlier in the batch is answered as its duplicate, like any retry.
    """
    replies: list[Reply] = []
    commits: list[Commit] = []
    current, unapplied = brief, None
    for proposal in proposals:
        if unapplied is not None:  # each commit is applied exactly once, here or in `brief`
            current, unapplied = apply_accepted(current, unapplied), None
        verdict = triage(current, proposal, now=now)
        if verdict is None:
            unapplied = Commit.of(
                proposal,
                revision=current.revision + 1,
                ts=now,
                committed_by=committed_by,
                resolved=resolve(current, proposal.op),
            )
            commits.append(unapplied)
            verdict = Committed(revision=unapplied.revision)
        replies.append(verdict)
    return Judgement(tuple(replies), tuple(commits), current, unapplied)
