"""Summary edge cases: one line per message whatever its breaks, merges that rank the same
in any instance, and every rule clause of a long sentence."""

from __future__ import annotations

import re

import pytest

from ctxbus.agents.context import ExtractiveSummarizer
from ctxbus.schemas._message import Message, MessageKind, MessageRole, message_id
from tests.context.conftest import MakeContext

_HEAD = re.compile(r"§\d+§ ")


def _msg(tag: int, content: str, role: MessageRole = "assistant", kind: MessageKind = "chat") -> Message:
    return Message(
        id=message_id(content, tag), tag=tag, role=role, kind=kind, content=content, created_at=0.0, tokens=1
    )


def test_a_message_with_line_breaks_is_one_summary_line() -> None:
    summarizer = ExtractiveSummarizer()
    crlf = "Please deploy the api service to staging\r\nbut do not touch the prod database\r\nbefore 18:00 on Friday."
    entries = [
        summarizer.summarize([_msg(3, crlf, role="user")]),
        summarizer.summarize([_msg(7, "Here is the config:\n```\nretries: 3\n}\n```")]),
        summarizer.summarize([_msg(9, "And the other one,\nsoft\u2028wrapped:\n```\n  timeout: 30s\n}\n```")]),
    ]
    assert entries[0] == (
        "§3§ user: Please deploy the api service to staging but do not touch the prod database before 18:00 on Friday."
    )
    assert entries[2] == "§9§ assistant: And the other one, soft wrapped: ``` timeout: 30s } ```"
    assert all(entry.splitlines() == [entry] for entry in entries)
    assert summarizer.merge(entries, 200).splitlines() == entries
    for target in (10, 25, 40):
        lines = summarizer.merge(entries, target).splitlines()
        assert lines and all(_HEAD.match(line) for line in lines), "no piece of a line loses its source"


def test_summary_lines_in_the_prompt_keep_their_tags(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=520, settings={"reserve_system": 100, "reserve_output": 50, "protected_recent": 2})
    ctx.add("user", "Goal: ship the release.")
    ctx.add(
        "assistant", "Checked staging:\r\nthe api service is healthy\r\nbut we did not migrate table orders_v2 yet."
    )
    summaries: list[str] = []
    for i in range(40):
        ctx.add("assistant", f"Step {i}: looked at module m{i}.py and it has {i} TODO items left in the queue.")
        head = ctx.compose().messages[1]["content"]
        summaries += [s for s in head.split("\n\n") if s.startswith("[summary")]
    assert summaries
    for summary in summaries:
        assert all(_HEAD.match(line) for line in summary.splitlines()[1:]), summary


def test_a_merge_rejoins_a_line_an_older_writer_broke() -> None:
    older = (
        "§3§ user: Please deploy the api service\r\n\nbut do not touch the prod database\n§4§ assistant: ok, 3 files"
    )
    assert ExtractiveSummarizer().merge([older], 200).splitlines() == [
        "§3§ user: Please deploy the api service but do not touch the prod database",
        "§4§ assistant: ok, 3 files",
    ]


def test_merge_ranks_the_same_whichever_instance_wrote_the_lines() -> None:
    """A restarted agent merges its stored summary exactly as the one that wrote it would."""
    opening = "The report covers " + ("several items in detail " * 16).strip() + " over 3 days."
    content = opening + " Never deploy on Friday. " + " ".join(["Filler sentence here."] * 130)
    writer = ExtractiveSummarizer()
    ruled = writer.summarize([_msg(1, content)])
    plain = writer.summarize([_msg(2, "The cache lives in /var/cache/x and holds 4 GB, the error was found.")])
    assert ruled.index("Never deploy on Friday") > 400, "precondition: the rule comes late in its line"
    merged = writer.merge([ruled, plain], 160)
    assert merged == ExtractiveSummarizer().merge([ruled, plain], 160)
    assert merged == ruled, "the rule counts wherever it is in the line"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            "Don't bump numpy past 1.26.4, and do not touch requirements-dev.txt; the CI image pins Python 3.11.9 "
            "and anything else breaks the build on the arm64 runners we rent from Hetzner for EUR 40 per month.",
            ["Don't bump numpy past 1.26.4", "and do not touch requirements-dev.txt"],
        ),
        (
            "After going through all of the logs that the nightly job produced over the last week on both clusters, "
            "the conclusion is that the leak is real in worker-7 and not present in worker-3 at all, and we should "
            "not restart worker-3 because it holds 12 GB of warm cache.",
            ["and not present in worker-3 at all", "and we should not restart worker-3 because it holds 12 GB"],
        ),
    ],
)
def test_every_rule_clause_of_a_long_sentence_keeps_its_negation(text: str, kept: list[str]) -> None:
    line = ExtractiveSummarizer().summarize([_msg(1, text, role="user")])
    for clause in kept:
        assert clause in line
    assert text in line, "a sentence with numbers and negations is not cut (issue 21)"
