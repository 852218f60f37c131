"""Issue 29: what the user wrote is kept by who wrote it (the authored layer).

The facts here are plain statements in the shapes users hand them over (a pasted wiki
excerpt, sentences around a pasted log): no imperative, no rule word, so the classifier
does not pin them. They must outlive any quantity of tool output and narration while the
layer's share has room; past the share, the layer is compressed (repeats left out, pastes
archived, chatter folded) before any of it is summarized.
"""

from __future__ import annotations

import pytest

from ctxbus.agents.context import ContextConfig, InvalidConfig, LocalContext
from ctxbus.agents.context._authored import parts
from ctxbus.agents.context._classify import has_constraint
from tests.context.conftest import MakeContext

WINDOW = 4_000
SMALL = {"reserve_output": 512, "reserve_system": 256}
GOAL = "Port the ledger importer to the new batch API."
"""The first user message: the goal, pinned as such (the messages after it are not)."""

WIKI = [
    "Owner: the payments-core team runs the ledger-sync service from their own repository.",
    "The shared batch pool holds 41 CPU-hours this month.",
    "PRs for this work link QX-4821.",
    "Staging runs Postgres 15.4 with the replica in eu-west-3.",
    "Hanna Ibsen reviews importer changes this sprint.",
]
DOC = "here's the relevant bit from our team wiki:\n\n## ledger-sync\n" + "\n".join(f"- {fact}" for fact in WIKI)

LOG = [
    f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}.{i:03d}Z WARN worker[{7000 + i}] retry {i}/60 "
    f"POST /v2/ledger/batches/{9000 + i} -> 503 (upstream=ledger-{i % 4}.internal:8443)"
    for i in range(60)
]
AROUND_LOG = [
    "The importer writes to the ledger_sync_2 schema since the migration on Tuesday.",
    "The ledger answers about 12 calls a minute per tenant.",
]


def _prompt_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def _work(ctx: LocalContext, steps: int, *, start: int = 0, every: int = 5) -> None:
    """Tool calls with sizable results and narration, composing as a loop would."""
    for i in range(start, start + steps):
        ctx.add(
            "assistant",
            f"Step {i}: checking module m_{i}.",
            tool_calls=[{"id": f"c{i}", "name": "bash", "arguments": f'{{"cmd": "pytest tests/test_m_{i}.py"}}'}],
        )
        ctx.add(
            "tool",
            "\n".join(f"tests/test_m_{i}.py::test_case_{j} PASSED [{j * 3 % 100:3d}%]" for j in range(12)),
            call_id=f"c{i}",
        )
        ctx.add("assistant", f"Module m_{i} passes its 12 tests; moving on to m_{i + 1} after editing m_{i}.py.")
        if i % every == 0:
            ctx.compose()


def _until_authored(ctx: LocalContext, tag: int, *, limit: int = 3_000) -> None:
    """Work until the rolling layer lets message `tag` go (it keeps the user's messages
    while tool output can go instead, so this takes a while)."""
    for start in range(0, limit, 50):
        _work(ctx, 50, start=start)
        if any(item.tag == tag for item in ctx.compose().report.authored):
            return
    pytest.fail(f"message {tag} still in the rolling layer after {limit} steps")


def _layer(ctx: LocalContext, name: str) -> str:
    layer = next(view for view in ctx.compose().layers if view.name == name)
    return "\n".join(item.text for item in layer.items)


def test_the_facts_here_are_not_recognised_as_rules() -> None:
    """The premise: nothing but who wrote them keeps these lines."""
    for fact in [*WIKI, *AROUND_LOG]:
        assert not has_constraint(fact), fact


@pytest.mark.parametrize("steps", [150, 1500])
def test_a_users_facts_outlive_any_quantity_of_tool_output_and_narration(make_ctx: MakeContext, steps: int) -> None:
    ctx = make_ctx(window=WINDOW, settings=SMALL)
    ctx.add("user", GOAL)
    ctx.add("assistant", "Where does the importer live, and who owns the ledger side?")
    ctx.add("user", DOC)
    _work(ctx, steps)
    composition = ctx.compose("go on")
    text = _prompt_text(composition.messages)
    for fact in WIKI:
        assert fact in text, fact
    assert all(fact in _layer(ctx, "authored") for fact in WIKI)
    assert composition.report.total <= composition.report.budget
    assert composition.report.user_share > 0


