"""ctx_reduce through the Agent: bad requests, tags that left the tail, and what
`inspect_store` shows."""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from ctxbus.agents.context import ContextConfig, LocalContext, StoreError
from ctxbus.agents.nudges import (
    REDUCE_TOOL_NAME,
    Channel1State,
    DropRangeTooLarge,
    DropSpecError,
    ReversedDropRange,
    TailMeasure,
    UnknownDropTags,
    Verdict,
    decide,
)
from ctxbus.agents.runtime import Agent, AgentConfig, inspect_store
from ctxbus.agents.runtime._saved import CONFIG_KEY
from ctxbus.bus import NatsClient
from ctxbus.schemas import Domain, UsageError
from tests.runtime._agents import Agents

WIDE = ContextConfig(window=400_000, archive_threshold=400_000)
"""Tool outputs larger than the protection floor: the newest three calls make the window."""
SMALL = ContextConfig(window=6000, reserve_system=500, reserve_output=500, low_water=0.9)
"""Small enough that a dozen tool results push the oldest ones out of the tail; a rebuild
evicts down to 90 % only, so results outside the protected window stay in it."""
ROOMY = ContextConfig(window=20_000)
"""Room for every result, with a protection window of only the newest few."""


def _agent(agents: Agents, client: NatsClient, store: Path, domain: Domain, config: ContextConfig) -> Agent:
    return agents.open(client, AgentConfig(agent_id="a1", domain=domain, store=store, context=config))


async def _grep(agent: Agent, calls: int, *, compose: bool) -> None:
    for i in range(calls):
        agent.assistant(f"grep {i}", tool_name="grep", call_id=f"c{i}")
        await agent.tool_result("grep", f"line of output {i}\n" * 150, call_id=f"c{i}")  # under the archive threshold
        if compose:
            agent.compose()


async def _build(agent: Agent, calls: int) -> None:
    """Build logs of some 29k tokens each, recorded as a call and its result (two tags)."""
    for i in range(calls):
        log = "\n".join(f"build/{i}/obj_{j}.o: warning: unused variable 'tmp_{j}' [-Wunused]" for j in range(1350))
        agent.assistant("bash make", tool_name="bash", call_id=f"b{i}")
        await agent.tool_result("bash", log, call_id=f"b{i}")


def _seen(agent: Agent) -> tuple[object, TailMeasure, Channel1State]:
    """What a ctx_reduce call could change: the queue, {U, T} and the rest of the
    measure (but whether it was a full walk), and Channel 1's post-reduce grace."""
    return agent.status()["queued_drops"], replace(agent.measure(), full=False), agent.channel1.state


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param("5,404", UnknownDropTags, id="a-result-and-an-unknown-tag"),
        pytest.param("5-9,404-405", UnknownDropTags, id="a-range-and-unknown-tags"),
        pytest.param("§5§,§0§", UnknownDropTags, id="marked-tags-and-tag-0"),
        pytest.param("9-5", ReversedDropRange, id="reversed"),
        pytest.param("5,x", DropSpecError, id="not-a-number"),
        pytest.param("5,7-", DropSpecError, id="open-range"),
        pytest.param("5,1-99999999", DropRangeTooLarge, id="too-large"),
    ],
)
async def test_a_bad_request_changes_nothing(
    nats_client: NatsClient, agents: Agents, tmp_path: Path, spec: str, error: type[UsageError]
) -> None:
    """`Agent.ctx_reduce` promises nothing changes when it raises: nothing is queued
    (not even the tags that exist), U stays, no grace starts, nothing is saved."""
    store = tmp_path / "a.db"
    domain = Domain.parse(f"rt/d0/{uuid.uuid4().hex[:8]}")
    agent = _agent(agents, nats_client, store, domain, ROOMY)
    agent.user("Find the slow handler.")
    await _grep(agent, 6, compose=False)  # tags: 1 the user, then each call and its result
    assert agent.ctx_reduce("3").queued == (3,)  # a queue and a grace to leave alone
    agent.assistant("grep more", tool_name="grep", call_id="more")
    await agent.tool_result("grep", "more output\n" * 150, call_id="more")  # U outgrows the grace's baseline
    before = _seen(agent)
    assert before[2].grace is not None and before[2].grace.baseline_u < before[1].u

    with pytest.raises(error):
        agent.ctx_reduce(spec)

    assert _seen(agent) == before
    agents.close(agent)
    again = _agent(agents, nats_client, store, domain, ROOMY)
    assert again.status()["queued_drops"] == [3], "a failed request must not save a queue"
    # The tags the bad request named could have gone: now they do.
    assert again.ctx_reduce("5").queued == (5,)
    assert again.status()["queued_drops"] == [3, 5]


