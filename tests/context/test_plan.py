"""Compose is plan -> apply -> render (docs/ARCHITECTURE.md section 3): the plan reads the
state and changes nothing, `ContextState.apply` writes what it decided, the render reads
the plan. Checked on a history whose next compose decides every kind of change: messages
evicted to the summary and gone, a pin demoted, summary entries merged, constraints
promoted, queued drops applied, ttls that no longer matter, a rebuilt head."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxbus.agents.context import ContextConfig, ExtractiveSummarizer, LocalContext, Tokenizer
from ctxbus.agents.context._compose import plan
from ctxbus.agents.context._render import Plan, render
from ctxbus.schemas import Message
from tests.context.conftest import Clock, MakeContext

SETTINGS = {"reserve_system": 200, "reserve_output": 200, "protected_recent": 2}


def _history(make_ctx: MakeContext, name: str, **kwargs: Any) -> tuple[LocalContext, Clock]:
    """A context (with its own clock) whose next compose rebuilds and changes every layer
    (see the module doc)."""
    clock = Clock()
    ctx = make_ctx(name, window=1_600, settings=SETTINGS, clock=clock, **kwargs)
    ctx.add("user", "Goal: tidy the repo and keep the build green.")
    for i in range(24):
        ctx.add("assistant", f"thinking {i}: " + "hmm " * 40, kind="reasoning", ttl=1_000)
        ctx.add("user", f"step {i}: look again")
    ctx.add("assistant", "brb", importance=0.1, ttl=5)
    ctx.add("user", "ok")
    ctx.compose()  # evicts, ttl'd messages among them: their ttl no longer matters after
    ctx.drop([item.tag for item in ctx.tail() if not item.protected][-2:], queue=True)
    for n in range(3):
        ctx.add(
            "assistant",
            f"Plan part {n}: I report what I did at each step, with the commands I ran. " * 3,
            importance=0.9,
        )
    for i in range(10):
        shard = f"We agreed with the user: the cache key for shard {i} must never include the tenant id. "
        ctx.add("assistant", shard + "The shard layout is described in docs/shards.md. " * 3, kind="conclusion")
    for i in range(4):
        ctx.add("user", f"next step {i}: " + "please look at the failing test output again " * 6)
    clock.now += 10  # "brb" expires
    return ctx, clock


def _plan(ctx: LocalContext, user_input: str = "", brief: str | None = None) -> Plan:
    """What `ctx.compose(user_input, brief=brief)` would plan now: the engine's own
    arguments, on the state classified as compose leaves it before it plans."""
    ctx._state.classify_pending()
    return plan(
        ctx._state,
        ctx.summarizer,
        ctx.mode,
        user_input,
        brief,
        now=ctx._clock(),
        domain=str(ctx.domain),
        count=ctx.tokenizer.count,
    )


def _state(ctx: LocalContext) -> Any:
    """Everything `ContextState` holds that a compose could change, as plain values."""
    st = ctx._state
    return (
        [(e.tag, e.layer, e.pin, e.state, e.shown, e.shown_tokens) for e in st.entries],
        [e.tag for e in st.rolling],
        [e.tag for e in st.pinned],
        sorted((r.source_tag, r.text, r.tokens) for r in st.records.values()),
        sorted(st.record_keys.items()),
        [(s.id, s.first_tag, s.last_tag, s.text, s.tokens) for s in st.summaries],
        (st.summary_tokens, st.next_summary_id, sorted(st.ttl_tags)),
        repr(st.head),
        (sorted(st.dirty), sorted(st.summary_changes), st.records_dirty, [e.tag for e in st.new]),
    )


def _rows(path: Path) -> dict[str, list[str]]:
    """Every row of the store, as a second reader of the file sees it."""
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: sorted(map(repr, conn.execute(f'SELECT * FROM "{name}"'))) for name in sorted(names)}


def test_the_history_plans_every_kind_of_change(make_ctx: MakeContext) -> None:
    """The precondition of the tests below: their plan decides each kind of change."""
    ctx, _ = _history(make_ctx, "a.db")
    before = ctx._state
    decided = _plan(ctx)
    assert decided.rebuild is not None
    assert {"summary", "gone"} <= set(decided.moves.values()), "evicted: summarized, and gone for good"
    assert any(t.source == "pinned" and t.destination == "rolling" for t in decided.trims), "a pin demoted"
    assert decided.merges and decided.promoted, "summary entries merged, constraints promoted"
    assert before.head.queued and not decided.head.queued, "queued drops applied"
    assert decided.ttl_done, "ttls that no longer matter"
    assert list(decided.summaries) != before.summaries and dict(decided.records) != before.records


def test_planning_twice_gives_equal_plans_and_changes_neither_state_nor_store(
    make_ctx: MakeContext, tmp_path: Path
) -> None:
    ctx, _ = _history(make_ctx, "a.db")
    ctx.flush()
    state, rows = _state(ctx), _rows(tmp_path / "a.db")
    first = _plan(ctx)
    assert _state(ctx) == state, "planning changed the state"
    second = _plan(ctx)
    assert first == second
    assert _state(ctx) == state
    ctx.flush()
    assert _rows(tmp_path / "a.db") == rows, "planning left something to write"


def test_a_plan_not_applied_changes_nothing_and_apply_then_render_is_compose(
    make_ctx: MakeContext, tmp_path: Path
) -> None:
    (ctx, clock), (twin, twin_clock) = _history(make_ctx, "a.db"), _history(make_ctx, "b.db")
    _plan(ctx)  # thrown away
    assert _compared(ctx.compose()) == _compared(twin.compose()), "a plan not applied changed the next compose"

    for _ in range(2):
        twin.add("user", "and once more " * 30)
        ctx.add("user", "and once more " * 30)
    clock.now += 1_000  # past the cache lifetime: the next compose rebuilds
    twin_clock.now += 1_000
    decided = _plan(ctx)
    assert decided.rebuild == "cache_expired"
    ctx._state.apply(decided)
    assert _compared(render(decided)) == _compared(twin.compose())
    ctx.flush()  # the twin's compose flushed
    assert _state(ctx) == _state(twin)
    assert _rows(tmp_path / "a.db") == _rows(tmp_path / "b.db")


def _compared(result: Any) -> Any:
    return result.messages, result.report, result.to_openai(), result.to_anthropic(cache=True), result.tail_length


class _FailingOnce(ExtractiveSummarizer):
    """A summarizer that fails once when armed, as a model behind one may (a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def summarize(self, messages: Sequence[Message]) -> str:
        if self.armed:
            self.armed = False
            raise TimeoutError("the summarizer's model timed out")
        return super().summarize(messages)


def test_a_compose_that_fails_while_planning_loses_nothing(make_ctx: MakeContext) -> None:
    """Through the public face only: a compose whose summarizer fails half way (messages
    already chosen for eviction) leaves the context as it was; the next compose is the
    one a context that never failed makes."""
    flaky = _FailingOnce()
    (ctx, _), (twin, _) = _history(make_ctx, "a.db", summarizer=flaky), _history(make_ctx, "b.db")
    flaky.armed = True
    with pytest.raises(TimeoutError):
        ctx.compose()
    assert [(i.tag, i.state, i.tokens, i.queued) for i in ctx.tail()] == [
        (i.tag, i.state, i.tokens, i.queued) for i in twin.tail()
    ]
    assert _compared(ctx.compose()) == _compared(twin.compose())
    assert [m.model_dump() for m in ctx.messages()] == [m.model_dump() for m in twin.messages()]


events = st.lists(
    st.one_of(
        st.tuples(
            st.just("say"),
            st.sampled_from(["user", "assistant", "system"]),
            st.integers(1, 200),
            st.sampled_from([None, "conclusion", "reasoning"]),
            st.one_of(st.none(), st.floats(1, 60)),  # ttl
        ),
        st.tuples(st.just("tool"), st.integers(1, 900)),
        st.tuples(st.just("compose"), st.sampled_from([0.0, 1.0, 400.0]), st.one_of(st.none(), st.integers(0, 3))),
        st.tuples(st.just("drop"), st.integers(0, 10_000), st.booleans()),
    ),
    min_size=10,
    max_size=60,
)
_WORDS = "you must never touch prod the cache key is 42 ms docs/shards.md ok hmm note remember".split()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=events, window=st.sampled_from([900, 1_600, 4_000]), seed=st.integers(0, 2**16))
def test_every_compose_is_its_plan_applied_and_rendered(
    tokenizer: Tokenizer, history: list[tuple[Any, ...]], window: int, seed: int
) -> None:
    """Over random histories (ttls, drops queued or not, briefs that change, the cache
    lifetime running out): planning twice gives equal plans and leaves the state as it
    was, and the compose that follows is the plan applied and rendered."""
    rnd = random.Random(seed)
    clock = Clock()
    config = ContextConfig(window=window, reserve_system=100, reserve_output=100, protected_recent=2)
    ctx = LocalContext(":memory:", "plan/s/t", config=config, tokenizer=tokenizer, clock=clock)
    try:
        for step in history:
            match step:
                case ("say", str(role), int(words), kind, ttl):
                    text = " ".join(rnd.choice(_WORDS) for _ in range(words))
                    ctx.add(role, text, kind=kind if role == "assistant" else None, ttl=ttl)
                case ("tool", int(words)):
                    call = f"c{ctx.next_tag}"
                    ctx.add("assistant", "running", tool_calls=[{"id": call, "name": "sh", "arguments": "{}"}])
                    ctx.add("tool", " ".join(rnd.choice(_WORDS) for _ in range(words)), call_id=call)
                case ("drop", int(index), bool(queue)) if ctx.next_tag > 1:
                    ctx.drop(1 + index % (ctx.next_tag - 1), queue=queue)
                case ("compose", float(elapsed), rev):
                    clock.now += elapsed
                    brief = None if rev is None else "\n".join(f"- item {i}" for i in range(rev + 1))
                    ctx._state.classify_pending()  # as compose does before it plans
                    state = _state(ctx)
                    first = _plan(ctx, "go on", brief)
                    assert _state(ctx) == state, "planning changed the state"
                    assert _plan(ctx, "go on", brief) == first
                    event(f"rebuild: {first.rebuild}, moves: {bool(first.moves)}, merges: {bool(first.merges)}")
                    assert _compared(ctx.compose("go on", brief=brief)) == _compared(render(first))
    finally:
        ctx.close()
