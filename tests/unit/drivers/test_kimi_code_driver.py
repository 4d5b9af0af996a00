"""Unit tests for the Kimi Code 2.x driver: screens, session-log parsing into typed events, errors, keys, login."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kimi_mcp.drivers import KimiInstall, ScreenState
from kimi_mcp.drivers.base import (
    ApprovalRequest,
    ApprovalResolved,
    LoginOptions,
    StepBegin,
    TextPart,
    ThinkPart,
    TokenUsage,
    ToolCall,
    ToolResult,
    TurnBegin,
    TurnEnd,
    UserMessage,
)
from kimi_mcp.drivers.kimi_code import BUILTIN_SKILLS, KimiCodeDriver, folds, skill_names
from kimi_mcp.errors import ApiError, AuthError, StartupFault
from kimi_mcp.question import Choice, Option, Question

SID = "session_bd1dd6b5-1c2d-4e8a-9c2f-1a2b3c4d5e6f"


@pytest.fixture
def driver() -> KimiCodeDriver:
    return KimiCodeDriver(KimiInstall(binary="/opt/kimi/bin/kimi", version="2.1.0", dialect="kimi-code"))


def welcome(session: str = "", model: str = "Fake Model") -> list[str]:
    return [
        " ╭──────────────────────────────────────────────────────────────────────────╮",
        " │  ▐█▛█▛█▌  Welcome to Kimi Code!                                         │",
        " │  ▐█████▌  Send /help for help information.                              │",
        f" │  Directory: /tmp/work   Session:   {session}   Model: {model}   Version: 2.1.0 │",
        " ╰──────────────────────────────────────────────────────────────────────────╯",
        "   No session yet — one will be created on your first message.",
    ]


def input_box(text: str = "") -> list[str]:
    return [
        " ╭──────────────────────────────────────────────────────────╮",
        f" │ > {text:<55}│",
        " ╰──────────────────────────────────────────────────────────╯",
        " Fake Model  /tmp/work                      · Tip: /init: generate AGENTS.md",
        "                                                      context: 0% (0/256k)",
    ]


def padded(lines: list[str], rows: int = 40) -> list[str]:
    return lines + [""] * (rows - len(lines))


APPROVAL_PANEL = [
    " ● Using Write (hello.txt)",
    " ──────",
    "   ▶ Write this file?",
    "   /tmp/work/hello.txt",
    "   ▶ 1. Approve once",
    "     2. Approve for this session",
    "     3. Reject",
    "     4. Reject with feedback",
    "   ↑/↓ select · 1/2/3/4 choose · ↵ confirm · ctrl+e preview",
]


# -------------------------------------------------------------------------------------------- classify


def test_classify_starting_without_input_box(driver: KimiCodeDriver) -> None:
    assert driver.classify(padded([])) == ScreenState.STARTING
    assert driver.classify(padded(welcome())) == ScreenState.STARTING


def test_classify_ready(driver: KimiCodeDriver) -> None:
    assert driver.classify(padded(welcome() + input_box())) == ScreenState.READY


def test_classify_tip_in_the_footer_below_the_input_box_is_not_busy(driver: KimiCodeDriver) -> None:
    lines = welcome() + ["✨ please write hello", " ● Done."] + input_box()
    assert "· Tip:" in lines[-2]
    assert driver.classify(padded(lines)) == ScreenState.READY


@pytest.mark.parametrize(
    "row",
    [
        " ⠋ Working… · Tip: /init",
        " ⠙ Thinking…",
        " 🌒 · Tip: use /help",
        " 🌖 Retrying (8/10) · APIStatusError",
    ],
)
def test_classify_busy_above_the_input_box(driver: KimiCodeDriver, row: str) -> None:
    lines = welcome() + ["✨ please write hello", row] + input_box()
    assert driver.classify(padded(lines)) == ScreenState.BUSY


def test_classify_trust_prompt(driver: KimiCodeDriver) -> None:
    lines = [
        " Trust this folder?",
        " ↑↓ navigate · Enter select · Esc exit",
        "  /tmp/work",
        "   ❯ Trust this folder          (Enter)",
        "     Don't trust",
    ]
    assert driver.classify(padded(lines)) == ScreenState.TRUST
    assert driver.classify(padded(lines[:3])) == ScreenState.STARTING  # the question alone is not the prompt


def test_classify_approval_panel(driver: KimiCodeDriver) -> None:
    assert driver.classify(padded(welcome() + APPROVAL_PANEL + input_box())) == ScreenState.APPROVAL
    assert driver.classify(padded(APPROVAL_PANEL)) == ScreenState.APPROVAL


def test_classify_question_panel(driver: KimiCodeDriver) -> None:
    panel = [
        "   Which colour?",
        "   → [1] Red  [2] Blue  [3] Other",
        "   ↑↓ select  1-3 / ↵ choose  ←/→/tab switch  esc cancel",
    ]
    assert driver.classify(padded(welcome() + panel + input_box())) == ScreenState.QUESTION


@pytest.mark.parametrize(
    "lines",
    [
        [" │  Model: not set, run /login or /provider"],
        ["   Run /login or /provider to get started."],
        [" │  Model:     not set"],
    ],
)
def test_classify_not_logged_in(driver: KimiCodeDriver, lines: list[str]) -> None:
    assert driver.classify(padded(welcome() + lines + input_box())) == ScreenState.NOT_LOGGED_IN
    assert driver.classify(padded(welcome() + lines)) == ScreenState.STARTING  # needs the input box


# ---------------------------------------------------------------------------------- screen text helpers


def test_session_id_appears_after_the_first_message(driver: KimiCodeDriver) -> None:
    assert driver.session_id("\n".join(welcome())) is None
    assert driver.session_id("\n".join(welcome(session=SID))) == SID


@pytest.mark.parametrize(
    "text", ["", "Session: session_not-a-uuid", f"Session: {SID.upper()}", f"Session {SID}"]
)
def test_session_id_absent_or_malformed(driver: KimiCodeDriver, text: str) -> None:
    assert driver.session_id(text) is None


def test_approval_text_reads_the_panel_from_its_question(driver: KimiCodeDriver) -> None:
    panel, whole = driver.approval_text(padded(welcome() + APPROVAL_PANEL + input_box()))
    assert (panel, whole) == ("▶Writethisfile?/tmp/work/hello.txt", True)
    tall = ["   +1 /tmp/work/gen.txt", *APPROVAL_PANEL[4:]]  # the question scrolled off the top
    panel, whole = driver.approval_text(tall)
    assert whole is False and panel == "+1/tmp/work/gen.txt"
    assert driver.approval_text(padded(welcome() + input_box())) == ("", False)
    assert driver.approval_tool(APPROVAL_PANEL) is None  # the log names the call, not the panel


def test_input_pending(driver: KimiCodeDriver) -> None:
    assert driver.input_pending(padded(welcome() + input_box("please write hello"))) is True
    assert driver.input_pending(padded(welcome() + input_box())) is False
    assert driver.input_pending(padded(welcome())) is False


def test_llm_not_set_after_it_looked_ready_is_a_start_up_fault_not_auth(driver: KimiCodeDriver) -> None:
    """Issue 29 item 8: seen under load after Kimi Code showed its model; a Kimi without one shows "not set" on
    its ready screen, which is the login's case (``ScreenState.NOT_LOGGED_IN``), not this."""
    err = driver.screen_error('✨ hello\nError: LLM not set, send "/login" to login\n')
    assert isinstance(err, StartupFault) and not isinstance(err, AuthError)
    assert err.type == "session" and err.retryable is True
    assert err.details["kimi_message"] == 'Error: LLM not set, send "/login" to login'


