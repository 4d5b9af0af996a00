"""Driver for the legacy Python kimi-cli 1.50.x TUI (prompt_toolkit).

Facts this relies on (docs/kimi-dialects.md): the input box ``── input`` stays visible during a turn,
so readiness is judged from spinners and panels; ``TurnEnd`` in
``$KIMI_SHARE_DIR|~/.kimi/sessions/<md5(workdir)>/<sid>/wire.jsonl`` marks the end of a turn, and tool
calls are logged there *before* their approval panel appears.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..errors import ApiError, AuthError, KimiMCPError
from ..message import MessageRules, one_line
from ..question import Choice, Question
from .base import (
    Console,
    Driver,
    LoginOptions,
    ScreenState,
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
    json_record,
    login_failed,
    write_atomically,
)

_SPINNER = re.compile(r"[\u2800-\u28ff\U0001F311-\U0001F318]")
_SESSION = re.compile(r"Session: ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
_AUTH = re.compile(r"Authorization failed\.[^\n]*|LLM not set, send \"/login\"[^\n]*")
_TRANSIENT = re.compile(
    r"LLM provider error: Error code: (?:429|5\d\d)[^\n]*|Network connection failed[^\n]*"
    r"|Request timed out[^\n]*|Membership expired[^\n]*|The server returned an empty response[^\n]*"
)
_APPROVAL_TOOL = re.compile(r"(\w+) is requesting approval")
_SERVER_LINE = re.compile(r"Server: Error code: (\d{3})[^\n]*")

_PLATFORM_LABEL = {"moonshot.ai": "(moonshot.ai)", "moonshot.cn": "(moonshot.cn)"}
_SETUP_FAILED = [
    r"Failed to get models: [^\n]*",
    r"No models available for the selected platform",
    r"No model selected|No platform selected|Unknown platform",
]

_EDIT_TOOLS = {"WriteFile": ("path",), "StrReplaceFile": ("path",)}
_SHELL_TOOLS = {"Shell"}
_READ_TOOLS = {"ReadFile", "Glob", "Grep", "ReadMediaFile", "SetTodoList", "TaskList", "TaskOutput"}


class LegacyDriver(Driver):
    name = "legacy"
    answer_terminal_queries = True  # prompt_toolkit asks for the cursor position (CPR) on every draw
    interrupt_key = "\x03"
    approve_key = "1"
    reject_key = "3"
    dismiss_question_key = "\x1b"
    edit_tools = frozenset(_EDIT_TOOLS)
    shell_tools = frozenset(_SHELL_TOOLS)
    read_tools = frozenset(_READ_TOOLS)

    def argv(self, read_only: bool = False, model: str | None = None) -> list[str]:
        # --plan: Kimi refuses file edits outside its own plan file (kept in Kimi's home, not the workspace)
        return [
            self.install.binary, *(["--plan"] if read_only else []), *(["-m", model] if model else [])
        ]  # fmt: skip

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        env = dict(base)
        env.update(KIMI_DISABLE_TELEMETRY="1", KIMI_CLI_NO_AUTO_UPDATE="1", TERM="xterm-256color")
        env.setdefault("NO_PROXY", "127.0.0.1,localhost")
        return env

    # -- screen --------------------------------------------------------------------------------------
    def classify(self, lines: list[str]) -> ScreenState:
        input_rows = [i for i, line in enumerate(lines) if line.lstrip().startswith(("── input", "╌╌ input"))]
        text = "\n".join(lines)
        if "[1] Approve once" in text or "╭─ approval" in text:
            return ScreenState.APPROVAL
        if "╭─ question" in text:
            return ScreenState.QUESTION
        if not input_rows:
            return ScreenState.STARTING
        row = input_rows[-1]
        above = [line for line in lines[:row] if line.strip()][-3:]
        if any(_SPINNER.search(line) for line in above):
            return ScreenState.BUSY
        if "Model: not set" in text:
            return ScreenState.NOT_LOGGED_IN
        return ScreenState.READY

    def approval_tool(self, lines: list[str]) -> str | None:
        """The tool named by the live panel: the first "X is requesting approval" after its border."""
        start = max((i for i, line in enumerate(lines) if "╭─ approval" in line), default=0)
        for line in lines[start:]:
            if match := _APPROVAL_TOOL.search(line):
                return match.group(1)
        return None

    def session_id(self, screen_text: str) -> str | None:
        match = _SESSION.search(screen_text)
        return match.group(1) if match else None

    paste_pause = 0.05  # prompt_toolkit takes the paste, then the Enter
    panel_top = re.compile(r"╭─ approval")

    def message_rules(self, workspace: Path, env: dict[str, str], max_tokens: int) -> MessageRules:
        # tabs survive a paste; no mid-text expansions beyond the placeholders prepare() always guards
        return MessageRules(keeps_tabs=True, max_tokens=max_tokens)

    def input_pending(self, lines: list[str]) -> bool:
        rows = [i for i, line in enumerate(lines) if line.lstrip().startswith(("── input", "╌╌ input"))]
        return bool(rows) and rows[-1] + 1 < len(lines) and bool(lines[rows[-1] + 1].strip())

    def exit_sequence(self) -> list[tuple[str, float]]:
        # Ctrl-D on the empty prompt exits; "/exit\r" can race the slash-command completion menu.
        return [("\x04", 0.0)]

    def exit_retry_sequence(self) -> list[tuple[str, float]]:
        return [("/exit", 0.4), ("\r", 0.2), ("\r", 0.0)]

    def reject_with_feedback(self, message: str) -> list[tuple[str, float]]:
        # "[4] Reject, tell the model what to do instead" opens a one-line input (a plain reject ends the turn)
        return [("4", 0.4), (one_line(message), 0.1), ("\r", 0.0)]

    def echo_seen(self, text: str, prompt: str) -> bool:
        first = prompt.strip().splitlines()[0][:30] if prompt.strip() else ""
        return bool(first) and ("\u2728 " + first) in text

    # -- questions and steering ----------------------------------------------------------------------
    question_digits = 6  # the panel maps the keys 1-6 (options + "Other")
    steer_delivery = "in_turn"

    def answer_question(
        self, question: Question, choice: Choice, *, index: int, count: int
    ) -> list[tuple[str, float]]:
        """A digit picks and submits a single-select question; on a multi-select one digits toggle and
        Enter submits. "Other" (options + 1) opens a one-line input (single-select: at once; multi-select:
        after the Enter), taken with Enter. Submitting moves to the next unanswered question by itself, and
        the last one sends the answers: no extra keys (``index``/``count`` do not change the keys)."""
        keys = [(self._question_key(question, pick), QUESTION_PAUSE) for pick in choice.picks]
        if choice.text is not None:
            keys.append((self._question_key(question, None), QUESTION_PAUSE))
            if question.multi_select:
                keys.append(("\r", QUESTION_PAUSE))  # "Other" ticked: Enter asks for its text
            keys += [(_paste(one_line(choice.text)), QUESTION_PAUSE), ("\r", QUESTION_PAUSE)]
        elif question.multi_select:
            keys.append(("\r", QUESTION_PAUSE))
        return keys

    def steer_sequence(self, message: str) -> list[tuple[str, float]]:
        """The message pasted into the input box, then Ctrl-S ("send immediately": Enter would queue it as
        the next turn). Kimi injects it into the turn at the next step boundary (after the running model
        reply or tool call). Without a running turn Ctrl-S opens prompt_toolkit's ``(i-search)`` with the
        text kept: Ctrl-G (:attr:`steer_cancel_key`) gets the text back into the input box. No pause between
        the paste and Ctrl-S: prompt_toolkit parses one read into the paste and the key and handles them in
        order (measured on 1.50.0)."""
        return [(_paste(message + "\n"), 0.0), ("\x13", 0.0)]

    #: leaves the ``(i-search)`` that Ctrl-S opens when no turn runs (the text comes back to the input box)
    steer_cancel_key = "\x07"

    def screen_error(self, text: str) -> KimiMCPError | None:
        if match := _AUTH.search(text):
            server = _SERVER_LINE.search(text)
            return AuthError(
                f"Kimi could not authenticate with the model provider: {match.group(0).strip()}",
                details={
                    "kimi_message": match.group(0).strip(),
                    "status": server.group(1) if server else None,
                },
            )
        if match := _TRANSIENT.search(text):
            return ApiError(
                f"The model provider failed: {match.group(0).strip()}",
                details={"kimi_message": match.group(0).strip()},
            )
        return None

    # -- login ---------------------------------------------------------------------------------------
    def login(self, console: Console, options: LoginOptions) -> str:
        """``/login`` → platform → API key → model → thinking → "Setup complete!" (then Kimi reloads)."""
        console.send("/login\r")
        console.wait_for([r"Select a platform"], 20)
        label = _PLATFORM_LABEL[options.platform]
        number = _menu_number(console.screen_lines(), lambda text: label in text)
        if number is None:
            raise AuthError(f"the /login menu of kimi-cli has no {options.platform} platform")
        console.send(str(number), 0.3)
        console.send("\r")
        console.wait_for([r"Enter your API key"], 20)
        console.send(options.api_key, 0.1)
        console.send("\r")
        index, match = console.wait_for([r"Select a model", *_SETUP_FAILED], 60)
        if index:
            raise _login_failed(match.group(0), options.platform)
        models = _menu_entries(console.screen_lines(), after="Select a model")
        if not models:
            raise AuthError("the platform offered no models", details={"platform": options.platform})
        wanted = options.model or models[0][1]
        chosen = next((number for number, name in models if name == wanted), None)
        if chosen is None:
            raise AuthError(
                f"model {wanted!r} is not offered by {options.platform}",
                details={"available": [name for _, name in models]},
                suggestion="Set KIMI_MCP_MODEL to one of the available models, or unset it.",
            )
        console.send(str(chosen), 0.3)
        console.send("\r")
        index, match = console.wait_for([r"Enable thinking mode\?", r"Setup complete", *_SETUP_FAILED], 30)
        if index == 0:
            console.send("1" if options.thinking else "2", 0.3)
            console.send("\r")
            index, match = console.wait_for([r"Setup complete", *_SETUP_FAILED], 30)
            index = 1 if index == 0 else index + 1
        if index != 1:
            raise _login_failed(match.group(0), options.platform)
        return wanted

    # -- session log ---------------------------------------------------------------------------------
    wire_glob = "*/{sid}/wire.jsonl"  # sessions/<md5(workdir)>/<sid>/wire.jsonl

    @classmethod
    def sessions_root(cls, env: dict[str, str]) -> Path:
        share = env.get("KIMI_SHARE_DIR")
        return (Path(share) if share else cls.home_of(env) / ".kimi") / "sessions"

    @classmethod
    def store_key(cls, workdir: str) -> str:
        return hashlib.md5(workdir.encode(), usedforsecurity=False).hexdigest()  # kimi_cli.metadata

    @classmethod
    def register_session(cls, env: dict[str, str], session_id: str, workdir: str, folder: Path) -> None:
        """kimi-cli finds a session only through its work directory's entry in ``kimi.json``."""
        meta = cls.sessions_root(env).parent / "kimi.json"
        data = json.loads(meta.read_text()) if meta.is_file() else {}
        dirs = [d for d in data.get("work_dirs", []) if d.get("path") != workdir or d.get("kaos") != "local"]
        dirs.append({"path": workdir, "kaos": "local", "last_session_id": session_id})
        write_atomically(meta, json.dumps({**data, "work_dirs": dirs}, indent=2))

    def parse_wire_line(self, line: str) -> list[WireEvent]:
        record = json_record(line)
        if record is None or not isinstance(record.get("message"), dict):
            return []
        message = record["message"]
        payload = message.get("payload") or {}
        match message.get("type"):
            case "TurnBegin":
                return [TurnBegin(_user_text(payload.get("user_input")))]
            case "StepBegin":
                return [StepBegin()]
            case "ContentPart":
                return _content_part(payload)
            case "ToolCall":
                function = payload.get("function") or {}
                call_id, name = payload.get("id") or "", function.get("name") or ""
                return [ToolCall(call_id, name, function.get("arguments") or "")]
            case "ToolResult":
                value = payload.get("return_value") or {}
                summary = value.get("message") or value.get("output") or ""
                return [
                    ToolResult(payload.get("tool_call_id") or "", str(summary), bool(value.get("is_error")))
                ]
            case "StatusUpdate":
                return _token_usage(payload)
            case "StepRetry":  # {"next_attempt": 2, "max_attempts": 3, "error_type": ..., "status_code": 429}
                return [_retry(payload)]
            case "SteerInput":  # a message steered in (Ctrl-S), logged as it is handed to the model
                return [UserMessage(_user_text(payload.get("user_input")))]
            case "TurnEnd":
                return [TurnEnd()]
        return []

    def edit_targets(self, name: str, arguments: dict[str, Any]) -> list[str]:
        keys = _EDIT_TOOLS.get(name, ())
        return [str(arguments[k]) for k in keys if isinstance(arguments.get(k), str)]


