"""A fake Moonshot / OpenAI-compatible API for the test suite (stdlib only).

It speaks what both Kimi CLIs use: ``POST {base}/chat/completions`` with SSE streaming (text deltas and
tool-call deltas) and ``GET {base}/models``. Replies are *scripted* per test:

    fake.script([Reply.tool("WriteFile", {"path": "a.txt", "content": "x"}), Reply.text("done")])

Each chat request pops the next reply. A reply can be bound to a marker string: requests whose user text
contains the marker take replies from that marker's queue, so concurrent tasks don't steal each other's
replies; with ``history=True`` the marker may be anywhere in the conversation sent (e.g. in the arguments
of a tool call an earlier reply made), which tells apart conversations that began with the same prompt.
Every request is recorded in ``fake.requests`` for assertions.

Run standalone (benchmarks): ``python tests/helpers/fake_moonshot.py --port 0`` prints the base URL and serves
the ``--reply`` text forever.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_http import FakeHTTPServer, handler_base

DEFAULT_MODELS = [
    {
        "id": "kimi-k2-fake",
        "context_length": 262144,
        "supports_reasoning": False,
        "supports_image_in": False,
        "supports_video_in": False,
        "display_name": "Kimi K2 Fake",
    }
]


@dataclass
class Reply:
    """One scripted answer to one chat request."""

    kind: str  # "text" | "tool" | "error" | "hang"
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    repeat: int = 1  # how many requests this reply answers (errors: retries hit it again)
    token_delay: float = 0.0  # seconds between streamed chunks
    chunk_chars: int = 16
    #: answer only if the request's history holds this text (else the reply says NO-HISTORY): proves that
    #: a follow-up reached the same conversation
    requires: str | None = None

    @classmethod
    def text_reply(
        cls, text: str, *, token_delay: float = 0.0, chunk_chars: int = 16, requires: str | None = None
    ) -> Reply:
        return cls("text", text=text, token_delay=token_delay, chunk_chars=chunk_chars, requires=requires)

    @classmethod
    def tool(cls, name: str, arguments: dict[str, Any], *, text: str = "") -> Reply:
        return cls("tool", text=text, tool_calls=[(name, arguments)])

    @classmethod
    def tools(cls, calls: list[tuple[str, dict[str, Any]]], *, text: str = "") -> Reply:
        return cls("tool", text=text, tool_calls=list(calls))

    @classmethod
    def error(cls, status: int, message: str | None = None, *, repeat: int = 1000) -> Reply:
        return cls("error", text=message or f"fake {status} error", status=status, repeat=repeat)

    @classmethod
    def hang(cls, seconds: float = 3600.0) -> Reply:
        """Accept the request, send the first chunk, then stall (for timeout tests)."""
        return cls("hang", token_delay=seconds)


#: AskUserQuestion's arguments for one single-select question with three options (Red, Blue, Green)
COLOUR = {
    "questions": [
        {
            "question": "Which colour?",
            "header": "Colour",
            "options": [{"label": "Red", "description": "warm"}, {"label": "Blue"}, {"label": "Green"}],
            "multi_select": False,
        }
    ]
}


def last_user_text(body: dict[str, Any]) -> str:
    """The last real user text: skips Kimi Code's ``<system-reminder>`` messages, reads list contents."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, list):
            parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            parts = [p for p in parts if not p.lstrip().startswith("<system-reminder>")]
            if not parts:
                continue
            return parts[-1]
        if isinstance(content, str):
            if content.lstrip().startswith("<system-reminder>"):
                continue
            return content
    return ""