def test_screen_error_provider_auth_error(driver: KimiCodeDriver) -> None:
    err = driver.screen_error(
        "  Error: [provider.auth_error] 401 fake error 401\n  If this persists, run …\n"
    )
    assert isinstance(err, AuthError)
    assert err.details == {"kimi_error": "provider.auth_error", "kimi_message": "401 fake error 401"}
    assert "401 fake error 401" in err.message


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Error: [provider.rate_limit] 429 fake error 429", "provider.rate_limit"),
        ("Error: [provider.api_error] 500 fake error 500", "provider.api_error"),
        ("Error: [provider.connection_error] Connection error.", "provider.connection_error"),
    ],
)
def test_screen_error_provider_failures_are_retryable_api_errors(
    driver: KimiCodeDriver, line: str, kind: str
) -> None:
    err = driver.screen_error(f"✨ do it\n 🌖 Retrying (8/10) · APIStatusError · in 34s\n  {line}\n")
    assert isinstance(err, ApiError) and err.retryable is True
    assert err.details["kimi_error"] == kind


def test_screen_error_the_last_error_counts(driver: KimiCodeDriver) -> None:
    text = "Error: [provider.auth_error] 401 old\n✨ again\nError: [provider.api_error] 500 new\n"
    err = driver.screen_error(text)
    assert isinstance(err, ApiError) and err.details["kimi_message"] == "500 new"


