"""Benchmark of prompt-cache stability (a script, not a test).

Replays the 34 sessions of `../shared/anchors/transcripts` at windows of 8k, 16k and 32k
tokens, composing before every model call the way `ctxbus replay` does (before an
assistant message that follows anything but another assistant message), and measures for
each call the part of the prompt a provider's prompt cache would serve: the tokens of
the longest run of leading whole messages identical to the previous call's (role,
content, tool call id, calls) over the prompt's tokens. Per system and window it prints:

- cached share (token-weighted over all calls) and prefix rewrites per call (calls whose
  prompt does not start with the whole previous prompt);
- mean prompt tokens per call;
- the estimated input cost under named price presets (uncached tokens are written at
  `write`, cached ones read at `read`, as multiples of the base input price), relative
  to the full, untrimmed history's cost under the same preset;
- for ctxbus: calls over budget and broken tool pairs in the OpenAI rendering.

The same message stream and call points go, in the same run, through the peers:
langchain-core's `trim_messages` (last strategy, starting on a human or ai message,
system kept), autogen-core's `TokenLimitedChatCompletionContext` (system message kept
outside it, as autogen's agents do), a SWE-agent-style history (tool outputs before the
last 5 replaced by "Old environment output: (N lines omitted)", then, when still over
the budget, the oldest messages after the task given up until it fits), and the full
history. Every system is given the same prompt budget (window minus ctxbus's output
reserve) and every prompt is counted the same way (cl100k_base, 4 tokens a message).
Last, the constraint retention figures of `bench/context.py` (constraints kept at the
final message), so a gain in cache cannot hide a loss in memory.

Peers need the `bench` extra: ``pip install -e '.[bench]'``.

    .venv/bin/python bench/cache.py [--quick] [--anchors DIR] [--windows 16000 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ctxbus.agents.context import PRICE_PRESETS, CacheMeter, ContextConfig, LocalContext, Tokenizer  # noqa: E402
from ctxbus.agents.runtime._transcript import Transcript, read_transcript  # noqa: E402

WINDOWS = (8_000, 16_000, 32_000)
OVERHEAD = 4
PRESETS = PRICE_PRESETS

Key = tuple[Any, ...]
"""One message as the cache compares it: role, content, tool call id, calls."""


# -- counting ----------------------------------------------------------------------------


class Counter:
    """Token counts of texts, cached: every system is counted by the same rule."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._count = tokenizer.count
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            n = self._cache[text] = self._count(text)
        return n

    def key_tokens(self, key: Key) -> int:
        _, content, _, calls = key
        return OVERHEAD + self(content) + sum(self(name) + self(args) for _, name, args in calls)


@dataclass
class Tally:
    """Cache figures of one system at one window, over all sessions (a `CacheMeter` per
    session, the same one `ctxbus replay` uses)."""

    count: Counter
    meters: list[CacheMeter] = field(default_factory=list)
    over: int = 0
    broken: int = 0
    compose_ms: list[float] = field(default_factory=list)

    def session(self) -> CacheMeter:
        meter = CacheMeter(self.count, OVERHEAD)
        self.meters.append(meter)
        return meter

    def total(self, name: str) -> int:
        """A `CacheMeter` count (calls, prompt_tokens, cached_tokens, rewrites) over all sessions."""
        return sum(getattr(m, name) for m in self.meters)

    def cost(self, preset: str) -> float:
        return sum(m.cost(preset) for m in self.meters)


# -- the sessions --------------------------------------------------------------------------


def load(anchors: Path, quick: bool) -> list[Transcript]:
    paths = sorted((anchors / "transcripts").glob("*/*.jsonl"))
    if quick:
        by_system: dict[str, list[Path]] = {}
        for p in paths:
            by_system.setdefault(p.parent.name, []).append(p)
        paths = [p for group in by_system.values() for p in group[:2]]
    return [read_transcript(p) for p in paths]


def calls_of(t: Transcript) -> list[int]:
    """Indexes of the messages before which a model call is made (as `ctxbus replay`)."""
    out, previous = [], ""
    for i, m in enumerate(t.messages):
        if m.role == "assistant" and previous not in ("", "assistant"):
            out.append(i)
        previous = m.role
    return out


