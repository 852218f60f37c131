"""Claude Code hooks: the user's rules and the shared brief kept in the host's model.

An MCP server sees only calls to its own tools. Claude Code's hooks see the rest: each
prompt the user submits, each tool call and its result, the moment before the host
compacts its conversation and the moment a session starts again after it. `ctxbus hook
claude-code` answers one such event (JSON on stdin, JSON on stdout):

- `SessionStart` (startup, resume, clear, compact): the task's pinned rules, verbatim,
  and the current brief go into the model's context; after a compaction this puts back
  every rule the user stated, as ctxbus pinned it.
- `UserPromptSubmit`: the prompt is recorded in the agent's local context, where
  constraints are detected and pinned; the brief's changes since the model last saw it
  are added.
- `PostToolUse`: the call and its result are recorded (large output archived); the
  tail is measured from the host's own transcript, a Channel 1 reminder is added when
  due, and Channel 2 (at most once per cycle, through the lease on the bus) asks the
  model through `decision: "block"` and its `reason`.
- `PreCompact`: the store is brought up to date (prompts given before the hooks were
  installed are taken from the transcript) before the host compacts.

Any failure is logged and answered with `{}`; NATS is optional (the brief parts are
left out without it). See `_identity` for which agent an event belongs to, and
`_stores` for where the hooks keep what they record (`AGENT.claude-code.db`, beside the
agent's store) and how the agent's MCP server reads it (`HooksArchive`).
"""

from ctxbus.agents.hooks._events import (
    EVENTS,
    HookAnswer,
    HookInput,
    PostToolUse,
    PreCompact,
    SessionStart,
    SpecificOutput,
    UnknownEvent,
    UserPromptSubmit,
    parse_event,
)
from ctxbus.agents.hooks._identity import hook_agent, hook_domain
from ctxbus.agents.hooks._install import HOOK_EVENTS, HOOK_TIMEOUT, install_hooks
from ctxbus.agents.hooks._run import EMPTY_ANSWER, run_claude_code
from ctxbus.agents.hooks._session import CLAUDE_WINDOW, HookConfig, answer_event, pinned_rules
from ctxbus.agents.hooks._stores import HooksArchive, hooks_store, set_aside
from ctxbus.agents.hooks._transcript import HostTail, read_tail, text_of

__all__ = [
    "CLAUDE_WINDOW",
    "EMPTY_ANSWER",
    "EVENTS",
    "HOOK_EVENTS",
    "HOOK_TIMEOUT",
    "HookAnswer",
    "HookConfig",
    "HookInput",
    "HooksArchive",
    "HostTail",
    "PostToolUse",
    "PreCompact",
    "SessionStart",
    "SpecificOutput",
    "UnknownEvent",
    "UserPromptSubmit",
    "answer_event",
    "hook_agent",
    "hook_domain",
    "hooks_store",
    "install_hooks",
    "parse_event",
    "pinned_rules",
    "read_tail",
    "run_claude_code",
    "set_aside",
    "text_of",
]