@pytest.mark.parametrize("text", ["", "\n".join(welcome() + input_box()), "● Error handling is done."])
def test_screen_error_none(driver: KimiCodeDriver, text: str) -> None:
    assert driver.screen_error(text) is None


# -------------------------------------------------------------------------------------------- wire log


def loop_event(event: dict) -> str:
    return json.dumps({"type": "context.append_loop_event", "event": event})


WIRE = [
    json.dumps({"type": "metadata", "protocol_version": "2"}),
    json.dumps(
        {
            "type": "turn.prompt",
            "input": [{"type": "text", "text": "please write "}, {"type": "text", "text": "hello"}],
        }
    ),
    loop_event({"type": "step.begin", "n": 1}),
    loop_event({"type": "content.part", "part": {"type": "think", "think": "plan"}}),
    loop_event({"type": "content.part", "part": {"type": "text", "text": "Let me do that."}}),
    json.dumps(
        {
            "type": "interaction.request",
            "kind": "approval",
            "toolCallId": "call_ab12",
            "request": {"toolName": "Write", "display": {"path": "/tmp/work/hello.txt"}},
        }
    ),
    json.dumps({"type": "permission.record_approval_result", "toolCallId": "call_ab12", "approved": True}),
    loop_event(
        {
            "type": "tool.call",
            "toolCallId": "call_ab12",
            "name": "Write",
            "args": {"path": "hello.txt", "content": "hé\n"},
        }
    ),
    json.dumps(
        {
            "type": "usage.record",
            "usage": {"inputOther": 10, "inputCacheRead": 200, "inputCacheCreation": 5, "output": 3},
        }
    ),
    loop_event(
        {"type": "tool.result", "toolCallId": "call_ab12", "result": {"output": "Wrote 4 bytes to hello.txt"}}
    ),
    loop_event({"type": "step.end"}),
    json.dumps({"type": "turn.ended", "reason": "completed"}),
    json.dumps({"type": "agent.turn.ended", "outcome": "done"}),
]


def test_wire_fixture_lines_are_valid_json() -> None:
    for line in WIRE:
        json.loads(line)


def test_parse_wire_whole_turn_in_order(driver: KimiCodeDriver) -> None:
    events = [event for line in WIRE for event in driver.parse_wire_line(line)]
    assert events == [
        TurnBegin("please write hello"),
        StepBegin(),
        ThinkPart("plan"),
        TextPart("Let me do that."),
        ApprovalRequest("call_ab12", "Write", '{"path": "/tmp/work/hello.txt"}'),
        ApprovalResolved("call_ab12"),
        ToolCall("call_ab12", "Write", '{"path": "hello.txt", "content": "hé\\n"}'),
        TokenUsage(input_tokens=215, output_tokens=3),
        ToolResult("call_ab12", "Wrote 4 bytes to hello.txt", is_error=False),
        TurnEnd(reason="completed"),
    ]


def test_parse_wire_approval_request_takes_the_call_id_from_the_request_too(driver: KimiCodeDriver) -> None:
    line = json.dumps(
        {
            "type": "interaction.request",
            "kind": "approval",
            "request": {"toolCallId": "c9", "toolName": "Bash"},
        }
    )
    assert driver.parse_wire_line(line) == [ApprovalRequest("c9", "Bash", "{}")]
    question = json.dumps({"type": "interaction.request", "kind": "question", "request": {}})
    assert driver.parse_wire_line(question) == []


