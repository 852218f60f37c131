"""Issue 21, second round: a rule the classifier does not recognise still survives as the
user's own words in the summary.

The rules catch many ways of putting a rule, never all ("Invoices are numbered per
tenant." binds nothing they know). What the summary keeps decides whether such a rule
survives: a user's short declarative sentence is kept before the chatter around it, a
user's statement before the assistant's narration, and short statements before a long
task text whose rules are pinned already. (The sentences here are not those of
bench/reworded_probes.json.)
"""

from __future__ import annotations

import pytest

from ctxbus.agents.context import ContextConfig, ExtractiveSummarizer, LocalContext
from ctxbus.agents.context._binding import states
from ctxbus.agents.context._classify import has_constraint
from tests.context.conftest import MakeContext
from tests.context.test_summary import _msg

UNRECOGNISED = ["Invoices are numbered per tenant.", "Release branches are cut from develop.", "发票按租户分别编号。"]


def _narration(first_tag: int, n: int) -> list[str]:
    summarizer = ExtractiveSummarizer()
    return [
        summarizer.summarize(
            [
                _msg(
                    first_tag + i,
                    f"Ran pytest on tests/test_{i}.py: 14 passed in 2.3s, db/x_{i}.py fixed in a1b2c3{i}.",
                )
            ]
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("statement", UNRECOGNISED)
def test_the_sentences_here_are_not_recognised_as_rules(statement: str) -> None:
    """The premise of the other tests: these rules slip past the classifier."""
    assert not has_constraint(statement)
    assert states(statement)


@pytest.mark.parametrize(
    "chat",
    [
        "ok, thanks.",
        "好的，继续。",
        "yes, go ahead",
        "Looks reasonable so far.",
        "What's next on your list?",
        "I read through the last diff and the loader reads well now.",
        "I think the naming is fine.",
        "We were stuck on that for a week.",
    ],
)
def test_acknowledgements_questions_reactions_and_reports_state_nothing(chat: str) -> None:
    assert not states(chat)


@pytest.mark.parametrize("statement", UNRECOGNISED)
def test_a_merge_keeps_a_users_statement_before_narration(statement: str) -> None:
    summarizer = ExtractiveSummarizer()
    said = summarizer.summarize([_msg(3, statement, role="user")])
    narration = _narration(10, 6)
    merged = summarizer.merge([*narration[:3], said, *narration[3:]], max_tokens=40)
    assert statement in merged
    assert len(merged.splitlines()) < 7, "something had to go"


def test_a_merge_does_not_rank_a_users_acknowledgement_above_narration() -> None:
    """Being the user's is not enough: "ok, thanks." says nothing worth a narration line."""
    summarizer = ExtractiveSummarizer()
    ack = summarizer.summarize([_msg(3, "ok, thanks.", role="user")])
    narration = _narration(10, 1)[0]
    room = (len(narration) + 1) // 3 + 1  # tokens for the narration line, not for both
    assert len(narration) + len(ack) + 2 > room * 3
    assert summarizer.merge([ack, narration], max_tokens=room) == narration


def test_a_users_summary_line_quotes_the_statement_not_the_chatter_around_it() -> None:
    """A long chatty turn gets a short line: its statement goes in before the chatter."""
    turn = (
        "I went through the whole diff this morning and the loader module looks much tidier than it did on "
        "Monday, the helper names read well and the fixture cleanup in conftest is a clear improvement too. "
        "The logging is still a little noisy in places but we can live with that for the next few days. "
        f"{UNRECOGNISED[1]} "
        "Other than that, go ahead with the plan you outlined yesterday and tell me when the first part is green, "
        "and include the timings from the last run so I can compare them with the numbers from yesterday."
    )
    line = ExtractiveSummarizer().summarize([_msg(7, turn, role="user")])
    assert UNRECOGNISED[1] in line
    assert len(line) < len(turn) / 2


def test_a_merge_keeps_short_user_statements_before_a_long_task_text() -> None:
    """The task's rules are pinned as its record already; its summary line must not crowd
    out the short statements that exist nowhere else."""
    summarizer = ExtractiveSummarizer()
    task = (
        "Fix the failing importer. Do NOT modify the tests or the configuration files (pyproject.toml, setup.cfg). "
        "Always use non-interactive flags (-y, --no-input) for every command you run. Never commit your changes, "
        "and do not submit the patch before the whole test suite passes on the branch. Keep each edit small "
        "and explain it before you make it, with the file and the line you change."
    )
    long_line = summarizer.summarize([_msg(2, task, role="user")])
    short = [summarizer.summarize([_msg(5 + i, s, role="user")]) for i, s in enumerate(UNRECOGNISED[:2])]
    assert len(long_line) > sum(len(s) for s in short) + 20
    merged = summarizer.merge([long_line, *short, *_narration(10, 4)], max_tokens=len(long_line) // 3)
    for statement in UNRECOGNISED[:2]:
        assert statement in merged


def test_an_unrecognised_rule_survives_a_long_session_in_the_summary(make_ctx: MakeContext) -> None:
    """End to end at a small window: the rule is never pinned, yet the final prompt has it."""
    ctx: LocalContext = make_ctx(config=ContextConfig(window=4_000, reserve_output=512, reserve_system=256))
    ctx.add("user", "Tidy up the invoicing module.")
    ctx.add("assistant", "Starting with the numbering code.")
    ctx.add("user", f"ok, thanks. {UNRECOGNISED[0]}")
    for i in range(400):
        ctx.add(
            "assistant",
            f"Step {i}: ran pytest on tests/test_inv_{i}.py, 14 passed in 2.{i}s; edited billing/inv_{i}.py "
            f"lines {i}-{i + 9} and db/schema_{i}.sql, commit a1b2c3{i:03d}.",
        )
        if i % 5 == 0:
            ctx.compose()
    prompt = ctx.compose("go on")
    pinned = next(layer for layer in prompt.layers if layer.name == "pinned")
    assert not any(UNRECOGNISED[0] in item.text for item in pinned.items), "the premise: it is not pinned"
    summary = next(layer for layer in prompt.layers if layer.name == "summary")
    assert summary.items, "the session was long enough to be summarized"
    assert UNRECOGNISED[0] in "\n".join(m["content"] for m in prompt.messages)


def test_a_users_statement_survives_when_the_summary_must_give_way_to_the_recent_window(make_ctx: MakeContext) -> None:
    """The newest tool output alone nearly fills the layers, so the summary must give way.
    The user's statement is not in it: it is in the authored layer, kept by who wrote it,
    word for word, however much of the summary goes."""
    ctx = make_ctx(config=ContextConfig(window=4_000, reserve_output=512, reserve_system=256))
    ctx.add("user", "Tidy up the invoicing module.")
    ctx.add("assistant", "Starting with the numbering code.")
    ctx.add("user", "ok, thanks. Invoices are numbered per tenant.")
    for i in range(60):
        ctx.add("assistant", f"Step {i}: edited billing/inv_{i}.py lines {i}-{i + 9}, commit a1b2c3{i:03d}.")
        if i % 5 == 0:
            ctx.compose()
    dropped = []
    for i in range(4):
        ctx.add("assistant", f"Running the suite, part {i}.", tool_name="pytest", call_id=f"p{i}")
        log = "\n".join(f"tests/test_{i}_{j}.py::case PASSED in {j % 7} ms" for j in range(55))
        ctx.add("tool", log, tool_name="pytest", call_id=f"p{i}")
        report = ctx.compose().report
        dropped += [t.id for t in report.trims if t.source == "summary" and t.destination == "archive"]
    prompt = ctx.compose("go on")
    assert prompt.report.total <= prompt.report.budget
    assert "Invoices are numbered per tenant." in "\n".join(m["content"] for m in prompt.messages)
    authored = next(layer for layer in prompt.layers if layer.name == "authored")
    assert any("Invoices are numbered per tenant." in item.text for item in authored.items), "kept by who wrote it"
    summary = "\n".join(item.text for layer in prompt.layers if layer.name == "summary" for item in layer.items)
    assert "Invoices are numbered" not in summary and dropped, "the summary gave way; the statement was not in it"
