"""OpenTelemetry for kimi-mcp: every job as an ``invoke_agent kimi`` span (GenAI semantic conventions) with
child spans for Kimi's start, its turns, the questions asked of the caller, the change list, verify rounds,
the hand-off to a worker and ``kimi_apply``; metrics of the jobs and their tokens. Exported over OTLP
(HTTP/protobuf) when configured the standard way (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_EXPORTER``,
``OTEL_SDK_DISABLED``; the ``otel`` extra installs the SDK and the exporter).

This module is the only door: the rest of kimi-mcp calls the functions below and never imports
opentelemetry. Not configured (the default), each is a no-op and neither the SDK nor an exporter is
imported (``_otel`` loads only in :func:`setup`, when it is configured). Spans are parented through the
current OpenTelemetry context of the calling thread: the job's thread runs with the job's span current
(:meth:`JobTrace.run`), so a hook anywhere below it (the runner, the session, the executors) needs no
handle to the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .._logging import get_logger
from ._base import JobTrace, Waiting

if TYPE_CHECKING:
    from ..job_spec import JobSpec
    from ..secrets import Redactor
    from ..session import TurnTrace
    from ._otel import Telemetry

log = get_logger("telemetry")

T = TypeVar("T")

_active: Telemetry | None = None  # set by setup() when OpenTelemetry is configured


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether OpenTelemetry is configured in ``environ``: an OTLP endpoint, or ``OTEL_TRACES_EXPORTER`` /
    ``OTEL_METRICS_EXPORTER`` = ``otlp``; never with ``OTEL_SDK_DISABLED=true``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoints = (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    )
    exporters = (environ.get(f"OTEL_{kind}_EXPORTER", "").strip().lower() for kind in ("TRACES", "METRICS"))
    return any(environ.get(name, "").strip() for name in endpoints) or "otlp" in exporters


def setup(
    service: str, environ: Mapping[str, str], *, content: bool = False, prometheus_port: int | None = None
) -> bool:
    """Start exporting (once per process) when :func:`wanted`; ``content``: record the task text and Kimi's
    answer (``KIMI_MCP_OTEL_CONTENT``); ``prometheus_port``: also serve the metrics, Docket's included, for
    Prometheus (``kimi-mcp worker --metrics-port``). Whether it is on."""
    global _active
    if _active is not None or not wanted(environ):
        return _active is not None
    try:
        from . import _otel  # the SDK and the exporter load only when configured: start-up speed
    except ImportError as exc:
        log.warning(
            "OpenTelemetry is configured (OTEL_*) but its SDK is not installed (%s): install kimi-mcp[otel]; "
            "running without it",
            exc.name,
        )
        return False
    _active = _otel.Telemetry(service, environ, content=content, prometheus_port=prometheus_port)
    return True


def shutdown() -> None:
    """Export what is pending and stop (the process ends); a no-op when off."""
    global _active
    active, _active = _active, None
    if active is not None:
        active.shutdown()


NO_TRACE = JobTrace()


def job(job_id: str, spec: JobSpec, redactor: Redactor) -> JobTrace:
    """The ``invoke_agent kimi`` span of a job, child of the current span (FastMCP's ``tools/call`` or
    ``tasks/*``) when there is one."""
    return NO_TRACE if _active is None else _active.job(job_id, spec, redactor)


def worker_job(request: Mapping[str, Any], worker: str, redactor: Redactor) -> JobTrace:
    """The span of a job's run on a worker, continuing the server's trace (``request["trace"]``)."""
    return NO_TRACE if _active is None else _active.worker_job(request, worker, redactor)


def call(name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(...)`` inside a span ``name`` (child of the current span); an exception is its ``error.type``."""
    if _active is None:
        return fn(*args, **kwargs)
    with _active.span(name):
        return fn(*args, **kwargs)


def traced(name: str, fn: Callable[..., T], **attributes: str) -> Callable[..., T]:
    """``fn`` that runs inside a span ``name`` whose parent is the span current *now* (for work handed to
    another thread, e.g. ``kimi_apply``'s)."""
    if _active is None:
        return fn
    return _active.traced(name, fn, attributes)


def handoff(request: dict[str, Any], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (sending ``request`` to a worker) inside a ``kimi_mcp.handoff`` span, whose context
    ``request["trace"]`` carries (W3C ``traceparent``) so the worker continues the trace."""
    if _active is None:
        return fn(*args)
    return _active.handoff(request, fn, *args)


def turn(index: int, fn: Callable[[], TurnTrace]) -> TurnTrace:
    """Kimi's turn ``index`` (``fn`` runs it) as a ``kimi.turn`` span, its steps and tool calls as events."""
    if _active is None:
        return fn()
    return _active.turn(index, fn)


NOT_WAITING = Waiting()


def asked(kind: str) -> Waiting:
    """A ``kimi.question`` / ``kimi.approval`` span (child of the current span) and one more job waiting."""
    return NOT_WAITING if _active is None else _active.asked(kind)


@contextlib.contextmanager
def prometheus(port: int | None) -> Iterator[None]:
    """Serve Docket's Prometheus metrics on ``port`` (None: nothing): with OpenTelemetry on, :func:`setup`
    serves them with kimi-mcp's; else Docket's own server does."""
    if port is None or _active is not None:
        yield
        return
    from docket.instrumentation import metrics_server  # needs the SDK: loaded only for --metrics-port

    with metrics_server(port=port):
        yield
