"""Large tool output: compact in the prompt, whole on demand, found by BM25 search."""

from __future__ import annotations

import pytest

from ctxbus.agents.context import ExtractiveSummarizer
from ctxbus.agents.context._archive import _snippet, error_lines
from ctxbus.schemas import UsageError
from tests.context.conftest import MakeContext


def _log(n: int, marker: str, error_at: int) -> str:
    lines = [f"{marker} step {i}: compiled unit_{i}.o in {i % 7} ms" for i in range(1, n + 1)]
    lines[error_at - 1] = f"ERROR: linker failed on unit_{error_at}.o: undefined symbol zlib_inflate"
    return "\n".join(lines)


def test_large_output_is_archived_and_read_back(make_ctx: MakeContext) -> None:
    ctx = make_ctx(settings={"archive_threshold": 500})
    ctx.add("assistant", "Building.", tool_name="make", call_id="m1")
    log = _log(300, "build", error_at=150)
    tag = ctx.add("tool", log, tool_name="make", call_id="m1")
    message = ctx.message(tag)
    assert message.state == "archived" and message.content == log and message.tokens > 500

    shown = ctx.compose().messages[-1]["content"]
    lines = log.splitlines()
    assert shown.startswith(f"§{tag}§ [archived make output: {message.tokens:,} tokens, 300 lines; ctx_read({tag})")
    assert lines[0] in shown and lines[-1] in shown and lines[150] not in shown
    assert "150: ERROR: linker failed on unit_150.o" in shown
    assert ctx.compose().report.layers["rolling"] < message.tokens / 3

    assert ctx.read(tag) == log
    assert ctx.read(f"§{tag}§", lines=(149, 151)) == "\n".join(f"{n}: {lines[n - 1]}" for n in (149, 150, 151))
    assert ctx.read(message.id, query="zlib_inflate") == f"150: {lines[149]}"
    assert ctx.read(tag, lines=(299, 400)).splitlines()[-1] == f"300: {lines[-1]}"


def test_search_ranks_with_bm25_across_archived_and_evicted(make_ctx: MakeContext) -> None:
    ctx = make_ctx(window=2_000, settings={"reserve_system": 300, "reserve_output": 300, "archive_threshold": 400})
    ctx.add("assistant", "Run the build.", tool_name="make", call_id="b")
    build = ctx.add("tool", _log(200, "build", error_at=120), tool_name="make", call_id="b")
    early = ctx.add("assistant", "The flaky test is test_payment_refund in billing/tests/test_refund.py.")
    for i in range(150):
        ctx.add("assistant", f"Unrelated chatter number {i} about formatting and naming of variables.")
    ctx.compose()
    assert ctx.message(early).tag == early
    assert all(item.tag != early for view in ctx.inspect() for item in view.items), "evicted from the prompt"

    hits = ctx.search("zlib_inflate linker")
    assert hits and hits[0].tag == build and hits[0].tool_name == "make"
    assert "[" in hits[0].snippet and hits[0].score > 0
    hits = ctx.search("which refund test is flaky?", limit=3)
    assert hits[0].tag == early and hits[0].layer == "summary"
    assert len(ctx.search("unrelated chatter", limit=4)) == 4
    assert ctx.search('"zlib_inflate" OR NEAR(* -x)')[0].tag == build, "FTS syntax in a query is just words"
    assert ctx.search("nothingmatchesthis") == []


def test_error_lines_are_found_past_many_lines_that_only_mention_errors(make_ctx: MakeContext) -> None:
    lines = ["$ make test", *(f"module_{i}: 0 errors, 0 warnings" for i in range(40))]
    lines += ["ERROR: test_payment_refund crashed with ConnectionRefused", *(f"ok {i}" for i in range(40)), "done"]
    log = "\n".join(lines)
    assert error_lines(log.splitlines(), set(), 5) == [(42, lines[41])]

    ctx = make_ctx(settings={"archive_threshold": 200})
    ctx.add("assistant", "Testing.", tool_name="make", call_id="t")
    tag = ctx.add("tool", log, tool_name="make", call_id="t")
    assert "42: ERROR: test_payment_refund crashed" in ctx.compose().messages[-1]["content"]
    summary = ExtractiveSummarizer().summarize([ctx.message(tag)])
    assert "ERROR: test_payment_refund crashed" in summary


