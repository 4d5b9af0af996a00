"""A fake Anthropic Messages API for the test suite (stdlib only), so Claude Code can run headless offline.

It speaks what Claude Code uses: ``POST /v1/messages`` (SSE when ``stream: true``, else one JSON message),
``POST /v1/messages/count_tokens``, ``GET /v1/models[/id]``; anything else gets a harmless empty JSON object.
Every request is recorded in ``fake.requests``.

The model's side of the conversation is *scripted by turn*:

    fake.script([Step.tool("mcp__kimi__kimi_code_task", {"task_description": "..."}), Step.final("done")])

Each ``/v1/messages`` request that belongs to the main conversation (it offers tools, see ``is_side_request``)
takes the next step. Before a step that calls a tool the request does not offer (Claude Code defers MCP tools
behind ``ToolSearch``), the fake first answers with a ``ToolSearch`` call that selects that tool (once per
step), and takes the step on the next request. A step's input may be a callable: it is given the latest
``ToolResult`` of a tool other than ToolSearch (``None`` if there is none) and returns the input (e.g. to pass
on a ``job_id``). Every ``tool_result`` Claude Code sends back is recorded in ``fake.tool_results``: this is
what Claude Code hands its model.
Requests without tools (Claude Code's side calls: titles, summaries, quota probes) get ``side_reply``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_http import FakeHTTPServer, handler_base

MODEL = "claude-fake-1"
THINK_LIMIT_S = 120.0
TOOL_SEARCH = "ToolSearch"


@dataclass
class ToolResult:
    """A tool_result block Claude Code sent back to the model."""

    tool_use_id: str
    name: str  # the tool the fake called with that id
    text: str  # its content, as text (list contents joined)
    is_error: bool
    raw: Any


@dataclass
class Step:
    """One turn of the scripted model: a tool call, or a final text that ends the conversation."""

    kind: str  # "tool" | "final"
    name: str = ""
    input: dict[str, Any] | Callable[[ToolResult | None], dict[str, Any]] = field(default_factory=dict)
    text: str = ""

    @classmethod
    def tool(
        cls,
        name: str,
        input: dict[str, Any] | Callable[[ToolResult | None], dict[str, Any]],
        *,
        text: str = "",
    ) -> Step:
        return cls("tool", name=name, input=input, text=text)

    @classmethod
    def final(cls, text: str) -> Step:
        return cls("final", text=text)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def is_side_request(body: dict[str, Any]) -> bool:
    """Claude Code's own side calls (no tools offered) as opposed to the main agent loop."""
    return not body.get("tools")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text":
                    parts.append(part.get("text", ""))
                else:
                    parts.append(json.dumps(part))
        return "\n".join(parts)
    return json.dumps(content)


