"""The OpenTelemetry SDK side of :mod:`kimi_mcp.telemetry`, imported only when OpenTelemetry is configured.

Traces and metrics go out over OTLP HTTP/protobuf; the exporters read the standard ``OTEL_EXPORTER_OTLP_*``
variables (endpoint, headers, timeout) themselves. The global tracer provider is set too, so FastMCP's own
``tools/call`` spans are exported and a job's span is their child. Attributes carry counts, names and ids;
text (the task, Kimi's answer) only with ``KIMI_MCP_OTEL_CONTENT=true``, masked like results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, Status, StatusCode

from .. import __version__
from .._logging import get_logger
from ._base import JobTrace, Waiting

if TYPE_CHECKING:
    from ..job_spec import JobSpec
    from ..models import TaskResult
    from ..secrets import Redactor
    from ..session import TurnTrace

log = get_logger("telemetry")

T = TypeVar("T")

SCOPE = "kimi_mcp"
AGENT = "kimi"
TRACE_KEY = "trace"  # the job request's field that carries the W3C trace context to the worker


def _exporter_wanted(environ: Mapping[str, str], kind: str) -> bool:
    """Whether ``OTEL_<kind>_EXPORTER`` leaves the OTLP exporter on (unset or otlp; none: off; anything else
    is not supported here, said once)."""
    value = environ.get(f"OTEL_{kind}_EXPORTER", "").strip().lower()
    if value in ("", "otlp"):
        return True
    if value != "none":
        log.warning(
            "OTEL_%s_EXPORTER=%s: kimi-mcp exports over OTLP only; %s are off", kind, value, kind.lower()
        )
    return False


class Telemetry:
    """The process's tracer and instruments (see the module's notes)."""

    def __init__(
        self, service: str, environ: Mapping[str, str], *, content: bool, prometheus_port: int | None
    ) -> None:
        self.content = content
        protocol = environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
        if protocol != "http/protobuf":
            log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: kimi-mcp exports over http/protobuf", protocol)
        attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
        resource = Resource.create({**attributes, "service.version": __version__})
        self.tracer_provider: TracerProvider | None = None
        if _exporter_wanted(environ, "TRACES"):
            self.tracer_provider = TracerProvider(resource=resource)
            self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(self.tracer_provider)
        readers: list[MetricReader] = []
        if _exporter_wanted(environ, "METRICS"):
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        self._prometheus = _prometheus(prometheus_port, readers)
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(self.meter_provider)
        self.tracer = trace.get_tracer(SCOPE, __version__)
        meter = metrics.get_meter(SCOPE, __version__)
        self.jobs = meter.create_counter("kimi_mcp.jobs", "{job}", "Jobs finished, by tool and status")
        self.duration = meter.create_histogram("kimi_mcp.job.duration", "s", "How long jobs took")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", "{token}", "Tokens a job used (input, output)"
        )
        self.waiting = meter.create_up_down_counter(
            "kimi_mcp.jobs.waiting", "{job}", "Jobs waiting for the caller's answer to a question or approval"
        )
        log.info("OpenTelemetry on: traces %s, metrics %s", self.tracer_provider is not None, bool(readers))

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        if self._prometheus is not None:
            self._prometheus.shutdown()

    # -- spans ---------------------------------------------------------------------------------------
    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Span]:
        with self.tracer.start_as_current_span(name, attributes=attributes, record_exception=False) as span:
            try:
                yield span
            except BaseException as exc:
                _failed(span, exc)
                raise

    def traced(self, name: str, fn: Callable[..., T], attributes: Mapping[str, str]) -> Callable[..., T]:
        parent = otel_context.get_current()

        def run(*args: Any, **kwargs: Any) -> T:
            token = otel_context.attach(parent)
            try:
                with self.span(name, {f"{SCOPE}.{k}": v for k, v in attributes.items()}):
                    return fn(*args, **kwargs)
            finally:
                otel_context.detach(token)

        return run

    def handoff(self, request: dict[str, Any], fn: Callable[..., T], *args: Any) -> T:
        with self.span(f"{SCOPE}.handoff", {f"{SCOPE}.job_id": str(request.get("job_id", ""))}):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            request[TRACE_KEY] = carrier
            return fn(*args)

    def turn(self, index: int, fn: Callable[[], TurnTrace]) -> TurnTrace:
        with self.span("kimi.turn", {f"{SCOPE}.turn": index}) as span:
            turn = fn()
            _turn_attributes(span, turn)
            return turn

    def asked(self, kind: str) -> Waiting:
        span = self.tracer.start_span(f"kimi.{kind}", attributes={f"{SCOPE}.question.kind": kind})
        self.waiting.add(1)
        return _Waiting(span, self.waiting)

    # -- jobs ----------------------------------------------------------------------------------------
    def job(self, job_id: str, spec: JobSpec, redactor: Redactor) -> JobTrace:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT, f"{SCOPE}.job_id": job_id,
            f"{SCOPE}.tool": spec.tool, f"{SCOPE}.isolation": spec.isolation,
        }  # fmt: skip
        if spec.model:
            attributes["gen_ai.request.model"] = spec.model
        span = self.tracer.start_span(f"invoke_agent {AGENT}", attributes=attributes)
        return _Job(self, span, spec, redactor, owner=True)

    def worker_job(self, request: Mapping[str, Any], worker: str, redactor: Redactor) -> JobTrace:
        parent = propagate.extract(request.get(TRACE_KEY) or {})
        spec = request["spec"]
        attributes = {f"{SCOPE}.job_id": str(request["job_id"]), f"{SCOPE}.worker": worker}
        span = self.tracer.start_span(f"{SCOPE}.worker_job", context=parent, attributes=attributes)
        return _Job(self, span, spec, redactor, owner=False)


class _Job(JobTrace):
    """A job's span on the server (``owner``: it also counts the job's metrics) or on a worker."""

    def __init__(self, telemetry: Telemetry, span: Span, spec: Any, redactor: Redactor, owner: bool) -> None:
        self.telemetry, self.span, self.spec, self.redactor, self.owner = (
            telemetry,
            span,
            spec,
            redactor,
            owner,
        )
        self.started = time.monotonic()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    def finish(self, result: TaskResult, mask: Callable[[Any], Any] = lambda value: value) -> None:
        span, telemetry = self.span, self.telemetry
        attributes = {f"{SCOPE}.tool": _field(self.spec, "tool"), **_result_attributes(result)}
        if telemetry.content:
            prompt = _field(self.spec, "prompt")
            attributes["gen_ai.input.messages"] = _messages("user", mask(self.redactor(prompt)))
            attributes["gen_ai.output.messages"] = _messages("assistant", mask(self.redactor(result.output)))
        span.set_attributes(attributes)
        if result.error is not None:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
        if self.owner:
            self._count(result, attributes)

    def _count(self, result: TaskResult, attributes: Mapping[str, Any]) -> None:
        telemetry = self.telemetry
        tool, status = attributes[f"{SCOPE}.tool"], attributes[f"{SCOPE}.status"]
        telemetry.jobs.add(1, {f"{SCOPE}.tool": tool, f"{SCOPE}.status": status})
        telemetry.duration.record(
            time.monotonic() - self.started, {f"{SCOPE}.tool": tool, f"{SCOPE}.status": status}
        )
        if result.usage is not None:
            base = {"gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": result.model or ""}
            telemetry.tokens.record(result.usage.input_tokens, {**base, "gen_ai.token.type": "input"})
            telemetry.tokens.record(result.usage.output_tokens, {**base, "gen_ai.token.type": "output"})


def _result_attributes(result: TaskResult) -> dict[str, Any]:
    """What a finished job's span says of it: ids, names and counts only."""
    changed = len(result.files_created) + len(result.files_modified) + len(result.files_deleted)
    attributes: dict[str, Any] = {
        f"{SCOPE}.status": result.status, f"{SCOPE}.files_changed": changed,
        f"{SCOPE}.warm_start": bool(result.warm_start),
    }  # fmt: skip
    optional = {
        "gen_ai.request.model": result.model, "gen_ai.conversation.id": result.session_id,
        f"{SCOPE}.dialect": result.dialect, f"{SCOPE}.worker": result.worker,
        "error.type": result.error.type if result.error is not None else None,
    }  # fmt: skip
    attributes.update({k: v for k, v in optional.items() if v})
    if result.usage is not None:
        attributes["gen_ai.usage.input_tokens"] = result.usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = result.usage.output_tokens
    return attributes