def neutral(t: Transcript) -> list[Key]:
    """The messages as a full-history prompt would send them, one key each."""
    keys: list[Key] = []
    last_call = ""
    for m in t.messages:
        calls = tuple((c.id, c.name, c.arguments) for c in m.tool_calls)
        if not calls and m.role == "assistant" and m.tool_name:
            calls = tuple((cid, m.tool_name, "") for cid in (m.call_id or "").split(",") if cid)
        if calls:
            last_call = calls[-1][0]
        call_id = (m.call_id or last_call) if m.role == "tool" else None
        keys.append((m.role, m.content, call_id, calls))
    return keys


# -- the systems ---------------------------------------------------------------------------

System = Callable[[Transcript, list[Key], int, Counter, Tally, Path], None]


def run_ctxbus(t: Transcript, keys: list[Key], window: int, count: Counter, tally: Tally, store: Path) -> None:
    config = ContextConfig(window=window, system_prompt=t.system_prompt)
    at = set(calls_of(t))
    meter = tally.session()
    with LocalContext(store, "bench/cache/s", config=config, autoflush=False) as ctx:
        clock = 0.0
        for i, m in enumerate(t.messages):
            if i in at:
                start = time.perf_counter()
                composition = ctx.compose()
                tally.compose_ms.append((time.perf_counter() - start) * 1000)
                rendered = composition.to_openai()
                meter.call(rendered)
                tally.over += composition.report.total > composition.report.budget
                tally.broken += _broken_pairs(rendered)
                ctx.flush()
            clock += 1.0
            ctx.add(**m.add_arguments(), created_at=clock)


def _broken_pairs(rendered: Sequence[dict[str, Any]]) -> int:
    """Tool messages answering no call of the turn before them, and calls left unanswered."""
    broken = 0
    waiting: set[str] = set()
    for msg in rendered:
        if msg["role"] == "tool":
            if msg.get("tool_call_id") in waiting:
                waiting.discard(msg["tool_call_id"])
            else:
                broken += 1
            continue
        broken += len(waiting)
        waiting = {c["id"] for c in msg.get("tool_calls") or ()}
    return broken + len(waiting)


def run_full(t: Transcript, keys: list[Key], window: int, count: Counter, tally: Tally, store: Path) -> None:
    system = [("system", t.system_prompt, None, ())] if t.system_prompt else []
    meter = tally.session()
    for i in calls_of(t):
        now = system + keys[:i]
        meter.call_keys(now)


def run_swe_agent(t: Transcript, keys: list[Key], window: int, count: Counter, tally: Tally, store: Path) -> None:
    """Last-5 observation masking (SWE-agent's `LastNObservations`), then, over the budget,
    the oldest messages after the task given up (a tool result never left first)."""
    budget = window - ContextConfig().reserve_output
    system = [("system", t.system_prompt, None, ())] if t.system_prompt else []
    masked: dict[int, Key] = {}
    meter = tally.session()
    for i in calls_of(t):
        history = keys[:i]
        observations = [j for j, k in enumerate(history) if k[0] == "tool"]
        for j in observations[:-5]:
            if j not in masked:
                role, content, cid, calls = history[j]
                lines = content.count("\n") + 1
                masked[j] = (role, f"Old environment output: ({lines} lines omitted)", cid, calls)
        history = [masked.get(j, k) for j, k in enumerate(history)]
        first_user = next((j for j, k in enumerate(history) if k[0] == "user"), 0)
        head, rest = system + history[: first_user + 1], history[first_user + 1 :]
        total = sum(count.key_tokens(k) for k in head + rest)
        cut = 0
        while total > budget and cut < len(rest):
            total -= count.key_tokens(rest[cut])
            cut += 1
            while cut < len(rest) and rest[cut][0] == "tool":
                total -= count.key_tokens(rest[cut])
                cut += 1
        now = head + rest[cut:]
        meter.call_keys(now)


