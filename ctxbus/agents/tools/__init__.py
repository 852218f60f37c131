"""The built-in agent tools (`brief_get`, `brief_propose`, `ctx_search`, `ctx_read`,
`ctx_reduce`, `ctx_status`), one set of bodies for every front that offers them: the MCP
server (`agents.mcp`) and the agent loop (`agents.loop`). No front's SDK is imported here.
"""

from ctxbus.agents.tools._args import AS_SENT, BadArgument, shown
from ctxbus.agents.tools._builtin import (
    BUILTIN_TOOLS,
    PROPOSE_DEADLINE,
    TAIL_SHOWN,
    Archive,
    BuiltinTools,
    ToolFailure,
)
from ctxbus.agents.tools._ops import BadOp, op_menu, parse_op

__all__ = [
    "Archive",
    "AS_SENT",
    "BUILTIN_TOOLS",
    "PROPOSE_DEADLINE",
    "TAIL_SHOWN",
    "BadArgument",
    "BadOp",
    "BuiltinTools",
    "ToolFailure",
    "op_menu",
    "parse_op",
    "shown",
]
