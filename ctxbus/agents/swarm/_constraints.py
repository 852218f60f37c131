"""Where the scenario's hard constraints must still be at the end of a run.

Two promises, checked apart: each agent keeps the constraints its *own* user stated in
its pinned layer, and the brief block of its prompt holds the ones the lead recorded.
Looking for a constraint anywhere in the prompt would prove neither, since the brief
block alone holds every one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from ctxbus.agents.context import LayerView

__all__ = ["missing_from_brief", "missing_from_pinned"]

_BRIEF_KIND: Final = "brief"
_BRIEF_KINDS: Final = frozenset({_BRIEF_KIND, "brief_delta"})


def missing_from_pinned(layers: Sequence[LayerView], constraints: Iterable[str]) -> list[str]:
    """The `constraints` (the agent's own user's) that the pinned layer lacks, the brief
    block left out. `layers` is the prompt, layer by layer (`Composition.layers`)."""
    pinned = "\n".join(
        item.text for layer in layers if layer.name == "pinned" for item in layer.items if item.kind != _BRIEF_KIND
    )
    return [c for c in constraints if c not in pinned]


def missing_from_brief(layers: Sequence[LayerView], constraints: Iterable[str]) -> list[str]:
    """The `constraints` (the lead's) that the brief block of the prompt lacks."""
    # The head's brief and the deltas since the last rebuild, which the tail shows.
    brief = "\n".join(item.text for layer in layers for item in layer.items if item.kind in _BRIEF_KINDS)
    return [c for c in constraints if c not in brief]
