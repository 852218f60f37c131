"""Cache-stable composition (issue 19), as properties over random histories: between
rebuilds a compose only appends to the previous prompt; a rebuild is taken exactly when
the rule says (the high-water mark, the cache lifetime, a change under the head);
re-rendering the same state gives the same bytes; budget and tool pairs hold."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbus.agents.context import (
    PRICE_PRESETS,
    CacheMeter,
    Composition,
    ContextConfig,
    InvalidConfig,
    LocalContext,
    PricePreset,
    Tokenizer,
)
from ctxbus.agents.context._delta import DELTA_HEADER, apply_delta, brief_delta
from ctxbus.agents.context._wire import STANDIN_RESULT
from tests._providers import SdkTypes, check_anthropic, checked_renderings
from tests.context.test_properties import WORDS, calls_event, chat_event, orphan_event, tool_event

compose_event = st.tuples(
    st.just("compose"),
    st.integers(0, 20),
    st.sampled_from([0.0, 1.0, 30.0, 400.0]),
    st.one_of(st.none(), st.integers(0, 63)),  # the brief's revision, which sets its lines
)
_ITEMS = ["- [c1] no writes to /etc", "- [d1] use the retry queue", "- [p1] port the worker", "- [p2] fix 42 tests"]
_ITEMS += ["- [n1] the cache is 10 GB", "Done:"]


def _brief(rev: int | None) -> str | None:
    """A brief of the given revision: its lines change with it, as a replica's would."""
    if rev is None:
        return None
    return "\n".join(
        [f"Task brief cache/s/t @ rev {rev}", "Goal: ship it"] + [x for i, x in enumerate(_ITEMS) if rev >> i & 1]
    )


def _shown_brief(result: Composition) -> str | None:
    """The brief the model is shown: the head's, with the deltas in the tail applied."""
    items = next(view for view in result.layers if view.name == "brief").items
    if not items:
        return None
    assert items[0].kind == "brief"
    text = items[0].text.removeprefix("[shared brief]\n")
    for item in items[1:]:
        assert item.kind == "brief_delta"
        assert any(m["content"] == item.text for m in result.messages), "a delta is in the prompt"
        text = apply_delta(text, item.text)
    return text


drop_event = st.tuples(st.just("drop"), st.integers(0, 10_000), st.booleans())  # queued or not
events = st.lists(
    st.one_of(chat_event, tool_event, calls_event, orphan_event, compose_event, compose_event, drop_event),
    min_size=1,
    max_size=70,
)
configs = st.builds(
    lambda window, protected, low: ContextConfig(
        window=window,
        reserve_system=100,
        reserve_output=100,
        protected_recent=protected,
        archive_threshold=400,
        low_water=low,
    ),
    st.sampled_from([1_500, 3_000, 8_000]),
    st.integers(0, 6),
    st.sampled_from([0.4, 0.6, 0.9]),
)


def _text(rnd: random.Random, words: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(words))


def _bytes(composition: Composition) -> bytes:
    return json.dumps([composition.messages, composition.to_openai(), composition.to_anthropic()]).encode()


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _without_input(messages: list[Any], user_input: str) -> list[Any]:
    """A prompt's messages but the new input (not recorded: the host adds it as it likes)."""
    return messages[:-1] if user_input else messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, history=events, seed=st.integers(0, 2**16))
