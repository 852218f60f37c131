"""The MCP front: any MCP-capable coding agent joins a ctxbus task as one `Agent`.

`ctxbus mcp --domain user/session/task --agent NAME` serves, over stdio, the tools
`brief_get`, `brief_propose`, `ctx_search`, `ctx_read`, `ctx_reduce`, `ctx_status`
and the brief as the resource `ctxbus://brief/user/session/task`. Several servers on
one domain are several Agents on the bus, so they share one brief like any others.

How the agent's context learns about the session, and where that stops:

- An MCP server sees only its own tools' traffic. Each call of ours is recorded in
  the agent's `LocalContext` as a tool call plus its result, and the result passes
  through `Agent.tool_result`, so Channel 1 reminders are appended when the tail
  measured from that traffic warrants one. U and T therefore count what the host's
  model read *from us*, not its whole transcript: the host's own tools, its files
  and the user's messages are invisible, so nudges come late or not at all for a
  session that mostly uses other tools.
- No user turns are seen, so Channel 1's calm re-fire (which needs new user turns)
  never happens; a reminder fires when the band rises.
- The host keeps tool results whole, so the context shows nothing in compact form
  (`host_context`), and each call first composes the context for a `--window`-token
  model: that applies drops queued by `ctx_reduce` and stands in for the host's own
  trimming, which we cannot observe.
- `ctx_reduce` releases results from ctxbus's model of the conversation (U falls,
  reminders stop); it cannot delete text from the host's transcript. Every result
  starts with its tag (`§12§`), the handle `ctx_reduce` and `ctx_read` take.
- Channel 2 cannot add a user message to a transcript the host owns: the message is
  appended to the tool result in progress instead (`McpHost`), still at most once per
  cycle across processes thanks to the lease.
- Reading the brief resource is the host's action, not a model tool call, so it is
  not recorded.
"""

from ctxbus.agents.mcp._calls import ToolCalls, ToolFailure
from ctxbus.agents.mcp._host import McpHost
from ctxbus.agents.mcp._serve import host_context, serve_stdio
from ctxbus.agents.mcp._server import brief_uri, build_server
from ctxbus.agents.mcp._tools import MCP_PROPOSE_DEADLINE, AgentTools
from ctxbus.agents.tools import BadOp, op_menu, parse_op
from ctxbus.schemas import AGENT_OPS  # re-exported: the ops `brief_propose` takes

__all__ = [
    "AGENT_OPS",
    "AgentTools",
    "BadOp",
    "MCP_PROPOSE_DEADLINE",
    "McpHost",
    "ToolCalls",
    "ToolFailure",
    "brief_uri",
    "build_server",
    "host_context",
    "op_menu",
    "parse_op",
    "serve_stdio",
]
