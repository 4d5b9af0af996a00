"""The lifecycle the suite's fake APIs share: a threaded HTTP server on 127.0.0.1 (any free port), started
as a context manager or with start()/stop(); subclasses supply the request handler."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class FakeHTTPServer:
    name = "fake-api"

    def __init__(self, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def handler_base(fake: FakeHTTPServer) -> type[BaseHTTPRequestHandler]:
    """A request handler that records every request in ``fake.requests`` and answers JSON."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _record(self, body: Any) -> None:
            with fake._lock:
                fake.requests.append(  # type: ignore[attr-defined]
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                        "at": time.time(),
                        "perf": time.perf_counter(),  # the clock of last_chunk_at
                    }
                )

        def _read_json(self) -> Any:
            """The request's JSON body (``{"_raw": text}`` when it is not JSON), recorded."""
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            self._record(body)
            return body

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

    return Handler
