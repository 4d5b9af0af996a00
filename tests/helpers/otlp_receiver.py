"""A real OTLP/HTTP receiver owned by a test: a small HTTP server on 127.0.0.1 that decodes the protobuf
``ExportTraceServiceRequest`` and ``ExportMetricsServiceRequest`` a kimi-mcp server or worker posts to
``/v1/traces`` and ``/v1/metrics``, and keeps every span and metric it received."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Span:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class OtlpReceiver:
    """``with OtlpReceiver() as otlp``: ``otlp.endpoint`` for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metrics: dict[str, list[dict[str, Any]]] = {}  # name -> the data points' attributes and values
        self.paths: list[str] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver._take(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take(self, path: str, body: bytes) -> None:
        with self._changed:
            self.paths.append(path)
            if path == "/v1/traces":
                self._spans(body)
            elif path == "/v1/metrics":
                self._metrics(body)
            self._changed.notify_all()

    def _spans(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = _attributes(resource.resource.attributes).get("service.name", "")
            for scope in resource.scope_spans:
                for s in scope.spans:
                    events = [(e.name, _attributes(e.attributes)) for e in s.events]
                    self.spans.append(
                        Span(s.name, service, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                             _attributes(s.attributes), events)
                    )  # fmt: skip

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        value = point.sum if kind == "histogram" else (point.as_int or point.as_double)
                        entry = {"attributes": _attributes(point.attributes), "value": value}
                        if kind == "histogram":
                            entry["count"] = point.count
                        self.metrics.setdefault(metric.name, []).append(entry)

    def wait_for(self, ready: Any, timeout: float = 60.0) -> None:
        """Block until ``ready(self)`` holds (each export wakes it); the receiver's state on failure."""
        with self._changed:
            if not self._changed.wait_for(lambda: ready(self), timeout=timeout):
                names = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"not received; spans so far: {names}; metrics: {sorted(self.metrics)}")

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def strings(self) -> str:
        """Every attribute and event attribute value received, as one text (to look for what must not be
        there)."""
        parts: list[str] = []
        for s in self.spans:
            parts += [str(v) for v in s.attributes.values()]
            parts += [str(v) for _name, attrs in s.events for v in attrs.values()]
        for points in self.metrics.values():
            parts += [str(v) for p in points for v in p["attributes"].values()]
        return "\n".join(parts)
