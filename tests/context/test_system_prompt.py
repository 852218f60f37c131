"""The host's own system prompt goes out verbatim: whole, first, in every mode, counted in
the budget, never demoted or summarized; the mode templates only stand in without one."""

from __future__ import annotations

import pytest

from ctxbus.agents.context import BUILTIN_MODES, ContextConfig, InvalidConfig
from tests._providers import check_anthropic, check_openai, check_openai_layout
from tests.context.conftest import MakeContext, rendered_tokens

HOST = (
    "You are the release agent of the payments team. Work in small steps and explain each one.\n\n"
    "Rules of the house:\n"
    + "\n".join(f"{i}. Rule {i}: never merge a change that lowers coverage below {70 + i % 20}%." for i in range(160))
)


def test_a_long_system_prompt_under_a_full_pinned_layer_is_still_first_and_whole(make_ctx: MakeContext) -> None:
    config = ContextConfig(window=8_000, system_prompt=HOST, reserve_system=512)
    ctx = make_ctx(config=config)
    host_tokens = ctx.tokenizer.count(HOST)
    assert host_tokens > 2_500, "long enough to crowd the layers"
    ctx.add("user", "Ship release 4.2 today.")
    for i in range(40):  # more pins than the pinned layer holds
        ctx.add("user", f"Remember: service s{i} must be deployed before s{i + 1}.")
        ctx.add("assistant", f"Noted for s{i}.", importance=0.9)
    composition = ctx.compose("What is next?")
    report = composition.report
    openai, anthropic = composition.to_openai(), composition.to_anthropic()
    assert openai[0] == {"role": "system", "content": HOST} and anthropic["system"] == HOST
    assert [m["role"] for m in openai].count("system") == 1
    check_openai_layout(openai)
    check_openai(openai)
    check_anthropic(anthropic)
    assert report.layers["system"] == host_tokens + config.message_overhead, "counted against the budget"
    assert report.total <= report.budget
    assert any(t.source == "pinned" for t in report.trims), "the pins gave way"
    assert not any(t.tag is None and t.source == "system" for t in report.trims)
    assert rendered_tokens(ctx.tokenizer, composition.messages) <= report.total


def test_the_host_prompt_takes_room_from_the_layers(make_ctx: MakeContext) -> None:
    plain = make_ctx("plain.db", window=8_000).compose("Go.")
    hosted = make_ctx("host.db", config=ContextConfig(window=8_000, system_prompt=HOST)).compose("Go.")
    assert hosted.report.budgets.rolling < plain.report.budgets.rolling


def test_the_host_prompt_stands_in_every_mode(make_ctx: MakeContext) -> None:
    ctx = make_ctx(config=ContextConfig(window=16_000, system_prompt="You triage bug reports."))
    ctx.add("user", "Sort the new reports.")
    for mode in ("task", "chat", "knowledge"):
        ctx.switch_mode(mode)
        assert ctx.compose().messages[0] == {"role": "system", "content": "You triage bug reports."}


def test_without_a_host_prompt_the_mode_template_is_the_system_message(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    ctx.add("user", "Hi.")
    assert ctx.compose().to_openai()[0]["content"] == BUILTIN_MODES["task"].system_text
    ctx.switch_mode("chat")
    assert ctx.compose().to_anthropic()["system"] == BUILTIN_MODES["chat"].system_text


def test_a_host_prompt_that_alone_does_not_fit_is_an_error(make_ctx: MakeContext) -> None:
    ctx = make_ctx(config=ContextConfig(window=2_000, reserve_system=100, reserve_output=200, system_prompt=HOST))
    with pytest.raises(InvalidConfig, match="the host's system prompt takes .* tokens.*shorten it"):
        ctx.compose()


@pytest.mark.parametrize("prompt", ["", "   \n", 42])
def test_a_blank_host_prompt_is_refused(prompt: object) -> None:
    with pytest.raises(InvalidConfig, match="system_prompt must be text"):
        ContextConfig(system_prompt=prompt)  # type: ignore[arg-type]
