"""Brief operations as an MCP client sends them: a plain JSON object, checked here.

The tool takes the op as an object rather than as pydantic's discriminated union, so
the input schema stays flat enough for every client and a bad op comes back as one
sentence the model can act on, not as a validation dump. The menu in the tool
description is generated from the op models, so it cannot drift from `schemas`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from ctxbus.agents.tools._args import shown
from ctxbus.schemas import AGENT_OPS, BriefOp, BriefOpAdapter, UsageError, describe_validation_error

__all__ = ["BadOp", "op_menu", "parse_op"]


class BadOp(UsageError):
    """Raised when a proposed op is not one an agent may send, or its fields are wrong."""


def op_menu() -> str:
    """One line per op: its tag, its fields (`?` = optional) and what it does."""
    lines = []
    for tag, model in AGENT_OPS.items():
        fields = ", ".join(
            name if field.is_required() else f"{name}?" for name, field in model.model_fields.items() if name != "op"
        )
        doc = (model.__doc__ or "").strip().splitlines()[0]
        lines.append(f"- {tag} {{{fields}}}: {doc}")
    return "\n".join(lines)


def parse_op(raw: object) -> BriefOp:
    """Validate one op object, as the client sent it.

    :raises BadOp: for a value that is not an object, or naming the unknown tag or the
        fields at fault, and the fix.
    """
    if not isinstance(raw, Mapping):
        raise BadOp(f'the op must be an object such as {{"op": "set_goal", "text": "..."}}, got {shown(raw)}')
    tag = raw.get("op")
    if not isinstance(tag, str) or tag not in AGENT_OPS:
        known = ", ".join(AGENT_OPS)
        what = "has no 'op' field" if tag is None else f"has an unknown op {tag!r}"
        raise BadOp(f"the op {what}; use one of: {known}")
    try:
        return BriefOpAdapter.validate_python(dict(raw))
    except ValidationError as exc:  # loc[0] is the op's tag, named already
        raise BadOp(f"bad {tag} op: {describe_validation_error(exc, skip=1, show_input=False)}") from None