QUESTION_PAUSE = 0.3  # seconds after each key on the question panel (measured safe; it redraws per key)


def _paste(text: str) -> str:
    return "\x1b[200~" + text + "\x1b[201~"


def _user_text(parts: Any) -> str:
    """The text of a logged ``user_input`` (a string, or a list of content parts)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _retry(payload: dict[str, Any]) -> StepRetrying:
    status = payload.get("status_code")
    status = status if isinstance(status, int) else None
    name = str(payload.get("error_type") or "error")
    attempt = payload.get("next_attempt")
    most = payload.get("max_attempts")
    return StepRetrying(
        attempt=attempt - 1 if isinstance(attempt, int) else 0,
        max_attempts=most if isinstance(most, int) else 0,
        error=f"{name} {status}" if status is not None else name,
        status=status,
    )


def _content_part(payload: dict[str, Any]) -> list[WireEvent]:
    if payload.get("type") == "text":
        return [TextPart(payload.get("text") or "")]
    if payload.get("type") == "think":
        return [ThinkPart(payload.get("think") or "")]
    return []


def _token_usage(payload: dict[str, Any]) -> list[WireEvent]:
    usage = payload.get("token_usage") or {}
    if not usage:
        return []
    return [
        TokenUsage(
            input_tokens=int(usage.get("input_other", 0))
            + int(usage.get("input_cache_read", 0))
            + int(usage.get("input_cache_creation", 0)),
            output_tokens=int(usage.get("output", 0)),
            message_id=payload.get("message_id"),
        )
    ]


def _menu_number(lines: list[str], predicate) -> int | None:
    for line in lines:
        match = re.match(r"\s*(?:>\s*)?(\d+)\.\s+(.*)$", line)
        if match and predicate(match.group(2)):
            return int(match.group(1))
    return None


def _menu_entries(lines: list[str], after: str) -> list[tuple[int, str]]:
    start = next((i for i, line in enumerate(lines) if after in line), None)
    if start is None:
        return []
    entries = []
    for line in lines[start + 1 :]:
        match = re.match(r"\s*(?:>\s*)?(\d+)\.\s+(\S+)", line)
        if match:
            entries.append((int(match.group(1)), match.group(2)))
        elif entries and line.strip():
            break
    return entries


def _login_failed(message: str, platform: str) -> AuthError:
    unreachable = "Cannot connect" in message or (
        "connect" in message.lower() and "Unauthorized" not in message
    )
    return login_failed(message, platform, unreachable=unreachable)
