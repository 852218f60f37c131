"""The constraint check of the swarm report: each agent's own constraints in its pinned
layer, the lead's in the brief block, each looked for apart."""

from __future__ import annotations

from pathlib import Path

from ctxbus.agents.context import LocalContext
from ctxbus.agents.swarm._constraints import missing_from_brief, missing_from_pinned
from ctxbus.agents.swarm._scenario import CACHE_GET_RULE, CONSTRAINTS, VENDOR_RULE, user_constraints
from ctxbus.agents.swarm._worker import SWARM_CONTEXT
from ctxbus.schemas import Domain

DOMAIN = Domain.parse("sw/c1/constraints")
BRIEF = "Task brief sw/c1/constraints @ rev 4\nConstraints:\n" + "\n".join(
    f"- [c{i}] {c}" for i, c in enumerate(CONSTRAINTS)
)


def _prompt(tmp_path: Path, *user: str) -> tuple[tuple[list[str], list[str]], str]:
    """((missing from pinned, missing from the brief), the whole prompt text) for a context holding `user`."""
    with LocalContext(tmp_path / "a.db", DOMAIN, config=SWARM_CONTEXT) as context:
        for text in user:
            context.add("user", text)
            context.add("assistant", "On it.")
        composition = context.compose("", brief=BRIEF)
    prompt = "\n".join(m["content"] for m in composition.messages)
    layers = composition.layers
    return (missing_from_pinned(layers, (VENDOR_RULE,)), missing_from_brief(layers, CONSTRAINTS)), prompt


def test_an_agent_that_keeps_its_own_constraint_passes(tmp_path: Path) -> None:
    missing, _ = _prompt(tmp_path, f"Goal: fix the cache. Your part: the flush race. {VENDOR_RULE}.")
    assert missing == ([], [])


def test_a_context_that_lost_its_own_constraint_fails_though_the_brief_still_holds_it(tmp_path: Path) -> None:
    missing, prompt = _prompt(tmp_path, "Goal: fix the cache. Your part: the flush race.")
    assert VENDOR_RULE in prompt, "the brief block alone holds it: a look at the whole prompt would pass"
    assert missing == ([VENDOR_RULE], [])


def test_a_brief_block_without_a_constraint_fails_though_the_user_stated_it(tmp_path: Path) -> None:
    with LocalContext(tmp_path / "a.db", DOMAIN, config=SWARM_CONTEXT) as context:
        context.add("user", f"Goal: fix the cache. {'. '.join(CONSTRAINTS)}.")
        composition = context.compose("", brief=BRIEF.replace(CONSTRAINTS[2], "Keep it small"))
    assert missing_from_pinned(composition.layers, CONSTRAINTS) == []
    assert missing_from_brief(composition.layers, CONSTRAINTS) == [CONSTRAINTS[2]]


def test_the_lead_states_three_constraints_the_others_one_and_all_the_cache_get_rule() -> None:
    assert user_constraints(0, 75) == (*CONSTRAINTS, CACHE_GET_RULE)
    assert user_constraints(1, 75) == user_constraints(4, 75) == (VENDOR_RULE, CACHE_GET_RULE)
    assert user_constraints(1, 1) == (VENDOR_RULE,)


def test_a_constraint_the_brief_gained_since_the_last_rebuild_is_in_its_delta(tmp_path: Path) -> None:
    earlier = "\n".join(BRIEF.splitlines()[:-1])  # the brief before the last constraint was committed
    with LocalContext(tmp_path / "a.db", DOMAIN, config=SWARM_CONTEXT) as context:
        context.add("user", f"Goal: fix the cache. {VENDOR_RULE}.")
        context.compose("", brief=earlier)
        context.add("assistant", "on it")
        composition = context.compose("", brief=BRIEF)
    assert composition.report.rebuild is None, "the head kept the earlier brief"
    assert missing_from_brief(composition.layers, CONSTRAINTS) == []
    head_only = [
        type(layer)(layer.name, layer.budget, layer.tokens, tuple(i for i in layer.items if i.kind == "brief"))
        for layer in composition.layers
    ]
    assert missing_from_brief(head_only, CONSTRAINTS) == [CONSTRAINTS[-1]]
