"""Turning the context engine's tail into what the hygiene walk reads."""

from __future__ import annotations

from collections.abc import Sequence

from ctxbus.agents.context import TailItem
from ctxbus.agents.nudges import PartKind, TagKind, TagState, TailPart, TailTag, drop_placeholder

__all__ = ["FINAL_KINDS", "TailAdapter"]

FINAL_KINDS = frozenset({"conclusion"})
"""Message kinds that hold a request's final result: ctx_reduce never drops them, so
they count in T but never in U (they are not the agent's to release)."""

_PART_KIND = {
    "tool_call": PartKind.TOOL_INPUT,
    "tool_result": PartKind.TOOL_OUTPUT,
    "reasoning": PartKind.REASONING,
}
_TOOL_KINDS = frozenset({"tool_call", "tool_result"})


class TailAdapter:
    """Builds `TailPart`/`TailTag` sequences from `LocalContext.tail()`.

    The walk is incremental only if unchanged parts are the same objects from one
    render to the next, so parts are cached by what determines them.

    Parts carry no `TailPart.arc`: the engine tags a tool call and its result apart and
    keeps rendering the call after the result is dropped, so the call still costs
    tokens (T) and can still be released by its own tag (U). Their tag rows share a
    `TailTag.call` instead, so protection counts the pair as one call.
    """

    def __init__(self) -> None:
        self._parts: dict[tuple[str, str, int], TailPart] = {}

    def convert(self, items: Sequence[TailItem]) -> tuple[list[TailPart], list[TailTag]]:
        """Parts in render order and tag rows in ascending tag order."""
        parts = [self._part(item) for item in items]
        tags = sorted(
            (
                TailTag(
                    number=item.tag,
                    kind=TagKind.TOOL if item.kind in _TOOL_KINDS else TagKind.MESSAGE,
                    state=TagState(item.state),
                    tokens=item.tokens,
                    tool_name=item.tool_name,
                    call=item.unit,
                )
                for item in items
            ),
            key=lambda tag: tag.number,
        )
        live = {(item.id, item.state, item.tokens) for item in items}
        for stale in self._parts.keys() - live:
            del self._parts[stale]
        return parts, tags

    def _part(self, item: TailItem) -> TailPart:
        key = (item.id, item.state, item.tokens)
        part = self._parts.get(key)
        if part is None:
            if item.state == TagState.DROPPED:
                part = TailPart(key=item.id, kind=PartKind.TEXT, text=drop_placeholder(item.tag), tag=item.tag)
            else:
                part = TailPart(
                    key=item.id,
                    kind=_PART_KIND.get(item.kind, PartKind.TEXT),
                    tag=None if item.kind in FINAL_KINDS else item.tag,
                    synthetic=item.kind == "synthetic",
                    tokens=item.tokens,
                )
            self._parts[key] = part
        return part