def test_parse_wire_thinking_part_and_unknown_part(driver: KimiCodeDriver) -> None:
    line = loop_event({"type": "content.part", "part": {"type": "thinking", "text": "hmm"}})
    assert driver.parse_wire_line(line) == [ThinkPart("hmm")]
    assert driver.parse_wire_line(loop_event({"type": "content.part", "part": {"type": "image"}})) == []


@pytest.mark.parametrize(
    ("result", "output", "is_error"),
    [
        ({"output": "ok"}, "ok", False),
        ({"output": {"lines": 2}}, '{"lines": 2}', False),
        ({"output": None, "error": "Tool was not run"}, "Tool was not run", True),
        ({"output": "exit 2", "isError": True}, "exit 2", True),
        ({"output": "", "is_error": True}, "", True),
        ({}, "", False),
    ],
)
def test_parse_wire_tool_result(driver: KimiCodeDriver, result: dict, output: str, is_error: bool) -> None:
    line = loop_event({"type": "tool.result", "toolCallId": "c1", "result": result})
    assert driver.parse_wire_line(line) == [ToolResult("c1", output, is_error)]


def test_parse_wire_turn_end_without_reason(driver: KimiCodeDriver) -> None:
    assert driver.parse_wire_line('{"type": "turn.ended"}') == [TurnEnd(reason=None)]


@pytest.mark.parametrize(
    "line",
    [
        '{"type": "turn.ended", "reas',
        "not json at all",
        "",
        "[]",
        '{"type": "something.new"}',
        '{"type": "context.append_loop_event", "event": {"type": "step.end"}}',
        '{"type": "context.append_loop_event"}',
    ],
)
def test_parse_wire_broken_or_unknown_line(driver: KimiCodeDriver, line: str) -> None:
    assert driver.parse_wire_line(line) == []


def test_wire_log_location(driver: KimiCodeDriver, tmp_path: Path) -> None:
    home = tmp_path / "kimi-home"
    work = tmp_path / "work"
    log = home / "sessions" / driver.store_key(str(work)) / SID / "agents" / "main" / "wire.jsonl"
    other = home / "sessions" / "wd_work_0123456789ab" / "session_x" / "agents" / "main" / "wire.jsonl"
    for path in (log, other):
        path.parent.mkdir(parents=True)
        path.write_text("")
    env = {"KIMI_CODE_HOME": str(home)}
    assert driver.wire_log(env, tmp_path, SID) == log
    assert driver.wire_log(env, tmp_path, None) is None
    assert driver.wire_logs(env, work) == [log]  # only the conversations started in that workspace
    assert driver.wire_logs(env, tmp_path / "elsewhere") == []
    assert driver.session_id_of(log) == SID


def test_wire_log_defaults_to_home_dot_kimi_code(driver: KimiCodeDriver, tmp_path: Path) -> None:
    log = tmp_path / ".kimi-code" / "sessions" / "wd" / SID / "agents" / "main" / "wire.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    assert driver.wire_log({"HOME": str(tmp_path)}, tmp_path, SID) == log


# ------------------------------------------------------------------------------------------- tool kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("Write", "edit"),
        ("Edit", "edit"),
        ("Bash", "shell"),
        ("Read", "read"),
        ("Glob", "read"),
        ("Grep", "read"),
        ("TodoList", "read"),
        ("FetchURL", "other"),
        ("Agent", "other"),
        ("WriteFile", "other"),
    ],
)
def test_tool_kind(driver: KimiCodeDriver, name: str, kind: str) -> None:
    assert driver.tool_kind(name) == kind


def test_edit_targets(driver: KimiCodeDriver) -> None:
    assert driver.edit_targets("Write", {"path": "hello.txt", "content": "x"}) == ["hello.txt"]
    assert driver.edit_targets("Edit", {"path": "/w/a.py", "old_string": "a", "new_string": "b"}) == [
        "/w/a.py"
    ]
    assert driver.edit_targets("Bash", {"command": "touch x", "path": "x"}) == []
    assert driver.edit_targets("Write", {}) == []
    assert driver.edit_targets("Write", {"path": 42}) == []


