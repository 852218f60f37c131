"""OpenTelemetry spans, recorded by the SDK's in-memory exporter: the propose an agent
sends, the commit a real coordinator makes of it, and the compose of an agent's prompt,
with the GenAI conventions' attribute names where they apply."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ctxbus.agents.brief import Proposer
from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import GEN_AI, configure_from_env, span
from ctxbus.schemas import AddNote, Committed, Domain
from tests._support import serving_coordinator

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider, set once (OpenTelemetry allows no second), with an
    exporter emptied for each test."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_a_proposal_and_its_commit_are_spans_with_what_they_did(
    nats_url: str, spans: InMemorySpanExporter
) -> None:
    domain = Domain.parse(f"trace/s/{uuid.uuid4().hex[:8]}")
    async with serving_coordinator(nats_url, coordinator_id="c-traced") as serving:
        proposer = Proposer(serving.client, domain, agent_id="a1")
        assert await proposer.propose(AddNote(text="traced"), key="k1") == Committed(revision=1)
        assert (await proposer.propose(AddNote(text="traced"), key="k1")).duplicate  # type: ignore[union-attr]
    proposes = _named(spans, "ctxbus.propose")
    assert [s.attributes and s.attributes["ctxbus.outcome"] for s in proposes] == ["committed", "duplicate"]
    first = proposes[0]
    assert first.kind is SpanKind.CLIENT and first.attributes is not None
    assert first.attributes[GEN_AI.AGENT_ID] == "a1"
    assert first.attributes["ctxbus.domain"] == str(domain)
    assert first.attributes["ctxbus.op"] == "add_note"
    assert first.attributes["ctxbus.revision"] == 1
    commits = _named(spans, "ctxbus.commit")
    assert commits and commits[0].attributes is not None
    assert commits[0].attributes["ctxbus.domain"] == str(domain)
    assert commits[0].attributes["ctxbus.commits"] == 1
    assert commits[0].attributes["ctxbus.revision"] == 1


async def test_a_compose_is_a_span_with_the_prompt_it_made(
    nats_url: str, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    domain = Domain.parse(f"trace/s/{uuid.uuid4().hex[:8]}")
    async with serving_coordinator(nats_url, coordinator_id="c-compose") as serving:
        config = AgentConfig(
            agent_id="a2", domain=domain, store=tmp_path / "a2.db", context=ContextConfig(window=8_000)
        )
        agent = Agent(serving.client, config)
        try:
            agent.user("Fix the flaky test. Never touch vendor/.")
            composition = agent.compose()
        finally:
            agent.close()
    (compose,) = _named(spans, "ctxbus.compose")
    assert compose.attributes is not None
    assert compose.attributes[GEN_AI.AGENT_ID] == "a2"
    assert compose.attributes["ctxbus.prompt_tokens"] == composition.report.total > 0
    assert compose.attributes["ctxbus.band"] == "quiet"


def test_an_exception_marks_its_span_as_an_error_and_goes_on(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError, match="bad"), span("ctxbus.test", {"kept": 1, "left_out": None}):
        raise ValueError("bad")
    (failed,) = _named(spans, "ctxbus.test")
    assert failed.status.status_code is StatusCode.ERROR and "ValueError: bad" in (failed.status.description or "")
    assert dict(failed.attributes or {}) == {"kept": 1}


def test_nothing_is_configured_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert configure_from_env("ctxbus") is False


async def test_the_agent_loop_traces_each_model_call_with_its_usage_and_each_tool_call(
    nats_url: str, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """Against the OpenAI-compatible stand-in: a `chat <model>` client span per turn with
    the GenAI conventions' token usage (cached tokens as the endpoint reported them), and
    an `execute_tool <name>` span per call, each inside its agent's trace."""
    from ctxbus.agents.runtime import Agent
    from tests._support import fresh_domain
    from tests.loop._standin import MODEL, StandIn, write_corpus
    from tests.loop._swarm import context_config, looping

    work = tmp_path / "work"
    write_corpus(work, agents=1, steps=6)
    domain = fresh_domain()
    config = AgentConfig(
        agent_id="agent-1", domain=domain, store=tmp_path / "agent-1.db", context=context_config("agent-1", domain, 1)
    )
    async with serving_coordinator(nats_url, coordinator_id="c-loop-traced") as serving:
        with StandIn(agents=1, steps=6) as standin:
            async with (
                Agent.open(serving.client, config) as agent,
                looping(agent, work, base_url=standin.base_url) as loop,
            ):
                stats = await loop.run("Fix the flaky cache tests.")
    chats = _named(spans, f"chat {MODEL}")
    assert len(chats) == stats.turns > 1
    for chat, turn in zip(chats, stats.history, strict=True):
        assert chat.kind is SpanKind.CLIENT and chat.attributes is not None
        assert chat.attributes[GEN_AI.OPERATION] == "chat"
        assert chat.attributes[GEN_AI.REQUEST_MODEL] == MODEL
        assert chat.attributes[GEN_AI.INPUT_TOKENS] == turn.prompt_tokens > 0
        assert chat.attributes[GEN_AI.CACHE_READ_TOKENS] == turn.cached_tokens
        assert chat.attributes[GEN_AI.OUTPUT_TOKENS] == turn.completion_tokens
    assert sum(turn.cached_tokens for turn in stats.history) > 0, "the stand-in reports cached prefixes"
    tools = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool ")]
    assert tools and all(s.attributes and s.attributes[GEN_AI.TOOL_CALL_ID] for s in tools)
    assert {s.attributes[GEN_AI.TOOL_NAME] for s in tools if s.attributes} >= {"brief_propose"}
