"""Tail hygiene, nudge bands, Channel 1 reminders and Channel 2 delivery.

The agent decides what to forget; this package tells it when and how much:

- `HygieneWalker` measures the rendered tail (`TailPart`s and `TailTag`s from the
  context engine) as {U, T}: reclaimable tokens out of eligible tokens.
- `band_for` turns {U, T} into a `Band`; `TailMeasure.channel2` says whether the
  Channel 2 predicate holds. The rules' absolute figures fit the model's window
  (`NudgeFloors.for_window`: magic-context's at 200k and above, scaled below).
- `Channel1` appends a `Reminder` to tool outputs, with its state persisted through a
  `NudgeStateStore` (`SqliteNudgeStateStore` in the agent's SQLite file).
- `plan_drops` turns a ctx_reduce ``drop="3-5,9"`` request into a `DropPlan`.
- `Channel2` asks for a prune in a `SyntheticMessage` once per tail cycle, delivered
  through a `HostAdapter` at most once across processes by a `Channel2Lease` on the bus.
"""

from ctxbus.agents.nudges._bands import (
    CHANNEL2_MIN_RECLAIMABLE_TOKENS,
    CHANNEL2_SEVERITY,
    DEFAULT_FLOORS,
    FIRM_SEVERITY,
    GENTLE_SEVERITY,
    MAGIC_CONTEXT_WINDOW,
    MIN_RECLAIMABLE_TOKENS,
    MIN_TAIL_TOKENS,
    REFIRE_GROWTH_RATIO,
    REFIRE_MIN_GROWTH_TOKENS,
    URGENT_SEVERITY,
    Band,
    NudgeFloors,
    band_for,
    channel1_band,
    channel2_armed,
    refire_growth,
    round_half_up,
    severity,
)
from ctxbus.agents.nudges._channel1 import (
    REFIRE_MIN_USER_TURNS,
    Channel1,
    Channel1Decision,
    Channel1Outcome,
    Verdict,
    decide,
    start_grace,
)
from ctxbus.agents.nudges._channel2 import (
    DIRECTIVE_PREFIX,
    Channel2,
    HostAdapter,
    SyntheticMessage,
    advance_cycle,
    channel2_text,
    directive_id,
)
from ctxbus.agents.nudges._channel2_lease import (
    DEFAULT_CLAIM_TTL,
    DEFAULT_DELIVERED_TTL,
    SEND_WINDOW,
    Channel2Lease,
    Channel2LeaseConfig,
    Delivery,
    DeliveryOutcome,
    DirectiveState,
    DirectiveView,
)
from ctxbus.agents.nudges._hints import HINT_LIMIT, HINT_MIN_OUTPUT_TOKENS, ReclaimHint, ToolCategory, tool_category
from ctxbus.agents.nudges._hygiene import HygieneWalker, TailMeasure
from ctxbus.agents.nudges._markers import (
    REMINDER_CLOSE,
    REMINDER_OPEN,
    drop_placeholder,
    is_drop_placeholder,
    strip_reminder_spans,
    wrap_reminder,
)
from ctxbus.agents.nudges._protection import (
    REDUCE_TOOL_NAME,
    newest_reduce_tags,
    protected_floor,
    protection_window,
)
from ctxbus.agents.nudges._reduce import (
    DropPlan,
    DropRangeTooLarge,
    DropSpecError,
    ReversedDropRange,
    UnknownDropTags,
    parse_drop_spec,
    plan_drops,
)
from ctxbus.agents.nudges._reminders import Reminder, approx_tokens
from ctxbus.agents.nudges._state import (
    Channel1Level,
    Channel1State,
    Channel2State,
    MemoryNudgeStateStore,
    NudgeState,
    NudgeStateCorrupt,
    NudgeStateStore,
    PostReduceGrace,
    SqliteNudgeStateStore,
)
from ctxbus.agents.nudges._tail import PartKind, TagKind, TagState, TailPart, TailTag, TokenCounter

__all__ = [
    "CHANNEL2_MIN_RECLAIMABLE_TOKENS",
    "CHANNEL2_SEVERITY",
    "DEFAULT_CLAIM_TTL",
    "DEFAULT_DELIVERED_TTL",
    "DEFAULT_FLOORS",
    "DIRECTIVE_PREFIX",
    "FIRM_SEVERITY",
    "GENTLE_SEVERITY",
    "HINT_LIMIT",
    "HINT_MIN_OUTPUT_TOKENS",
    "MAGIC_CONTEXT_WINDOW",
    "MIN_RECLAIMABLE_TOKENS",
    "MIN_TAIL_TOKENS",
    "REDUCE_TOOL_NAME",
    "REFIRE_GROWTH_RATIO",
    "REFIRE_MIN_GROWTH_TOKENS",
    "REFIRE_MIN_USER_TURNS",
    "REMINDER_CLOSE",
    "REMINDER_OPEN",
    "SEND_WINDOW",
    "URGENT_SEVERITY",
    "Band",
    "Channel1",
    "Channel1Decision",
    "Channel1Level",
    "Channel1Outcome",
    "Channel1State",
    "Channel2",
    "Channel2Lease",
    "Channel2LeaseConfig",
    "Channel2State",
    "Delivery",
    "DeliveryOutcome",
    "DirectiveState",
    "DirectiveView",
    "DropPlan",
    "DropRangeTooLarge",
    "DropSpecError",
    "HostAdapter",
    "HygieneWalker",
    "MemoryNudgeStateStore",
    "NudgeFloors",
    "NudgeState",
    "NudgeStateCorrupt",
    "NudgeStateStore",
    "PartKind",
    "PostReduceGrace",
    "ReclaimHint",
    "Reminder",
    "ReversedDropRange",
    "SqliteNudgeStateStore",
    "SyntheticMessage",
    "TagKind",
    "TagState",
    "TailMeasure",
    "TailPart",
    "TailTag",
    "TokenCounter",
    "ToolCategory",
    "UnknownDropTags",
    "Verdict",
    "advance_cycle",
    "approx_tokens",
    "band_for",
    "channel1_band",
    "channel2_armed",
    "channel2_text",
    "decide",
    "directive_id",
    "drop_placeholder",
    "is_drop_placeholder",
    "newest_reduce_tags",
    "parse_drop_spec",
    "plan_drops",
    "protected_floor",
    "protection_window",
    "refire_growth",
    "round_half_up",
    "severity",
    "start_grace",
    "strip_reminder_spans",
    "tool_category",
    "wrap_reminder",
]
