"""Which reclaimable tool outputs a reminder names first.

A hint is only useful if the agent can act on it without second thoughts. Outputs of
miscellaneous tools (shell runs, builds, test logs) are usually spent once read; edit
confirmations and search hits come next; file reads and directory listings are the
likeliest to still be referenced, so they are suggested last. Within a category the
oldest output goes first.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "CTX_TOOL_PREFIX",
    "EDIT_SEARCH_TOOLS",
    "HINT_LIMIT",
    "HINT_MIN_OUTPUT_TOKENS",
    "READ_NAVIGATION_TOOLS",
    "ReclaimHint",
    "ToolCategory",
    "is_ctx_tool",
    "tool_category",
]

HINT_LIMIT = 4
"""A reminder names at most this many tags; more would read as a chore list."""
HINT_MIN_OUTPUT_TOKENS = 250
"""Smaller outputs are not worth a hint: dropping them barely moves U."""
CTX_TOOL_PREFIX = "ctx_"
"""Our own context tools; their outputs are never suggested for dropping."""

EDIT_SEARCH_TOOLS = frozenset(
    {
        "edit", "multiedit", "write", "patch", "apply_patch", "str_replace",
        "str_replace_editor", "replace", "create", "grep", "rg", "search", "codesearch",
        "websearch", "search_files", "find_references",
    }
)  # fmt: skip
READ_NAVIGATION_TOOLS = frozenset(
    {
        "read", "read_file", "view", "cat", "open", "ls", "list", "list_dir", "glob",
        "find", "tree", "navigate", "goto", "webfetch", "fetch", "lsp_hover",
        "lsp_definition",
    }
)  # fmt: skip

_NAMESPACE_SEPARATOR = re.compile(r"__|[./:]")


class ToolCategory(IntEnum):
    """Hint priority of a tool's output; lower values are suggested first."""

    MISC = 0
    EDIT_SEARCH = 1
    READ_NAVIGATION = 2


@dataclass(frozen=True, slots=True, order=True)
class ReclaimHint:
    """A tool output the reminder suggests dropping, shown as ``§N§ name``."""

    category: ToolCategory
    tag: int
    tool_name: str


@functools.lru_cache(maxsize=512)
def tool_category(tool_name: str | None) -> ToolCategory:
    """Category of a tool by its bare name; namespaced names (``mcp__fs__read``) use the last segment."""
    if not tool_name:
        return ToolCategory.MISC
    bare = _NAMESPACE_SEPARATOR.split(tool_name.lower())[-1]
    if bare in READ_NAVIGATION_TOOLS:
        return ToolCategory.READ_NAVIGATION
    if bare in EDIT_SEARCH_TOOLS:
        return ToolCategory.EDIT_SEARCH
    return ToolCategory.MISC


def is_ctx_tool(tool_name: str | None) -> bool:
    """Whether the tool is one of ours (ctx_reduce, ctx_search, ...)."""
    return tool_name is not None and tool_name.startswith(CTX_TOOL_PREFIX)
