"""pydantic's reports, worded once for every error message that quotes them."""

from __future__ import annotations

from typing import Annotated, Self

import msgpack
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ctxbus.schemas import (
    BriefSnapshot,
    Domain,
    Envelope,
    EnvelopeInvalid,
    LeaseRecord,
    MessageType,
    Presence,
    describe_validation_error,
)


class _Inner(BaseModel):
    n: int


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=5)] = "a"
    count: int = 0
    url: str = "nats://x"
    inner: _Inner | None = None
    low: int = 0
    high: int = 1

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        if not url.startswith("nats://"):
            raise ValueError(f"server URL {url!r} must start with nats://")
        return url

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.low > self.high:
            raise ValueError("low is above high")
        return self


def _describe(raw: object, *, skip: int = 0, show_input: bool = True) -> str:
    with pytest.raises(ValidationError) as caught:
        _Shape.model_validate(raw)
    return describe_validation_error(caught.value, skip=skip, show_input=show_input)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        pytest.param(
            {"count": "x"},
            "field 'count': Input should be a valid integer, unable to parse string as an integer (got 'x')",
            id="wrong_type",
        ),
        pytest.param({"name": "abcdefg"}, "field 'name' is 7 characters long, over the limit of 5", id="too_long"),
        pytest.param(
            {"url": "http://x"},
            "field 'url': server URL 'http://x' must start with nats:// (got 'http://x')",
            id="value_error_without_its_prefix",
        ),
        pytest.param({"inner": {}}, "field 'inner.n': Field required", id="missing_quotes_no_parent"),
        pytest.param({"low": 2}, "low is above high (got {'low': 2})", id="whole_value_names_no_field"),
        pytest.param({"extra": 1}, "field 'extra': Extra inputs are not permitted (got 1)", id="extra"),
        pytest.param(
            {"count": "x" * 100},
            "field 'count': Input should be a valid integer, unable to parse string as an integer "
            f"(got {repr('x' * 100)[:57]}...)",
            id="long_input_clipped",
        ),
    ],
)
def test_each_problem_is_one_clause(raw: object, says: str) -> None:
    assert _describe(raw) == says


def test_problems_are_joined_in_order_and_past_ten_only_counted() -> None:
    assert _describe({"count": "x", "name": "abcdefg"}) == (
        "field 'name' is 7 characters long, over the limit of 5; "
        "field 'count': Input should be a valid integer, unable to parse string as an integer (got 'x')"
    )
    described = _describe({f"x{i}": i for i in range(12)})
    assert described.count("Extra inputs are not permitted") == 10
    assert described.endswith("field 'x9': Extra inputs are not permitted (got 9); and 2 more problems")


def test_skip_drops_leading_parts_and_show_input_the_value() -> None:
    assert _describe({"inner": {"n": "x"}}, skip=1, show_input=False) == (
        "field 'n': Input should be a valid integer, unable to parse string as an integer"
    )
    assert _describe({"url": "http://x"}, skip=1, show_input=False) == "server URL 'http://x' must start with nats://"
    assert _describe({"name": "abcdefg"}, skip=1) == "the value is 7 characters long, over the limit of 5"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (msgpack.packb(5), "lease value is invalid: Input should be a valid dictionary or instance of LeaseRecord (got 5)"),
        (msgpack.packb({"state": "x"}), "lease value is invalid: field 'holder': Field required"),
        (msgpack.packb({"holder": ""}), "lease value is invalid: field 'holder': String should have at least 1 character (got '')"),
    ],
    ids=["not_a_map", "missing", "too_short"],
)  # fmt: skip
def test_a_bad_stored_value_is_described_not_dumped(data: bytes, says: str) -> None:
    with pytest.raises(EnvelopeInvalid) as caught:
        LeaseRecord.decode(data)
    assert str(caught.value) == says
    with pytest.raises(EnvelopeInvalid, match="^presence value is invalid: "):
        Presence.decode(data)


def test_a_bad_snapshot_body_names_every_problem() -> None:
    envelope = Envelope[dict[str, int]](
        type=MessageType.SNAPSHOT, domain=Domain.parse("a/b/c"), sender="x", body={"seq": -1}
    )
    with pytest.raises(EnvelopeInvalid) as caught:
        BriefSnapshot.decode(envelope.encode())
    assert str(caught.value) == (
        "snapshot body is invalid: field 'seq': Input should be greater than or equal to 0 (got -1); "
        "field 'brief': Field required"
    )
