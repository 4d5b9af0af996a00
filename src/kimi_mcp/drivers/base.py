"""What a Kimi dialect driver must provide. The session is generic; everything version-specific
(argv, environment, screen strings, keys, session-log location and format) lives in a driver."""

from __future__ import annotations

import enum
import json
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from .._logging import get_logger
from ..errors import AuthError, KimiMCPError
from ..message import MessageRules
from ..question import Choice, Question
from ._models import KimiModels

log = get_logger("drivers")


class ScreenState(enum.Enum):
    STARTING = "starting"
    READY = "ready"  # input box shown and nothing running
    BUSY = "busy"  # a spinner / live area is running
    APPROVAL = "approval"  # an approval panel waits for a key
    QUESTION = "question"  # the agent asks the user a question
    TRUST = "trust"  # "trust this folder?" prompt
    NOT_LOGGED_IN = "not_logged_in"  # ready, but no model / login configured


@dataclass(frozen=True, slots=True)
class TurnBegin:
    """A user message opened a turn; ``text`` is the message as Kimi logged it."""

    text: str


@dataclass(frozen=True, slots=True)
class StepBegin:
    """The model begins another step of the turn (the answer is the last step's text)."""


@dataclass(frozen=True, slots=True)
class TextPart:
    """A piece of the model's answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkPart:
    """A piece of the model's reasoning (not part of the answer)."""

    text: str


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """Kimi asks to approve a tool call (logged before the call itself by some dialects); ``arguments``
    is JSON."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    """The approval request of a call was answered."""

    call_id: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model calls a tool; ``arguments`` is JSON."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call returned (its summary or output)."""

    call_id: str
    output: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens one model request used (input counts cached input too)."""

    input_tokens: int
    output_tokens: int
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class StepRetrying:
    """A model request failed and Kimi will retry it (``attempt`` failed of ``max_attempts``)."""

    attempt: int
    max_attempts: int
    error: str  # the provider's error, e.g. "APIStatusError 500: 500 fake error 500"
    status: int | None = None


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user message added to the running turn (steered in, see :meth:`Driver.steer_sequence`); logged when
    Kimi hands it to the model, i.e. just before the model request that carries it."""

    text: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The turn is over (``reason`` as Kimi logged it, where it does)."""

    reason: str | None = None


#: A normalized record from Kimi's session log (``wire.jsonl``). The session applies these with ``match``
#: and ``assert_never``: a new member must be handled there, or type checking (and a unit test) fails.
WireEvent = (
    TurnBegin
    | StepBegin
    | TextPart
    | ThinkPart
    | ApprovalRequest
    | ApprovalResolved
    | ToolCall
    | ToolResult
    | StepRetrying
    | TokenUsage
    | UserMessage
    | TurnEnd
)


ToolKind = Literal["edit", "shell", "read", "other"]


@dataclass(frozen=True, slots=True)
class LoginOptions:
    """What the automated first-run login uses (the key comes from MOONSHOT_API_KEY)."""

    api_key: str
    platform: Literal["moonshot.ai", "moonshot.cn"] = "moonshot.ai"
    model: str | None = None
    thinking: bool = False


class Console(Protocol):
    """The session as a driver's login script sees it."""

    def send(self, keys: str, pause: float = 0.0) -> None: ...

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        """Wait until one of the regexes matches the screen (or output since the last send)."""
        ...

    def screen_lines(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class KimiInstall:
    binary: str
    version: str
    dialect: Literal["legacy", "kimi-code"]
    node_dir: str | None = None
    """The Node installed with this Kimi Code (``kimi-mcp install-kimi``), put first on Kimi's PATH."""

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with :attr:`node_dir` first on PATH (``env`` itself without one)."""
        if self.node_dir is None:
            return env
        return {**env, "PATH": os.pathsep.join(filter(None, (self.node_dir, env.get("PATH"))))}


_QUESTION_LINE = re.compile(r"^[\s│]*\? (.*?)[\s│]*$")
_SQUASH = re.compile(r"[\s\u2500-\u257f]+")


def squash(text: str) -> str:
    """Text without whitespace and box drawing: what stays comparable when a panel wraps or frames it."""
    return _SQUASH.sub("", text)


def json_record(line: str) -> dict[str, Any] | None:
    """One session-log line as a JSON object, or None if it is not one."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def login_failed(message: str, platform: str, *, unreachable: bool) -> AuthError:
    """The error for a failed automated login, with the remedy that fits the cause."""
    text = message.strip()
    return AuthError(
        f"automated Kimi login on {platform} failed: {text}",
        details={"platform": platform, "kimi_message": text},
        suggestion=(
            "The platform could not be reached; check the network/proxy and retry."
            if unreachable
            else "Check MOONSHOT_API_KEY and KIMI_MCP_PLATFORM (moonshot.ai and moonshot.cn keys differ), "
            "or log in once by hand with `kimi` and /login."
        ),
        retryable=unreachable,
    )


class Driver(KimiModels, ABC):
    """One Kimi dialect. Instances are per session (they may hold per-session state). Its models (what
    ``-m`` takes, the default) come from :class:`~kimi_mcp.drivers._models.KimiModels`."""

    name: ClassVar[str]
    #: answer terminal queries (cursor position, device attributes) from the virtual screen
    answer_terminal_queries: ClassVar[bool] = True
    #: terminal queries answered with a fixed reply whatever ``answer_terminal_queries`` says (query, reply)
    fixed_answers: ClassVar[tuple[tuple[str, str], ...]] = ()
    interrupt_key: ClassVar[str]
    approve_key: ClassVar[str]
    reject_key: ClassVar[str]
    dismiss_question_key: ClassVar[str]
    trust_key: ClassVar[str] = "\r"
    #: the session log records which call an approval panel is for (else panels are matched on screen)
    logs_approvals: ClassVar[bool] = False
    #: the workspace listing in the model's system prompt is read at startup (else at the first message);
    #: instruction files (AGENTS.md) are read at startup by both dialects
    lists_workspace_at_startup: ClassVar[bool] = True

    def __init__(self, install: KimiInstall) -> None:
        self.install = install

    # -- process -------------------------------------------------------------------------------------
    @abstractmethod
    def argv(self, read_only: bool = False, model: str | None = None) -> list[str]:
        """The command line; read-only sessions start in a mode where Kimi itself refuses edits; ``model``:
        one of Kimi's model aliases (:meth:`models`), passed with the flag both dialects take (``-m``)."""

    def resume_argv(self, session_id: str, read_only: bool = False, model: str | None = None) -> list[str]:
        """The command line that continues the conversation ``session_id`` (Kimi replays it on screen and
        appends to its session log). Both dialects take ``-S <id>``; without an id ``-S`` opens a picker,
        and legacy kimi-cli silently starts an empty session for an unknown id, so the caller checks that
        the session's log exists first."""
        return [*self.argv(read_only, model), "-S", session_id]

    @abstractmethod
    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """The child's environment: the server's plus what this dialect needs."""

    # -- screen --------------------------------------------------------------------------------------
    @abstractmethod
    def classify(self, lines: list[str]) -> ScreenState: ...

    @abstractmethod
    def session_id(self, screen_text: str) -> str | None: ...

    #: the first line of an approval panel (its text is read from there down to "Approve once")
    panel_top: ClassVar[re.Pattern[str]] = re.compile(r"$^")

    def approval_text(self, lines: list[str]) -> tuple[str, bool]:
        """What the approval panel on screen displays, whitespace and box drawing removed ("" if none), and
        whether its first line is on screen (a tall panel, e.g. a long diff, pushes it off the top)."""
        end = next((i for i in range(len(lines) - 1, -1, -1) if "Approve once" in lines[i]), None)
        if end is None:
            return "", False
        start = next((i for i in range(end - 1, -1, -1) if self.panel_top.search(lines[i])), None)
        if start is None:
            return squash("".join(lines[:end])), False
        return squash("".join(lines[start:end])), True

    def approval_tool(self, lines: list[str]) -> str | None:
        """The tool name an approval panel on screen asks about, if the dialect shows it."""
        return None

    @abstractmethod
    def reject_with_feedback(self, message: str) -> list[tuple[str, float]]:
        """Keys that reject the approval on screen and tell the model why (so the turn goes on)."""

    def exit_retry_sequence(self) -> list[tuple[str, float]]:
        """Second way out when the first exit sequence was not obeyed."""
        return self.exit_sequence()

    def clear_input_sequence(self) -> list[tuple[str, float]]:
        """Empty the input line (stray text there blocks the exit keys); harmless when it is empty."""
        return [("\x7f" * 256, 0.2)]

    def empty_input_sequence(self) -> list[tuple[str, float]]:
        """Empty the input box however long its text: Ctrl-U deletes to the start of the line, and at a
        line's start the newline before it (both TUIs); harmless when it is empty. Repeated while the box
        still shows text."""
        return [("\x15" * 64 + "\x7f" * 64, 0.2)]

    def submit_sequence(self, message: str) -> list[tuple[str, float]]:
        """Keystrokes (with pauses after each, seconds) that type and submit ``message``.

        ``message`` comes from :func:`kimi_mcp.message.prepare` (no control characters left), so one
        bracketed paste carries it whole and nothing inside can end the paste. The trailing newline keeps
        the cursor off the text's last word (no completion menu can take the Enter, a final backslash
        cannot turn it into a newline); both TUIs trim it.
        """
        paste = "\x1b[200~" + message + "\n\x1b[201~"
        if not self.paste_pause:
            return [(paste + "\r", 0.0)]
        return [(paste, self.paste_pause), ("\r", 0.0)]

    #: seconds between the paste and the Enter that submits it
    paste_pause: ClassVar[float] = 0.0

    # -- questions (AskUserQuestion) and steering ----------------------------------------------------
    #: the tool whose call shows the question panel (``ScreenState.QUESTION``)
    question_tool: ClassVar[str] = "AskUserQuestion"
    #: the highest option number a digit key picks on the question panel ("Other" is options + 1)
    question_digits: ClassVar[int] = 6
    #: where a message sent with :meth:`steer_sequence` reaches the model: "in_turn" (the next model
    #: request of the running turn carries it) or "next_turn" (it opens a new turn after this one)
    steer_delivery: ClassVar[Literal["in_turn", "next_turn"]] = "in_turn"
    #: keys that bring back into the input box a steer Kimi did not take ("" if it stays there by itself)
    steer_cancel_key: ClassVar[str] = ""

    @abstractmethod
    def answer_question(
        self, question: Question, choice: Choice, *, index: int, count: int
    ) -> list[tuple[str, float]]:
        """Keys (with pauses) answering the question panel on screen with ``choice``, when it shows the
        ``index``-th (0-based) of its ``count`` questions, earlier ones answered in order; they include
        what moves on to the next question, and after the last one what sends the answers to the model."""

    def question_on_screen(self, lines: list[str]) -> str | None:
        """The text of the question the panel on screen shows (its ``? …`` line), or None (no panel, or a
        page without one such as Kimi Code's review page). A question that wraps is given by its first
        line only, so compare with ``startswith``."""
        for line in reversed(lines):
            match = _QUESTION_LINE.match(line)
            if match:
                return match.group(1).strip()
        return None

    @abstractmethod
    def steer_sequence(self, message: str) -> list[tuple[str, float]]:
        """Keys (with pauses) that add ``message`` (from :func:`kimi_mcp.message.prepare`) to the running
        turn. Only safe while the screen is ``ScreenState.BUSY``: with an approval or question panel up the
        keys would go to the panel, and at ``READY`` the text stays in the input box (see the dialect)."""

    def _question_key(self, question: Question, pick: int | None) -> str:
        """The digit of option ``pick`` (0-based) on the panel, or of its "Other" entry (``None``)."""
        number = len(question.options) + 1 if pick is None else pick + 1
        if pick is not None and not 0 <= pick < len(question.options) or number > self.question_digits:
            raise ValueError(f"option {number} of {question.text!r} has no number key on the panel")
        return str(number)

    @abstractmethod
    def message_rules(self, workspace: Path, env: dict[str, str], max_tokens: int) -> MessageRules:
        """What this dialect's input box does to a message (see :mod:`kimi_mcp.message`)."""

    @abstractmethod
    def input_pending(self, lines: list[str]) -> bool:
        """Whether the input box on screen still holds typed text (a submit that did not take)."""

    @abstractmethod
    def exit_sequence(self) -> list[tuple[str, float]]: ...

    @abstractmethod
    def screen_error(self, text: str) -> KimiMCPError | None:
        """An error message Kimi printed (auth, provider, network), or None."""

    def echo_seen(self, text: str, prompt: str) -> bool:
        """Whether the submitted prompt shows up as accepted in the output ``text``."""
        first = prompt.strip().splitlines()[0][:30] if prompt.strip() else ""
        return bool(first) and first in text

    # -- login ---------------------------------------------------------------------------------------
    @abstractmethod
    def login(self, console: Console, options: LoginOptions) -> str:
        """Run the dialect's interactive login with an API key; return the model chosen.

        Raises AuthError (wrong key, unreachable platform, no models) without retrying.
        """

    # -- session log ---------------------------------------------------------------------------------
    #: where a session's log lies below ``sessions_root``; ``{sid}`` stands for the session id
    wire_glob: ClassVar[str]

    @classmethod
    @abstractmethod
    def sessions_root(cls, env: dict[str, str]) -> Path:
        """The folder holding this Kimi's sessions (it honours Kimi's own home variables); a class method,
        so what needs only the store (``kimi-mcp prune``) finds it without a Kimi install."""

    @classmethod
    @abstractmethod
    def store_key(cls, workdir: str) -> str:
        """The folder below ``sessions_root`` that holds the conversations started in ``workdir``."""

    @classmethod
    @abstractmethod
    def register_session(cls, env: dict[str, str], session_id: str, workdir: str, folder: Path) -> None:
        """Tell this Kimi that ``folder`` holds ``session_id``, a conversation in ``workdir`` (its files were
        put there by kimi-mcp: a conversation moved from another machine)."""

    def wire_log(self, env: dict[str, str], workspace: Path, session_id: str | None) -> Path | None:
        """The session's wire.jsonl if it exists yet."""
        if not session_id:
            return None
        return next(iter(self.sessions_root(env).glob(self.wire_glob.format(sid=session_id))), None)

    def wire_logs(self, env: dict[str, str], workspace: Path) -> list[Path]:
        """The session logs of ``workspace``'s conversations (in a folder keyed by its path, :meth:`store_key`;
        Kimi runs in the resolved path), to find ours when the screen never showed its id."""
        keys = {self.store_key(path) for path in (str(workspace), os.path.realpath(workspace))}
        below = self.wire_glob.split("/", 1)[1].format(sid="*")  # the glob below that folder
        return [log for key in keys for log in (self.sessions_root(env) / key).glob(below)]

    def session_id_of(self, wire_log: Path) -> str:
        """The session id a session log belongs to."""
        parts = self.wire_glob.split("/")
        below = len(parts) - parts.index("{sid}") - 1
        return wire_log.parents[below - 1].name

    def events(self, line: str) -> list[WireEvent]:
        """``parse_wire_line``, total: a record of an unexpected shape is logged and skipped (a newer Kimi
        may write fields differently); it never ends the call."""
        try:
            return self.parse_wire_line(line)
        except (TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:
            log.warning(
                "skipped a session-log record of an unexpected shape (%s: %s): %.200s",
                type(exc).__name__,
                exc,
                line,
            )
            return []

    @abstractmethod
    def parse_wire_line(self, line: str) -> list[WireEvent]:
        """Normalized events of one log line; ``TurnBegin`` carries the prompt text."""

    #: the dialect's tool names by kind (everything else is "other")
    edit_tools: ClassVar[frozenset[str]] = frozenset()
    shell_tools: ClassVar[frozenset[str]] = frozenset()
    read_tools: ClassVar[frozenset[str]] = frozenset()

    def tool_kind(self, name: str) -> ToolKind:
        if name in self.edit_tools:
            return "edit"
        if name in self.shell_tools:
            return "shell"
        if name in self.read_tools:
            return "read"
        return "other"

    @abstractmethod
    def edit_targets(self, name: str, arguments: dict[str, Any]) -> list[str]:
        """Paths a file-editing tool call would write (as given, possibly relative)."""

    # -- helpers -------------------------------------------------------------------------------------
    @staticmethod
    def home_of(env: dict[str, str]) -> Path:
        return Path(env.get("HOME") or os.path.expanduser("~"))


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a Kimi reading it never sees half of it)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