# ------------------------------------------------------------------------------------------- keystrokes


def test_every_message_is_one_bracketed_paste_then_enter(driver: KimiCodeDriver) -> None:
    """A plain CR right after typed text is swallowed as part of a paste burst; after a bracketed paste it
    submits, even in the same write."""
    for message in ("write hello", "line one\nline two"):
        assert driver.submit_sequence(message) == [("\x1b[200~" + message + "\n\x1b[201~\r", 0.0)]


def test_exit_and_keys(driver: KimiCodeDriver) -> None:
    assert driver.exit_sequence() == [("/exit", 0.15), ("\r", 0.0)]
    assert [keys for keys, _ in driver.exit_retry_sequence()] == ["\x03", "\x03"]  # Ctrl-C twice
    assert (driver.approve_key, driver.reject_key, driver.interrupt_key) == ("1", "3", "\x1b")
    assert driver.trust_key == "\r" and driver.dismiss_question_key == "\x1b"
    feedback = driver.reject_with_feedback("read-only\ntask")
    assert feedback[0][0] == "4" and feedback[1][0] == "\x1b[200~read-only task\x1b[201~"
    assert feedback[-1][0] == "\r"
    assert driver.argv() == ["/opt/kimi/bin/kimi"]
    assert driver.argv(read_only=True) == ["/opt/kimi/bin/kimi", "--plan"]
    assert driver.logs_approvals is True and driver.answer_terminal_queries is False
    assert driver.lists_workspace_at_startup is False


def test_environment_keeps_base_and_disables_telemetry(driver: KimiCodeDriver, tmp_path: Path) -> None:
    base = {"PATH": "/bin", "HOME": str(tmp_path)}
    env = driver.environment(base)
    assert env["PATH"] == "/bin" and env["HOME"] == str(tmp_path)
    assert env["KIMI_DISABLE_TELEMETRY"] == "1" and env["KIMI_CODE_NO_AUTO_UPDATE"] == "1"
    assert env["TERM"] == "xterm-256color"
    assert base == {"PATH": "/bin", "HOME": str(tmp_path)}  # not mutated


