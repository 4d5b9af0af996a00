"""Driver for Kimi Code CLI 2.x (npm ``@moonshot-ai/kimi-code``, a pi-tui app on Node >= 22.19).

Facts this relies on (docs/kimi-dialects.md): a first-run "Trust this folder?" prompt; the input box
``│ >``; prompts are submitted as a bracketed paste followed by CR (a plain CR right after typed text is
swallowed as part of a paste burst); the session log
``$KIMI_CODE_HOME|~/.kimi-code/sessions/<wd>/<session_id>/agents/main/wire.jsonl`` records
``turn.prompt`` … ``turn.ended``, and approval requests (``interaction.request``, with the target path)
*before* the tool call itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..errors import ApiError, AuthError, KimiMCPError, StartupFault
from ..kimi_dirs import cache_dir
from ..message import MessageRules, one_line
from ..question import Choice, Question
from .base import (
    ApprovalRequest,
    ApprovalResolved,
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

_SESSION = re.compile(r"Session:\s+(session_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
_BUSY = re.compile(r"Working…|Thinking…|· Tip:|Retrying \(|[\U0001F311-\U0001F318\u2800-\u28ff] ")
_ERROR = re.compile(r"Error: \[(provider\.[a-z_]+)\] ([^\n]*)")
_NOT_SET = re.compile(r"Error: LLM not set[^\n]*")

_OTHER_INPUT_HINT = re.compile(r"type answer  ↵ save")  # the question panel while "Other" takes text
REVIEW_TITLE = "Review your answer before submit"
#: seconds after each key on the question panel: none, Kimi Code splits one read into single keys (and a paste)
#: and its panel handles each in turn at once (measured on 2.1.0: answer → the next model request 391 → 77 ms,
#: every answer taken; it was 0.3 s, from the belief that keys in one read were not recognised)
QUESTION_PAUSE = 0.0

_PLATFORM_ROW = {"moonshot.ai": "platform.kimi.ai", "moonshot.cn": "platform.kimi.com"}
_LOGIN_ERROR = r"Error: [^\n]*"

_EDIT_TOOLS = {"Write", "Edit"}
_SHELL_TOOLS = {"Bash"}
_READ_TOOLS = {
    "Read", "ReadMediaFile", "Glob", "Grep", "TodoList", "TaskList", "TaskOutput", "GetGoal", "CronList",
}  # fmt: skip


def _input_row(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].lstrip().startswith("│ >"):
            return index
    return None


class KimiCodeDriver(Driver):
    name = "kimi-code"
    answer_terminal_queries = False  # it probes colours/keyboard protocols and falls back on its own
    #: a dark background, as a terminal answers OSC 11: its theme detection ("auto") waits 250 ms for it at
    #: every start (spawn → ready input box 1.90 → 1.65 s, medians of 5 and 7); a late answer is
    #: harmless (it strips OSC 11 reports from its input and follows the terminal's theme with them)
    fixed_answers = (("\x1b]11;?", "\x1b]11;rgb:0000/0000/0000\x07"),)
    interrupt_key = "\x1b"
    approve_key = "1"
    reject_key = "3"
    dismiss_question_key = "\x1b"
    edit_tools = frozenset(_EDIT_TOOLS)
    shell_tools = frozenset(_SHELL_TOOLS)
    read_tools = frozenset(_READ_TOOLS)
    trust_key = "\r"
    lists_workspace_at_startup = False  # the listing is taken when the session starts (first message)
    logs_approvals = True
    panel_top = re.compile(r"▶ (?!\d\.).*\?\s*$")  # "▶ Write this file?", not "▶ 1. Approve once"

    def argv(self, read_only: bool = False, model: str | None = None) -> list[str]:
        # --plan: Kimi refuses file edits outside its own plan file (kept in Kimi's home, not the workspace)
        return [
            self.install.binary, *(["--plan"] if read_only else []), *(["-m", model] if model else [])
        ]  # fmt: skip

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        env = dict(self.install.environment(base))  # kimi-mcp's own install: its Node first on PATH
        env.update(KIMI_DISABLE_TELEMETRY="1", KIMI_CODE_NO_AUTO_UPDATE="1", TERM="xterm-256color")
        if not (base.get("NODE_COMPILE_CACHE") or base.get("NODE_DISABLE_COMPILE_CACHE")):
            cache = _compile_cache(base)
            if cache is not None:
                env["NODE_COMPILE_CACHE"] = cache
        return env

    # -- screen --------------------------------------------------------------------------------------
    def classify(self, lines: list[str]) -> ScreenState:
        text = "\n".join(lines)
        if "Trust this folder?" in text and "Don't trust" in text:
            return ScreenState.TRUST
        if re.search(r"1\. Approve once", text):
            return ScreenState.APPROVAL
        if "esc cancel" in text and ("←/→/tab switch" in text or _OTHER_INPUT_HINT.search(text)):
            return ScreenState.QUESTION
        row = _input_row(lines)
        if row is None:
            return ScreenState.STARTING
        if any(_BUSY.search(line) for line in lines[:row]):
            return ScreenState.BUSY
        if "Model:     not set" in text or "Model: not set" in text or "Run /login or /provider" in text:
            return ScreenState.NOT_LOGGED_IN
        return ScreenState.READY

    def session_id(self, screen_text: str) -> str | None:
        match = _SESSION.search(screen_text)
        return match.group(1) if match else None

    def message_rules(self, workspace: Path, env: dict[str, str], max_tokens: int) -> MessageRules:
        # tabs become four spaces on any input path; "/<skill>" after whitespace expands the skill
        return MessageRules(keeps_tabs=False, max_tokens=max_tokens, skill_names=skill_names(workspace, env))

    def input_pending(self, lines: list[str]) -> bool:
        row = _input_row(lines)
        return row is not None and bool(lines[row].lstrip()[3:].strip(" │"))

    def exit_sequence(self) -> list[tuple[str, float]]:
        return [("/exit", 0.15), ("\r", 0.0)]

    def reject_with_feedback(self, message: str) -> list[tuple[str, float]]:
        # "4. Reject with feedback" then type the reason (as a paste) and submit
        return [("4", 0.4), ("\x1b[200~" + one_line(message) + "\x1b[201~", 0.2), ("\r", 0.0)]

    def exit_retry_sequence(self) -> list[tuple[str, float]]:
        return [("\x03", 0.3), ("\x03", 0.0)]  # Ctrl-C twice exits

    # -- questions and steering ----------------------------------------------------------------------
    question_digits = 9  # the panel maps the keys 1-9 (options + "Other")
    steer_delivery = "in_turn"

    def answer_question(
        self, question: Question, choice: Choice, *, index: int, count: int
    ) -> list[tuple[str, float]]:
        """The panel has a tab per question plus a last "Submit" tab (also for one question). A digit picks
        a single-select option and moves to the next unanswered tab; on a multi-select question digits
        toggle and Tab moves on. "Other" (options + 1) opens a one-line input: paste, Enter saves it (and
        moves on for a single-select question). On the Submit tab "1" sends the answers."""
        keys = [(self._question_key(question, pick), QUESTION_PAUSE) for pick in choice.picks]
        if choice.text is not None:
            keys += [
                (self._question_key(question, None), QUESTION_PAUSE),
                ("\x1b[200~" + one_line(choice.text) + "\x1b[201~", QUESTION_PAUSE),
                ("\r", QUESTION_PAUSE),
            ]
        if question.multi_select:
            keys.append(("\t", QUESTION_PAUSE))
        if index == count - 1:
            keys.append(("1", QUESTION_PAUSE))  # the Submit tab: "[1] Submit"
        return keys

    def question_on_screen(self, lines: list[str]) -> str | None:
        if any(REVIEW_TITLE in line for line in lines):
            return None  # the Submit tab: "Review your answer before submit"
        return super().question_on_screen(lines)

    def steer_sequence(self, message: str) -> list[tuple[str, float]]:
        """The message pasted into the input box, then Ctrl-S ("ctrl-s to steer immediately"; Enter would
        queue it for a new turn after this one). Kimi logs ``prompt.steered`` at once and injects it
        (``turn.steer``) at the next step boundary. Without a running turn Ctrl-S does nothing and the text
        stays in the input box.

        A paste of more than 10 lines or 1,000 characters shows as ``[paste #1 …]``, which Enter expands but
        Ctrl-S sends as it is: Ctrl-V with the cursor on that marker expands it in the box first.

        No pause between the keys: Kimi Code splits what it reads into the paste and single keys and handles
        each in turn at once (its stdin buffer), so all of them in one read work (measured on 2.1.0: the
        steer in Kimi's log 35 ms after ``kimi_steer`` instead of 273 ms with 0.2 s pauses)."""
        paste = message + "\n"
        keys = [("\x1b[200~" + paste + "\x1b[201~", 0.0)]
        if folds(paste):
            keys.append((EXPAND_PASTE_KEY, 0.0))
        return [*keys, ("\x13", 0.0)]

    def screen_error(self, text: str) -> KimiMCPError | None:
        if match := _NOT_SET.search(text):  # it showed a model when it looked ready (else it was logged in)
            return StartupFault(
                "Kimi Code said its model is not set although it looked ready with one",
                details={"kimi_message": match.group(0)},
            )
        matches = list(_ERROR.finditer(text))
        if not matches:
            return None
        kind, message = matches[-1].group(1), matches[-1].group(2).strip()
        details = {"kimi_error": kind, "kimi_message": message}
        if kind == "provider.auth_error":
            return AuthError(
                f"Kimi could not authenticate with the model provider: {message}", details=details
            )
        return ApiError(f"The model provider failed ({kind}): {message}", details=details)

    # -- login ---------------------------------------------------------------------------------------
    def login(self, console: Console, options: LoginOptions) -> str:
        """``/login`` → "Kimi Platform (API key · …)" → key → model (+ thinking toggle) → "Setup complete"."""
        console.send("/login", 0.15)
        console.send("\r")
        console.wait_for([r"Kimi Platform \(API key"], 20)
        target = _PLATFORM_ROW[options.platform]
        rows = [line for line in console.screen_lines() if "Kimi Code (" in line or "Kimi Platform (" in line]
        wanted = next((i for i, line in enumerate(rows) if target in line), None)
        current = next((i for i, line in enumerate(rows) if "❯" in line), 0)
        if wanted is None:
            raise AuthError(f"the /login menu of Kimi Code has no {target} entry", details={"menu": rows})
        step = "\x1b[B" if wanted >= current else "\x1b[A"
        console.send(step * abs(wanted - current), 0.2)
        console.send("\r")
        console.wait_for([r"Enter API key"], 20)
        console.send("\x1b[200~" + options.api_key + "\x1b[201~", 0.2)
        console.send("\r")
        index, match = console.wait_for([r"Select a model", _LOGIN_ERROR], 60)
        if index:
            raise _login_failed(match.group(0), options.platform)
        if options.model:
            console.send(options.model, 0.4)  # the list filters as you type
        screen = "\n".join(console.screen_lines())
        if not options.thinking and "[ On ]" in screen:
            console.send("\x1b[C", 0.2)  # thinking toggle: On -> Off
        elif options.thinking and "[ Off ]" in screen:
            console.send("\x1b[D", 0.2)
        console.send("\r")
        index, match = console.wait_for(
            [r"Setup complete[^\n]*", _LOGIN_ERROR, r"No (?:matching )?models?[^\n]*"], 30
        )
        if index:
            raise _login_failed(match.group(0), options.platform)
        return match.group(0).rsplit("·", 1)[-1].strip() or (options.model or "")

    # -- session log ---------------------------------------------------------------------------------
    wire_glob = "*/{sid}/agents/main/wire.jsonl"  # sessions/<wd>/<sid>/agents/main/wire.jsonl

    @classmethod
    def sessions_root(cls, env: dict[str, str]) -> Path:
        explicit = env.get("KIMI_CODE_HOME")
        return (Path(explicit) if explicit else cls.home_of(env) / ".kimi-code") / "sessions"

    @classmethod
    def store_key(cls, workdir: str) -> str:
        """``wd_<slug of the folder's name>_<sha256 of the path, 12 hex>`` (Kimi Code's encodeWorkDirKey)."""
        normalized = workdir.replace("\\", "/").rstrip("/")
        slug = re.sub(r"[^a-z0-9._-]+", "-", normalized.rsplit("/", 1)[-1].lower()).strip("-")[:40].strip("-")
        digest = hashlib.sha256(normalized.encode()).hexdigest()[:12]
        return f"wd_{slug if slug not in ('', '.', '..') else 'workspace'}_{digest}"

    @classmethod
    def register_session(cls, env: dict[str, str], session_id: str, workdir: str, folder: Path) -> None:
        """Kimi Code resumes a session its ``session_index.jsonl`` lists, in a workspace ``workspaces.json``
        knows."""
        home = cls.sessions_root(env).parent
        entry = {"sessionId": session_id, "sessionDir": str(folder), "workDir": workdir}
        with open(home / "session_index.jsonl", "a", encoding="utf-8") as index:
            index.write(json.dumps(entry, separators=(",", ":")) + "\n")
        listed = home / "workspaces.json"
        data = (
            json.loads(listed.read_text())
            if listed.is_file()
            else {"version": 1, "deleted_workspace_ids": []}
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        name = workdir.rstrip("/").rsplit("/", 1)[-1]
        known = data.setdefault("workspaces", {})
        known.setdefault(folder.parent.name, {"root": workdir, "name": name, "created_at": now})[
            "last_opened_at"
        ] = now
        write_atomically(listed, json.dumps(data, separators=(",", ":")))

    def parse_wire_line(self, line: str) -> list[WireEvent]:
        record = json_record(line)
        if record is None:
            return []
        match record.get("type"):
            case "turn.prompt":
                parts = record.get("input") or []
                return [TurnBegin("".join(p.get("text", "") for p in parts if isinstance(p, dict)))]
            case "turn.steer":  # a message steered into the running turn, as it is handed to the model
                parts = record.get("input") or []
                return [UserMessage("".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)))]
            case "turn.ended":
                return [TurnEnd(reason=record.get("reason"))]
            case "turn.step.retrying":
                return [_retrying(record)]
            case "usage.record":
                usage = record.get("usage") or {}
                return [
                    TokenUsage(
                        input_tokens=int(usage.get("inputOther", 0))
                        + int(usage.get("inputCacheRead", 0))
                        + int(usage.get("inputCacheCreation", 0)),
                        output_tokens=int(usage.get("output", 0)),
                    )
                ]
            case "interaction.request" if record.get("kind") == "approval":
                request = record.get("request") or {}
                return [
                    ApprovalRequest(
                        call_id=str(record.get("toolCallId") or request.get("toolCallId") or ""),
                        name=str(request.get("toolName") or ""),
                        arguments=json.dumps(request.get("display") or {}, ensure_ascii=False),
                    )
                ]
            case "permission.record_approval_result":
                return [ApprovalResolved(str(record.get("toolCallId") or ""))]
            case "context.append_loop_event":
                return _loop_event(record.get("event") or {})
        return []

    def edit_targets(self, name: str, arguments: dict[str, Any]) -> list[str]:
        if name not in _EDIT_TOOLS:
            return []
        path = arguments.get("path")
        return [path] if isinstance(path, str) else []


EXPAND_PASTE_KEY = "\x16"  # Ctrl-V: with the cursor on a paste marker, the marker becomes the pasted text
FOLD_LINES, FOLD_CHARS = 10, 1000  # a paste of more lines or characters is shown as a marker


def _compile_cache(env: dict[str, str]) -> str | None:
    """Where Node keeps the code it compiled of Kimi's 22 MB bundle for the next start (Node >= 22.1 reads
    ``NODE_COMPILE_CACHE``, checked against the source): spawn → ready input box 1.65 → 1.46 s (medians of
    7, with the answer to its colour query). Made here, and None if it cannot be: Node 22.23 spun at full
    CPU without end on a folder it could not create (under /proc)."""
    folder = cache_dir(env) / "node-compile-cache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(folder) if os.access(folder, os.W_OK | os.X_OK) else None


def folds(paste: str) -> bool:
    """Whether Kimi Code's input box shows ``paste`` as a ``[paste #N …]`` marker (its editor's own rule:
    characters are JavaScript's, UTF-16 code units; tabs count as the four spaces they become)."""
    text = paste.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    return text.count("\n") + 1 > FOLD_LINES or len(text.encode("utf-16-le")) // 2 > FOLD_CHARS


def _retrying(record: dict[str, Any]) -> StepRetrying:
    """``turn.step.retrying`` (camelCase keys in 2.1.0; snake_case seen in earlier builds)."""

    def get(camel: str, snake: str) -> Any:
        return record.get(camel, record.get(snake))

    status = get("statusCode", "status_code")
    name, message = (
        str(get("errorName", "error_name") or "error"),
        str(get("errorMessage", "error_message") or ""),
    )
    return StepRetrying(
        attempt=_int(get("failedAttempt", "failed_attempt")),
        max_attempts=_int(get("maxAttempts", "max_attempts")),
        error=f"{name}: {message}" if message else name,
        status=status if isinstance(status, int) else None,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _loop_event(event: dict[str, Any]) -> list[WireEvent]:
    """The events of one ``context.append_loop_event`` record (steps, text, tool calls and results)."""
    match event.get("type"):
        case "step.begin":
            return [StepBegin()]
        case "content.part":
            part = event.get("part") or {}
            if part.get("type") == "text":
                return [TextPart(str(part.get("text") or ""))]
            if part.get("type") in ("think", "thinking"):
                return [ThinkPart(str(part.get("think") or part.get("text") or ""))]
            return []
        case "tool.call":
            return [
                ToolCall(
                    call_id=str(event.get("toolCallId") or ""),
                    name=str(event.get("name") or ""),
                    arguments=json.dumps(event.get("args") or {}, ensure_ascii=False),
                )
            ]
        case "tool.result":
            result = event.get("result") or {}
            output = result.get("output")
            if not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False) if output is not None else ""
            return [
                ToolResult(
                    call_id=str(event.get("toolCallId") or ""),
                    output=output or str(result.get("error") or ""),
                    is_error=bool(result.get("isError") or result.get("is_error") or result.get("error")),
                )
            ]
    return []


BUILTIN_SKILLS = frozenset(
    {
        "write-goal", "custom-theme", "mcp-config", "update-config", "check-kimi-code-docs",
        "import-from-cc-codex", "sub-skill",
    }
)  # fmt: skip


def skill_names(workspace: Path, env: dict[str, str]) -> frozenset[str]:
    """Skills Kimi Code 2.1 knows in ``workspace``: built-in, user (``$KIMI_CODE_HOME/skills``,
    ``~/.agents/skills``) and project ones (``.kimi-code/skills``, ``.agents/skills``, ``.claude/skills``
    in the workspace and the folders above it up to the git root). A skill is a folder with ``SKILL.md``
    (named by the folder and by its ``name:`` line) or a ``.md`` file (named by its stem)."""
    home = Path(env.get("HOME") or Path.home())
    kimi_home = Path(env["KIMI_CODE_HOME"]) if env.get("KIMI_CODE_HOME") else home / ".kimi-code"
    roots = [kimi_home / "skills", home / ".agents" / "skills"]
    for folder in (workspace, *workspace.parents):
        roots += [
            folder / ".kimi-code" / "skills",
            folder / ".agents" / "skills",
            folder / ".claude" / "skills",
        ]
        if (folder / ".git").exists() or folder == home:
            break
    names = set(BUILTIN_SKILLS)
    for root in roots:
        names |= _skills_in(root)
    return frozenset(names)


def _skills_in(root: Path) -> set[str]:
    names: set[str] = set()
    try:
        entries = list(root.iterdir())
    except OSError:
        return names
    for entry in entries:
        if entry.suffix == ".md" and entry.is_file():
            names.add(entry.stem)
        elif (entry / "SKILL.md").is_file():
            names.add(entry.name)
            with contextlib.suppress(OSError):
                head = (entry / "SKILL.md").read_text(encoding="utf-8", errors="replace")[:2000]
                if match := re.search(r"^name:\s*['\"]?([^'\"\n]+?)['\"]?\s*$", head, re.M):
                    names.add(match.group(1))
    return names


def _login_failed(message: str, platform: str) -> AuthError:
    unreachable = any(word in message for word in ("fetch failed", "ECONNREFUSED", "ENOTFOUND"))
    return login_failed(message, platform, unreachable=unreachable)
