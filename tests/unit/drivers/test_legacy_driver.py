"""Unit tests for the legacy kimi-cli 1.50 driver and for binary discovery / dialect detection."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from kimi_mcp.drivers import KimiInstall, ScreenState, find_binary, make_driver, probe
from kimi_mcp.drivers._probe import _classify
from kimi_mcp.drivers.base import (
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
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.errors import ApiError, AuthError, InstallError
from kimi_mcp.question import Choice, Option, Question

SID = "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f"


@pytest.fixture
def driver() -> LegacyDriver:
    return LegacyDriver(KimiInstall(binary="/usr/local/bin/kimi", version="1.50.0", dialect="legacy"))


def welcome(model: str = "kimi-k2-turbo-preview") -> list[str]:
    return [
        "╭──────────────────────────────────────────────────────────╮",
        "│                                                          │",
        "│   Welcome to Kimi Code CLI!                              │",
        "│   Send /help for help information.                       │",
        "│                                                          │",
        "│   Directory: /tmp/work                                   │",
        f"│   Session: {SID}          │",
        f"│   Model: {model}                           │",
        "│                                                          │",
        "╰──────────────────────────────────────────────────────────╯",
        "",
    ]


INPUT_BOX = [
    "── input ─────────────────────────────────────────────────────────",
    "> ",
    "──────────────────────────────────────────────────────────────────",
    "agent (kimi-k2)  ~/work                      ctrl-j: newline",
]


def padded(lines: list[str], rows: int = 40) -> list[str]:
    return lines + [""] * (rows - len(lines))


# -------------------------------------------------------------------------------------------- classify


def test_classify_starting_without_input_row(driver: LegacyDriver) -> None:
    assert driver.classify(padded([])) == ScreenState.STARTING
    assert driver.classify(padded(welcome())) == ScreenState.STARTING


def test_classify_ready(driver: LegacyDriver) -> None:
    assert driver.classify(padded(welcome() + INPUT_BOX)) == ScreenState.READY


def test_classify_ready_after_finished_turn(driver: LegacyDriver) -> None:
    lines = welcome() + [
        "✨ please write hello",
        "• Let me do that.",
        "• Used WriteFile (hello.txt)",
        "• Done: hello.txt now contains the greeting.",
        "",
    ]
    assert driver.classify(padded(lines + INPUT_BOX)) == ScreenState.READY


def test_classify_dashed_input_row_also_counts(driver: LegacyDriver) -> None:
    box = ["╌╌ input ╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌", "> "]
    assert driver.classify(padded(welcome() + box)) == ScreenState.READY


@pytest.mark.parametrize("spinner", ["⠋ Composing...", "⠙ Thinking...", "⣾ Using Shell", "🌑 Working", "🌘"])
def test_classify_busy_with_spinner_above_input(driver: LegacyDriver, spinner: str) -> None:
    lines = welcome() + ["✨ please write hello", "", spinner, ""] + INPUT_BOX
    assert driver.classify(padded(lines)) == ScreenState.BUSY


def test_classify_spinner_far_above_input_row_is_not_busy(driver: LegacyDriver) -> None:
    # only the 3 non-blank rows right above the input row count
    lines = welcome() + ["⠋ old spinner line", "line a", "", "line b", "line c"] + INPUT_BOX
    assert driver.classify(padded(lines)) == ScreenState.READY


def test_classify_spinner_within_three_nonblank_rows_skipping_blanks(driver: LegacyDriver) -> None:
    lines = welcome() + ["⠋ Composing...", "", "", "line a", "", "line b", ""] + INPUT_BOX
    assert driver.classify(padded(lines)) == ScreenState.BUSY


def test_classify_spinner_below_input_row_is_ignored(driver: LegacyDriver) -> None:
    lines = welcome() + INPUT_BOX + ["⠋ not above the input"]
    assert driver.classify(padded(lines)) == ScreenState.READY


APPROVAL_PANEL = [
    "╭─ approval ─────────────────────────────────────────────────────╮",
    "│ WriteFile is requesting approval to edit file:                  │",
    "│ /tmp/work/hello.txt                                             │",
    "│                                                                 │",
    "│ → [1] Approve once                                              │",
    "│   [2] Approve for this session                                  │",
    "│   [3] Reject, tell the model what to do instead                 │",
    "╰─────────────────────────────────────────────────────────────────╯",
]


def test_classify_approval_panel(driver: LegacyDriver) -> None:
    lines = welcome() + ["⠋ Using WriteFile"] + APPROVAL_PANEL + INPUT_BOX
    assert driver.classify(padded(lines)) == ScreenState.APPROVAL


def test_classify_approval_panel_without_input_row(driver: LegacyDriver) -> None:
    assert driver.classify(padded(APPROVAL_PANEL)) == ScreenState.APPROVAL
    assert driver.classify(padded(["  → [1] Approve once", "    [3] Reject"])) == ScreenState.APPROVAL


def test_classify_question_panel(driver: LegacyDriver) -> None:
    panel = [
        "╭─ question ─────────────────────────────────────╮",
        "│ Which framework should I use?                   │",
        "│ → [1] Flask                                     │",
        "│   [2] FastAPI                                   │",
        "╰─────────────────────────────────────────────────╯",
    ]
    assert driver.classify(padded(welcome() + panel + INPUT_BOX)) == ScreenState.QUESTION


def test_classify_not_logged_in(driver: LegacyDriver) -> None:
    lines = welcome(model="not set, send /login to login") + INPUT_BOX
    assert driver.classify(padded(lines)) == ScreenState.NOT_LOGGED_IN


def test_classify_not_logged_in_needs_the_input_row(driver: LegacyDriver) -> None:
    assert driver.classify(padded(welcome(model="not set, send /login to login"))) == ScreenState.STARTING


# ---------------------------------------------------------------------------------- screen text helpers


def test_session_id_found_in_welcome(driver: LegacyDriver) -> None:
    assert driver.session_id("\n".join(welcome())) == SID


@pytest.mark.parametrize(
    "text",
    ["", "Session: not-a-uuid", "Session: 3F2A9C1E-7B4D-4E8A-9C2F-1A2B3C4D5E6F", f"Session {SID}"],
)
def test_session_id_absent_or_malformed(driver: LegacyDriver, text: str) -> None:
    assert driver.session_id(text) is None


def test_approval_tool(driver: LegacyDriver) -> None:
    assert driver.approval_tool(APPROVAL_PANEL) == "WriteFile"
    shell = ["│ Shell is requesting approval to run command:", "│ rm -rf build"]
    assert driver.approval_tool(shell) == "Shell"
    assert driver.approval_tool(welcome() + INPUT_BOX) is None


def test_screen_error_auth_with_status(driver: LegacyDriver) -> None:
    text = (
        "✨ please write hello\n"
        "Authorization failed. Your session may have expired.\n"
        "Server: Error code: 401 - {'error': {'message': 'Invalid Authentication', "
        "'type': 'invalid_authentication_error'}}\n"
    )
    err = driver.screen_error(text)
    assert isinstance(err, AuthError)
    assert err.type == "auth"
    assert err.details["status"] == "401"
    assert "Authorization failed. Your session may have expired." in err.message
    assert err.retryable is False


def test_screen_error_llm_not_set_is_auth(driver: LegacyDriver) -> None:
    err = driver.screen_error('LLM not set, send "/login" to login\n')
    assert isinstance(err, AuthError)
    assert err.details["status"] is None


@pytest.mark.parametrize(
    "line",
    [
        "LLM provider error: Error code: 429 - {'error': {'message': 'rate limited', "
        "'type': 'rate_limit_reached_error'}}",
        "LLM provider error: Error code: 503 - {'error': {'message': 'overloaded'}}",
        "Network connection failed: Connection error.",
        "Request timed out.",
    ],
)
def test_screen_error_transient_is_retryable_api_error(driver: LegacyDriver, line: str) -> None:
    err = driver.screen_error(f"✨ do it\n{line}\n")
    assert isinstance(err, ApiError)
    assert err.type == "api"
    assert err.retryable is True
    assert err.details["kimi_message"] == line


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n".join(welcome() + INPUT_BOX),
        "• I wrote hello.txt for you.",
        "LLM provider error: Error code: 400 - {'error': 'bad request'}",
    ],
)
def test_screen_error_none(driver: LegacyDriver, text: str) -> None:
    assert driver.screen_error(text) is None


# -------------------------------------------------------------------------------------------- wire log

WIRE = [
    '{"type": "metadata", "protocol_version": "1.10"}',
    '{"timestamp": 1795279592.5270295, "message": {"type": "TurnBegin", "payload": {"user_input": '
    '[{"type": "text", "text": "please write hello"}]}}}',
    '{"timestamp": 1795279592.5433776, "message": {"type": "StepBegin", "payload": {"n": 1}}}',
    '{"timestamp": 1795279593.2705116, "message": {"type": "ContentPart", "payload": {"type": "text", '
    '"text": "Let me do that."}}}',
    '{"timestamp": 1795279593.3336275, "message": {"type": "ToolCall", "payload": {"type": "function", '
    '"id": "WriteFile:0a76c8", "function": {"name": "WriteFile", "arguments": "{\\"path\\": '
    '\\"hello.txt\\", \\"content\\": \\"hello from fake\\\\n\\"}"}, "extras": null}}}',
    '{"timestamp": 1795279593.3355656, "message": {"type": "StatusUpdate", "payload": {"context_usage": '
    '0.01, "context_tokens": 1000, "max_context_tokens": 100000, "token_usage": {"input_other": 1000, '
    '"output": 20, "input_cache_read": 0, "input_cache_creation": 0}, "message_id": '
    '"chatcmpl-7f4cccfdcea5", "plan_mode": false, "mcp_status": null}}}',
    '{"timestamp": 1795279593.4196262, "message": {"type": "ToolResult", "payload": {"tool_call_id": '
    '"WriteFile:0a76c8", "return_value": {"is_error": false, "output": "", "message": "File successfully '
    'overwritten. Current size: 16 bytes.", "display": [], "extras": null}}}}',
    '{"timestamp": 1795279593.4691079, "message": {"type": "TurnEnd", "payload": {}}}',
]


def test_wire_fixture_lines_are_valid_json() -> None:
    for line in WIRE:
        json.loads(line)


def test_parse_wire_metadata_is_ignored(driver: LegacyDriver) -> None:
    assert driver.parse_wire_line(WIRE[0]) == []


def test_parse_wire_turn_begin_and_step(driver: LegacyDriver) -> None:
    assert driver.parse_wire_line(WIRE[1]) == [TurnBegin(text="please write hello")]
    assert driver.parse_wire_line(WIRE[2]) == [StepBegin()]


def test_parse_wire_text(driver: LegacyDriver) -> None:
    assert driver.parse_wire_line(WIRE[3]) == [TextPart(text="Let me do that.")]


def test_parse_wire_tool_call(driver: LegacyDriver) -> None:
    (event,) = driver.parse_wire_line(WIRE[4])
    assert isinstance(event, ToolCall)
    assert event.call_id == "WriteFile:0a76c8"
    assert event.name == "WriteFile"
    assert json.loads(event.arguments) == {"path": "hello.txt", "content": "hello from fake\n"}


def test_parse_wire_usage(driver: LegacyDriver) -> None:
    (event,) = driver.parse_wire_line(WIRE[5])
    assert isinstance(event, TokenUsage)
    assert event.input_tokens == 1000
    assert event.output_tokens == 20
    assert event.message_id == "chatcmpl-7f4cccfdcea5"


def test_parse_wire_usage_sums_cached_input(driver: LegacyDriver) -> None:
    line = json.dumps(
        {
            "message": {
                "type": "StatusUpdate",
                "payload": {
                    "token_usage": {
                        "input_other": 10,
                        "output": 3,
                        "input_cache_read": 200,
                        "input_cache_creation": 5,
                    }
                },
            }
        }
    )
    (event,) = driver.parse_wire_line(line)
    assert (event.input_tokens, event.output_tokens) == (215, 3)


def test_parse_wire_status_without_usage(driver: LegacyDriver) -> None:
    line = json.dumps({"message": {"type": "StatusUpdate", "payload": {"context_usage": 0.2}}})
    assert driver.parse_wire_line(line) == []


def test_parse_wire_tool_result(driver: LegacyDriver) -> None:
    (event,) = driver.parse_wire_line(WIRE[6])
    assert isinstance(event, ToolResult)
    assert event.call_id == "WriteFile:0a76c8"
    assert event.output == "File successfully overwritten. Current size: 16 bytes."
    assert event.is_error is False


def test_parse_wire_tool_result_error_uses_output_when_no_message(driver: LegacyDriver) -> None:
    line = json.dumps(
        {
            "message": {
                "type": "ToolResult",
                "payload": {
                    "tool_call_id": "Shell:1",
                    "return_value": {"is_error": True, "output": "exit 2", "message": ""},
                },
            }
        }
    )
    (event,) = driver.parse_wire_line(line)
    assert (type(event), event.call_id, event.output, event.is_error) == (
        ToolResult,
        "Shell:1",
        "exit 2",
        True,
    )


def test_parse_wire_think(driver: LegacyDriver) -> None:
    line = json.dumps({"message": {"type": "ContentPart", "payload": {"type": "think", "think": "hmm"}}})
    assert driver.parse_wire_line(line) == [ThinkPart(text="hmm")]


def test_parse_wire_turn_end(driver: LegacyDriver) -> None:
    assert driver.parse_wire_line(WIRE[7]) == [TurnEnd()]


def test_parse_wire_whole_turn_in_order(driver: LegacyDriver) -> None:
    kinds = [type(event) for line in WIRE for event in driver.parse_wire_line(line)]
    assert kinds == [TurnBegin, StepBegin, TextPart, ToolCall, TokenUsage, ToolResult, TurnEnd]


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 1795279593.4691079, "message": {"type": "TurnE',
        "not json at all",
        "",
        '{"message": {"type": "SomethingNew", "payload": {}}}',
        '{"message": {"type": "ContentPart", "payload": {"type": "image_url"}}}',
    ],
)
def test_parse_wire_broken_or_unknown_line(driver: LegacyDriver, line: str) -> None:
    assert driver.parse_wire_line(line) == []


# ------------------------------------------------------------------------------------------- tool kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("WriteFile", "edit"),
        ("StrReplaceFile", "edit"),
        ("Shell", "shell"),
        ("ReadFile", "read"),
        ("Glob", "read"),
        ("Grep", "read"),
        ("SetTodoList", "read"),
        ("SearchWeb", "other"),
        ("FetchURL", "other"),
        ("Task", "other"),
        ("writefile", "other"),
    ],
)
def test_tool_kind(driver: LegacyDriver, name: str, kind: str) -> None:
    assert driver.tool_kind(name) == kind


def test_edit_targets(driver: LegacyDriver) -> None:
    assert driver.edit_targets("WriteFile", {"path": "hello.txt", "content": "x"}) == ["hello.txt"]
    assert driver.edit_targets("StrReplaceFile", {"path": "/w/a.py", "edit": {"old": "a", "new": "b"}}) == [
        "/w/a.py"
    ]


def test_edit_targets_empty_for_other_tools_or_bad_args(driver: LegacyDriver) -> None:
    assert driver.edit_targets("Shell", {"command": "touch x", "path": "x"}) == []
    assert driver.edit_targets("ReadFile", {"path": "a.txt"}) == []
    assert driver.edit_targets("WriteFile", {}) == []
    assert driver.edit_targets("WriteFile", {"path": 42}) == []


# ------------------------------------------------------------------------------------------- keystrokes


def test_every_message_is_one_bracketed_paste_then_enter(driver: LegacyDriver) -> None:
    """Never typed as keys (Ctrl-X would start shell mode, a tab would be eaten); a trailing newline keeps
    the cursor off a last ``@word`` whose completion menu would take the Enter."""
    for message in ("write hello", "line one\nline two", "see @READ"):
        steps = driver.submit_sequence(message)
        assert [keys for keys, _ in steps] == ["\x1b[200~" + message + "\n\x1b[201~", "\r"]
        assert steps[0][1] > 0  # prompt_toolkit takes the paste before the Enter


def test_exit_and_keys(driver: LegacyDriver) -> None:
    assert driver.exit_sequence()[0][0] == "\x04"  # Ctrl-D on the empty prompt; no completion-menu race
    retry = "".join(keys for keys, _ in driver.exit_retry_sequence())
    assert retry.startswith("/exit") and retry.endswith("\r")
    assert set("".join(keys for keys, _ in driver.clear_input_sequence())) == {"\x7f"}
    assert (driver.approve_key, driver.reject_key) == ("1", "3")
    feedback = driver.reject_with_feedback("read-only\ntask")
    assert feedback[0][0] == "4" and feedback[1][0] == "read-only task" and feedback[-1][0] == "\r"
    assert driver.argv() == ["/usr/local/bin/kimi"]
    assert driver.argv(read_only=True) == ["/usr/local/bin/kimi", "--plan"]


def test_environment_keeps_base_and_disables_telemetry(driver: LegacyDriver) -> None:
    base = {"PATH": "/bin", "NO_PROXY": "corp.example"}
    env = driver.environment(base)
    assert env["PATH"] == "/bin"
    assert env["KIMI_DISABLE_TELEMETRY"] == "1"
    assert env["TERM"] == "xterm-256color"
    assert env["NO_PROXY"] == "corp.example"
    assert base == {"PATH": "/bin", "NO_PROXY": "corp.example"}  # not mutated


def test_echo_seen(driver: LegacyDriver) -> None:
    assert driver.echo_seen("...\n✨ please write hello\n", "please write hello\nmore") is True
    assert driver.echo_seen("please write hello", "please write hello") is False
    assert driver.echo_seen("✨ anything", "   ") is False


def test_wire_log_location(driver: LegacyDriver, tmp_path: Path) -> None:
    share = tmp_path / "share"
    log = share / "sessions" / "0123abcd" / SID / "wire.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    env = {"KIMI_SHARE_DIR": str(share)}
    assert driver.wire_log(env, tmp_path, SID) == log
    assert driver.wire_log(env, tmp_path, None) is None
    assert driver.wire_log(env, tmp_path, "00000000-0000-0000-0000-000000000000") is None


def test_wire_log_defaults_to_home_dot_kimi(driver: LegacyDriver, tmp_path: Path) -> None:
    log = tmp_path / ".kimi" / "sessions" / "abc" / SID / "wire.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    assert driver.wire_log({"HOME": str(tmp_path)}, tmp_path, SID) == log


# ------------------------------------------------------------------------------ dialect detection


def test_classify_legacy_version() -> None:
    assert _classify("/bin/kimi", "kimi, version 1.50.0", 0, "auto") == KimiInstall(
        "/bin/kimi", "1.50.0", "legacy"
    )


def test_classify_kimi_code_version() -> None:
    assert _classify("/bin/kimi", "2.1.0", 0, "auto") == KimiInstall("/bin/kimi", "2.1.0", "kimi-code")


def test_classify_deprecation_stub() -> None:
    output = (
        "kimi, version 1.52.0\nkimi-cli is no longer maintained. Please use the new Kimi Code CLI. "
        "Install: curl -fsSL https://code.kimi.com/kimi-code/install.sh | bash"
    )
    with pytest.raises(InstallError) as info:
        _classify("/bin/kimi", output, 0, "auto")
    err = info.value
    assert err.type == "install"
    assert "1.52.0" in err.message
    assert "kimi-cli==1.51.0" in err.suggestion
    assert "kimi-code" in err.suggestion


def test_classify_accepts_1_51_and_refuses_1_52_and_newer_by_number() -> None:
    assert _classify("/bin/kimi", "kimi, version 1.51.0", 0, "auto") == KimiInstall(
        "/bin/kimi", "1.51.0", "legacy"
    )
    with pytest.raises(InstallError) as info:
        _classify("/bin/kimi", "kimi, version 1.52.3", 0, "auto")
    assert "1.52.3" in info.value.message and "stub" in info.value.message
    assert "1.51.0" in info.value.message


@pytest.mark.parametrize(
    ("output", "returncode"),
    [
        ("", 0),
        ("command not found", 127),
        ("Usage: kimi [OPTIONS]", 0),
        ("kimi, version 1.50.0", 1),
        ("2.1.0", 2),
    ],
)
def test_classify_garbage_or_failure(output: str, returncode: int) -> None:
    with pytest.raises(InstallError):
        _classify("/bin/kimi", output, returncode, "auto")


def test_classify_node_problem_gets_a_hint() -> None:
    with pytest.raises(InstallError, match="Node"):
        _classify("/bin/kimi", "SyntaxError: Unexpected token '?'", 1, "auto")


def test_forced_dialect_overrides_detection() -> None:
    assert _classify("/bin/kimi", "2.1.0", 0, "legacy").dialect == "legacy"
    assert _classify("/bin/kimi", "kimi, version 1.50.0", 0, "kimi-code").dialect == "kimi-code"
    assert _classify("/bin/kimi", "kimi, version 1.50.0", 0, "legacy").dialect == "legacy"


def test_make_driver() -> None:
    driver = make_driver(KimiInstall("/bin/kimi", "1.50.0", "legacy"))
    assert isinstance(driver, LegacyDriver)
    assert driver.install.binary == "/bin/kimi"
    from kimi_mcp.drivers.kimi_code import KimiCodeDriver

    assert isinstance(make_driver(KimiInstall("/bin/kimi", "2.1.0", "kimi-code")), KimiCodeDriver)


# ------------------------------------------------------------------------------------------ find_binary


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_find_binary_configured_not_executable(tmp_path: Path) -> None:
    plain = tmp_path / "kimi"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(InstallError) as info:
        find_binary(str(plain), {"PATH": ""})
    assert "KIMI_MCP_KIMI_BIN" in info.value.message
    assert info.value.type == "install"


def test_find_binary_configured_missing_or_directory(tmp_path: Path) -> None:
    with pytest.raises(InstallError):
        find_binary(str(tmp_path / "nope"), {"PATH": ""})
    with pytest.raises(InstallError):
        find_binary(str(tmp_path), {"PATH": ""})


def test_find_binary_configured_executable_wins_over_path(tmp_path: Path) -> None:
    configured = write_script(tmp_path / "my-kimi", "exit 0\n")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    write_script(on_path / "kimi", "exit 0\n")
    assert find_binary(str(configured), {"PATH": str(on_path)}) == str(configured)


def test_find_binary_not_on_path(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InstallError) as info:
        find_binary(None, {"PATH": str(empty)})
    assert "KIMI_MCP_KIMI_BIN" in info.value.suggestion
    assert info.value.details["PATH"] == str(empty)


def test_find_binary_on_given_path(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "kimi").write_text("not executable")
    (first / "kimi").chmod(0o644)
    kimi = write_script(second / "kimi", "exit 0\n")
    assert find_binary(None, {"PATH": f"{first}{os.pathsep}{second}"}) == str(kimi)


# ------------------------------------------------------------------------------------------------ probe


def probe_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def test_probe_legacy_script(tmp_path: Path) -> None:
    kimi = write_script(tmp_path / "kimi", 'echo "kimi, version 1.50.0"\n')
    assert probe(str(kimi), probe_env()) == KimiInstall(str(kimi), "1.50.0", "legacy")


def test_probe_runs_only_version(tmp_path: Path) -> None:
    marker = tmp_path / "installer-ran"
    seen = tmp_path / "args"
    kimi = write_script(
        tmp_path / "kimi",
        f'echo "$@" > "{seen}"\n'
        f'if [ "$1" != "--version" ]; then touch "{marker}"; fi\n'
        'echo "kimi, version 1.50.0"\n',
    )
    install = probe(str(kimi), probe_env())
    assert install.dialect == "legacy"
    assert seen.read_text().strip() == "--version"
    assert not marker.exists()


def test_probe_stub_script_is_install_error(tmp_path: Path) -> None:
    kimi = write_script(
        tmp_path / "kimi",
        'echo "kimi, version 1.52.0"\n'
        'echo "kimi-cli is no longer maintained. Please use the new Kimi Code CLI."\n',
    )
    with pytest.raises(InstallError) as info:
        probe(str(kimi), probe_env())
    assert "kimi-code" in info.value.suggestion


def test_probe_failing_script_is_install_error(tmp_path: Path) -> None:
    kimi = write_script(tmp_path / "kimi", 'echo "boom" >&2\nexit 3\n')
    with pytest.raises(InstallError) as info:
        probe(str(kimi), probe_env())
    assert info.value.details["returncode"] == 3
    assert "boom" in info.value.details["version_output"]


def test_probe_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(InstallError):
        probe(str(tmp_path / "missing"), probe_env())


def test_probe_reprobes_after_binary_changes(tmp_path: Path) -> None:
    kimi = tmp_path / "kimi"
    write_script(kimi, 'echo "kimi, version 1.50.0"\n')
    assert probe(str(kimi), probe_env()).dialect == "legacy"
    write_script(kimi, 'echo "2.1.0"   # a different, longer script body\n')
    assert probe(str(kimi), probe_env()) == KimiInstall(str(kimi), "2.1.0", "kimi-code")


# -------------------------------------------------------------------------------- questions and steering
# Screens captured from kimi-cli 1.50.0 (pyte, 120 columns) answering AskUserQuestion against the fake API.

LEGACY_THREE_QUESTIONS = """
⠴ Using AskUserQuestion ({"questions": [{"question... "multi_select": false}]})
╭─ question ───────────────────────────────────────────────────────────────────────────────────────────────────────────╮
│ (●) Colour  (○) Fruit  (○) Size                                                                                      │
│                                                                                                                      │
│ ? Which colour?                                                                                                      │
│                                                                                                                      │
│ → [1] Red                                                                                                            │
│       red desc                                                                                                       │
│   [2] Blue                                                                                                           │
│       blue desc                                                                                                      │
│   [3] Green                                                                                                          │
│       green desc                                                                                                     │
│   [4] Other                                                                                                          │
│                                                                                                                      │
│   ◄/► switch question  ▲/▼ select  ↵ submit  esc exit                                                                │
╰──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────╯
────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
agent (kimi-k2-fake ○)  /tmp/w  /theme: switch dark/light | @: mention files
                                                                                                 context: 1.0% (1k/100k)
""".splitlines()[1:]

LEGACY_OTHER_INPUT = """
⠋ Using AskUserQuestion ({"questions": [{"question..., "multi_select": true}]})
╭─ question ───────────────────────────────────────────────────────────────────────────────────────────────────────────╮
│ (●) Colour  (○) Fruit                                                                                                │
│                                                                                                                      │
│ ? Which colour?                                                                                                      │
│                                                                                                                      │
│   [1] Red                                                                                                            │
│       red desc                                                                                                       │
│   [2] Blue                                                                                                           │
│       blue desc                                                                                                      │
│   [3] Green                                                                                                          │
│       green desc                                                                                                     │
│ → [4] Other: typed text█                                                                                             │
│                                                                                                                      │
│   Type your answer, then press Enter to submit.                                                                      │
╰──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────╯
────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
agent (kimi-k2-fake ○)  /tmp/w  ctrl-o: editor | ctrl-j: newline
                                                                                                 context: 1.0% (1k/100k)
""".splitlines()[1:]

LEGACY_MULTI_SELECT = """
⠙ Using AskUserQuestion ({"questions": [{"question..., "multi_select": true}]})
╭─ question ───────────────────────────────────────────────────────────────────────────────────────────────────────────╮
│ ? Which fruits?                                                                                                      │
│   (SPACE to toggle, ENTER to submit)                                                                                 │
│                                                                                                                      │
│ [ ] Apple                                                                                                            │
│       apple desc                                                                                                     │
│ [ ] Pear                                                                                                             │
│       pear desc                                                                                                      │
│ [ ] Plum                                                                                                             │
│       plum desc                                                                                                      │
│ [ ] Other                                                                                                            │
╰──────────────────────────────────────────────────────────────────────────────────────────────────────────────────────╯
────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
agent (kimi-k2-fake ○)  /tmp/w  ctrl-o: editor | ctrl-j: newline
                                                                                                 context: 1.0% (1k/100k)
""".splitlines()[1:]

COLOUR = Question("Which colour?", "Colour", (Option("Red"), Option("Blue"), Option("Green")))
FRUIT = Question(
    "Which fruits?", "Fruit", (Option("Apple"), Option("Pear"), Option("Plum")), multi_select=True
)
PASTE = "\x1b[200~{}\x1b[201~"


@pytest.mark.parametrize(
    ("screen", "shown"),
    [
        (LEGACY_THREE_QUESTIONS, "Which colour?"),
        (LEGACY_OTHER_INPUT, "Which colour?"),
        (LEGACY_MULTI_SELECT, "Which fruits?"),
    ],
)
def test_question_panels_captured(driver: LegacyDriver, screen: list[str], shown: str) -> None:
    assert driver.classify(padded(screen)) == ScreenState.QUESTION
    assert driver.question_on_screen(padded(screen)) == shown


def test_question_on_screen_without_a_panel(driver: LegacyDriver) -> None:
    assert driver.question_on_screen(padded(welcome() + INPUT_BOX)) is None


def test_question_tool(driver: LegacyDriver) -> None:
    assert driver.question_tool == "AskUserQuestion"


@pytest.mark.parametrize(("index", "count"), [(0, 1), (0, 3), (2, 3)])
def test_answer_single_select_is_its_digit(driver: LegacyDriver, index: int, count: int) -> None:
    # the digit picks and submits; kimi-cli moves to the next unanswered question, or sends the answers
    assert driver.answer_question(COLOUR, Choice(picks=(1,)), index=index, count=count) == [("2", 0.3)]


def test_answer_multi_select_toggles_then_enter(driver: LegacyDriver) -> None:
    keys = driver.answer_question(FRUIT, Choice(picks=(0, 2)), index=1, count=2)
    assert keys == [("1", 0.3), ("3", 0.3), ("\r", 0.3)]  # measured: {"Which fruits?": "Apple, Plum"}


def test_answer_free_text_single_select(driver: LegacyDriver) -> None:
    # "Other" ([4]) opens an inline input at once; Enter takes the text (stripped by kimi-cli)
    keys = driver.answer_question(COLOUR, Choice(text="teal, 1 2 3"), index=0, count=1)
    assert keys == [("4", 0.3), (PASTE.format("teal, 1 2 3"), 0.3), ("\r", 0.3)]


def test_answer_free_text_multi_select(driver: LegacyDriver) -> None:
    # ticking "Other" and Enter asks for its text; the answer is the labels and the text, ", "-joined
    keys = driver.answer_question(FRUIT, Choice(picks=(1,), text="kiwis"), index=0, count=1)
    assert keys == [("2", 0.3), ("4", 0.3), ("\r", 0.3), (PASTE.format("kiwis"), 0.3), ("\r", 0.3)]


def test_answer_free_text_is_typed_as_one_line(driver: LegacyDriver) -> None:
    keys = driver.answer_question(COLOUR, Choice(text="a\nb\x1b"), index=0, count=1)
    assert keys[1] == (PASTE.format("a b\u241b"), 0.3)


def test_answer_beyond_the_number_keys(driver: LegacyDriver) -> None:
    many = Question("Q?", options=tuple(Option(str(n)) for n in range(6)))
    assert driver.answer_question(many, Choice(picks=(5,)), index=0, count=1) == [("6", 0.3)]
    with pytest.raises(ValueError, match="no number key"):
        driver.answer_question(many, Choice(text="other"), index=0, count=1)  # "Other" would be 7
    with pytest.raises(ValueError, match="no number key"):
        driver.answer_question(COLOUR, Choice(picks=(3,)), index=0, count=1)


def test_steer_is_a_paste_then_ctrl_s(driver: LegacyDriver) -> None:
    # Ctrl-S sends "immediately" into the running turn; Enter would queue the message as the next turn
    assert driver.steer_delivery == "in_turn"
    assert driver.steer_sequence("mention bananas") == [
        ("\x1b[200~mention bananas\n\x1b[201~", 0.0),
        ("\x13", 0.0),
    ]
    assert driver.steer_cancel_key == "\x07"  # Ctrl-S without a turn opens (i-search); Ctrl-G leaves it


def test_parse_wire_steered_message(driver: LegacyDriver) -> None:
    # logged (as the model gets it) after the running step, inside the turn: TurnBegin … SteerInput … TurnEnd
    line = json.dumps(
        {
            "timestamp": 1795512719.36,
            "message": {
                "type": "SteerInput",
                "payload": {
                    "user_input": [{"type": "text", "text": "STEER-MSG please also mention bananas"}]
                },
            },
        }
    )
    assert driver.parse_wire_line(line) == [UserMessage("STEER-MSG please also mention bananas")]
    plain = json.dumps({"message": {"type": "SteerInput", "payload": {"user_input": "plain"}}})
    assert driver.parse_wire_line(plain) == [UserMessage("plain")]


def test_parse_wire_question_records_are_not_events(driver: LegacyDriver) -> None:
    line = json.dumps(
        {
            "message": {
                "type": "QuestionRequest",
                "payload": {"id": "1", "tool_call_id": "AskUserQuestion:5a7240", "questions": []},
            }
        }
    )
    assert driver.parse_wire_line(line) == []