def test_node_keeps_kimis_compiled_code_in_kimi_mcps_cache_unless_the_user_chose(
    driver: KimiCodeDriver, tmp_path: Path
) -> None:
    env = driver.environment({"HOME": str(tmp_path)})
    assert env["NODE_COMPILE_CACHE"] == str(tmp_path / ".cache" / "kimi-mcp" / "node-compile-cache")
    assert Path(env["NODE_COMPILE_CACHE"]).is_dir()  # made first: Node spins on a folder it cannot make
    own = driver.environment({"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert own["NODE_COMPILE_CACHE"] == str(tmp_path / "xdg" / "kimi-mcp" / "node-compile-cache")
    assert (
        driver.environment({"HOME": str(tmp_path), "NODE_COMPILE_CACHE": "/mine"})["NODE_COMPILE_CACHE"]
        == "/mine"
    )
    off = driver.environment({"HOME": str(tmp_path), "NODE_DISABLE_COMPILE_CACHE": "1"})
    assert "NODE_COMPILE_CACHE" not in off
    (tmp_path / "file").write_text("x")
    assert "NODE_COMPILE_CACHE" not in driver.environment(
        {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "file")}
    )


def test_echo_seen(driver: KimiCodeDriver) -> None:
    assert driver.echo_seen("...\n✨ please write hello\n", "please write hello\nmore") is True
    assert driver.echo_seen("nothing yet", "please write hello") is False
    assert driver.echo_seen("✨ anything", "   ") is False


def test_skill_names_builtin_user_and_project(driver: KimiCodeDriver, tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    (home / ".kimi-code" / "skills" / "mine").mkdir(parents=True)
    (home / ".kimi-code" / "skills" / "mine" / "SKILL.md").write_text("---\nname: my-skill\n---\n")
    (repo / ".git").mkdir(parents=True)
    (repo / ".agents" / "skills").mkdir(parents=True)
    (repo / ".agents" / "skills" / "deploy.md").write_text("# deploy")
    (repo / "sub").mkdir()
    names = skill_names(repo / "sub", {"HOME": str(home)})
    assert names >= BUILTIN_SKILLS | {"mine", "my-skill", "deploy"}
    assert driver.message_rules(repo / "sub", {"HOME": str(home)}, 1000).skill_names == names


# ------------------------------------------------------------------------------------------------ login


class ScriptedConsole:
    """A console whose screen turns to the next scripted one at each wait_for; it records what is typed."""

    def __init__(self, *screens: list[str]) -> None:
        self.screens = list(screens)
        self.lines: list[str] = []
        self.sent: list[str] = []

    def send(self, keys: str, pause: float = 0.0) -> None:
        self.sent.append(keys)

    def wait_for(self, patterns: list[str], timeout: float) -> tuple[int, re.Match[str]]:
        self.lines = self.screens.pop(0)
        text = "\n".join(self.lines)
        for index, pattern in enumerate(patterns):
            if match := re.search(pattern, text):
                return index, match
        raise AssertionError(f"none of {patterns} on {text!r}")

    def screen_lines(self) -> list[str]:
        return self.lines


PLATFORMS = [
    " ↑↓ navigate · Enter select · Esc cancel",
    "   ❯ Kimi Code (kimi.com/code)",
    "     Kimi Code (kimi.ai/code)",
    "     Kimi Platform (API key · platform.kimi.com)",
    "     Kimi Platform (API key · platform.kimi.ai)",
]
KEY_PROMPT = [" │  Enter API key for Kimi Platform (platform.kimi.ai)", " │  > "]
MODELS = [
    " Select a model  (type to search)",
    "   ❯ Kimi K2 Fake  moonshot-ai ← current",
    " Thinking  (←→ to switch)  [ On ]  Off",
]


def test_login_picks_the_platform_pastes_the_key_and_turns_thinking_off(driver: KimiCodeDriver) -> None:
    done = [" Setup complete: Kimi Platform (API key · platform.kimi.ai) · kimi-k2-fake"]
    console = ScriptedConsole(PLATFORMS, KEY_PROMPT, MODELS, done)
    model = driver.login(console, LoginOptions(api_key="sk-test", platform="moonshot.ai"))
    assert model == "kimi-k2-fake"
    assert console.sent == [
        "/login",
        "\r",
        "\x1b[B" * 3,
        "\r",
        "\x1b[200~sk-test\x1b[201~",
        "\r",
        "\x1b[C",  # thinking On -> Off
        "\r",
    ]


def test_login_types_the_wanted_model_and_keeps_thinking(driver: KimiCodeDriver) -> None:
    done = [" Setup complete: Kimi Platform (API key · platform.kimi.com) · kimi-k2-x"]
    console = ScriptedConsole(PLATFORMS, KEY_PROMPT, MODELS, done)
    options = LoginOptions(api_key="sk-test", platform="moonshot.cn", model="kimi-k2-x", thinking=True)
    assert driver.login(console, options) == "kimi-k2-x"
    assert console.sent[2] == "\x1b[B" * 2
    assert console.sent[6:] == ["kimi-k2-x", "\r"]


@pytest.mark.parametrize(
    ("message", "retryable"),
    [
        ("Error: Failed to verify API key: fetch failed", True),
        ("Error: Failed to verify API key: 401 Unauthorized", False),
    ],
)
def test_login_failure_says_whether_retrying_can_help(
    driver: KimiCodeDriver, message: str, retryable: bool
) -> None:
    console = ScriptedConsole(PLATFORMS, KEY_PROMPT, [f"   {message}"])
    with pytest.raises(AuthError) as info:
        driver.login(console, LoginOptions(api_key="sk-test"))
    assert info.value.retryable is retryable
    assert info.value.details["platform"] == "moonshot.ai"


# -------------------------------------------------------------------------------- questions and steering
# Screens captured from Kimi Code 2.1.0 (pyte, 120 columns) answering AskUserQuestion against the fake API.

KC_THREE_QUESTIONS = """
 ✨ case three
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
  question

   Colour   (○) Fruit  (○) Size   Submit

  ? Which colour?

   → [1] Red
         red desc
     [2] Blue
         blue desc
     [3] Green
         green desc
     [4] Other

   ↑↓ select  1-4 / ↵ choose  ←/→/tab switch  esc cancel
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
 kimi-k2-fake  /tmp/w                             @: mention files | ! to run a shell command
                                                                                                context: 1% (1020/256k)
""".splitlines()[1:]

KC_OTHER_INPUT = """
 ✨ capture
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
  question

   Colour   (○) Fruit   Submit

  ? Which colour?
    Type your answer, then press Enter to save.

     [1] Red
         red desc
     [2] Blue
         blue desc
     [3] Green
         green desc
   → [4] Other: typed text

   type answer  ↵ save  tab switch  esc cancel
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
 kimi-k2-fake  /tmp/w
                                                                                                context: 1% (1020/256k)
""".splitlines()[1:]

KC_REVIEW = """
 ✨ capture
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
  question

  (✓) Colour  (✓) Fruit   Submit

  Review your answer before submit

   Q  Which colour?
   →  typed text
   Q  Which fruits?
   →  Apple

  Ready to submit your answers?

   → [1] Submit
     [2] Cancel

   ↑↓ select  1/2 choose  ↵ confirm  ←/→/tab switch  esc cancel
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
 kimi-k2-fake  /tmp/w
                                                                                                context: 1% (1020/256k)
""".splitlines()[1:]

KC_MULTI_SELECT = """
 ✨ case multi
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
  question

   Fruit    Submit

  ? Which fruits?

   [ ] Apple
         apple desc
   [ ] Pear
         pear desc
   [ ] Plum
         plum desc
   [ ] Other

   ↑↓ select  1-4 / ↵ toggle  ←/→/tab switch  esc cancel
 ──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
 kimi-k2-fake  /tmp/w                             @: mention files | ! to run a shell command
                                                                                                context: 1% (1020/256k)
""".splitlines()[1:]

COLOUR = Question("Which colour?", "Colour", (Option("Red"), Option("Blue"), Option("Green")))
FRUIT = Question(
    "Which fruits?", "Fruit", (Option("Apple"), Option("Pear"), Option("Plum")), multi_select=True
)
PASTE = "\x1b[200~{}\x1b[201~"


@pytest.mark.parametrize(
    ("screen", "shown"),
    [
        (KC_THREE_QUESTIONS, "Which colour?"),
        (KC_OTHER_INPUT, "Which colour?"),  # the hint row reads "type answer  ↵ save  tab switch  esc cancel"
        (KC_MULTI_SELECT, "Which fruits?"),
        (KC_REVIEW, None),  # the Submit tab shows no "? question" line
    ],
)
def test_question_panels_captured(driver: KimiCodeDriver, screen: list[str], shown: str | None) -> None:
    assert driver.classify(padded(screen)) == ScreenState.QUESTION
    assert driver.question_on_screen(padded(screen)) == shown


def test_question_on_screen_without_a_panel(driver: KimiCodeDriver) -> None:
    assert driver.question_on_screen(padded(welcome() + input_box())) is None


def test_question_tool(driver: KimiCodeDriver) -> None:
    assert driver.question_tool == "AskUserQuestion"


def test_answer_single_select_then_submit(driver: KimiCodeDriver) -> None:
    # the digit picks and moves to the next unanswered tab; after the last question that is the Submit tab,
    # where "1" ("[1] Submit") sends the answers (also for a single question)
    assert driver.answer_question(COLOUR, Choice(picks=(1,)), index=0, count=1) == [("2", 0.0), ("1", 0.0)]
    assert driver.answer_question(COLOUR, Choice(picks=(1,)), index=0, count=3) == [("2", 0.0)]


def test_answer_multi_select_toggles_then_tab(driver: KimiCodeDriver) -> None:
    keys = driver.answer_question(FRUIT, Choice(picks=(0, 2)), index=1, count=3)
    assert keys == [("1", 0.0), ("3", 0.0), ("\t", 0.0)]
    keys = driver.answer_question(FRUIT, Choice(picks=(0, 2)), index=0, count=1)
    assert keys == [("1", 0.0), ("3", 0.0), ("\t", 0.0), ("1", 0.0)]  # measured: "Apple, Plum"


def test_answer_free_text(driver: KimiCodeDriver) -> None:
    # "Other" ([4]) opens a one-line input: paste, Enter saves it (a single-select question then moves on)
    keys = driver.answer_question(COLOUR, Choice(text="teal, 1 2 3"), index=0, count=2)
    assert keys == [("4", 0.0), (PASTE.format("teal, 1 2 3"), 0.0), ("\r", 0.0)]
    keys = driver.answer_question(FRUIT, Choice(picks=(1,), text="kiwis"), index=0, count=1)
    assert keys == [
        ("2", 0.0),
        ("4", 0.0),
        (PASTE.format("kiwis"), 0.0),
        ("\r", 0.0),
        ("\t", 0.0),
        ("1", 0.0),
    ]


def test_answer_beyond_the_number_keys(driver: KimiCodeDriver) -> None:
    many = Question("Q?", options=tuple(Option(str(n)) for n in range(8)))
    assert driver.answer_question(many, Choice(text="x"), index=0, count=2)[0] == ("9", 0.0)
    with pytest.raises(ValueError, match="no number key"):
        driver.answer_question(COLOUR, Choice(picks=(3,)), index=0, count=1)


def test_steer_is_a_paste_then_ctrl_s(driver: KimiCodeDriver) -> None:
    # Ctrl-S ("ctrl-s to steer immediately") joins the running turn; Enter would queue a new turn after it
    assert driver.steer_delivery == "in_turn"
    assert driver.steer_sequence("mention bananas") == [
        ("\x1b[200~mention bananas\n\x1b[201~", 0.0),
        ("\x13", 0.0),
    ]


def test_a_steer_kimi_code_would_fold_into_a_paste_marker_is_expanded_before_ctrl_s(
    driver: KimiCodeDriver,
) -> None:
    """Issue 30, item 4: a paste of more than 10 lines or 1,000 characters shows as "[paste #1 …]", which
    Ctrl-S sends as it is; Ctrl-V with the cursor on the marker (right after the paste) expands it first."""
    for long in ("x" * 1000, "\n".join("abcdefghij"), "\U0001f600" * 500, "\t" * 250):  # +1 newline each
        assert folds(long + "\n"), long[:20]
        keys = driver.steer_sequence(long)
        assert keys == [("\x1b[200~" + long + "\n\x1b[201~", 0.0), ("\x16", 0.0), ("\x13", 0.0)]
    for short in ("x" * 999, "\n".join("abcdefghi"), "\U0001f600" * 499, "\t" * 249):
        assert not folds(short + "\n"), short[:20]
        assert [k for k, _ in driver.steer_sequence(short)] == ["\x1b[200~" + short + "\n\x1b[201~", "\x13"]


def test_parse_wire_steered_message(driver: KimiCodeDriver) -> None:
    # prompt.steered is logged at the key press, turn.steer when the message is handed to the model: only the
    # latter is an event (one per steered message)
    steered = {
        "type": "prompt.steered",
        "agentId": "main",
        "activePromptId": "msg_01M86ED6FR124WMR73J74FJRNX",
        "promptIds": ["msg_01M86ED7P43QSGW91MKRQAKNPH"],
        "messageId": "msg_01M86ED7P43QSGW91MKRQAKNPH",
        "content": [{"type": "text", "text": "STEER-MSG please also mention bananas"}],
        "steeredAt": "2026-11-24T09:32:50.249Z",
        "time": 1795512770249,
    }
    steer = {
        "type": "turn.steer",
        "agentId": "main",
        "input": [{"type": "text", "text": "STEER-MSG please also mention bananas"}],
        "origin": {"kind": "user", "inTurn": True},
        "messageId": "msg_01M86ED7P43QSGW91MKRQAKNPH",
        "promptIds": ["msg_01M86ED7P43QSGW91MKRQAKNPH"],
        "turnId": 0,
        "time": 1795512775119,
    }
    assert driver.parse_wire_line(json.dumps(steered)) == []
    assert driver.parse_wire_line(json.dumps(steer)) == [UserMessage("STEER-MSG please also mention bananas")]
    assert driver.parse_wire_line(json.dumps({"type": "turn.steer"})) == [UserMessage("")]
