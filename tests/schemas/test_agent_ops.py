"""The ops an agent may propose: every brief op but the coordinator's own fold."""

from __future__ import annotations

from typing import get_args

import pytest

from ctxbus.schemas import AGENT_OPS, BriefOp, FoldDone, Proposal, Rejection, RejectionCode, refuse_agent_proposal


def test_every_op_but_fold_done_in_the_order_of_the_union() -> None:
    models = get_args(get_args(BriefOp)[0])
    assert list(AGENT_OPS.values()) == [model for model in models if model is not FoldDone]
    assert list(AGENT_OPS) == [model.model_fields["op"].default for model in AGENT_OPS.values()]
    assert "fold_done" not in AGENT_OPS


def test_no_caller_can_change_the_list() -> None:
    with pytest.raises(TypeError):
        AGENT_OPS["fold_done"] = FoldDone  # type: ignore[index]


def test_a_proposal_of_any_other_op_is_refused() -> None:
    body = {
        "domain": "a/b/c",
        "author": "agent-a",
        "key": "k1",
        "deadline": 1e9,
        "op": {"op": "fold_done", "item_ids": ["d1"]},
    }
    answer = refuse_agent_proposal(Proposal.model_validate(body))
    assert isinstance(answer, Rejection)
    assert answer.code is RejectionCode.INVALID_OP
    assert answer.reason == "fold_done is the coordinators' own operation, done when the brief is over its budget"


def test_a_proposal_of_an_agent_op_is_not_refused_here() -> None:
    body = {"domain": "a/b/c", "author": "agent-a", "key": "k1", "deadline": 1e9, "op": {"op": "add_note", "text": "x"}}
    assert refuse_agent_proposal(Proposal.model_validate(body)) is None