class FakeAnthropic(FakeHTTPServer):
    """Threaded fake Anthropic API on 127.0.0.1. Use as a context manager or call start()/stop()."""

    name = "fake-anthropic"

    def __init__(self, port: int = 0, *, side_reply: str = "Fake title") -> None:
        self._ready: Callable[[], bool] | None = None
        self._steps: deque[Step] = deque()
        self.side_reply = side_reply
        self.requests: list[dict[str, Any]] = []
        self.tool_results: list[ToolResult] = []
        self._called: dict[str, str] = {}  # tool_use id -> tool name
        self._seen_results: set[str] = set()
        self._searched: Step | None = None
        super().__init__(port)

    # -- lifecycle (the rest is FakeHTTPServer's) ---------------------------------------------------
    @property
    def base_url(self) -> str:
        """For ANTHROPIC_BASE_URL (Claude Code appends /v1/...)."""
        return f"http://127.0.0.1:{self.port}"

    # -- scripting -------------------------------------------------------------------------------------
    def script(self, steps: list[Step]) -> None:
        with self._lock:
            self._steps.extend(steps)

    def think_until(self, ready: Callable[[], bool] | None) -> None:
        """The model's first reply of the conversation waits (at most ``THINK_LIMIT_S``) until ``ready()``:
        e.g. until the kimi server has listed its tools to Claude Code, which a busy machine can make take
        longer than the ~10 s Claude Code lets a tool call wait for a server still connecting. A real model
        takes seconds too; without this the test would measure the machine's load, not the product."""
        self._ready = ready

    def reset(self) -> None:
        self._ready = None
        with self._lock:
            self._steps.clear()
            self.requests.clear()
            self.tool_results.clear()
            self._called.clear()
            self._seen_results.clear()
            self._searched = None

    def pending(self) -> int:
        with self._lock:
            return len(self._steps)

    def message_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].split("?")[0].rstrip("/") == "/v1/messages"]

    def main_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.message_requests() if not is_side_request(r["body"])]

    def notifications(self) -> list[str]:
        """The ``<task-notification>`` blocks Claude Code sent its model (a background task ended), in order."""
        found: list[str] = []
        for request in self.main_requests():
            for msg in request["body"].get("messages") or []:
                if msg.get("role") != "user":
                    continue
                text = _content_text(msg.get("content"))
                for part in text.split("<task-notification>")[1:]:
                    block = part.split("</task-notification>")[0]
                    if block not in found:
                        found.append(block)
        return found

    def results_of(self, name: str) -> list[ToolResult]:
        return [r for r in self.tool_results if r.name == name]

    def _collect_tool_results(self, body: dict[str, Any]) -> None:
        """Record the tool_result blocks not seen before."""
        for msg in body.get("messages") or []:
            if msg.get("role") != "user" or not isinstance(msg.get("content"), list):
                continue
            for block in msg["content"]:
                if not isinstance(block, dict) or block.get("type") != "tool_result":
                    continue
                tid = block.get("tool_use_id", "")
                text = _content_text(block.get("content"))
                if tid not in self._seen_results:
                    self._seen_results.add(tid)
                    self.tool_results.append(
                        ToolResult(
                            tool_use_id=tid,
                            name=self._called.get(tid, "?"),
                            text=text,
                            is_error=bool(block.get("is_error")),
                            raw=block.get("content"),
                        )
                    )

    def _answer(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
        """(text, tool_use blocks, stop_reason) for one /v1/messages request."""
        if is_side_request(body):
            return self.side_reply, [], "end_turn"
        ready, deadline = self._ready, time.monotonic() + THINK_LIMIT_S
        while ready is not None and not ready() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._ready = None  # the first reply only
        with self._lock:
            self._collect_tool_results(body)
            if not self._steps:
                return "FAKE-ANTHROPIC: nothing scripted.", [], "end_turn"
            step = self._steps[0]
            if step.kind == "final":
                self._steps.popleft()
                return step.text, [], "end_turn"
            offered = tool_names(body)
            if step.name not in offered and TOOL_SEARCH in offered and self._searched is not step:
                self._searched = step  # once: if the search did not load it, call it anyway (and fail loudly)
                name, args = TOOL_SEARCH, {"query": f"select:{step.name}", "max_results": 5}
            else:
                self._steps.popleft()
                if callable(step.input):
                    earlier = [r for r in self.tool_results if r.name != TOOL_SEARCH]
                    args = step.input(earlier[-1] if earlier else None)
                else:
                    args = step.input
                name = step.name
            tid = "toolu_" + uuid.uuid4().hex[:20]
            self._called[tid] = name
            return step.text, [{"id": tid, "name": name, "input": args}], "tool_use"

    # -- HTTP ------------------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(handler_base(fake)):  # type: ignore[misc]
            def do_GET(self) -> None:
                self._record(None)
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/models":
                    self._json(
                        200, {"data": [_model()], "has_more": False, "first_id": MODEL, "last_id": MODEL}
                    )
                elif path.startswith("/v1/models/"):
                    self._json(200, _model(path.rsplit("/", 1)[1]))
                else:
                    self._json(200, {})

            def do_HEAD(self) -> None:
                self._record(None)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self._read_json()
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 1000})
                    return
                if path != "/v1/messages":
                    self._json(200, {})
                    return
                text, tools, stop = fake._answer(body)
                model = body.get("model") or MODEL
                if body.get("stream"):
                    self._stream(model, text, tools, stop)
                else:
                    self._json(200, _message(model, text, tools, stop))

            def _stream(self, model: str, text: str, tools: list[dict[str, Any]], stop: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

                def send(event: str, data: dict[str, Any]) -> None:
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                try:
                    start = _message(model, "", [], None)
                    start["usage"]["output_tokens"] = 1
                    send("message_start", {"type": "message_start", "message": start})
                    index = 0
                    if text:
                        send(
                            "content_block_start",
                            {
                                "type": "content_block_start",
                                "index": index,
                                "content_block": {"type": "text", "text": ""},
                            },
                        )
                        for i in range(0, len(text), 24):
                            send(
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": index,
                                    "delta": {"type": "text_delta", "text": text[i : i + 24]},
                                },
                            )
                        send("content_block_stop", {"type": "content_block_stop", "index": index})
                        index += 1
                    for call in tools:
                        block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
                        send(
                            "content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": block},
                        )
                        encoded = json.dumps(call["input"])
                        for j in range(0, len(encoded), 40):
                            send(
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": index,
                                    "delta": {
                                        "type": "input_json_delta",
                                        "partial_json": encoded[j : j + 40],
                                    },
                                },
                            )
                        send("content_block_stop", {"type": "content_block_stop", "index": index})
                        index += 1
                    send(
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 20},
                        },
                    )
                    send("message_stop", {"type": "message_stop"})
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _model(model_id: str = MODEL) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": "Claude Fake",
        "created_at": "2026-01-01T00:00:00Z",
    }


def _message(model: str, text: str, tools: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for call in tools:
        content.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["input"]})
    return {
        "id": "msg_" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 1000,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
