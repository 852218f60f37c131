"""Checks every adapter's run is held to, on the prompts the model was shown (`_worker.summary`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PLACEHOLDER_MAX = 60
"""Tokens a released output is shown in at most (its placeholder)."""


def calls_and_answers(prompt: list[dict[str, Any]]) -> None:
    """Every call is answered right after its turn, and every result answers one."""
    i = 0
    while i < len(prompt):
        message = prompt[i]
        assert message["role"] != "tool", f"a result answering no call of the turn before it: {message}"
        calls = message["calls"]
        answered = [m["answers"] for m in prompt[i + 1 : i + 1 + len(calls)]]
        assert answered == calls, f"calls {calls} answered by {answered}"
        i += 1 + len(calls)


def reduces_taking_effect(
    prompts: list[list[dict[str, Any]]], reduces: Sequence[tuple[int, list[int]]]
) -> tuple[list[int], list[int]]:
    """The prompt indexes of the `ctx_reduce`s that took effect, and of those whose tags
    the prompt no longer showed (a rebuild had folded them already).

    A reduce asked for on prompt `index` releases whole outputs shown there; below urgent
    the drop waits for the context's next rebuild (the cached prefix is kept): until then
    the messages are shown as they were, then as placeholders.
    """
    took_effect: list[int] = []
    out_of_view: list[int] = []
    for index, dropped in reduces:
        before = {m["tag"]: m["tokens"] for m in prompts[index] if m["tag"] in dropped}
        if not before:
            out_of_view.append(index)
            continue
        assert any(tokens > 500 for tokens in before.values()), before  # whole outputs were shown
        for prompt in prompts[index + 1 :]:
            after = {m["tag"]: m["tokens"] for m in prompt if m["tag"] in dropped}
            if all(after.get(tag, 0) < PLACEHOLDER_MAX for tag in dropped):
                took_effect.append(index)
                break
            assert after == before, (before, after)
    return took_effect, out_of_view
