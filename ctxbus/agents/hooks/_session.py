"""One Claude Code hook event, answered from the agent's store (and the bus, if any).

Each hook runs as its own short process: it takes the hooks' store of the agent for the
length of one event (its single-writer lock, see `_stores`), does what the event
needs, writes it, and lets go. The brief comes from NATS only when a URL is configured,
under a short deadline; without it the brief parts are left out and everything else works.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbus.agents.context import ContextConfig, LocalContext, Tokenizer
from ctxbus.agents.hooks._events import HookAnswer, HookInput, PostToolUse, PreCompact, SessionStart, UserPromptSubmit
from ctxbus.agents.hooks._identity import token_of
from ctxbus.agents.hooks._stores import set_aside, store_lock
from ctxbus.agents.hooks._transcript import HostPart, HostTail, read_tail, text_of
from ctxbus.agents.nudges import (
    Channel1,
    HygieneWalker,
    NudgeFloors,
    ReclaimHint,
    SqliteNudgeStateStore,
    TagKind,
    TailMeasure,
    TailPart,
    TailTag,
    protected_floor,
    wrap_reminder,
)
from ctxbus.agents.runtime import save_config
from ctxbus.schemas import Domain

if TYPE_CHECKING:
    from ctxbus.bus import BusConfig

__all__ = ["CLAUDE_WINDOW", "HookConfig", "answer_event"]

log = logging.getLogger(__name__)

CLAUDE_WINDOW = 200_000
"""Tokens of the host model's window the nudges are scaled for, unless configured."""

_USER_TURNS_KEY = "user_turns"  # the key the Agent runtime counts real user turns under
_HOST_SESSION_KEY = "claude_code.session"
_CALLS_KEY = "claude_code.calls"
_TAIL_KEY = "claude_code.tail"
_BRIEF_SEEN_KEY = "claude_code.brief_seen"

RULES_HEADER = "[ctxbus] The user's rules for this task, verbatim, as ctxbus pinned them:"
RULES_AFTER_COMPACT = (
    "[ctxbus] The conversation was just compacted. The user's rules for this task, verbatim, "
    "as ctxbus pinned them before the compaction (they still apply):"
)
BRIEF_HEADER = "[ctxbus] The shared task brief (every agent on task {domain} holds the same):"
BRIEF_CHANGED = "[ctxbus] The shared task brief changed since you last saw it (revision {old} -> {new}):"


@dataclass(frozen=True, kw_only=True)
class HookConfig:
    """Who the agent is and where its state and the bus are."""

    domain: Domain
    agent: str
    store: Path
    """The hooks' own store of the agent (`hooks_store` of its `AGENT.db`)."""
    bus: BusConfig | None = None
    """None: no NATS configured; the brief parts are left out."""
    window: int = CLAUDE_WINDOW
    bus_deadline: float = 2.0
    """Seconds for everything the bus does in one hook: connect, load, lease."""


async def answer_event(config: HookConfig, event: HookInput, *, tokenizer: Tokenizer | None = None) -> HookAnswer:
    """The answer to one event; writes what the event tells into the agent's store.

    :raises StoreError: if the store cannot be opened or stays locked.
    :raises BusError: never for the bus: an unreachable NATS leaves the brief out.
    """
    if isinstance(event, SessionStart) and event.source in ("startup", "clear"):
        _start_afresh(config, event.session_id)
    with store_lock(config.store):
        settings = ContextConfig(window=config.window)
        context = LocalContext(config.store, config.domain, config=settings, tokenizer=tokenizer)
        try:
            save_config(context, settings)  # `ctxbus inspect` composes as the hooks do
            hook = _Hook(config, context)
            if isinstance(event, SessionStart):
                return await hook.session_start(event)
            if isinstance(event, UserPromptSubmit):
                return await hook.user_prompt(event)
            if isinstance(event, PostToolUse):
                return await hook.post_tool_use(event)
            if isinstance(event, PreCompact):
                hook.pre_compact(event)
            return HookAnswer()
        finally:
            context.close()


