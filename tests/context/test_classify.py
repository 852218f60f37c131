"""Constraint detection by rule, in English and Chinese, and verbatim units."""

from __future__ import annotations

import pytest

from ctxbus.agents.context._classify import constraint_text, facts, has_constraint, split_units


@pytest.mark.parametrize(
    "text",
    [
        "Remember: the staging DB is read-only.",
        "Please note that the API key rotates daily.",
        "You must run the linter before pushing.",
        "Never force-push to main.",
        "Do not commit your changes.",
        "Do \nnot rush to solutions.",
        "don't add comments to the script",
        "Don’t touch the vendored code.",
        "Avoid interactive tools like vi, nano",
        "Make sure the tests pass.",
        "I want us to be working only on one scenario at a time",
        "Use no more than 5 files.",
        "Keep the budget <= 50k tokens.",
        "Ship it by Friday.",
        "记住：生产库只读。",
        "注意不要删除日志。",
        "一定要先备份。",
        "别改配置文件。",
        "不要提交代码。",
        "必须使用 UTF-8。",
    ],
)
def test_triggers_are_detected(text: str) -> None:
    assert has_constraint(text)


@pytest.mark.parametrize(
    "text",
    [
        "The function returns a list of books.",
        "Here is the output of the test run.",
        "特别好，谢谢。",
        "区别在于缓存。",
        "I noted the time in the log",
        "x = y + 1",
    ],
)
def test_plain_text_is_not_a_constraint(text: str) -> None:
    assert not has_constraint(text)


def test_constraint_text_quotes_rules_verbatim_with_the_block_they_introduce() -> None:
    text = (
        "Fix the parser in src/parse.py.\n\n"
        "It fails on empty input and we think the tokenizer is at fault.\n"
        "Do NOT commit your changes.\n\n"
        "You MUST use this EXACT command to submit:\n\n"
        "```bash\necho DONE && cat patch.txt\n```\n\n"
        "**CRITICAL:**\n1. Work autonomously\n2. Use the 'chat' command instead\n\n"
        "Thanks, have fun."
    )
    rules = constraint_text(text)
    assert "Do NOT commit your changes." in rules
    assert "```bash\necho DONE && cat patch.txt\n```" in rules
    assert "1. Work autonomously\n2. Use the 'chat' command instead" in rules
    assert "have fun" not in rules and "src/parse.py" not in rules
    for line in rules.splitlines():
        assert line in text, "every line is a verbatim piece of the source"


def test_units_are_verbatim_sentences_items_and_blocks() -> None:
    text = "First sentence (e.g. this one). Second one!\n- item one\n  continued\n```\ncode\n```"
    units = split_units(text)
    assert units == ["First sentence (e.g. this one).", "Second one!", "- item one\n  continued", "```\ncode\n```"]


def test_facts_are_kept_verbatim() -> None:
    text = (
        "Deploy /srv/app/config.yaml to https://example.com/api?v=2 within 30 minutes; "
        "ticket django-11797 costs $300 and 2.5 GB at 10:00 AM, see §12§ and lookups.py"
    )
    found = facts(text)
    for fact in (
        "/srv/app/config.yaml",
        "https://example.com/api?v=2",
        "30 minutes",
        "django-11797",
        "$300",
        "2.5 GB",
        "10:00 AM",
        "§12§",
        "lookups.py",
    ):
        assert fact in found


def test_a_remember_request_that_points_back_takes_the_sentence_before() -> None:
    text = "Sounds good. Keep each change under 50 lines. Would you remember that, or should we write it down?"
    assert constraint_text(text) == (
        "Keep each change under 50 lines. Would you remember that, or should we write it down?"
    )
    assert constraint_text("Hello. Remember that the port is 8443.") == "Remember that the port is 8443."