def run_langchain(t: Transcript, keys: list[Key], window: int, count: Counter, tally: Tally, store: Path) -> None:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

    budget = window - ContextConfig().reserve_output
    objects: list[BaseMessage] = []
    key_of: dict[int, Key] = {}
    for role, content, cid, calls in keys:
        message: BaseMessage
        if role == "user":
            message = HumanMessage(content)
        elif role == "system":
            message = SystemMessage(content)
        elif role == "tool":
            message = ToolMessage(content, tool_call_id=cid or "none")
        else:
            message = AIMessage(
                content, tool_calls=[{"id": c, "name": n, "args": {"arguments": a}} for c, n, a in calls]
            )
        key_of[id(message)] = (role, content, cid, calls)
        objects.append(message)
    system: list[BaseMessage] = [SystemMessage(t.system_prompt)] if t.system_prompt else []
    for m in system:
        key_of[id(m)] = ("system", t.system_prompt, None, ())
    tokens = {ident: count.key_tokens(k) for ident, k in key_of.items()}

    def counter(messages: list[BaseMessage]) -> int:
        return sum([tokens[id(m)] for m in messages])

    meter = tally.session()
    for i in calls_of(t):
        trimmed = trim_messages(
            system + objects[:i],
            max_tokens=budget,
            token_counter=counter,
            strategy="last",
            start_on=("human", "ai"),
            include_system=True,
            allow_partial=False,
        )
        now = [key_of[id(m)] for m in trimmed]
        meter.call_keys(now)


def run_autogen(t: Transcript, keys: list[Key], window: int, count: Counter, tally: Tally, store: Path) -> None:
    from autogen_core import FunctionCall
    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from autogen_core.models import (
        AssistantMessage,
        FunctionExecutionResult,
        FunctionExecutionResultMessage,
        LLMMessage,
        SystemMessage,
        UserMessage,
    )

    budget = window - ContextConfig().reserve_output
    key_of: dict[int, Key] = {}
    tokens: dict[int, int] = {}
    client = _CountingClient(tokens)
    system_tokens = count.key_tokens(("system", t.system_prompt, None, ())) if t.system_prompt else 0
    context = TokenLimitedChatCompletionContext(client, token_limit=max(1, budget - system_tokens))  # type: ignore[arg-type]
    system = [("system", t.system_prompt, None, ())] if t.system_prompt else []
    at = calls_of(t)
    meter = tally.session()
    added = 0
    for i in at:
        for role, content, cid, calls in keys[added:i]:
            message: LLMMessage
            if role in ("user", "system"):
                message = (
                    UserMessage(content=content, source="user") if role == "user" else SystemMessage(content=content)
                )
            elif role == "tool":
                result = FunctionExecutionResult(content=content, name="tool", call_id=cid or "none", is_error=False)
                message = FunctionExecutionResultMessage(content=[result])
            elif calls:
                message = AssistantMessage(
                    content=[FunctionCall(id=c, arguments=a, name=n) for c, n, a in calls],
                    thought=content or None,
                    source="assistant",
                )
            else:
                message = AssistantMessage(content=content, source="assistant")
            key_of[id(message)] = (role, content, cid, calls)
            tokens[id(message)] = count.key_tokens((role, content, cid, calls))
            _sync(context.add_message(message))
        added = i
        kept = _sync(context.get_messages())
        now = system + [key_of[id(m)] for m in kept]
        meter.call_keys(now)