def test_within_its_share_the_users_message_is_shown_verbatim(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=WINDOW, settings=SMALL)
    ctx.add("user", GOAL)
    tag = ctx.add("user", DOC)
    _until_authored(ctx, tag)
    item = next(i for i in ctx.compose().report.authored if i.tag == tag)
    assert item.kind == "authored"
    assert DOC in item.text


def test_a_long_paste_is_archived_and_the_users_own_lines_stay(make_ctx: MakeContext) -> None:
    """One paste larger than the layer's share: its log goes behind a locator, read back
    in full by `read`; the user's sentences around it stay in the prompt, verbatim."""
    ctx = make_ctx(window=WINDOW, settings=SMALL)
    ctx.add("user", GOAL)
    message = "\n".join([AROUND_LOG[0], "this is what the nightly run printed:", *LOG, AROUND_LOG[1]])
    tag = ctx.add("user", message)
    ctx.add("user", DOC)
    _work(ctx, 120)
    composition = ctx.compose("go on")
    text = _prompt_text(composition.messages)
    for fact in [*AROUND_LOG, *WIKI]:
        assert fact in text, fact
    assert LOG[30] not in text, "the paste is behind a locator"
    assert f"ctx_read({tag})" in text
    item = next(i for i in composition.report.authored if i.tag == tag)
    assert item.archived >= len(LOG) - 2
    read = ctx.read(tag)
    assert all(line in read for line in LOG), "nothing of the paste is lost"


def test_over_its_share_chatter_is_folded_before_any_statement_goes(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=WINDOW, settings={**SMALL, "user_share": 0.05})
    chatter = [  # short (repeats this short are not left out) and stating nothing
        "ok thanks",
        "sounds good, go ahead",
        "hmm, why?",
        "what did it print?",
        "nice",
        "yes please",
        "can you show the diff?",
        "looks fine to me",
    ]
    facts = [f"The tenant {name} has {n} ledgers in the archive." for name, n in (("Orsolya", 37), ("Baltrum", 12))]
    ctx.add("user", GOAL)
    for i in range(40):
        ctx.add("user", f"{chatter[i % len(chatter)]}\n{facts[i]}" if i < len(facts) else chatter[i % len(chatter)])
        _work(ctx, 4, start=10 * i, every=2)
    _work(ctx, 40, start=500)
    composition = ctx.compose("go on")
    authored = composition.report.authored
    assert sum(item.folded for item in authored) > 0, "the layer was over its share: chatter folded"
    assert all(fact in _layer(ctx, "authored") for fact in facts)
    for item in authored:
        if item.folded:
            assert "ctx_read" in item.text or item.text.endswith("[…]")


def test_a_paste_is_split_into_its_lines() -> None:
    """A pasted document is its lines (each statement on its own); pasted machine output
    is one block however long, a fenced block too; a table's rows are statements."""
    table = "| service | owner |\n|---|---|\n| ledger-sync | payments-core |\n| importer | data-eng |"
    fenced = "```\n" + "\n".join(f"x = {i}" for i in range(6)) + "\n```"
    content = "\n".join([DOC, "the log:", *LOG[:20], AROUND_LOG[0], table, fenced, AROUND_LOG[1]])
    ps = parts(content)
    lines = [p.text for p in ps if p.kind == "line"]
    pastes = [p for p in ps if p.kind == "paste"]
    for fact in [*WIKI, *AROUND_LOG]:
        assert any(fact in line for line in lines), fact
    assert "| ledger-sync | payments-core |" in lines
    assert len(pastes) == 2
    log, code = pastes
    assert (log.first, log.last) == (content.split("\n").index(LOG[0]) + 1, content.split("\n").index(LOG[19]) + 1)
    assert code.text == fenced


def test_the_authored_layer_survives_reopening(make_ctx: MakeContext) -> None:
    ctx = make_ctx("agent.db", window=WINDOW, settings=SMALL)
    ctx.add("user", GOAL)
    tag = ctx.add("user", DOC)
    _until_authored(ctx, tag)
    before = _layer(ctx, "authored")
    ctx.close()
    again = make_ctx("agent.db", window=WINDOW, settings=SMALL)
    assert _layer(again, "authored") == before
    assert all(fact in before for fact in WIKI)


@pytest.mark.parametrize("share", [0, -0.1, 1.5, True, "0.3"])
def test_user_share_must_be_a_share_of_the_room(share: object) -> None:
    with pytest.raises(InvalidConfig, match="user_share"):
        ContextConfig(user_share=share)  # type: ignore[arg-type]
