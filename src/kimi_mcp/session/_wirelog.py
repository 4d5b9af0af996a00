"""Kimi's session log (``wire.jsonl``): find this session's, tail it, fold its events into a TurnTrace."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from .._logging import get_logger
from ..drivers.base import (
    ApprovalRequest,
    ApprovalResolved,
    Driver,
    StepBegin,
    StepRetrying,
    TextPart,
    ThinkPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    TurnBegin,
    TurnEnd,
    UserMessage,
    WireEvent,
)
from ..errors import KimiMCPError
from ..scope import Scope

log = get_logger("session")

SEARCH_EVERY = 0.2  # seconds between searches for a log the screen never named
SEARCH_LINES = 400  # lines of a candidate log read for its first prompt
PROMPT_KEY = 200  # characters of the first prompt that identify a log


@dataclass
class CallRecord:
    """One tool call of the turn, as logged, and how kimi-mcp answered its approval."""

    call_id: str
    name: str
    arguments: str
    result: str | None = None
    is_error: bool = False
    approval: str = "auto"
    awaiting_approval: bool = False


@dataclass
class TurnTrace:
    """Everything the session log said about one turn."""

    begun: bool = False
    ended: bool = False
    steps: list[list[str]] = field(default_factory=list)
    calls: dict[str, CallRecord] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    error: KimiMCPError | None = None
    ended_at: float | None = None  # perf_counter when the turn end was seen
    received: str | None = None  # the user message as Kimi logged it at the start of the turn
    unmatched: list[str] = field(default_factory=list)  # panels rejected without a logged call
    retrying: StepRetrying | None = None  # the model request failed and nothing has come since
    steered: list[str] = field(
        default_factory=list
    )  # messages added to the running turn, as Kimi logged them

    @property
    def output(self) -> str:
        for texts in reversed(self.steps):
            text = "".join(texts).strip()
            if text:
                return text
        return ""


def merged(traces: list[TurnTrace]) -> TurnTrace:
    """Several turns of one run (messages sent as next turns) as one: every step and call, the tokens
    summed, the last turn's end and error."""
    if len(traces) == 1:
        return traces[0]
    last = traces[-1]
    whole = TurnTrace(
        begun=traces[0].begun, ended=last.ended, error=last.error, ended_at=last.ended_at,
        received=traces[0].received, retrying=last.retrying,
    )  # fmt: skip
    for trace in traces:
        whole.steps += trace.steps
        whole.calls.update(trace.calls)
        whole.input_tokens += trace.input_tokens
        whole.output_tokens += trace.output_tokens
        whole.unmatched += trace.unmatched
        whole.steered += trace.steered
    return whole


def fold(trace: TurnTrace, event: WireEvent) -> str | None:
    """Apply one event to ``trace``; returns what to tell the caller about it (a new tool call), if
    anything. Every kind of event is handled: a new one fails type checking until it is."""
    if not isinstance(event, StepBegin | StepRetrying | ThinkPart | TurnEnd):
        trace.retrying = None  # the provider answered again (a turn that ends while retrying: Kimi gave up)
    match event:
        case TurnBegin(text=text):
            if not trace.begun:
                trace.received = text
            trace.begun = True
            trace.steps.append([])
        case StepBegin():
            trace.steps.append([])
        case TextPart(text=text):
            if not trace.steps:
                trace.steps.append([])
            trace.steps[-1].append(text)
        case ThinkPart():
            pass  # reasoning is not part of the answer
        case ApprovalRequest(call_id=call_id, name=name, arguments=arguments):  # before the call itself
            call = trace.calls.get(call_id)
            news = None
            if call is None:
                call = trace.calls[call_id] = CallRecord(call_id, name, arguments)
                news = f"Kimi asks to run {name} {summarize_args(arguments)}".strip()
            call.awaiting_approval = True
            return news
        case ApprovalResolved(call_id=call_id):
            if (call := trace.calls.get(call_id)) is not None:
                call.awaiting_approval = False
        case ToolCall(call_id=call_id, name=name, arguments=arguments):
            if (known := trace.calls.get(call_id)) is not None:
                known.arguments = arguments or known.arguments
            else:
                trace.calls[call_id] = CallRecord(call_id, name, arguments)
                return f"Kimi runs {name} {summarize_args(arguments)}".strip()
        case ToolResult(call_id=call_id, output=output, is_error=is_error):
            if (call := trace.calls.get(call_id)) is not None:
                call.result = output
                call.is_error = is_error
        case TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens):
            trace.input_tokens += input_tokens
            trace.output_tokens += output_tokens
        case StepRetrying(attempt=attempt, max_attempts=most, error=error):
            trace.retrying = event
            return f"the model provider failed ({error}); Kimi retries ({attempt}/{most})"
        case UserMessage(text=text):
            trace.steered.append(text)
            return "Kimi took the message sent into its turn"
        case TurnEnd():
            if trace.begun:
                trace.ended = True
                trace.ended_at = time.perf_counter()
        case _:
            assert_never(event)
    return None


