"""The framework adapters, each on its framework's real agent loop: two agents in separate
processes (`_worker`) share one brief over a real NATS with a real coordinator; each
model is the framework's own shipped test model, played by the worker's `Policy`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests._support import fresh_domain, serving_coordinator
from tests.adapters._checks import (
    Workers,
    adoption_refused,
    calls_and_answers,
    read_afresh,
    reduces_taking_effect,
)
from tests.adapters._worker import REJECTED

WINDOW = 32_000
LEAD_STEPS = 24
"""Each step a ~2,800-token file: the lead reads far more than its window holds."""
FOLLOWER_STEPS = 5

FRAMEWORKS = ["langchain", "autogen"]


@pytest.fixture(scope="module", params=FRAMEWORKS)
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
async def ran(framework: str, nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run per framework, checked by each test below."""
    tmp_path = tmp_path_factory.mktemp(framework)
    domain = fresh_domain()
    async with serving_coordinator(nats_url, coordinator_id=f"adapters-{framework}") as serving:
        results: dict[str, Any] = {}
        workers = Workers("tests.adapters._worker", nats_url, str(domain), tmp_path, WINDOW)

        async def one(agent: str, role: str, steps: int) -> None:
            results[agent] = await workers.run(agent, framework, "--role", role, "--steps", str(steps))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "lead", "lead", LEAD_STEPS)
            tg.start_soon(one, "follower", "follower", FOLLOWER_STEPS)
        results |= await read_afresh(serving.client, domain)  # a fresh reader of the log, in this process
    return results


async def test_two_agents_share_a_brief_inside_their_windows(framework: str, ran: dict[str, Any]) -> None:
    lead, follower = ran["lead"], ran["follower"]
    for result in (lead, follower):
        assert result["final"] == "Done: the sources are read."
        for prompt in result["prompts"]:
            assert sum(m["tokens"] for m in prompt) <= WINDOW
            calls_and_answers(prompt)
    # A long, tool-heavy run: the lead saw many times its window, never more than the window.
    assert lead["history_tokens"] > 2 * WINDOW
    assert len(lead["prompts"]) > LEAD_STEPS


async def test_a_reminder_reaches_the_model_and_its_ctx_reduce_takes_effect(
    framework: str, ran: dict[str, Any]
) -> None:
    lead = ran["lead"]
    prompts = lead["prompts"]
    assert any(m["reminder"] for prompt in prompts for m in prompt if m["role"] == "tool")
    assert lead["reduces"], "the model was never shown a reminder naming tags"
    took_effect, out_of_view = reduces_taking_effect(prompts, lead["reduces"])
    assert out_of_view == [], "a reminder named outputs its prompt no longer showed"
    assert took_effect and took_effect[0] == lead["reduces"][0][0], "the first ctx_reduce never took effect"


async def test_a_rejected_option_cannot_be_adopted_by_the_other_agent(framework: str, ran: dict[str, Any]) -> None:
    follower = ran["follower"]
    adoption_refused(follower, (ran["lead"], follower), ran["brief"], REJECTED)
    assert ran["lead"]["brief_hash"] == ran["follower"]["brief_hash"] == ran["hash"]


async def test_a_bad_call_is_answered_with_what_was_wrong(framework: str, ran: dict[str, Any]) -> None:
    follower = ran["follower"]
    answers = [m["text"] for p in follower["prompts"] for m in p if m["answers"] == follower["bad_call"]]
    assert answers, "the bad call's result never reached the model"
    assert answers[0].endswith(
        "error: argument 'tag' must be a tag: a whole number such as 12, or a string such as \"§12§\", got true"
    )
