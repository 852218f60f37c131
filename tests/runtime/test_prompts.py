"""What the Agent sends to its model: Channel 1 reminders inside the tool message they
were appended to, nothing after a ctx_reduce until the rules say so, and nudges that
speak on small windows."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ctxbus.agents.context import ContextConfig, Tokenizer
from ctxbus.agents.nudges import REDUCE_TOOL_NAME, REMINDER_CLOSE, REMINDER_OPEN, Band, strip_reminder_spans
from ctxbus.agents.runtime import Agent, AgentConfig, ToolOutcome, replay_transcript
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain
from tests._providers import check_anthropic, check_openai, check_openai_layout
from tests.context.conftest import anchors_dir
from tests.runtime._agents import Agents

WINDOW = 32_000


def _output(i: int) -> str:
    """About 900 tokens of tool output: under the archive threshold, shown whole."""
    return "\n".join(f"src/pkg_{i}/mod_{j}.py:{j * 3}: def handler_{j}(req): return run({j})" for j in range(40))


def _agent(agents: Agents, client: NatsClient, tmp_path: Path) -> Agent:
    domain = Domain.parse(f"rt/prompts/{uuid.uuid4().hex[:8]}")
    config = AgentConfig(
        agent_id="a1",
        domain=domain,
        store=tmp_path / "a1.db",
        context=ContextConfig(window=WINDOW, system_prompt="You fix handler bugs."),
    )
    return agents.open(client, config)


async def _grep(agent: Agent, i: int) -> tuple[int, ToolOutcome]:
    agent.assistant("", tool_calls=[{"id": f"g{i}", "name": "grep", "arguments": json.dumps({"q": f"handler {i}"})}])
    tag = agent.context.next_tag
    return tag, await agent.tool_result("grep", _output(i), call_id=f"g{i}")


def _text(messages: list[dict[str, object]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


def _tool_message(messages: list[dict[str, object]], call_id: str) -> str:
    (content,) = [m["content"] for m in messages if m["role"] == "tool" and m["tool_call_id"] == call_id]
    assert isinstance(content, str)
    return content


async def test_a_reminder_reaches_the_model_inside_its_tool_message(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    agent = _agent(agents, nats_client, tmp_path)
    agent.user("Fix the failing handler tests.")
    for i in range(30):
        agent.compose()
        tag, outcome = await _grep(agent, i)
        if outcome.text != _output(i):
            break
    else:
        pytest.fail("Channel 1 never spoke on a 32k window")
    reminder = outcome.text.removeprefix(_output(i))
    assert reminder.startswith(REMINDER_OPEN) and reminder.endswith(REMINDER_CLOSE)
    assert agent.measure().t == outcome.measure.t, "the reminder kept with the result stays out of T"

    composition = agent.compose()
    openai = composition.to_openai()
    check_openai_layout(openai)
    check_openai(openai)
    assert _tool_message(openai, f"g{i}") == f"§{tag}§ {_output(i)}{reminder}"
    check_anthropic(anthropic := composition.to_anthropic())
    results = [b for m in anthropic["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [b["content"] for b in results if b["tool_use_id"] == f"g{i}"] == [f"§{tag}§ {_output(i)}{reminder}"]
    assert sum(REMINDER_OPEN.strip() in _tool_message(openai, f"g{n}") for n in range(i + 1)) == 1, "only there"

    # Kept with the message: a restarted agent's next prompt shows it too.
    agents.close(agent)
    again = agents.open(nats_client, agent.config)
    assert _tool_message(again.compose().to_openai(), f"g{i}").endswith(reminder)


async def test_after_ctx_reduce_the_next_results_carry_no_reminder_until_the_rules_say(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    agent = _agent(agents, nats_client, tmp_path)
    agent.user("Fix the failing handler tests.")
    i = 0
    while True:
        agent.compose()
        _, outcome = await _grep(agent, i)
        i += 1
        if outcome.text != _output(i - 1):
            break
        assert i < 30, "Channel 1 never spoke on a 32k window"
    hints = sorted({hint.tag for hint in outcome.measure.hints})
    spec = ",".join(map(str, hints))
    plan = agent.ctx_reduce(spec)
    assert plan.queued
    agent.assistant("", tool_calls=[{"id": "r1", "name": REDUCE_TOOL_NAME, "arguments": json.dumps({"drop": spec})}])
    reduced = await agent.tool_result(REDUCE_TOOL_NAME, plan.summary(), call_id="r1")
    assert reduced.text == plan.summary(), "ctx_reduce's own result never carries one"
    grace = agent.channel1.state.grace
    assert grace is not None
    quiet_calls = []
    for _ in range(3):  # U regrows by ~900 tokens a call, under the 4k a 32k window needs
        agent.compose()
        _, after = await _grep(agent, i)
        quiet_calls.append(f"g{i}")
        i += 1
        assert after.text == _output(i - 1), "the agent complied: quiet while U regrows"
        assert after.measure.u - grace.baseline_u < 4_000
    openai = agent.compose().to_openai()
    check_openai(openai)
    for call_id in [*quiet_calls, "r1"]:
        assert strip_reminder_spans(_tool_message(openai, call_id)) == _tool_message(openai, call_id)
    dropped = [m for m in openai if m["role"] == "tool" and m["content"] in {f"[dropped §{t}§]" for t in plan.queued}]
    assert len(dropped) == len([t for t in plan.queued if agent.context.message(t).kind == "tool_result"])

    # Once U has regrown past the floor the grace allows, a reminder speaks again, and
    # reaches the model inside its tool message.
    for _ in range(30):
        agent.compose()
        _, again = await _grep(agent, i)
        i += 1
        if again.text != _output(i - 1):
            break
    else:
        pytest.fail("no reminder came back after the grace, however much the tail regrew")
    rose = list(Band).index(again.measure.band) > list(Band).index(outcome.measure.band)
    assert again.measure.u - grace.baseline_u >= 4_000 or rose, again.measure
    assert _tool_message(agent.compose().to_openai(), f"g{i - 1}").endswith(again.text.removeprefix(_output(i - 1)))


@pytest.mark.parametrize("budget", [16_000, WINDOW])
def test_bands_on_a_small_window_reach_gentle_and_beyond_on_a_tool_heavy_session(
    budget: int, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    session = anchors_dir() / "transcripts" / "mini-swe-agent" / "deepseek_chat_test_1-100__django__django-11797.jsonl"
    assert session.is_file(), f"anchor transcript {session} not found (set CTXBUS_ANCHORS)"
    report = replay_transcript(session, budget=budget, store=tmp_path / "r.db", tokenizer=tokenizer)
    spoke = {band: n for band, n in report.bands.items() if band != Band.QUIET}
    assert spoke and Band(report.highest_band).rank >= Band.GENTLE.rank, dict(report.bands)
    assert max(report.prompt_tokens) <= budget


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load()


async def test_below_urgent_a_ctx_reduce_keeps_the_prompt_append_only_until_the_next_rebuild(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    """magic-context's rule: the drops of a ctx_reduce made below urgent are shown at the
    context's next rebuild, so the prompts before it only append (the provider's cached
    prefix is kept); they leave U at once all the same."""
    agent = _agent(agents, nats_client, tmp_path)
    agent.user("Fix the failing handler tests.")
    for i in range(8):  # a tail still quiet, whose oldest results the agent releases itself
        agent.compose()
        _, outcome = await _grep(agent, i)
    i += 1
    assert outcome.measure.band is Band.QUIET, outcome.measure.band
    released = [
        item.tag
        for item in agent.context.tail()
        if item.kind == "tool_result" and item.tag not in outcome.measure.protected
    ][:3]
    spec = ",".join(map(str, released))
    plan = agent.ctx_reduce(spec)
    assert plan.queued
    u_before = outcome.measure.u
    agent.assistant("", tool_calls=[{"id": "r1", "name": REDUCE_TOOL_NAME, "arguments": json.dumps({"drop": spec})}])
    await agent.tool_result(REDUCE_TOOL_NAME, plan.summary(), call_id="r1")
    previous = agent.compose().to_openai()
    assert agent.measure().u < u_before, "the queued drops left U at once"
    shown_whole = [t for t in plan.queued if f"§{t}§ src/" in _text(previous)]
    assert shown_whole, "the dropped outputs are still shown as they were"
    rebuilt = False
    for _ in range(40):
        _, after = await _grep(agent, i)
        i += 1
        composition = agent.compose()
        prompt = composition.to_openai()
        if composition.report.rebuild:
            rebuilt = True
            break
        assert prompt[: len(previous)] == previous, "a compose between rebuilds only appends"
        previous = prompt
    assert rebuilt, "no rebuild came, however much the tail grew"
    assert not [t for t in shown_whole if f"§{t}§ src/" in _text(prompt)], (
        "shown dropped after the rebuild"
    )  # dropped, or evicted