class FakeMoonshot(FakeHTTPServer):
    """Threaded fake API server on 127.0.0.1. Use as a context manager or call start()/stop()."""

    name = "fake-moonshot"

    def __init__(self, port: int = 0, *, default_reply: Reply | None = None) -> None:
        self._queues: dict[str | None, deque[Reply]] = {None: deque()}
        self._history: dict[str, deque[Reply]] = {}  # marker anywhere in the conversation → its replies
        self.default_reply = default_reply or Reply.text_reply("FAKE-OK: nothing scripted.")
        self.models: list[dict[str, Any]] = list(DEFAULT_MODELS)
        self.models_status = 200
        self.requests: list[dict[str, Any]] = []
        self.last_chunk_at: float | None = None  # perf_counter of the last SSE byte of the last reply
        super().__init__(port)

    # -- lifecycle (the rest is FakeHTTPServer's) ---------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------------------
    def script(self, replies: list[Reply], *, marker: str | None = None, history: bool = False) -> None:
        """Queue ``replies`` for the requests whose user text holds ``marker`` (all others: None); with
        ``history``, for the requests whose conversation holds it anywhere (these queues are served first)."""
        with self._lock:
            if history:
                assert marker, "a history marker is a string"
                self._history.setdefault(marker, deque()).extend(replies)
            else:
                self._queues.setdefault(marker, deque()).extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._queues = {None: deque()}
            self._history = {}
            self.requests.clear()
            self.models = list(DEFAULT_MODELS)
            self.models_status = 200
            self.last_chunk_at = None

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def pending(self, marker: str | None = None) -> int:
        with self._lock:
            return sum(r.repeat for r in self._queues.get(marker, ()))

    def _next_reply(self, user_text: str, conversation: str = "") -> Reply:
        with self._lock:
            queue = next((q for marker, q in self._history.items() if q and marker in conversation), None)
            if queue is None:
                queue = next(
                    (q for marker, q in self._queues.items() if marker is not None and marker in user_text),
                    self._queues[None],
                )
            if not queue:
                return self.default_reply
            reply = queue[0]
            reply.repeat -= 1
            if reply.repeat <= 0:
                queue.popleft()
            return reply

    # -- HTTP ------------------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(handler_base(fake)):  # type: ignore[misc]
            def do_GET(self) -> None:
                self._record(None)
                if self.path.rstrip("/").endswith("/models"):
                    if fake.models_status != 200:
                        self._json(fake.models_status, _error_body(fake.models_status, "fake models error"))
                    else:
                        self._json(200, {"object": "list", "data": fake.models})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = self._read_json()
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                reply = fake._next_reply(last_user_text(body), json.dumps(body.get("messages")))
                if reply.requires is not None and reply.requires not in json.dumps(body.get("messages")):
                    reply = Reply.text_reply("NO-HISTORY: the earlier turn is not in this conversation")
                if reply.kind == "error":
                    self._json(reply.status, _error_body(reply.status, reply.text))
                    return
                self._stream(body.get("model") or "kimi-k2-fake", reply)

            def _stream(self, model: str, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                cid = "chatcmpl-" + uuid.uuid4().hex[:12]
                created = int(time.time())

                def send(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> None:
                    chunk: dict[str, Any] = {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    if usage:
                        chunk["usage"] = {
                            "prompt_tokens": 1000,
                            "completion_tokens": 20,
                            "total_tokens": 1020,
                        }
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()

                try:
                    send({"role": "assistant", "content": ""})
                    if reply.kind == "hang":
                        time.sleep(reply.token_delay)
                        return
                    text = reply.text
                    step = max(1, reply.chunk_chars)
                    for i in range(0, len(text), step):
                        if reply.token_delay:
                            time.sleep(reply.token_delay)
                        send({"content": text[i : i + step]})
                    for index, (name, args) in enumerate(reply.tool_calls):
                        call_id = f"{name}:{uuid.uuid4().hex[:6]}" if ":" not in name else name
                        send(
                            {
                                "tool_calls": [
                                    {
                                        "index": index,
                                        "id": call_id,
                                        "type": "function",
                                        "function": {"name": name, "arguments": ""},
                                    }
                                ]
                            }
                        )
                        encoded = json.dumps(args)
                        for j in range(0, len(encoded), 40):
                            send(
                                {
                                    "tool_calls": [
                                        {"index": index, "function": {"arguments": encoded[j : j + 40]}}
                                    ]
                                }
                            )
                    finish = "tool_calls" if reply.tool_calls else "stop"
                    send({}, finish=finish, usage=True)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    fake.last_chunk_at = time.perf_counter()
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _error_body(status: int, message: str) -> dict[str, Any]:
    kinds = {401: "invalid_authentication_error", 429: "rate_limit_reached_error", 500: "server_error"}
    return {"error": {"message": message, "type": kinds.get(status, "invalid_request_error")}}


def main() -> None:  # pragma: no cover - manual / benchmark use
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reply", default="FAKE-OK: standalone fake.")
    args = parser.parse_args()
    fake = FakeMoonshot(args.port, default_reply=Reply.text_reply(args.reply))
    fake.start()
    print(fake.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
