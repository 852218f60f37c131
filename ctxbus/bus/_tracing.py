"""OpenTelemetry spans for what an operator wants to follow across processes: compose,
model call, tool call, propose, commit.

ctxbus uses only the OpenTelemetry API (a dependency of the MCP SDK, so always there). As
every library should, it records nothing until the application configures a tracer
provider: until then each span is the API's no-op, a microsecond or two. An application
sets its own provider as usual (`opentelemetry.trace.set_tracer_provider`); the `ctxbus`
command line sets one up when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and the `otel` extra is installed
(`configure_from_env`).

Attributes follow the GenAI semantic conventions where they apply (`gen_ai.*`: the
operation, the model, token usage, the tool); ctxbus's own are under `ctxbus.*`.

This lives in `bus` because both sides use it: the agents (compose, tools, proposals) and
the coordinator (commits).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:  # OpenTelemetry is imported by the first span: a command that opens none starts faster
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue

__all__ = ["GEN_AI", "TRACER_NAME", "configure_from_env", "span"]

log = logging.getLogger(__name__)

TRACER_NAME: Final = "ctxbus"


class GEN_AI:  # noqa: N801 - a namespace of attribute names, as the conventions spell them
    """Attribute names of the OpenTelemetry GenAI semantic conventions that ctxbus sets."""

    OPERATION: Final = "gen_ai.operation.name"
    PROVIDER: Final = "gen_ai.provider.name"
    REQUEST_MODEL: Final = "gen_ai.request.model"
    RESPONSE_MODEL: Final = "gen_ai.response.model"
    INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
    OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
    CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
    TOOL_NAME: Final = "gen_ai.tool.name"
    TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
    AGENT_ID: Final = "gen_ai.agent.id"
    CONVERSATION_ID: Final = "gen_ai.conversation.id"


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    kind: Literal["internal", "client", "server", "producer", "consumer"] = "internal",
) -> Iterator[Span]:
    """A span of `kind` (OpenTelemetry's `SpanKind`, by name) around the block, current
    while it runs; None-valued attributes are left out. An exception leaving the block is recorded and
    marks the span as an error."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # No provider configured: nothing would be recorded, so skip making a span and
        # making it current (a tenth of a commit's overhead on the hot path otherwise).
        yield trace.INVALID_SPAN
        return
    tracer = trace.get_tracer(TRACER_NAME)
    given = {key: value for key, value in (attributes or {}).items() if value is not None}
    with tracer.start_as_current_span(
        name, kind=SpanKind[kind.upper()], attributes=given, record_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            if current.is_recording() and isinstance(exc, Exception):
                current.record_exception(exc)
                current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


_ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configure_from_env(service_name: str) -> bool:
    """Export spans over OTLP/HTTP where the standard environment asks for it (an
    `OTEL_EXPORTER_OTLP_*ENDPOINT` is set) and no provider is set yet; whether it did.

    Needs the `otel` extra (`pip install 'ctxbus[otel]'`); without it, says so once and
    goes on untraced.
    """
    if not any(os.environ.get(name) for name in _ENDPOINT_VARS):
        return False
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the application set its own
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "an OTLP endpoint is set but OpenTelemetry's SDK is not installed: "
            "pip install 'ctxbus[otel]' to export traces"
        )
        return False
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service_name)})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