class _Hook:
    def __init__(self, config: HookConfig, context: LocalContext) -> None:
        self.config = config
        self.context = context

    # -- events -------------------------------------------------------------------------

    async def session_start(self, event: SessionStart) -> HookAnswer:
        context = self.context
        context.set_state(_HOST_SESSION_KEY, event.session_id)
        blocks = []
        rules = pinned_rules(context)
        if rules:
            blocks += [RULES_AFTER_COMPACT if event.source == "compact" else RULES_HEADER, *rules]
        brief = await self._brief()
        if brief is not None:
            revision, text = brief
            blocks.append(BRIEF_HEADER.format(domain=self.config.domain) + "\n" + text)
            self._saw_brief(revision, text)
        return HookAnswer.context("SessionStart", fit(blocks, self._overflow("session-start")))

    async def user_prompt(self, event: UserPromptSubmit) -> HookAnswer:
        context = self.context
        if event.prompt.strip():
            context.add("user", event.prompt)
            context.set_state(_USER_TURNS_KEY, str(int(context.get_state(_USER_TURNS_KEY) or 0) + 1))
        brief = await self._brief()
        if brief is None:
            return HookAnswer()
        revision, text = brief
        seen = self._seen_brief()
        if seen is not None and seen[1] == text:
            return HookAnswer()
        self._saw_brief(revision, text)
        if seen is None:
            blocks = [BRIEF_HEADER.format(domain=self.config.domain) + "\n" + text]
            return HookAnswer.context("UserPromptSubmit", fit(blocks, self._overflow("brief")))
        changes = brief_changes(seen[1], text)
        blocks = [BRIEF_CHANGED.format(old=seen[0], new=revision) + "\n" + changes]
        return HookAnswer.context("UserPromptSubmit", fit(blocks, self._overflow("brief-changes")))

    async def post_tool_use(self, event: PostToolUse) -> HookAnswer:
        context = self.context
        output = text_of(event.tool_response)
        call_id = event.tool_use_id or f"hook-{context.next_tag}"
        arguments = json.dumps(event.tool_input, ensure_ascii=False, default=str)
        call_tag = context.add(
            "assistant", "", tool_calls=[{"id": call_id, "name": event.tool_name, "arguments": arguments}]
        )
        result_tag = context.add("tool", output, tool_name=event.tool_name, call_id=call_id)
        calls = self._calls()
        calls[call_id] = [call_tag, result_tag, event.tool_name]
        context.set_state(_CALLS_KEY, json.dumps(calls, separators=(",", ":")))
        measure = self._measure(event, call_id, output, calls)
        turns = int(context.get_state(_USER_TURNS_KEY) or 0)
        nudges = SqliteNudgeStateStore(self.config.store)
        outcome = Channel1(nudges).after_tool_call(event.tool_name, measure, user_turn=turns)
        reminder = ""
        if outcome.reminder is not None:
            tools = _tools_of(outcome.reminder.hints)
            reminder = reminder_text(outcome.reminder.outputs, outcome.reminder.tokens, outcome.reminder.calm, tools)
            context.annotate(result_tag, wrap_reminder(reminder))  # what the model was told, kept with the result
        reason = await self._channel2(nudges, measure) if measure.channel2 else None
        answer = HookAnswer.context("PostToolUse", reminder)
        if reason:
            answer = answer.model_copy(update={"decision": "block", "reason": reason})
        return answer

    def pre_compact(self, event: PreCompact) -> None:
        # Every event is written when it is answered; what may be missing are prompts
        # given before the hooks were installed: take them from the transcript now.
        if event.transcript_path:
            known = {m.content for m in self.context.messages() if m.role == "user"}
            for prompt in user_prompts(event.transcript_path):
                if prompt not in known:
                    self.context.add("user", prompt)
                    known.add(prompt)
        self.context.flush()

    def _overflow(self, what: str) -> Path:
        store = self.config.store
        return store.with_name(f"{store.stem}.{what}.md")

    # -- the tail ----------------------------------------------------------------------

    def _measure(self, event: PostToolUse, call_id: str, output: str, calls: dict[str, list[object]]) -> TailMeasure:
        context = self.context
        count = context.tokenizer.count
        tail = read_tail(event.transcript_path or "", HostTail.load(context.get_state(_TAIL_KEY)), count)
        context.set_state(_TAIL_KEY, tail.dump())
        parts = list(tail.parts)
        if call_id not in tail.calls():  # Claude Code writes the result after its hooks
            parts.append(HostPart(f"hook:{call_id}", "tool_output", count(output), call_id))
        return measure_parts(parts, calls, window=self.config.window, counter=context.tokenizer)

    def _calls(self) -> dict[str, list[object]]:
        try:
            calls = json.loads(self.context.get_state(_CALLS_KEY) or "{}")
        except ValueError:
            return {}
        return calls if isinstance(calls, dict) else {}

    # -- the bus -------------------------------------------------------------------------
    # NATS, the log and the keys load only when a URL is configured (`_bus`).

    async def _brief(self) -> tuple[int, str] | None:
        if self.config.bus is None:
            return None
        from ctxbus.agents.hooks._bus import load_brief

        brief = await load_brief(self.config.bus, self.config.domain, deadline=self.config.bus_deadline)
        return None if brief is None or brief[0] == 0 else brief  # nobody has written one: nothing to show

    async def _channel2(self, nudges: SqliteNudgeStateStore, measure: TailMeasure) -> str | None:
        if self.config.bus is None:
            return None
        from ctxbus.agents.hooks._bus import run_channel2

        sent = await run_channel2(
            self.config.bus,
            self.context,
            nudges,
            measure,
            domain=self.config.domain,
            agent=self.config.agent,
            deadline=self.config.bus_deadline,
        )
        return channel2_text(measure) if sent else None

    def _seen_brief(self) -> tuple[int, str] | None:
        try:
            seen = json.loads(self.context.get_state(_BRIEF_SEEN_KEY) or "null")
        except ValueError:
            return None
        if not (isinstance(seen, list) and len(seen) == 2 and isinstance(seen[0], int) and isinstance(seen[1], str)):
            return None
        return seen[0], seen[1]

    def _saw_brief(self, revision: int, text: str) -> None:
        self.context.set_state(_BRIEF_SEEN_KEY, json.dumps([revision, text]))


