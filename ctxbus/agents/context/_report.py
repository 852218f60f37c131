"""What compose, inspect and tail hand back, and how trims are logged."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ctxbus.agents.context._authored import AuthoredItem
from ctxbus.agents.context._config import LayerBudgets
from ctxbus.agents.context._wire import Prompt, to_anthropic, to_openai
from ctxbus.schemas import ToolCall

__all__ = [
    "ComposeReport",
    "Composition",
    "LayerItem",
    "LayerView",
    "TailItem",
    "Trim",
    "TrimReason",
    "log_trim",
    "logger",
]

logger = logging.getLogger("ctxbus.agents.context")
"""Every trim, promotion, mode switch and compose is logged here with structured extras."""

TrimReason = Literal["expired", "low_value", "over_budget"]
"""Why something left a layer: its ttl ran out, it was the least valuable, or the layer
(or the whole prompt) was over budget."""


@dataclass(frozen=True, slots=True)
class Trim:
    """One thing that left a layer during a compose."""

    tag: int | None
    """The message tag, or None for a summary entry."""
    id: str
    """Message id, or `summary-<n>` for a summary entry."""
    reason: TrimReason
    """Why it was trimmed."""
    source: str
    """Layer it left: pinned, rolling or summary."""
    destination: str
    """Where it went: rolling (a pin demoted), constraint (a long hard pin cut down: the
    message went to rolling, its constraint sentences stay pinned), summary, dropped (out
    of the prompt, still readable and searchable), or archive (a summary entry given up;
    the messages it covered stay readable and searchable)."""
    tokens: int
    """Prompt tokens it took before the trim."""


@dataclass(frozen=True, slots=True)
class LayerItem:
    """One item of a layer as the model sees it."""

    tag: int | None
    """Message tag, or None for the brief block and summary entries."""
    kind: str
    """Message kind, or `brief`, `constraint`, `summary`, `system`, `input`, `opening`."""
    text: str
    """The exact text shown."""
    tokens: int
    """Tokens this item costs in its layer (cached count plus join margin, its calls
    included)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls an assistant turn makes, shown with its text."""
    lines: int = 0
    """For a message of the authored layer: its lines; 0 elsewhere."""
    folded: int = 0
    """Of those, lines folded out of the prompt (`ctx_read` of the tag shows them)."""
    archived: int = 0
    """Lines of pasted output behind a locator."""
    deduped: int = 0
    """Lines left out because an older message of the layer shows them."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (what `ctxbus inspect --json` and the web page give)."""
        out: dict[str, Any] = {"tag": self.tag, "kind": self.kind, "tokens": self.tokens, "text": self.text}
        if self.lines:
            out |= {"lines": self.lines, "folded": self.folded, "archived": self.archived, "deduped": self.deduped}
        return out


@dataclass(frozen=True, slots=True)
class LayerView:
    """One layer of a composed prompt."""

    name: str
    """system, pinned, authored, summary, brief, rolling or input, in prompt order."""
    budget: int
    """The layer's cap for this compose (for system and input: their own size)."""
    tokens: int
    """What the layer costs, message overheads included."""
    items: tuple[LayerItem, ...]
    """Its contents in prompt order."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (what `ctxbus inspect --json` and the web page give)."""
        return {
            "layer": self.name,
            "budget": self.budget,
            "tokens": self.tokens,
            "items": [i.as_dict() for i in self.items],
        }


def authored_note(layers: Sequence[LayerView]) -> str:
    """One line on the authored layer of `layers` (a composition's): the user's share of
    the prompt and what of it is folded, archived or left out as repeats, so a user can
    see why something of theirs is where it is. Empty when the layer holds nothing."""
    authored = next((v for v in layers if v.name == "authored"), None)
    if authored is None or not authored.items:
        return ""
    total = sum(v.tokens for v in layers)
    items = authored.items
    parts = [f"{sum(1 for i in items if not (i.folded or i.archived or i.deduped))} verbatim"]
    for what, count in (
        ("lines folded", "folded"),
        ("pasted lines archived", "archived"),
        ("repeated lines left out", "deduped"),
    ):
        touched = [getattr(i, count) for i in items if getattr(i, count)]
        if touched:
            parts.append(f"{len(touched)} with {sum(touched):,} {what}")
    share = f" ({authored.tokens / total:.0%})" if total else ""
    return (
        f"what the user wrote, in their words: {authored.tokens:,} of {total:,} prompt tokens{share}, "
        f"share {authored.budget:,}; {len(items)} messages: {', '.join(parts)}"
        + ("; ctx_read of a tag shows a message whole" if len(parts) > 1 else "")
    )


