"""Property tests: for random histories, sizes and budgets, compose never exceeds the budget,
never shows a tool call without its result or a result without its call, and renders to
prompts both providers accept."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbus.agents.context import ContextConfig, LocalContext, Tokenizer
from tests._providers import checked_renderings
from tests.context.conftest import rendered_cost, rendered_tokens

WORDS = (
    "must never cache token index layer budget 42 ms /srv/app.py error failed ok value window merge "
    "summary archive node 10 GB https://x.io/a django-11797 note remember 不要 记住 the a of to and"
).split()

chat_event = st.tuples(
    st.just("chat"),
    st.sampled_from(["user", "assistant", "system"]),
    st.integers(1, 300),
    st.one_of(st.none(), st.floats(0, 1)),
    st.sampled_from([None, "conclusion", "knowledge", "task_state", "reasoning", "synthetic"]),
)
tool_event = st.tuples(
    st.just("tool"),
    st.integers(1, 3),  # results per call
    st.lists(st.integers(1, 1_500), min_size=3, max_size=3),  # sizes in words
    st.booleans(),  # call ids present
)
calls_event = st.tuples(
    st.just("calls"),
    st.lists(st.booleans(), min_size=1, max_size=3),  # per call: answered (a turn cut short if not)
    st.lists(st.integers(1, 600), min_size=3, max_size=3),  # result sizes in words
    st.booleans(),  # results recorded in reverse order
)
orphan_event = st.tuples(st.just("orphan"), st.integers(1, 80))  # output no call asked for
compose_event = st.tuples(st.just("compose"), st.integers(0, 60), st.booleans())
drop_event = st.tuples(st.just("drop"), st.integers(0, 10_000))
events = st.lists(
    st.one_of(chat_event, tool_event, calls_event, orphan_event, compose_event, drop_event), min_size=1, max_size=60
)
configs = st.builds(
    lambda window, sys_r, out_r, protected, threshold, split: ContextConfig(
        window=window,
        reserve_system=sys_r,
        reserve_output=out_r,
        protected_recent=protected,
        archive_threshold=threshold,
        split=split,
    ),
    st.sampled_from([700, 1_200, 2_500, 6_000, 16_000]),
    st.integers(0, 150),
    st.integers(0, 150),
    st.integers(0, 8),
    st.integers(50, 1_500),
    st.sampled_from([(1, 3, 2), (1, 1, 1), (0, 1, 0), (3, 3, 1)]),
)


@dataclass
class Model:
    """What the test itself knows about the history, independent of the engine."""

    units: list[list[int]] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)


def _text(rnd: random.Random, words: int) -> str:
    lines, line = [], []
    for _ in range(words):
        line.append(rnd.choice(WORDS))
        if len(line) >= 12:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return "\n".join(lines)


def _check(ctx: LocalContext, model: Model, tokenizer: Tokenizer, user_input: str, brief: str | None) -> None:
    result = ctx.compose(user_input, brief=brief)
    report = result.report
    assert report.total <= report.budget
    assert rendered_tokens(tokenizer, result.messages, ctx.config.message_overhead) <= report.budget
    rolling = [item.tag for view in result.layers if view.name == "rolling" for item in view.items]
    pinned = [
        item.tag for view in result.layers if view.name == "pinned" for item in view.items if item.kind != "constraint"
    ]
    shown = set(rolling)
    assert len(shown) == len(rolling) and not shown & set(pinned), "a message is shown at most once"
    for unit in model.units:
        present = [tag in shown for tag in unit]
        assert all(present) or not any(present), f"tool unit {unit} split: {present}"
        assert not set(unit) & set(pinned), "tool traffic is never pinned"
    openai, _ = checked_renderings(result, prefill=True)  # a random history may end with an assistant turn
    assert rendered_cost(tokenizer, openai, ctx.config.message_overhead) <= report.budget


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, history=events, seed=st.integers(0, 2**16))
def test_compose_respects_budget_and_pairs(
    tokenizer: Tokenizer, config: ContextConfig, history: list[tuple[object, ...]], seed: int
) -> None:
    rnd = random.Random(seed)
    ctx = LocalContext(":memory:", "prop/s/t", config=config, tokenizer=tokenizer)
    model = Model()
    calls = 0
    try:
        for event in history:
            match event:
                case ("chat", str(role), int(words), importance, kind):
                    if role != "assistant":
                        kind = None
                    tag = ctx.add(role, _text(rnd, words), importance=importance, kind=kind)  # type: ignore[arg-type]
                    model.tags.append(tag)
                case ("tool", int(n_results), list(sizes), bool(with_ids)):
                    calls += 1
                    ids = [f"c{calls}_{k}" for k in range(n_results)]
                    unit = [
                        ctx.add(
                            "assistant", _text(rnd, 10), tool_name="sh", call_id=",".join(ids) if with_ids else None
                        )
                    ]
                    for k in range(n_results if with_ids else 1):
                        unit.append(
                            ctx.add(
                                "tool", _text(rnd, int(sizes[k])), tool_name="sh", call_id=ids[k] if with_ids else None
                            )
                        )
                    model.units.append(unit)
                    model.tags += unit
                case ("calls", list(answered), list(sizes), bool(reverse)):
                    calls += 1
                    ids = [f"t{calls}.{k}" for k in range(len(answered))]  # "." is no Anthropic id
                    turn = [{"id": i, "name": "run tests", "arguments": json.dumps({"n": calls})} for i in ids]
                    unit = [ctx.add("assistant", _text(rnd, 5) if calls % 2 else "", tool_calls=turn)]
                    done = [(k, i) for k, i in enumerate(ids) if answered[k]]
                    for k, call_id in reversed(done) if reverse else done:
                        unit.append(ctx.add("tool", _text(rnd, int(sizes[k])), call_id=call_id))
                    model.units.append(unit)
                    model.tags += unit
                case ("orphan", int(words)):
                    model.tags.append(ctx.add("tool", _text(rnd, words), tool_name="console_output"))
                case ("compose", int(words), bool(with_brief)):
                    _check(
                        ctx,
                        model,
                        tokenizer,
                        _text(rnd, words) if words else "",
                        "goal: ship it\nconstraint: no more than 5 files" if with_brief else None,
                    )
                case ("drop", int(index)) if model.tags:
                    ctx.drop([model.tags[index % len(model.tags)]])
        _check(ctx, model, tokenizer, "", None)
    finally:
        ctx.close()
