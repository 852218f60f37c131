"""Domains: the scope of everything; malformed tokens must never reach a subject."""

from __future__ import annotations

import pytest

from ctxbus.schemas import DOMAIN_TOKEN_MAX, Domain, InvalidDomain, UsageError


def test_parse_and_render() -> None:
    domain = Domain.parse("alice/sess-1/task_2")
    assert domain.tokens == ("alice", "sess-1", "task_2")
    assert domain.subject_prefix == "alice.sess-1.task_2"
    assert str(domain) == "alice/sess-1/task_2"
    assert Domain.parse(str(domain)) == domain
    assert hash(domain) == hash(Domain.parse("alice/sess-1/task_2"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("alice/s1", "3 parts, got 2"),
        ("a/b/c/d", "3 parts, got 4"),
        ("/s1/t1", "user is empty"),
        ("alice/s 1/t1", "session 's 1' contains ' '"),
        ("alice/s1/t>", "task 't>' contains '>'"),
        ("alice/s1/t.1", "contains '.'"),
        ("ålice/s1/t1", "contains 'å'"),
        (f"alice/s1/{'x' * (DOMAIN_TOKEN_MAX + 1)}", f"over the limit of {DOMAIN_TOKEN_MAX}"),
    ],
)
def test_bad_domains_are_refused_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(InvalidDomain) as caught:
        Domain.parse(text)
    assert says in str(caught.value)
    assert isinstance(caught.value, UsageError)


def test_longest_token_is_accepted() -> None:
    assert Domain.parse(f"a/b/{'x' * DOMAIN_TOKEN_MAX}").task == "x" * DOMAIN_TOKEN_MAX