# -- pure helpers ----------------------------------------------------------------------


def pinned_rules(context: LocalContext) -> list[str]:
    """Every pinned item of the agent's context, as the model would be shown it: the
    user's goal and rules, whole (or cut to their constraint sentences, if long)."""
    pinned = next(view for view in context.inspect() if view.name == "pinned")
    return [item.text for item in pinned.items if item.kind != "opening" and item.text.strip()]


CONTEXT_LIMIT = 10_000
"""Characters of `additionalContext` Claude Code puts in the model's context as they are:
a longer one is saved to a file and the model sees a 2,000-character preview, with
nothing to say that the rest matters (measured by Claude Code's users; its hooks
reference names the cap)."""

_POINTER = (
    "[ctxbus] {more} more of these items did not fit here (Claude Code shows a hook's text up to {limit:,} "
    "characters). "
    "All of it, verbatim, is in {path}: read that file now, before you carry on."
)


def fit(blocks: list[str], overflow: Path, *, limit: int = CONTEXT_LIMIT) -> str:
    """`blocks` joined by blank lines, within Claude Code's limit: whole blocks, in order,
    as many as fit; if some do not, all of them go to `overflow` and the text ends by
    saying how many more there are and where.

    :raises OSError: if the overflow file cannot be written.
    """
    whole = "\n\n".join(blocks)
    if len(whole) <= limit:
        return whole
    overflow.write_text(whole + "\n", encoding="utf-8")
    room = limit - len(_POINTER.format(more=len(blocks), limit=limit, path=overflow)) - 2
    shown: list[str] = []
    for block in blocks:
        if len(block) + 2 + sum(len(b) + 2 for b in shown) > room:
            break
        shown.append(block)
    pointer = _POINTER.format(more=len(blocks) - len(shown), limit=limit, path=overflow)
    return "\n\n".join([*shown, pointer])


def brief_changes(old: str, new: str) -> str:
    """The lines of the rendered brief that came (`+`) and went (`-`)."""
    lines = [
        line
        for line in difflib.ndiff(old.splitlines(), new.splitlines())
        if line.startswith(("+ ", "- ")) and line[2:].strip()
    ]
    return "\n".join(lines) or "(only its order changed)"