@dataclass(frozen=True, slots=True)
class ComposeReport:
    """Token accounting and trims of one compose."""

    mode: str
    """The mode composed in."""
    budget: int
    """Prompt budget: window minus the output reserve."""
    total: int
    """Tokens of the composed prompt; never above `budget`."""
    layers: dict[str, int]
    """Tokens per layer: system, pinned, authored (what the user wrote, let go by
    rolling), summary, brief (which shares pinned's cap), rolling, input."""
    budgets: LayerBudgets
    """Caps of pinned, rolling, summary and authored (its share) for this compose."""
    trims: tuple[Trim, ...]
    """Everything trimmed, in order."""
    promoted: tuple[int, ...]
    """Tags whose constraints were found while summarizing and pinned."""
    merges: int
    """Summary entries merged to fit the summary cap."""
    pinned_overflow: int
    """Tokens hard constraints take beyond the pinned cap (borrowed from the others)."""
    hard_omitted: tuple[int, ...]
    """Source tags of hard constraints left out because they alone exceed the budget."""
    notes: tuple[str, ...]
    """Plain-language warnings (e.g. protected window over budget)."""
    rebuild: str | None = None
    """Why this compose rebuilt the head of the prompt, or None: it only appended to the
    previous compose's prompt, whose messages it repeats byte for byte (a provider's
    prompt cache serves them). Reasons: `first` (first compose since open), `mode` (a mode
    switch), `layers` (a restore), `drop`, `note` (a note on a message already shown),
    `brief` (the shared brief changed), `expired` (a ttl ran out), `cache_expired`
    (longer than `cache_lifetime` since the last compose) and `pressure` (past the
    high-water mark)."""
    authored: tuple[AuthoredItem, ...] = ()
    """The authored layer as shown: per message, what of it is verbatim, and how many of
    its lines are folded, archived (pasted output behind a locator) or left out as
    repeats."""

    @property
    def user_share(self) -> float:
        """Share of the prompt's tokens in the authored layer (the user's own words)."""
        return self.layers.get("authored", 0) / self.total if self.total else 0.0


class Composition:
    """The prompt of one compose: as a provider takes it (`to_openai`, `to_anthropic`),
    in a neutral form (`messages`), and layer by layer (`layers`), with its report.

    It is fixed when composed: changes to the context since (drops, new messages) show
    in the next compose, not in this one's renderings.
    """

    __slots__ = ("messages", "report", "cache_key", "_views", "_layers", "_prompt")

    def __init__(
        self,
        messages: list[dict[str, str]],
        report: ComposeReport,
        views: Callable[[], tuple[LayerView, ...]],
        prompt: Prompt,
        cache_key: str = "",
    ) -> None:
        self.messages = messages
        """The neutral form: `{role, content}` per message, as recorded (tool results also
        carry their `tool_call_id`; calls are not shown). Use a rendering to send it."""
        self.report = report
        """Accounting and trims."""
        self.cache_key = cache_key
        """The same for every compose of one agent (its domain, digested): pass it as
        OpenAI's `prompt_cache_key`, so its calls are routed to the same prompt cache."""
        self._views = views
        self._layers: tuple[LayerView, ...] | None = None
        self._prompt = prompt

    def to_openai(self) -> list[dict[str, Any]]:
        """The prompt as Chat Completions `messages`.

        Exactly one system message, first: the host's system prompt (or the mode's
        template). Then a user message: the pinned block, summary and brief. Assistant
        turns carry their `tool_calls` (id, function name, the arguments as recorded);
        each call's `tool` message, with its `tool_call_id`, follows the turn that made
        it. The list is new at each call; the messages in it are shared and read-only.
        """
        return to_openai(self._prompt)

    def to_anthropic(self, *, cache: bool = False) -> dict[str, Any]:
        """The prompt as the `system` and `messages` of a Messages API request.

        Turns alternate from a user turn; each turn's calls are `tool_use` blocks and
        their results `tool_result` blocks, first in the next user turn (consecutive
        results in one turn). Pass it on with ``client.messages.create(model=...,
        max_tokens=..., tools=..., **composition.to_anthropic())``. A prompt that ends
        with an assistant turn (nothing said since the model's last answer) is a prefill
        there, which some models refuse: compose once there is something to answer.

        With `cache`, `cache_control` breakpoints mark the end of the head, of the part the
        previous compose showed too, and of the prompt (three at most of the API's four),
        so the Messages API caches the prefix that the next call repeats.
        """
        return to_anthropic(self._prompt, cache=cache)

    @property
    def tail_length(self) -> int:
        """Messages of the tail (rolling layer, late pins, brief deltas) this prompt shows."""
        return len(self._prompt.rolling)

    @property
    def layers(self) -> tuple[LayerView, ...]:
        """Exactly what the model sees, layer by layer, in prompt order (built on first use)."""
        if self._layers is None:
            self._layers = self._views()
        return self._layers

    def __repr__(self) -> str:
        return f"<Composition {len(self.messages)} messages, {self.report.total}/{self.report.budget} tokens>"


@dataclass(frozen=True, slots=True)
class TailItem:
    """One message of the rendered rolling tail, for tail hygiene (nudges)."""

    tag: int
    id: str
    role: str
    kind: str
    tool_name: str | None
    tokens: int
    """Tokens it costs now (compact or placeholder size if archived or dropped), without a
    note the host appended to it (a Channel 1 reminder is not the agent's to release)."""
    state: str
    protected: bool
    """Inside the protected recent window."""
    unit: int
    """Tag of the tool call it belongs to (a call and its results share it); its own tag
    if it stands alone."""
    queued: bool = False
    """Dropped with `queue=True` and still shown as it was until the next rebuild (state
    and tokens are what is shown): count it in T, not in what can still be dropped."""


def log_trim(domain: str, trim: Trim) -> None:
    """Log one trim with structured extras."""
    logger.info(
        "context trim %s §%s§ %s -> %s (%s)",
        trim.id,
        trim.tag,
        trim.source,
        trim.destination,
        trim.reason,
        extra={
            "event": "trim",
            "domain": domain,
            "msg_id": trim.id,
            "tag": trim.tag,
            "reason": trim.reason,
            "source_layer": trim.source,
            "destination": trim.destination,
            "tokens": trim.tokens,
        },
    )
