"""The agent loop: a ctxbus agent driven by a real model over any OpenAI-compatible endpoint.

    async with Agent.open(client, config) as agent:
        tools = Toolbox()
        tools.add_builtins(BuiltinTools(agent))        # ctx_search, ctx_read, ctx_reduce, brief_*
        tools.add(my_function)                         # a typed Python function of yours
        model = ModelClient(base_url="http://127.0.0.1:8000/v1", model="qwen3-8b")
        stats = await AgentLoop(agent, model, tools).run("Fix the flaky test.")

`ctxbus swarm run` runs N of these as processes on one task (`agents.loop._worker`).
"""

from ctxbus.agents.loop._bash import BASH_OUTPUT_CAP, BASH_TIMEOUT, BashTool
from ctxbus.agents.loop._loop import AgentLoop, LoopConfig, LoopStats, LoopStop, Turn, TurnRecord
from ctxbus.agents.loop._model import (
    API_KEY_VARIABLES,
    ModelClient,
    ModelError,
    ModelRefused,
    ModelUnavailable,
    RetryPolicy,
    TurnUsage,
    api_key_from_env,
)
from ctxbus.agents.loop._prompt import loop_system_prompt
from ctxbus.agents.loop._tools import LOOP_BUILTINS, Tool, Toolbox, ToolError
from ctxbus.agents.tools import BuiltinTools

__all__ = [
    "API_KEY_VARIABLES",
    "BASH_OUTPUT_CAP",
    "BASH_TIMEOUT",
    "LOOP_BUILTINS",
    "AgentLoop",
    "BashTool",
    "BuiltinTools",
    "LoopConfig",
    "LoopStats",
    "LoopStop",
    "ModelClient",
    "ModelError",
    "ModelRefused",
    "ModelUnavailable",
    "RetryPolicy",
    "Tool",
    "ToolError",
    "Toolbox",
    "Turn",
    "TurnRecord",
    "TurnUsage",
    "api_key_from_env",
    "loop_system_prompt",
]