def _tools_of(hints: Sequence[ReclaimHint]) -> list[str]:
    """The tools whose outputs the hints name, most releasable first, once each: the
    model does not see ctxbus's tags in Claude Code, but it knows its tools."""
    return list(dict.fromkeys(hint.tool_name for hint in hints if hint.tool_name))


def reminder_text(outputs: int, tokens: int, calm: bool, tools: list[str]) -> str:
    """Channel 1's words for Claude Code, whose transcript ctxbus cannot cut."""
    from ctxbus.agents.nudges import approx_tokens

    noun = "used tool output" if outputs == 1 else "used tool outputs"
    held = f"{outputs} {noun} (about {approx_tokens(tokens)} tokens)"
    start = f" (mostly {', '.join(tools[:3])} output)" if tools else ""
    if calm:
        return f"[ctxbus] Still held in this conversation: {held}{start}."
    return (
        f"[ctxbus] {held} are still held in this conversation{start}. ctxbus keeps their full text. "
        "Note what you still need from them in a line or two: the host drops them at its next "
        "compaction, and your rules and the shared brief come back after it."
    )


def channel2_text(measure: TailMeasure) -> str:
    """Channel 2's words for Claude Code: the model is prompted with them once per cycle."""
    from ctxbus.agents.nudges import approx_tokens

    tools = _tools_of(measure.hints)
    start = f" (mostly {', '.join(tools[:3])})" if tools else ""
    return (
        f"[ctxbus] Most of this conversation is now spent tool output: {measure.spent_outputs} outputs, about "
        f"{approx_tokens(measure.u)} tokens{start}, which ctxbus keeps in full. Before your next step, write down "
        "in two or three lines what you still need from them, then carry on: after the host compacts, your rules "
        "and the shared brief come back by themselves."
    )


def measure_parts(
    parts: list[HostPart], calls: dict[str, list[object]], *, window: int, counter: Tokenizer
) -> TailMeasure:
    """{U, T} of the host's tail: only tool calls ctxbus recorded (and so archived) are
    reclaimable; everything else counts in T alone."""
    tail_parts: list[TailPart] = []
    tags: dict[int, TailTag] = {}
    for part in parts:
        known = calls.get(part.call) if part.call else None
        tag = None
        if known is not None and part.kind in ("tool_input", "tool_output"):
            call_tag, result_tag, name = int(str(known[0])), int(str(known[1])), str(known[2])
            tag = call_tag if part.kind == "tool_input" else result_tag
            tags[tag] = TailTag(number=tag, kind=TagKind.TOOL, tokens=part.tokens, tool_name=name, call=call_tag)
        tail_parts.append(TailPart(key=part.key, kind=part.part_kind, tag=tag, tokens=part.tokens))
    usable = window - ContextConfig().reserve_system - ContextConfig().reserve_output
    walker = HygieneWalker(counter, protected_floor=protected_floor(usable), floors=NudgeFloors.for_window(window))
    return walker.measure(tail_parts, [tags[n] for n in sorted(tags)], queued=frozenset())


def user_prompts(path: str) -> Iterator[str]:
    """The user's own prompts in a Claude Code transcript (not tool results, not the
    compaction's summary), oldest first; unreadable lines are skipped."""
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        for raw in handle:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(line, dict) or line.get("type") != "user" or line.get("isCompactSummary"):
                continue
            if line.get("isMeta") or line.get("isSidechain"):
                continue
            message = line.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):  # a prompt with an image, say: its text blocks (tool results have none)
                texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
                content = "\n".join(t for t in texts if isinstance(t, str)) if texts else None
            if isinstance(content, str) and content.strip():
                yield content


# -- the store -------------------------------------------------------------------------


def _start_afresh(config: HookConfig, session_id: str) -> None:
    """A new host session under a fixed agent name starts with an empty store: the old
    one is kept beside it, named after its session (`AGENT.claude-code.<session>.db`)."""
    if not config.store.is_file():
        return
    with store_lock(config.store), LocalContext(config.store, config.domain) as context:
        previous = context.get_state(_HOST_SESSION_KEY)
    if previous is not None and previous != session_id:
        kept = set_aside(config.store, token_of(previous, fallback="previous"))
        log.info("new host session %s: the store of %s kept as %s", session_id, config.agent, kept)