def test_error_lines_are_numbered_as_read_numbers_them(make_ctx: MakeContext) -> None:
    # A progress bar redraws itself with "\r"; `read` (str.splitlines) counts each as a line.
    log = "10%\r20%\r100%\nok\nERROR: boom\ndone\n"
    ctx = make_ctx(settings={"archive_threshold": 1, "compact_lines": 1})
    ctx.add("assistant", "Downloading.", tool_name="fetch", call_id="f")
    tag = ctx.add("tool", log, tool_name="fetch", call_id="f")
    assert ctx.read(tag, lines=(5, 5)) == "5: ERROR: boom"
    shown = ctx.compose().messages[-1]["content"]
    assert shown.endswith("errors:\n5: ERROR: boom"), shown
    summary = ExtractiveSummarizer().summarize([ctx.message(tag)])
    assert "; 10%; ERROR: boom" in summary, summary


def test_error_lines_survive_text_whose_lower_case_is_longer() -> None:
    # "İ".lower() is two characters: offsets into a lower-cased copy would drift.
    lines = ["İİİİ retrying", "İİ ok", "Traceback (most recent call last):", "ValueError: bad"]
    assert error_lines(lines, set(), 5) == [(3, lines[2]), (4, lines[3])]


def test_long_lines_of_a_compact_form_are_clipped_between_words(make_ctx: MakeContext) -> None:
    ctx = make_ctx(settings={"archive_threshold": 20, "compact_line_chars": 40})
    ctx.add("assistant", "Listing.", tool_name="ls", call_id="l")
    ctx.add("tool", "words " * 60 + "\nERROR: " + "failed " * 20, tool_name="ls", call_id="l")
    shown = ctx.compose().messages[-1]["content"].splitlines()
    assert shown[1:] == ["words " * 5 + "words…", "ERROR: " + "failed " * 3 + "failed…"]


def test_reading_a_range_past_the_end_says_how_many_lines_there_are(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    tag = ctx.add("assistant", "one\ntwo\nthree")
    assert ctx.read(tag, lines=(3, 9)) == "3: three"
    with pytest.raises(UsageError, match="has 3 lines"):
        ctx.read(tag, lines=(5, 9))


def test_a_query_says_when_no_line_matches_and_how_many_it_left_out(make_ctx: MakeContext) -> None:
    ctx = make_ctx()
    tag = ctx.add("assistant", "\n".join(f"row {i}: ok" for i in range(1, 81)))
    assert ctx.read(tag, query="Failed, missing") == f"no line of §{tag}§ holds 'failed' or 'missing'"
    shown = ctx.read(tag, query="ok").splitlines()
    assert shown[0] == "1: row 1: ok" and shown[49] == "50: row 50: ok"
    assert shown[50:] == ["(and 30 more matching lines: narrow the query, or read a line range)"]


def test_a_snippet_is_the_line_holding_most_of_the_query(make_ctx: MakeContext) -> None:
    ctx = make_ctx(settings={"archive_threshold": 500})
    lines = [f"test_{i} PASSED: handler ok" for i in range(600)]
    lines[300] = "test_300 FAILED: handler raised KeyError 'tenant' after 3 retries"
    ctx.add("assistant", "Running the suite.", tool_name="pytest", call_id="p")
    tag = ctx.add("tool", "\n".join(lines), tool_name="pytest", call_id="p")
    (hit,) = ctx.search("handler keyerror", limit=1)
    assert hit.tag == tag
    assert hit.snippet == "test_300 FAILED: [handler] raised [KeyError] 'tenant' after 3 retries"


def test_a_snippet_shows_the_match_on_a_long_line_without_spaces(make_ctx: MakeContext) -> None:
    """Minified JSON: no space to start at, so the window is cut just before the match."""
    ctx = make_ctx()
    ctx.add("user", "go")
    tag = ctx.add("tool", '{"a":1,' * 100 + '"needle":"x"' + ',"b":2' * 50, tool_name="curl")
    (hit,) = ctx.search("needle")
    assert hit.tag == tag
    assert hit.snippet.startswith('…,{"a":1,{"a":1,{"a":1,{"a":1,"[needle]":"x","b":2'), hit.snippet


def test_a_snippet_always_holds_its_first_match() -> None:
    """A long term after a space near the window's start is kept whole, not cut off."""
    line = "a" * 50 + " " + "b" * 29 + " " + "n" * 80 + " tail " + "c" * 80
    assert _snippet(line, ["n" * 80]) == "…" + "b" * 29 + " [" + "n" * 80 + "]…"
