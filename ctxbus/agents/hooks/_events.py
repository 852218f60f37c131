"""Claude Code's hook events as they come in on stdin, and the answers it reads on stdout.

The shapes follow Claude Code's hooks reference (code.claude.com/docs/en/hooks): every
event carries `session_id`, `transcript_path`, `cwd`, `hook_event_name` and usually
`permission_mode`; each event adds its own fields. Claude Code adds fields from one
release to the next, so the input models allow unknown ones. Answers are JSON objects:
`hookSpecificOutput.additionalContext` puts text into the model's context
(SessionStart, UserPromptSubmit, PostToolUse); on PostToolUse, `decision: "block"`
with a `reason` prompts the model with the reason (the tool has run already). PreCompact
takes no `hookSpecificOutput`. An empty object is a valid answer to every event.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "EVENTS",
    "HookAnswer",
    "HookInput",
    "PostToolUse",
    "PreCompact",
    "SessionStart",
    "SpecificOutput",
    "UnknownEvent",
    "UserPromptSubmit",
    "parse_event",
]


class HookInput(BaseModel):
    """The fields every Claude Code hook event carries."""

    model_config = ConfigDict(extra="allow", frozen=True)

    session_id: Annotated[str, Field(min_length=1)]
    transcript_path: str | None = None
    """The host's own transcript (JSON Lines); may not exist yet at session start."""
    cwd: str = "."
    permission_mode: str | None = None
    hook_event_name: str


class SessionStart(HookInput):
    hook_event_name: Literal["SessionStart"]
    source: str = "startup"
    """startup, resume, clear or compact (an unknown value is read as startup)."""


class UserPromptSubmit(HookInput):
    hook_event_name: Literal["UserPromptSubmit"]
    prompt: str


class PostToolUse(HookInput):
    hook_event_name: Literal["PostToolUse"]
    tool_name: Annotated[str, Field(min_length=1)]
    tool_input: Any = None
    tool_response: Any = None
    tool_use_id: str | None = None


class PreCompact(HookInput):
    hook_event_name: Literal["PreCompact"]
    trigger: str = "auto"
    """manual or auto."""
    custom_instructions: str | None = None


class UnknownEvent(HookInput):
    """Any other event: answered with an empty, valid output."""


EVENTS: dict[str, type[HookInput]] = {
    "SessionStart": SessionStart,
    "UserPromptSubmit": UserPromptSubmit,
    "PostToolUse": PostToolUse,
    "PreCompact": PreCompact,
}

_ADAPTERS = {name: TypeAdapter(model) for name, model in EVENTS.items()}


def parse_event(raw: bytes | str) -> HookInput:
    """One event, validated by the model of its `hook_event_name` (`UnknownEvent` for others).

    :raises pydantic.ValidationError: for input that is not JSON, or misses a field the
        event needs.
    """
    event = UnknownEvent.model_validate_json(raw)
    adapter = _ADAPTERS.get(event.hook_event_name)
    return event if adapter is None else adapter.validate_json(raw)


class SpecificOutput(BaseModel):
    """`hookSpecificOutput`: context for the model, for the event that asked."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    hook_event_name: Annotated[Literal["SessionStart", "UserPromptSubmit", "PostToolUse"], Field(alias="hookEventName")]
    additional_context: Annotated[str, Field(alias="additionalContext")]


class HookAnswer(BaseModel):
    """What a hook prints on stdout. Unset fields are left out: `{}` changes nothing."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    decision: Literal["block"] | None = None
    """PostToolUse only: prompt the model with `reason`."""
    reason: str | None = None
    hook_specific_output: Annotated[SpecificOutput | None, Field(alias="hookSpecificOutput")] = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def context(cls, event: str, text: str) -> HookAnswer:
        """Text for the model's context, or the empty answer when there is none."""
        if not text:
            return cls()
        if event not in ("SessionStart", "UserPromptSubmit", "PostToolUse"):
            raise ValueError(f"{event} takes no additional context")
        return cls(hook_specific_output=SpecificOutput(hook_event_name=event, additional_context=text))  # type: ignore[arg-type]
