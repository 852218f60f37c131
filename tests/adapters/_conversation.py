"""The two-exchange conversation both frameworks' conversation tests hold, as the agent records it."""

from __future__ import annotations

from typing import Final

from ctxbus.agents.runtime import Agent

ASKED: Final = ("Find the flaky test.", "Now fix it.")
ANSWERED: Final = ("First answer.", "Second answer.")


def said(agent: Agent) -> list[tuple[str, str]]:
    """The user and assistant turns the agent recorded, in order."""
    return [(m.role, m.content) for m in agent.context.messages() if m.role in ("user", "assistant")]


def expected() -> list[tuple[str, str]]:
    """Each question, then its answer."""
    return [turn for pair in zip(ASKED, ANSWERED, strict=True) for turn in (("user", pair[0]), ("assistant", pair[1]))]
