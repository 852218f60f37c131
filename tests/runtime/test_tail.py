"""The tail adapter pairs tool calls with their results the way the engine does."""

from __future__ import annotations

from pathlib import Path

from ctxbus.agents.context import LocalContext
from ctxbus.agents.runtime import TailAdapter
from ctxbus.schemas import Domain


def test_each_result_shares_its_calls_identity(tmp_path: Path) -> None:
    with LocalContext(tmp_path / "a.db", Domain.parse("u/s/t")) as context:
        context.add("user", "go")
        context.add("assistant", "two calls at once", tool_name="grep", call_id="a,b")
        context.add("tool", "A", tool_name="grep", call_id="a")
        context.add("tool", "B", tool_name="grep", call_id="b")
        context.add("assistant", "ls", tool_name="ls")  # no ids: the result answers the call before it
        context.add("tool", "README.md", tool_name="ls")
        context.add("assistant", "grep again", tool_name="grep", call_id="a")  # an id used again
        context.add("tool", "A again", tool_name="grep", call_id="a")
        context.add("user", "thanks")
        _, tags = TailAdapter().convert(context.tail())

    call = {tag.number: tag.call for tag in tags}
    assert call[9] == 9, "a message outside any call is its own"
    assert call[2] == call[3] == call[4]
    assert call[5] == call[6] != call[2]
    assert call[7] == call[8] not in (call[2], call[5])
