"""The local three-layer context engine: pure, synchronous, its only I/O is SQLite.

`LocalContext` keeps one agent's history in layers under a token budget (pinned, the
user's own words, rolling, summary), archives large tool output for `read`/`search`, and persists
everything in the agent's SQLite file. Its `compose()` gives a `Composition`, which
renders the prompt for a provider: `to_openai()` (Chat Completions) or `to_anthropic()`
(Messages API), each call of each turn paired with its result. See
docs/ARCHITECTURE.md section 3.
"""

from ctxbus.agents.context._archive import SearchHit
from ctxbus.agents.context._authored import AuthoredItem
from ctxbus.agents.context._config import ContextConfig, LayerBudgets
from ctxbus.agents.context._cost import PRICE_PRESETS, CacheMeter, PricePreset, PromptCache
from ctxbus.agents.context._engine import LocalContext
from ctxbus.agents.context._errors import (
    ContextClosed,
    DomainMismatch,
    InputTooLarge,
    InvalidConfig,
    InvalidMessage,
    LinesPastTheEnd,
    StoreError,
    UnknownMode,
    UnknownReference,
)
from ctxbus.agents.context._modes import BUILTIN_MODES, ModeDescriptor
from ctxbus.agents.context._records import drop_placeholder
from ctxbus.agents.context._report import (
    ComposeReport,
    Composition,
    LayerItem,
    LayerView,
    TailItem,
    Trim,
    TrimReason,
    authored_note,
)
from ctxbus.agents.context._store import AgentStore, check_store_file, store_error
from ctxbus.agents.context._summary import ExtractiveSummarizer, Summarizer
from ctxbus.agents.context._tokens import CLAUDE_SPLIT_PATTERN, DEFAULT_ENCODING, EncodingNotFound, Tokenizer

__all__ = [
    "AgentStore",
    "AuthoredItem",
    "BUILTIN_MODES",
    "CacheMeter",
    "CLAUDE_SPLIT_PATTERN",
    "ComposeReport",
    "Composition",
    "ContextClosed",
    "ContextConfig",
    "DEFAULT_ENCODING",
    "DomainMismatch",
    "EncodingNotFound",
    "ExtractiveSummarizer",
    "InputTooLarge",
    "InvalidConfig",
    "InvalidMessage",
    "LayerBudgets",
    "LayerItem",
    "LayerView",
    "authored_note",
    "LinesPastTheEnd",
    "LocalContext",
    "ModeDescriptor",
    "PRICE_PRESETS",
    "PromptCache",
    "PricePreset",
    "SearchHit",
    "StoreError",
    "Summarizer",
    "TailItem",
    "Tokenizer",
    "Trim",
    "TrimReason",
    "UnknownMode",
    "UnknownReference",
    "check_store_file",
    "drop_placeholder",
    "store_error",
]
