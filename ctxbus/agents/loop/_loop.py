"""The agent loop: compose, ask the model, run its tool calls, record the results; repeat.

Each turn:

1. `Agent.compose()` builds the prompt inside the window (drops queued by `ctx_reduce`
   applied, the shared brief in its head, Channel 1 reminders inside their tool
   messages, a Channel 2 message as a user turn) and `to_openai()` renders it;
2. the model is asked (`ModelClient.complete`, retried on 429, 5xx, timeouts and an
   endpoint that is down);
3. its answer is recorded with its calls (`Agent.assistant(..., tool_calls=...)`);
4. each call runs (`Toolbox.call`: a bad call becomes a failed result, never an
   exception) and its result is recorded (`Agent.tool_result`, where the nudges act).

The loop stops at a final answer (a turn with no calls), at `max_turns` (counted across
restarts), or once the brief is closed (the task is done for every agent). Everything
it keeps is in the agent's store, written as it goes, so a process killed at any point
restarts on the same store where it stopped: a call whose result was never recorded is
shown to the model with a stand-in result, and the model decides what to do about it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from ctxbus.agents.loop._model import ModelClient, TurnUsage
from ctxbus.agents.loop._tools import Toolbox
from ctxbus.agents.nudges import REDUCE_TOOL_NAME, REMINDER_OPEN, DeliveryOutcome
from ctxbus.agents.runtime import Agent
from ctxbus.bus import GEN_AI, span
from ctxbus.schemas import ToolCall, UsageError

__all__ = ["AgentLoop", "LoopConfig", "LoopStats", "LoopStop", "Turn", "TurnRecord"]

log = logging.getLogger(__name__)

_STATS_KEY: Final = "loop:stats"
_SENT: Final = frozenset({DeliveryOutcome.SENT, DeliveryOutcome.RECOVERED})


class LoopStop(enum.StrEnum):
    """Why a loop stopped."""

    FINAL_ANSWER = "final_answer"
    """The model answered without calling a tool."""
    MAX_TURNS = "max_turns"
    TASK_DONE = "task_done"
    """The shared brief was closed: the task is over for every agent."""


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    max_turns: int = 50
    """Model calls in all, across restarts on the same store."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise UsageError(f"max_turns must be at least 1, got {self.max_turns}")


class TurnRecord(BaseModel):
    """One turn as the store keeps it."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    composed_tokens: int
    """The prompt as ctxbus counted it (tiktoken)."""
    prompt_tokens: int
    """As the endpoint counted it (its tokenizer); 0 if it reported no usage."""
    cached_tokens: int
    completion_tokens: int
    attempts: int
    calls: list[str] = Field(default_factory=list)
    failed_calls: int = 0


class LoopStats(BaseModel):
    """What one agent's loop did so far; persisted in its store, so it survives a SIGKILL."""

    model_config = ConfigDict(extra="forbid")

    turns: int = 0
    starts: int = 0
    """Processes that ran this loop on this store."""
    task_given: bool = False
    stopped: LoopStop | None = None
    answer: str | None = None
    """The final answer, when the loop stopped at one."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    """Model calls that needed more than one try, counted by the extra tries."""
    failed_calls: int = 0
    """Tool calls that came back as errors (bad arguments, unknown tools, refusals)."""
    reminders: int = 0
    """Channel 1 reminders the model was shown in a tool result."""
    reduces: int = 0
    channel2: int = 0
    """Channel 2 messages delivered to this agent."""
    bands: list[str] = Field(default_factory=list)
    """Nudge bands reached, in the order first reached."""
    peak_composed_tokens: int = 0
    history: list[TurnRecord] = Field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    """What `on_turn` hears after each turn."""

    record: TurnRecord
    stats: LoopStats
    reminders: int
    """Channel 1 reminders shown in this turn's results."""
    delivered: int
    """Channel 2 messages delivered during this turn."""
    failures: tuple[str, ...] = ()
    """Each failed call of the turn: its tool's name and the start of its result."""