def _field(spec: Any, name: str) -> str:
    """A field of a job's spec (a ``JobSpec``, or its dict in a worker's request)."""
    return str(spec.get(name, "") if isinstance(spec, dict) else getattr(spec, name, ""))


def _messages(role: str, text: str) -> str:
    """One message as the GenAI conventions' ``gen_ai.*.messages`` (JSON)."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _turn_attributes(span: Span, turn: TurnTrace) -> None:
    """A turn's tokens, and its steps and tool calls as events (names and counts, never their text)."""
    span.set_attributes(
        {
            "gen_ai.usage.input_tokens": turn.input_tokens, "gen_ai.usage.output_tokens": turn.output_tokens,
            f"{SCOPE}.steps": len(turn.steps), f"{SCOPE}.tool_calls": len(turn.calls),
        }
    )  # fmt: skip
    for index, texts in enumerate(turn.steps):
        span.add_event("kimi.step", {f"{SCOPE}.step": index, f"{SCOPE}.text_chars": sum(map(len, texts))})
    for call in turn.calls.values():
        span.add_event(
            "kimi.tool_call",
            {
                "gen_ai.tool.name": call.name,
                f"{SCOPE}.approval": call.approval,
                f"{SCOPE}.is_error": call.is_error,
            },
        )
    if turn.error is not None:
        span.set_attribute("error.type", turn.error.type)
        span.set_status(Status(StatusCode.ERROR))


def _failed(span: Span, exc: BaseException) -> None:
    """``exc`` ended the span: its type (kimi-mcp's error type, else the class), never its message."""
    span.set_attribute("error.type", getattr(exc, "type", None) or type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR))


class _Waiting(Waiting):
    def __init__(self, span: Span, waiting: Any) -> None:
        self.span, self.counter, self.ended = span, waiting, False

    def end(self, outcome: str) -> None:
        if self.ended:
            return
        self.ended = True
        self.counter.add(-1)
        self.span.set_attribute("kimi_mcp.question.outcome", outcome)
        self.span.end()


def _prometheus(port: int | None, readers: list[MetricReader]) -> Any:
    """``--metrics-port``: a Prometheus reader among ``readers`` (Docket's, which serves what the global
    meter provider measures, Docket's own instruments included) and its HTTP server; None without a port."""
    if port is None:
        return None
    from docket._prometheus_exporter import PrometheusMetricReader  # only with --metrics-port
    from prometheus_client import REGISTRY, start_http_server

    readers.append(PrometheusMetricReader())
    server, _thread = start_http_server(port, registry=REGISTRY)
    return server
