"""Modes: what the model is told it is doing, and which messages it is shown.

A mode is data, not code: a system template, a projection (the message kinds shown in
the rolling layer) and an output constraint. Switching mode does not rewrite history;
the engine snapshots the layers first so `restore` can bring them back exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ctxbus.agents.context._errors import InvalidConfig, UnknownMode
from ctxbus.schemas import MESSAGE_KINDS

__all__ = ["BUILTIN_MODES", "ModeDescriptor", "lookup_mode", "resolve_modes"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModeDescriptor:
    """One way of working: system template, projection rule, output constraint.

    :raises InvalidConfig: for an unknown kind, or a projection that shows tool calls
        without their results (or the reverse), which would orphan them in the prompt.
    """

    name: str
    """The name `switch_mode` takes."""
    system_template: str
    """First part of the system message."""
    kinds: frozenset[str]
    """Projection rule: message kinds shown in the rolling layer; others stay stored."""
    output_constraint: str
    """Appended to the system message: how the model should answer in this mode."""

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidConfig("a mode needs a name")
        unknown = sorted(set(self.kinds) - set(MESSAGE_KINDS))
        if unknown:
            raise InvalidConfig(f"mode {self.name!r} shows unknown kinds {unknown}; known: {MESSAGE_KINDS}")
        if ("tool_call" in self.kinds) != ("tool_result" in self.kinds):
            raise InvalidConfig(
                f"mode {self.name!r} must show both tool_call and tool_result or neither, "
                "so no call is shown without its result"
            )

    @property
    def system_text(self) -> str:
        """The full system message of this mode."""
        return f"{self.system_template}\n\n{self.output_constraint}"


_TAGS_HINT = (
    "Earlier messages carry §N§ tags. Pinned items are binding for the whole session. "
    "Use ctx_read(N) for the full text of a tagged or archived message and ctx_search for anything older."
)

BUILTIN_MODES: Mapping[str, ModeDescriptor] = {
    mode.name: mode
    for mode in (
        ModeDescriptor(
            name="task",
            system_template=f"You are an agent working on a task with tools. {_TAGS_HINT}",
            kinds=frozenset(MESSAGE_KINDS),
            output_constraint="Think briefly, then either call a tool or give the result.",
        ),
        ModeDescriptor(
            name="chat",
            system_template=f"You are a helpful assistant in a conversation. {_TAGS_HINT}",
            kinds=frozenset({"chat", "conclusion", "knowledge", "task_state", "synthetic"}),
            output_constraint="Answer the latest message directly, in plain prose.",
        ),
        ModeDescriptor(
            name="knowledge",
            system_template=f"You answer from what has been established so far. {_TAGS_HINT}",
            kinds=frozenset({"knowledge", "conclusion", "chat"}),
            output_constraint="Answer concisely and cite the §N§ tags you rely on.",
        ),
    )
}
"""`task` shows everything; `chat` hides tool traffic and reasoning; `knowledge` shows
only conversation, knowledge and conclusions."""


def resolve_modes(extra: Iterable[ModeDescriptor] | None) -> dict[str, ModeDescriptor]:
    """Built-in modes plus `extra` (which may replace a built-in of the same name)."""
    modes = dict(BUILTIN_MODES)
    for mode in extra or ():
        modes[mode.name] = mode
    return modes


def lookup_mode(modes: Mapping[str, ModeDescriptor], name: str) -> ModeDescriptor:
    """The mode called `name`.

    :raises UnknownMode: naming the known modes.
    """
    try:
        return modes[name]
    except KeyError:
        raise UnknownMode(f"unknown mode {name!r}; known modes: {', '.join(sorted(modes))}") from None