async def test_a_range_over_tags_that_left_the_tail_still_drops_the_rest(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d1/{uuid.uuid4().hex[:8]}"), SMALL)
    agent.user("Goal: fix the bug.")
    await _grep(agent, 12, compose=True)
    in_tail = {item.tag for item in agent.context.tail()}
    newest = agent.context.next_tag - 1
    assert 2 not in in_tail, "the test needs tags that left the tail"

    plan = agent.ctx_reduce(f"2-{newest}")
    assert set(plan.outside) == set(range(2, newest + 1)) - in_tail
    assert plan.queued
    assert "(already summarized or pinned; nothing to do)" in plan.summary()
    with pytest.raises(UnknownDropTags, match=rf"no such tag §{newest + 1}§"):
        agent.ctx_reduce(str(newest + 1))


async def test_inspect_store_applies_queued_drops_like_the_next_compose(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    store = tmp_path / "a.db"
    domain = Domain.parse(f"rt/d2/{uuid.uuid4().hex[:8]}")
    agent = _agent(agents, nats_client, store, domain, ROOMY)
    agent.user("Find the slow handler.")
    await _grep(agent, 6, compose=False)
    assert agent.ctx_reduce("3").queued == (3,)
    agents.close(agent)

    rolling = next(layer for layer in inspect_store(store, domain) if layer.name == "rolling")
    assert [item.text for item in rolling.items if item.tag == 3] == ["[dropped §3§]"]
    again = _agent(agents, nats_client, store, domain, ROOMY)
    assert again.status()["queued_drops"] == [3], "inspect must not write to the agent's store"


async def test_the_heartbeat_shows_the_tail_after_the_compose_that_applied_the_drops(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    """The compose that applies them may evict more (SMALL's window is full): the
    heartbeat shows the tail after all of it."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d5/{uuid.uuid4().hex[:8]}"), SMALL)
    agent.user("Find the slow handler.")
    await _grep(agent, 14, compose=False)
    before = agent.presence().tail_tokens
    agent.ctx_reduce("3")
    agent.compose()
    after = agent.presence()
    assert after.tail_tokens < before and after.tail_tokens == agent.measure().t


async def test_a_dropped_result_leaves_its_call_counted(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    """The engine keeps rendering a call after its result is dropped, so T keeps it."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d3/{uuid.uuid4().hex[:8]}"), ROOMY)
    await _grep(agent, 6, compose=False)
    agent.ctx_reduce("2")  # the result of the first call, §1§
    agent.compose()
    shown = {item.tag: item for item in agent.context.tail()}
    assert shown[2].state == "dropped" and shown[1].state == "active"
    assert agent.measure().t == sum(item.tokens for item in shown.values() if item.state != "dropped")


def _edit_saved_config(store: Path, domain: Domain, **changes: object) -> None:
    """Rewrite the settings record the way another build of ctxbus might have written it."""
    with LocalContext(store, domain) as context:
        saved = json.loads(context.get_state(CONFIG_KEY) or "{}")
        saved.update(changes)
        saved.pop("compact_lines")  # a field that build did not have yet
        context.set_state(CONFIG_KEY, json.dumps(saved))


async def test_inspect_store_reads_settings_saved_by_another_build(
    nats_client: NatsClient, agents: Agents, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "a.db"
    domain = Domain.parse(f"rt/d4/{uuid.uuid4().hex[:8]}")
    agents.close(_agent(agents, nats_client, store, domain, ROOMY))
    budgets = [layer.budget for layer in inspect_store(store, domain)]
    assert [layer.budget for layer in inspect_store(str(store), str(domain))] == budgets, "a path and domain as text"
    _edit_saved_config(store, domain, legacy_knob=3)

    with caplog.at_level(logging.WARNING, logger="ctxbus.agents.runtime"):
        assert [layer.budget for layer in inspect_store(store, domain)] == budgets  # still ROOMY's window
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"ignoring the context settings saved in {store} that this build does not have: legacy_knob"
    ]


async def test_unusable_saved_settings_are_a_store_error(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    store = tmp_path / "a.db"
    domain = Domain.parse(f"rt/d5/{uuid.uuid4().hex[:8]}")
    agents.close(_agent(agents, nats_client, store, domain, ROOMY))
    _edit_saved_config(store, domain, window="large")
    with pytest.raises(StoreError, match=rf"^the context settings saved in {re.escape(str(store))} are not usable: "):
        inspect_store(store, domain)


async def test_the_window_protects_the_newest_calls_with_their_results(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    """A call and its result are two tags: the newest three calls are six of them."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d6/{uuid.uuid4().hex[:8]}"), WIDE)
    await _build(agent, 4)
    assert agent.measure().protected == {3, 4, 5, 6, 7, 8}
    assert agent.ctx_reduce("2-4").deferred == (3, 4)


async def test_the_grace_counts_from_the_tail_with_the_reduce_recorded(
    nats_client: NatsClient, agents: Agents, tmp_path: Path
) -> None:
    """The reduce's own call and result take a window slot and leave the oldest protected
    output reclaimable: that is not U regrowing, so it must not end the grace."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d7/{uuid.uuid4().hex[:8]}"), WIDE)
    await _build(agent, 4)
    plan = agent.ctx_reduce("2")  # the oldest build log
    assert plan.queued == (2,)
    # Recorded once the tool ran, as MCP tool calls are.
    agent.assistant("ctx_reduce 2", tool_name=REDUCE_TOOL_NAME, call_id="r")
    recorded = (await agent.tool_result(REDUCE_TOOL_NAME, plan.summary(), call_id="r")).measure
    assert 4 not in recorded.protected, "the test needs the reduce to push an output out of the window"

    state = agent.channel1.state
    assert state.grace is not None and state.grace.baseline_u == recorded.u
    assert decide(state, recorded.u, recorded.t, user_turn=agent.user_turns).verdict is Verdict.GRACE


async def test_a_conclusion_is_kept_when_named(nats_client: NatsClient, agents: Agents, tmp_path: Path) -> None:
    """Final results are never dropped, as `DropPlan.kept` tells the agent."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d8/{uuid.uuid4().hex[:8]}"), ROOMY)
    agent.user("Find why the handler tests fail.")
    tag = agent.context.add("assistant", "Root cause: handler_7 returns None on a cold cache.", kind="conclusion")
    await _grep(agent, 4, compose=False)
    plan = agent.ctx_reduce(f"{tag},{tag + 1}")  # the conclusion and the first grep call
    assert (plan.kept, plan.queued) == ((tag,), (tag + 1,))
    assert "kept §2§ (final results are never dropped)" in plan.summary()
    agent.compose()
    assert agent.context.message(tag).state == "active"


async def test_a_conclusion_counts_in_t_but_never_in_u(nats_client: NatsClient, agents: Agents, tmp_path: Path) -> None:
    """What the agent may not release is not asked of it."""
    agent = _agent(agents, nats_client, tmp_path / "a.db", Domain.parse(f"rt/d9/{uuid.uuid4().hex[:8]}"), ROOMY)
    agent.user("Find why the handler tests fail.")
    before = agent.measure()
    finding = " ".join(f"handler_{i} returns None on a cold cache;" for i in range(300))
    agent.context.add("assistant", f"Root cause: {finding}", kind="conclusion")
    after = agent.measure()
    assert after.t > before.t + 1_000 and after.u == before.u
