"""Real Claude Code sessions replayed as Claude Code would run them with ctxbus's hooks.

The anchor sessions (`../shared/anchors/transcripts/claude-code`) are console logs in
ctxbus's transcript form. `ClaudeSession` writes them out as Claude Code's own
transcript (JSON Lines, `type` user/assistant/system, content blocks, a
`compact_boundary` line and a summary at each compaction) and yields, in order, the
hook events Claude Code sends for them, in the documented input format: a
`UserPromptSubmit` before each prompt reaches the transcript, a `PostToolUse` after
each tool ran (its result reaches the transcript after the hook), and at each
compaction the session recorded (a user turn that starts with Claude Code's
continuation text) `PreCompact`, the boundary, then `SessionStart` with source
`compact`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tests.context.conftest import anchors_dir

CONTINUED = "This session is being continued from a previous conversation"


def claude_sessions() -> list[Path]:
    return sorted((anchors_dir() / "transcripts" / "claude-code").glob("*.jsonl"))


class OutputSpecific(BaseModel):
    """`hookSpecificOutput` as Claude Code's hooks reference documents it."""

    model_config = ConfigDict(extra="forbid")
    hookEventName: Literal["SessionStart", "UserPromptSubmit", "PostToolUse"]  # noqa: N815 - the wire's name
    additionalContext: str  # noqa: N815


class HookOutput(BaseModel):
    """A command hook's JSON output (common fields and the decision fields), per the
    reference: anything else is a mistake Claude Code would ignore or refuse."""

    model_config = ConfigDict(extra="forbid")
    # common fields
    continue_: bool | None = Field(default=None, alias="continue")
    stopReason: str | None = None  # noqa: N815
    suppressOutput: bool | None = None  # noqa: N815
    systemMessage: str | None = None  # noqa: N815
    # decision control (PostToolUse, UserPromptSubmit, Stop)
    decision: Literal["block"] | None = None
    reason: str | None = None
    hookSpecificOutput: OutputSpecific | None = None  # noqa: N815

    @model_validator(mode="after")
    def _reason_with_block(self) -> HookOutput:
        if self.decision == "block" and not self.reason:
            raise ValueError("decision 'block' needs a reason")
        return self


def check_output(event: str, stdout: str) -> HookOutput:
    """The output, validated for `event` (PreCompact takes no hookSpecificOutput; only
    PostToolUse and UserPromptSubmit take a decision)."""
    output = HookOutput.model_validate_json(stdout)
    specific = output.hookSpecificOutput
    if specific is not None:
        assert event != "PreCompact", stdout
        assert specific.hookEventName == event, stdout
        # Claude Code shows at most this much as it is; more is filed away behind a preview
        assert len(specific.additionalContext) <= 10_000, len(specific.additionalContext)
    if output.decision is not None:
        assert event in ("PostToolUse", "UserPromptSubmit"), stdout
    return output


def context_of(output: HookOutput) -> str:
    return output.hookSpecificOutput.additionalContext if output.hookSpecificOutput else ""


def reachable(context: str) -> str:
    """The context and, when it says some did not fit, the file it names for the rest."""
    found = re.search(r"verbatim, is in (.+?): read that file now", context)
    return context if found is None else context + "\n" + Path(found[1]).read_text(encoding="utf-8")


@dataclass
class ClaudeSession:
    anchor: Path
    transcript: Path
    cwd: Path
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    prompts: list[str] = field(default_factory=list)
    """The user's prompts so far (compaction summaries excepted)."""
    _last: str | None = None

    def common(self, event: str) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.transcript),
            "cwd": str(self.cwd),
            "permission_mode": "default",
            "hook_event_name": event,
        }

    def write(self, kind: str, body: Any, **extra: Any) -> None:
        line_id = str(uuid.uuid4())
        line = {
            "type": kind,
            "uuid": line_id,
            "parentUuid": self._last,
            "sessionId": self.session_id,
            "cwd": str(self.cwd),
            "timestamp": "2026-01-01T00:00:00.000Z",
            **extra,
        }
        if kind in ("user", "assistant"):
            line["message"] = {"role": kind, "content": body}
        self._last = line_id
        with self.transcript.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def compact(self, trigger: str = "auto") -> Iterator[dict[str, Any]]:
        """The events and transcript lines of one compaction."""
        yield {**self.common("PreCompact"), "trigger": trigger, "custom_instructions": None}
        self.write("system", None, subtype="compact_boundary", content="Conversation compacted")
        self.write(
            "user",
            f"{CONTINUED} that ran out of context. The conversation is summarized below: ...",
            isCompactSummary=True,
        )
        yield {**self.common("SessionStart"), "source": "compact"}

    def events(self, *, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The session's hook events in order (at most `limit` rows of the anchor)."""
        rows = [json.loads(line) for line in self.anchor.read_text(encoding="utf-8").splitlines() if line.strip()]
        yield {**self.common("SessionStart"), "source": "startup"}
        for row in rows[:limit]:
            role, content = row["role"], row["content"]
            if role == "user" and content.startswith(CONTINUED):
                yield from self.compact()
            elif role == "user":
                yield {**self.common("UserPromptSubmit"), "prompt": content}
                self.prompts.append(content)
                self.write("user", content)
            elif role == "assistant" and row.get("tool_name"):
                call = {
                    "type": "tool_use",
                    "id": row["tool_call_id"],
                    "name": row["tool_name"],
                    "input": {"console": content},
                }
                self.write("assistant", [call])
            elif role == "assistant":
                self.write("assistant", [{"type": "text", "text": content}])
            elif role == "tool":
                call = {"console": "(see the call)"}
                yield {
                    **self.common("PostToolUse"),
                    "tool_name": row.get("tool_name") or "Bash",
                    "tool_input": call,
                    "tool_response": {"stdout": content, "stderr": "", "interrupted": False},
                    "tool_use_id": row.get("tool_call_id"),
                }
                result = {"type": "tool_result", "tool_use_id": row.get("tool_call_id"), "content": content}
                self.write("user", [result])