def _sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (autogen's context methods only compute)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended")


class _CountingClient:
    """What `TokenLimitedChatCompletionContext` asks of a model client: a token count
    (the same per-message count as every other system here). No model is called."""

    def __init__(self, tokens: dict[int, int]) -> None:
        self._tokens = tokens

    def count_tokens(self, messages: Iterable[object], *, tools: object = ()) -> int:
        return sum([self._tokens[id(m)] for m in messages])

    def remaining_tokens(self, messages: Iterable[object], *, tools: object = ()) -> int:
        raise NotImplementedError("a token_limit is always given")


SYSTEMS: dict[str, System] = {
    "ctxbus": run_ctxbus,
    "langchain trim_messages": run_langchain,
    "autogen TokenLimited": run_autogen,
    "SWE-agent last-5 mask": run_swe_agent,
    "full history": run_full,
}


def retention(anchors: Path, quick: bool) -> list[str]:
    """Constraints kept at the final message, as `bench/context.py` measures them."""
    import context as context_bench  # bench/context.py

    sessions = context_bench.load_sessions(anchors, quick)
    tokenizer = Tokenizer.load()
    lines = []
    with tempfile.TemporaryDirectory(prefix="cachebench-ret-") as tmp:
        for window in WINDOWS:
            r = context_bench.replay(sessions, window, Path(tmp), tokenizer)
            lines.append(f"  {window:>7,}  constraints kept {r['kept']:.0f} / {r['total']:.0f}")
    return lines


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 sessions per agent system")
    parser.add_argument("--windows", type=int, nargs="*", default=list(WINDOWS))
    parser.add_argument("--no-retention", action="store_true", help="skip bench/context.py's retention replay")
    parser.add_argument(
        "--anchors",
        type=Path,
        default=Path(os.environ.get("CTXBUS_ANCHORS", ROOT.parent / "shared" / "anchors")),
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    transcripts = load(args.anchors, args.quick)
    tokenizer = Tokenizer.load()
    count = Counter(tokenizer)
    n_calls = sum(len(calls_of(t)) for t in transcripts)
    print(f"ctxbus cache bench — {len(transcripts)} sessions, {n_calls:,} model calls each run")
    presets = ", ".join(f"{n} write {w} / read {r}" for n, (w, r) in PRESETS.items())
    print(f"price presets (x base input price): {presets}; cost relative to the full history's\n")
    keys = [neutral(t) for t in transcripts]
    with tempfile.TemporaryDirectory(prefix="cachebench-") as tmp:
        for window in args.windows:
            print(
                f"window {window:,} (prompt budget {window - ContextConfig().reserve_output:,})\n"
                f"  {'system':<24} {'cached':>7} {'rewrites/call':>13} {'prompt tok':>10} "
                f"{'anthropic':>9} {'openai':>7} {'over budget':>11} {'broken pairs':>12}"
            )
            tallies: dict[str, Tally] = {}
            for name, run in SYSTEMS.items():
                tally = tallies[name] = Tally(count)
                for n, (t, k) in enumerate(zip(transcripts, keys, strict=True)):
                    run(t, k, window, count, tally, Path(tmp) / f"{window}-{n}.db")
            full = tallies["full history"]
            for name, tally in tallies.items():
                rel = {p: tally.cost(p) / full.cost(p) for p in PRESETS}
                calls, prompt, cached = (tally.total(n) for n in ("calls", "prompt_tokens", "cached_tokens"))
                extra = f"{tally.over:>11} {tally.broken:>12}" if name == "ctxbus" else f"{'':>11} {'':>12}"
                print(
                    f"  {name:<24} {cached / prompt:>7.1%} {tally.total('rewrites') / calls:>13.2f} "
                    f"{prompt / calls:>10,.0f} {rel['anthropic']:>8.2f}x {rel['openai']:>6.2f}x {extra}"
                )
            ours = tallies["ctxbus"]
            peers = [n for n in tallies if n not in ("ctxbus", "full history")]
            best = min(peers, key=lambda n: tallies[n].cost("anthropic"))
            print(
                f"  ctxbus vs best peer ({best}): anthropic {ours.cost('anthropic') / tallies[best].cost('anthropic'):.2f}x, "
                f"openai {ours.cost('openai') / min(tallies[n].cost('openai') for n in peers):.2f}x; "
                f"compose p50 {pct(ours.compose_ms, 0.5):.2f} ms p95 {pct(ours.compose_ms, 0.95):.2f} ms\n"
            )
    if not args.no_retention:
        print("retention (bench/context.py's replay: constraints kept at the final message)")
        for line in retention(args.anchors, args.quick):
            print(line)
    print(f"\ntotal bench time {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
