"""Every prompt of every recorded session, rendered for both providers, is one they take.

The 34 sessions of ../shared/anchors/transcripts are replayed as an agent would have
recorded them (the leading system message as the host's system prompt, each call whole)
at 8k, 16k and 32k, composing before every model call. Each composition is rendered
with `to_openai()` and `to_anthropic()` and checked against the SDKs' request types and
the providers' pairing rules (`tests._providers`); the calls shown come back exactly as
recorded: id, name where the provider takes it, and arguments byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.context import BUILTIN_MODES, Composition, ContextConfig, LocalContext, Tokenizer
from ctxbus.agents.runtime import read_transcript
from ctxbus.schemas import ToolCall
from tests._providers import SdkTypes, check_anthropic, check_openai, check_openai_layout
from tests.context.conftest import rendered_cost

BUDGETS = (8_000, 16_000, 32_000)
SESSIONS = 34
_NAME_OK = r"^[a-zA-Z0-9_-]{1,64}$"
_RECOUNT_EVERY = 20
"""Every so many composes, the rendering is tokenized afresh: it may not cost more than
the report says (tokenizing every prompt would take most of this test's time)."""


def _sessions(root: Path) -> list[Path]:
    sessions = sorted(root.glob("*/*.jsonl"))
    assert len(sessions) == SESSIONS, (
        f"the anchors README lists {SESSIONS} sessions; found {len(sessions)} under {root}"
    )
    return sessions


Recorded = dict[int, list[tuple[ToolCall, bool]]]
"""Tag -> each call of that assistant turn as recorded, and whether an earlier call of
the session had its id."""


def _shown_calls(composition: Composition, recorded: Recorded) -> list[tuple[ToolCall, bool]]:
    """The calls of the assistant turns the prompt shows, in order, as they were recorded."""
    rolling = next(view for view in composition.layers if view.name == "rolling")
    return [call for item in rolling.items if item.tag in recorded for call in recorded[item.tag]]


def _same_call(want: tuple[ToolCall, bool], call_id: str, name: str, arguments: object) -> bool:
    """Whether a rendered call is the recorded one: the same arguments, the same id (one
    the session used before goes out as another, derived from it: a provider wants them
    unique) and the same name, where the providers take it."""
    call, repeated = want
    name_ok = name == call.name if re.match(_NAME_OK, call.name) else bool(re.match(_NAME_OK, name))
    if not call.id:
        id_ok = bool(call_id)
    elif repeated:
        id_ok = call_id != call.id and call_id.startswith(call.id[:20])
    else:
        id_ok = call_id == call.id
    return name_ok and id_ok and arguments == call.arguments


def _check_openai(
    messages: Sequence[dict[str, Any]], expected: list[tuple[ToolCall, bool]], system: str, sdk: SdkTypes
) -> None:
    check_openai_layout(messages)
    check_openai(messages)
    sdk.openai(messages)
    assert messages[0]["content"] == system, "the system prompt goes out whole, first"
    rendered = [call for m in messages if m["role"] == "assistant" for call in m.get("tool_calls", ())]
    assert len(rendered) == len(expected)
    for call, want in zip(rendered, expected, strict=True):
        assert _same_call(want, call["id"], call["function"]["name"], call["function"]["arguments"]), (call, want)


def _check_anthropic(
    request: dict[str, Any], expected: list[tuple[ToolCall, bool]], system: str, sdk: SdkTypes
) -> None:
    check_anthropic(request)
    sdk.anthropic(request)
    assert request["system"] == system
    uses = [b for m in request["messages"] if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert len(uses) == len(expected)
    for use, want in zip(uses, expected, strict=True):
        arguments = want[0].arguments if use["input"] == json.loads(want[0].arguments) else json.dumps(use["input"])
        assert _same_call(want, use["id"], use["name"], arguments), (use, want)


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_prompt_of_every_session_renders_for_both_providers(
    budget: int, transcripts: Path, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    renderings = composes = calls_checked = 0
    for path in _sessions(transcripts):
        transcript = read_transcript(path)
        config = ContextConfig(window=budget, system_prompt=transcript.system_prompt)
        system = transcript.system_prompt or BUILTIN_MODES["task"].system_text
        sdk = SdkTypes()  # per session: what it remembers as validated is that session's
        recorded: Recorded = {}
        ids: set[str] = set()
        with LocalContext(
            tmp_path / f"{budget}-{path.stem}.db",
            "anchors/render/s",
            config=config,
            tokenizer=tokenizer,
            autoflush=False,
        ) as ctx:
            previous = ""
            for message in transcript.messages:
                if message.role == "assistant" and previous not in ("", "assistant"):
                    composition = ctx.compose()
                    assert composition.report.total <= composition.report.budget
                    expected = _shown_calls(composition, recorded)
                    openai = composition.to_openai()
                    _check_openai(openai, expected, system, sdk)
                    _check_anthropic(composition.to_anthropic(), expected, system, sdk)
                    if composes % _RECOUNT_EVERY == 0:
                        cost = rendered_cost(tokenizer, openai, config.message_overhead)
                        assert cost <= composition.report.total, f"{path.name}: under-counted"
                    composes += 1
                    renderings += 2
                    calls_checked += len(expected)
                tag = ctx.add(**message.add_arguments())
                if message.role == "assistant":
                    calls = ctx.message(tag).tool_calls
                    assert not message.tool_calls or calls == message.tool_calls, "recorded whole"
                    recorded[tag] = [(call, call.id in ids) for call in calls]
                    ids.update(call.id for call in calls)
                previous = message.role
    print(f"\n{budget:,}: {composes:,} composes, {renderings:,} renderings validated, {calls_checked:,} calls shown")
    assert composes > 5_000