class AgentLoop:
    """Runs one agent against one model with one toolbox until it stops.

    The agent must be open (`Agent.open`); the loop owns no task group of its own.
    """

    def __init__(
        self,
        agent: Agent,
        model: ModelClient,
        tools: Toolbox,
        *,
        config: LoopConfig | None = None,
        on_turn: Callable[[Turn], Any] | None = None,
    ) -> None:
        self.agent = agent
        self.model = model
        self.tools = tools
        self.config = config or LoopConfig()
        self._on_turn = on_turn
        self.stats = self._load()

    def __repr__(self) -> str:
        return f"<AgentLoop {self.agent.id} turn {self.stats.turns}/{self.config.max_turns}>"

    async def run(self, task: str | None = None) -> LoopStats:
        """Run turns until the loop stops; returns what it did (also kept in the store).

        :param task: the user's task, recorded once as the first user message (a
            restarted loop already has it and ignores it).
        :raises ModelUnavailable: if the endpoint did not answer after every retry; the
            store holds everything up to the failed turn, for a restart.
        :raises ModelRefused: if the endpoint refused a request.
        """
        self.stats.starts += 1
        self.stats.stopped = None
        if task is not None and not self.stats.task_given:
            self.agent.user(task)
            self.stats.task_given = True
        self._save()
        while True:
            if self.agent.brief.is_closed:
                return self._stop(LoopStop.TASK_DONE)
            if self.stats.turns >= self.config.max_turns:
                return self._stop(LoopStop.MAX_TURNS)
            if await self._turn():
                return self._stop(LoopStop.FINAL_ANSWER)

    async def _turn(self) -> bool:
        """One turn; True if it was the final answer."""
        agent, stats = self.agent, self.stats
        composition = agent.compose()
        attributes = {
            GEN_AI.OPERATION: "chat",
            GEN_AI.REQUEST_MODEL: self.model.model,
            GEN_AI.AGENT_ID: agent.id,
            GEN_AI.CONVERSATION_ID: str(agent.domain),
        }
        with span(f"chat {self.model.model}", attributes, kind="client") as current:
            completion, usage = await self.model.complete(composition.to_openai(), self.tools.to_openai())
            current.set_attribute(GEN_AI.RESPONSE_MODEL, completion.model)
            current.set_attribute(GEN_AI.INPUT_TOKENS, usage.prompt_tokens)
            current.set_attribute(GEN_AI.OUTPUT_TOKENS, usage.completion_tokens)
            current.set_attribute(GEN_AI.CACHE_READ_TOKENS, usage.cached_tokens)
        if usage.prompt_tokens:
            agent.reported_cached_share = min(1.0, usage.cached_tokens / usage.prompt_tokens)
            current.set_attribute("ctxbus.prompt_tokens", composition.report.total)
        message = completion.choices[0].message
        calls = [
            # A nameless call is kept (as one no tool answers to): the model hears what was wrong.
            ToolCall(id=call.id, name=function.name or "unnamed", arguments=function.arguments or "{}")
            for call in message.tool_calls or ()
            if (function := getattr(call, "function", None)) is not None
        ]
        agent.assistant(message.content or "", tool_calls=calls)
        record = self._count(composition.report.total, usage, calls)
        self._save()
        reminders = delivered = 0
        failures: list[str] = []
        for call in calls:
            tool = {GEN_AI.OPERATION: "execute_tool", GEN_AI.TOOL_NAME: call.name, GEN_AI.TOOL_CALL_ID: call.id}
            with span(f"execute_tool {call.name}", tool) as current:
                text, failed = await self.tools.call(call.name, call.arguments)
                current.set_attribute("ctxbus.failed", failed)
            outcome = await agent.tool_result(call.name, text, call_id=call.id)
            if failed:
                record.failed_calls += 1
                stats.failed_calls += 1
                failures.append(f"{call.name}: {text.splitlines()[0][:200] if text else ''}")
            stats.reduces += call.name == REDUCE_TOOL_NAME and not failed
            if REMINDER_OPEN.strip() in outcome.text[len(text) :]:
                reminders += 1
            if outcome.delivery is not None and outcome.delivery.outcome in _SENT:
                delivered += 1
            band = str(outcome.measure.band)
            if band not in stats.bands:
                stats.bands.append(band)
        stats.reminders += reminders
        stats.channel2 += delivered
        if not calls:
            stats.answer = message.content or ""
        agent.context.flush()
        self._save()
        if self._on_turn is not None:
            self._on_turn(
                Turn(record=record, stats=stats, reminders=reminders, delivered=delivered, failures=tuple(failures))
            )
        return not calls

    def _count(self, composed: int, usage: TurnUsage, calls: list[ToolCall]) -> TurnRecord:
        stats = self.stats
        stats.turns += 1
        record = TurnRecord(
            turn=stats.turns,
            composed_tokens=composed,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens,
            attempts=usage.attempts,
            calls=[call.name for call in calls],
        )
        stats.history.append(record)
        stats.prompt_tokens += usage.prompt_tokens
        stats.cached_tokens += usage.cached_tokens
        stats.completion_tokens += usage.completion_tokens
        stats.retries += usage.attempts - 1
        stats.peak_composed_tokens = max(stats.peak_composed_tokens, composed)
        return record

    def _stop(self, why: LoopStop) -> LoopStats:
        self.stats.stopped = why
        self._save()
        log.info("%s stopped after %d turns: %s", self.agent.id, self.stats.turns, why)
        return self.stats

    def _load(self) -> LoopStats:
        raw = self.agent.context.get_state(_STATS_KEY)
        return LoopStats.model_validate_json(raw) if raw else LoopStats()

    def _save(self) -> None:
        self.agent.context.set_state(_STATS_KEY, self.stats.model_dump_json())
