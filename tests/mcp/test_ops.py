"""`brief_propose`'s op argument, checked before anything reaches the bus."""

from __future__ import annotations

import pytest

from ctxbus import schemas
from ctxbus.agents.mcp import AGENT_OPS, BadOp, op_menu, parse_op
from ctxbus.schemas import TEXT_MAX, AddNote, Complete


def test_the_ops_are_the_ones_schemas_lets_an_agent_propose() -> None:
    assert AGENT_OPS is schemas.AGENT_OPS
    assert [line.split()[1] for line in op_menu().splitlines()] == list(AGENT_OPS)


def test_a_good_op_comes_back_as_its_model() -> None:
    assert parse_op({"op": "complete", "item_id": "p1"}) == Complete(item_id="p1")
    assert parse_op({"op": "add_note", "text": "x"}) == AddNote(text="x")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"op": "complete"}, "bad complete op: field 'item_id': Field required"),
        ({"op": "add_note", "text": "x" * (TEXT_MAX + 1)}, f"bad add_note op: field 'text' is {TEXT_MAX + 1:,} characters long, over the limit of {TEXT_MAX:,}"),
        ({"op": "close", "force": True}, "bad close op: field 'force': Extra inputs are not permitted"),
        ({"op": "set_goal", "text": 5}, "bad set_goal op: field 'text': Input should be a valid string"),
        ({"op": "fold_done", "item_ids": ["d1"]}, "the op has an unknown op 'fold_done'; use one of: " + ", ".join(AGENT_OPS)),
        ({"text": "x"}, "the op has no 'op' field; use one of: " + ", ".join(AGENT_OPS)),
    ],
    ids=["missing", "too_long", "extra", "wrong_type", "coordinators_own", "no_tag"],
)  # fmt: skip
def test_a_bad_op_is_one_sentence_naming_the_field(raw: dict[str, object], says: str) -> None:
    with pytest.raises(BadOp) as caught:
        parse_op(raw)
    assert str(caught.value) == says