def test_between_rebuilds_a_compose_only_appends(
    tokenizer: Tokenizer, config: ContextConfig, history: list[tuple[object, ...]], seed: int
) -> None:
    rnd = random.Random(seed)
    clock = _Clock()
    ctx = LocalContext(":memory:", "cache/s/t", config=config, tokenizer=tokenizer, clock=clock)
    previous: tuple[list[Any], list[Any]] | None = None
    last_at: float | None = None
    tags: list[int] = []
    calls = 0
    dropped_since = False
    """A message the last prompt showed was dropped at once since: the next compose rebuilds."""
    queued: set[int] = set()
    """Messages the last prompt showed, dropped with queue=True since the last rebuild."""
    shown_upto = 1
    try:
        for event in history:
            match event:
                case ("chat", str(role), int(words), _, _):
                    tags.append(ctx.add(role, _text(rnd, words)))
                case ("tool", int(n), list(sizes), _) | ("calls", list(_) as n, list(sizes), _):
                    calls += 1
                    count = n if isinstance(n, int) else len(n)
                    ids = [f"c{calls}_{k}" for k in range(count)]
                    turn = [{"id": i, "name": "sh", "arguments": "{}"} for i in ids]
                    tags.append(ctx.add("assistant", _text(rnd, 5), tool_calls=turn))
                    for k, call_id in enumerate(ids):
                        tags.append(ctx.add("tool", _text(rnd, int(sizes[k]) // 2), call_id=call_id))
                case ("orphan", int(words)):
                    tags.append(ctx.add("user", _text(rnd, words)))
                case ("drop", int(index), bool(queue)) if tags:
                    done = [tag for tag in ctx.drop([tags[index % len(tags)]], queue=queue) if tag < shown_upto]
                    if queue and not dropped_since:
                        queued.update(done)
                    else:
                        dropped_since |= bool(done)
                    assert {i.tag for i in ctx.tail() if i.queued} <= queued
                case ("compose", int(words), float(wait), rev):
                    clock.now += wait
                    user_input = _text(rnd, words) if words else ""
                    brief = _brief(rev)  # type: ignore[arg-type]
                    result = ctx.compose(user_input, brief=brief)
                    report = result.report
                    if not any("[brief cut:" in str(m["content"]) for m in result.messages):
                        assert _shown_brief(result) == brief
                    assert report.total <= report.budget
                    openai, _ = checked_renderings(result, prefill=True)
                    now = (_without_input(result.messages, user_input), _without_input(openai, user_input))
                    expired = last_at is not None and clock.now - last_at > config.cache_lifetime
                    if previous is not None and expired:
                        assert report.rebuild is not None, "past the cache lifetime, a compose rebuilds"
                    if dropped_since:
                        assert report.rebuild is not None, "a drop is applied at the next compose"
                    rolling = {i.tag: i.text for v in result.layers if v.name == "rolling" for i in v.items}
                    for tag in queued & rolling.keys():
                        # Queued: shown as it was until a rebuild, which applies it.
                        assert rolling[tag].startswith("[dropped") == (report.rebuild is not None)
                    if report.rebuild is not None:
                        queued = set()
                    assert {i.tag for i in ctx.tail() if i.queued} == queued & {i.tag for i in ctx.tail()}
                    if report.rebuild is None and previous is not None:
                        neutral, rendered = previous
                        assert now[0][: len(neutral)] == neutral, "an append-only compose repeats the last prompt"
                        if not any(m.get("content") == STANDIN_RESULT for m in rendered):
                            # (a stand-in result gives way to the real one, when it comes; a
                            # prompt that ended with an assistant turn takes a next assistant
                            # message into that turn, as consecutive ones are one turn)
                            ended = bool(rendered) and rendered[-1]["role"] == "assistant"
                            kept = len(rendered) - ended
                            assert now[1][:kept] == rendered[:kept]
                    # The same state renders to the same bytes, and composing again only appends.
                    again = ctx.compose(user_input, brief=brief)
                    assert again.report.rebuild is None
                    assert _bytes(again) == _bytes(result)
                    previous, last_at, dropped_since, shown_upto = now, clock.now, False, ctx.next_tag
    finally:
        ctx.close()


def test_a_rebuild_under_pressure_evicts_down_to_the_low_water_mark(tokenizer: Tokenizer) -> None:
    config = ContextConfig(window=4_000, reserve_system=100, reserve_output=100, protected_recent=2, low_water=0.5)
    ctx = LocalContext(":memory:", "cache/s/t", config=config, tokenizer=tokenizer)
    room = config.available
    reasons = []
    totals = []
    try:
        ctx.add("user", "Goal: tidy the logs.")
        for i in range(120):
            ctx.add("assistant", f"step {i}", tool_calls=[{"id": f"c{i}", "name": "sh", "arguments": "{}"}])
            ctx.add("tool", " ".join(["line of output"] * 30), call_id=f"c{i}")
            report = ctx.compose().report
            reasons.append(report.rebuild)
            totals.append(report.total - report.layers["system"] - report.layers["input"])
    finally:
        ctx.close()
    pressure = [i for i, r in enumerate(reasons) if r == "pressure"]
    assert len(pressure) >= 3, reasons
    for i in pressure:
        assert totals[i] <= room * 0.5 + 60, "a rebuild evicts down to the low-water mark (one unit of slack)"
        assert totals[i - 1] <= room, "the compose before stayed under the budget, appending"
    appended = [r for r in reasons[1:] if r is None]
    assert len(appended) >= 0.8 * len(reasons[1:]), "most composes only append"


def test_brief_changes_arrive_as_deltas_in_the_tail_and_fold_at_the_next_rebuild(tokenizer: Tokenizer) -> None:
    clock = _Clock()
    config = ContextConfig(window=8_000)
    ctx = LocalContext(":memory:", "cache/s/t", config=config, tokenizer=tokenizer, clock=clock)
    try:
        ctx.add("user", "Goal: port the worker.")
        first = ctx.compose(brief=_brief(1))
        head = first.messages[1]
        previous = first.messages
        for rev in (3, 7, 6, 22):
            ctx.add("assistant", f"working on rev {rev}")
            result = ctx.compose(brief=_brief(rev))
            assert result.report.rebuild is None
            assert result.messages[: len(previous)] == previous, "the head and everything after it stay"
            assert result.messages[1] == head
            assert _shown_brief(result) == _brief(rev)
            assert result.messages[-1]["content"].startswith("[shared brief changed;")
            previous = result.messages
        clock.now += config.cache_lifetime + 1  # the cache has likely expired: the next compose folds
        folded = ctx.compose(brief=_brief(22))
        assert folded.report.rebuild == "cache_expired"
        assert [i.kind for v in folded.layers if v.name == "brief" for i in v.items] == ["brief"]
        assert _shown_brief(folded) == _brief(22)
    finally:
        ctx.close()


def _marks(request: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, message in enumerate(request["messages"])
        for j, block in enumerate(message["content"])
        if "cache_control" in block
    ]


def _plain(request: dict[str, Any]) -> dict[str, Any]:
    messages = [
        {
            "role": m["role"],
            "content": tuple({k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]),
        }
        for m in request["messages"]
    ]
    return {"system": request["system"], "messages": messages}


def test_anthropic_breakpoints_mark_the_head_what_the_last_call_cached_and_the_end(tokenizer: Tokenizer) -> None:
    ctx = LocalContext(":memory:", "cache/s/a", config=ContextConfig(window=16_000), tokenizer=tokenizer)
    other = LocalContext(":memory:", "cache/s/b", config=ContextConfig(window=16_000), tokenizer=tokenizer)
    try:
        ctx.add("user", "Goal: port the worker. Never touch /etc.")
        previous: dict[str, Any] | None = None
        keys = set()
        for i in range(6):
            ctx.add("assistant", f"step {i}", tool_calls=[{"id": f"c{i}", "name": "sh", "arguments": "{}"}])
            ctx.add("tool", f"output {i}", call_id=f"c{i}")
            result = ctx.compose()
            keys.add(result.cache_key)
            request = result.to_anthropic(cache=True)
            check_anthropic(request)
            SdkTypes().anthropic(request)
            assert _plain(request) == _plain(result.to_anthropic()), "hints change nothing else"
            assert _marks(result.to_anthropic()) == []
            marks = _marks(request)
            assert 1 <= len(marks) <= 4
            assert marks[0] == (0, 0), "the head is marked"
            last = len(request["messages"]) - 1
            assert marks[-1] == (last, len(request["messages"][last]["content"]) - 1), "and the prompt's end"
            if previous is not None and result.report.rebuild is None:
                # What the previous call wrote up to its end is marked here, where it ends now.
                end, block = _marks(previous)[-1]
                assert (end, block) in marks
                assert _plain(request)["messages"][:end] == _plain(previous)["messages"][:end]
                now_blocks = _plain(request)["messages"][end]["content"]
                assert now_blocks[: block + 1] == _plain(previous)["messages"][end]["content"][: block + 1]
            previous = request
        assert len(keys) == 1 and keys != {other.compose().cache_key}
    finally:
        ctx.close()
        other.close()


_LINES = st.lists(st.sampled_from(["a", "b", "- [p1] x", "@@ -1 +1 @@", "+b", "-a", ""]), max_size=8).map("\n".join)


@given(old=_LINES, new=_LINES)
def test_a_brief_delta_turns_the_old_brief_into_the_new(old: str, new: str) -> None:
    delta = brief_delta(old, new)
    assert apply_delta(old, delta) == new
    assert delta.startswith(DELTA_HEADER)


def test_a_delta_that_does_not_fit_is_refused() -> None:
    delta = brief_delta("a\nb\nc", "a\nB\nc")
    with pytest.raises(ValueError, match="does not fit"):
        apply_delta("a\nx\nc", delta)
    with pytest.raises(ValueError, match="not a brief delta"):
        apply_delta("a", "@@ -1 +1 @@\n-a\n+b")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"low_water": 0.0}, "low_water must be a share"),
        ({"high_water": 1.5}, "high_water must be a share"),
        ({"high_water": 0.5, "low_water": 0.6}, "must not be above high_water"),
        ({"cache_lifetime": 0}, "cache_lifetime must be a positive number"),
        ({"cache_lifetime": float("nan")}, "cache_lifetime must be a positive number"),
    ],
)
def test_rebuild_settings_out_of_range_are_refused(settings: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        ContextConfig(**settings)  # type: ignore[arg-type]


def test_the_cache_meter_counts_the_repeated_prefix_and_prices_it() -> None:
    meter = CacheMeter(lambda text: len(text.split()), overhead=0)
    system = {"role": "system", "content": "be brief"}
    meter.call([system, {"role": "user", "content": "one two three"}])
    meter.call([system, {"role": "user", "content": "one two three"}, {"role": "assistant", "content": "four"}])
    meter.call([system, {"role": "user", "content": "changed"}])
    assert (meter.calls, meter.prompt_tokens, meter.cached_tokens, meter.rewrites) == (3, 14, 7, 1)
    assert meter.cost("anthropic") == pytest.approx(7 * 1.25 + 7 * 0.1)
    assert meter.cost("openai") == pytest.approx(7 * 1.0 + 7 * 0.5)
    assert PRICE_PRESETS["anthropic"] == PricePreset(write=1.25, read=0.1)


def test_a_rebuild_for_another_reason_applies_the_queued_drops(tokenizer: Tokenizer) -> None:
    """(Found by the property above: a rebuild the brief asked for showed a queued drop's
    old text.)"""
    ctx = LocalContext(":memory:", "cache/s/t", config=ContextConfig(window=8_000), tokenizer=tokenizer)
    try:
        tag = ctx.add("assistant", "a long answer to forget")
        ctx.compose(brief=_brief(0))
        assert ctx.drop(tag, queue=True) == [tag]
        ctx.add("user", "next")
        kept = ctx.compose(brief=_brief(0))
        assert kept.report.rebuild is None and f"§{tag}§ a long answer to forget" in kept.messages[2]["content"]
        assert [i.queued for i in ctx.tail() if i.tag == tag] == [True]
        applied = ctx.compose(brief=None)
        assert applied.report.rebuild == "brief"
        assert any(m["content"] == f"[dropped §{tag}§]" for m in applied.messages)
        assert [i.queued for i in ctx.tail() if i.tag == tag] == [False]
    finally:
        ctx.close()


def test_a_prompt_cache_meter_prices_the_whole_history_as_growing_by_appends() -> None:
    """The whole history each call: every call's prefix is the previous call's history."""
    from ctxbus.agents.context import PromptCache

    cache = PromptCache(CacheMeter(len))
    first = [{"role": "system", "content": "s" * 96}, {"role": "user", "content": "u" * 96}]
    cache.observe(first, history_tokens=200)
    cache.observe([*first, {"role": "assistant", "content": "a" * 96}], history_tokens=300)
    assert (cache.full_prompt_tokens, cache.full_cached_tokens) == (500, 200)
    assert cache.full_cost("anthropic") == 300 * 1.25 + 200 * 0.1
    assert cache.meter.cached_tokens == 200 and cache.cached_share == 200 / 500
    assert cache.cost("openai") == 300 * 1.0 + 200 * 0.5