def trim(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


def summarize_args(arguments: str) -> str:
    """The path, command, pattern or URL of a call's JSON arguments, for progress messages."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return ""
    if not isinstance(args, dict):
        return ""
    for key in ("path", "file_path", "command", "pattern", "url"):
        if isinstance(args.get(key), str):
            return trim(args[key], 120)
    return ""


class WireTail:
    """Reads complete new lines appended to a JSONL file."""

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        if from_end:
            with contextlib.suppress(OSError):
                self._offset = os.stat(path).st_size

    def poll(self) -> list[str]:
        """New complete lines; [] when the file is missing or unreadable. A file that shrank (rewritten or
        truncated) is read again from its start."""
        try:
            size = os.stat(self.path).st_size
            if size < self._offset:
                log.warning("session log %s shrank; reading it again from the start", self.path)
                self._offset, self._partial = 0, b""
            if size <= self._offset:
                return []
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(size - self._offset)
        except OSError:
            return []
        self._offset += len(data)
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        return [chunk.decode("utf-8", "replace") for chunk in chunks if chunk.strip()]


class SessionLog:
    """This session's log: found by the session id on screen (or by its first prompt), tailed, and folded
    into :attr:`trace`, the current turn. The current call's ``scope`` is told the session id as soon as it
    is known, and the news of the turn (progress)."""

    def __init__(
        self,
        driver: Driver,
        env: dict[str, str],
        workspace: Path,
        *,
        screen_text: Callable[[], str],
        scope: Callable[[], Scope],
    ) -> None:
        self.driver = driver
        self.env = env
        self.workspace = workspace
        self.session_id: str | None = None
        self.trace = TurnTrace()
        self._screen_text = screen_text
        self._scope = scope  # the current call's: told the news (progress) and the session id
        self._prompt: str | None = None
        self._tail: WireTail | None = None
        self._not_ours: set[Path] = set()
        self._last_search = 0.0

    @property
    def found(self) -> bool:
        return self._tail is not None

    def name(self, session_id: str | None) -> None:
        """Kimi's session id, once known (read from its screen, or from the log found): told at once."""
        if session_id and session_id != self.session_id:
            self.session_id = session_id
            self._scope().on_session(session_id)

    def exclude_existing(self) -> None:
        """The logs that exist now belong to other sessions (called at spawn, and when a standby is
        taken)."""
        self._not_ours = set(self.driver.wire_logs(self.env, self.workspace))

    def resume(self, session_id: str) -> bool:
        """Tail the log of an earlier session Kimi resumed, from its current end (its earlier turns are
        not this turn's); ``False`` if that log does not exist."""
        path = self.driver.wire_log(self.env, self.workspace, session_id)
        if path is None:
            return False
        self.name(session_id)
        self._tail = WireTail(path, from_end=True)
        return True

    def begin_turn(self, prompt: str) -> TurnTrace:
        self.trace = TurnTrace()
        self._prompt = prompt
        return self.trace

    def read(self) -> None:
        """Fold whatever the log gained since the last read into the current turn."""
        if self.session_id is None:  # some dialects only create the session on the first message
            self.name(self.driver.session_id(self._screen_text()))
        if self._tail is None:
            path = self.driver.wire_log(self.env, self.workspace, self.session_id)
            if path is None and self.session_id is None:
                path = self._find_by_prompt()
            if path is None:
                return
            log.debug("session log: %s", path)
            self._tail = WireTail(path)
        for line in self._tail.poll():
            for event in self.driver.events(line):
                self.apply(event)

    def apply(self, event: WireEvent) -> None:
        if (news := fold(self.trace, event)) is not None:
            self._scope().progress(news)

    def _find_by_prompt(self) -> Path | None:
        """Our session log when the screen never showed the session id (e.g. it scrolled away).

        Candidates are the logs of this workspace's conversations (Kimi keeps them in a folder keyed by the
        work directory: parallel attempts of one prompt, each on its own copy, never see each other's) that
        did not exist when we spawned Kimi; ours is the one whose first prompt is ours.
        """
        now = time.monotonic()
        if self._prompt is None or now - self._last_search < SEARCH_EVERY:
            return None
        self._last_search = now
        wanted = self._prompt.strip()[:PROMPT_KEY]
        for path in self.driver.wire_logs(self.env, self.workspace):
            if path in self._not_ours:
                continue
            first = self._first_prompt(path)
            if first is not None and first.strip()[:PROMPT_KEY] == wanted:
                self.name(self.driver.session_id_of(path))
                return path
        return None

    def _first_prompt(self, path: Path) -> str | None:
        """The first prompt a log records within its first lines (None if none, or unreadable)."""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for _, line in zip(range(SEARCH_LINES), handle, strict=False):
                    if '"turn' not in line and "TurnBegin" not in line:
                        continue
                    begin = next((e for e in self.driver.events(line) if isinstance(e, TurnBegin)), None)
                    if begin is not None:
                        return begin.text
        except OSError:
            return None
        return None
