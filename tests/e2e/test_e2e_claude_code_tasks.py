"""Long Kimi work as interactive Claude Code's own background tasks: the real Claude Code 2.1.330 TUI (in a
pty, as a person runs it) → the real kimi-mcp server over stdio (registered as the README says) → the real
Kimi TUI → the suite's fake Moonshot API, with ``MCP_TOOL_TIMEOUT=8000`` and a Kimi turn well past it.

Claude Code declares the tasks extension on its calls, so the call comes back at once as a task; its model is
told the work moved to the background, and gets a ``<task-notification>`` with kimi-mcp's result when the job
ends. Its ``TaskStop`` sends ``tasks/cancel``: the turn is interrupted and nothing of Kimi is left. Kimi's
question turns the task ``input_required``: Claude Code shows the form, and the person's answer (sent back by
``tasks/update``) reaches Kimi's model.

Claude Code meets kimi-mcp's task layer, above the runner: each test runs one Kimi dialect (that layer is
tested with both dialects through a plain MCP client, tests/e2e/test_e2e_tasks.py)."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from claude_code import (
    ClaudeCode,
    ClaudeTUI,
    claude_env,
    kill_all,
    processes_of,
    server_vars,
    wait_until_gone,
)
from fake_anthropic import FakeAnthropic, Step, ToolResult
from fake_moonshot import COLOUR, FakeMoonshot, Reply
from kimi_env import KimiUnderTest
from test_e2e_control import answered_with

from kimi_mcp.jobs import STORE_FILE, JobStore

pytestmark = pytest.mark.e2e

TASK = "mcp__kimi__kimi_code_task"
STOP = "TaskStop"
HELLO = "def hello() -> str:\n    return 'hello from kimi'\n"
TOOL_TIMEOUT_MS = "8000"
KIMI_SLEEP_S = 14  # with Kimi's start and the fake model's replies the turn lasts about 20 s: past 8 s


@pytest.fixture
def tui(claude_code: Path, fake_anthropic: FakeAnthropic, home: Path, workspace: Path) -> Iterator[ClaudeTUI]:
    claude = ClaudeCode(claude_code, workspace, claude_env(home, fake_anthropic.base_url))
    session = ClaudeTUI(claude, (TASK, STOP), home / "kimi-mcp.log", MCP_TOOL_TIMEOUT=TOOL_TIMEOUT_MS)
    yield session
    session.close()
    kill_all(home)  # only if a test failed before its own check: never leave processes behind


def add_kimi(tui: ClaudeTUI, kimi: KimiUnderTest, **extra: str) -> None:
    state = kimi.home / "kimi-mcp-state"
    tui.claude.add_kimi(
        {
            **server_vars(kimi.env),
            "KIMI_MCP_LOG_FILE": str(tui.server_log),
            "KIMI_MCP_STATE_DIR": str(state),
            **extra,
        }
    )


def background_notice(fake_anthropic: FakeAnthropic) -> tuple[str, str]:
    """(Claude Code's task id, kimi-mcp's job id) from the tool_result the model got for the Kimi call."""
    [started] = fake_anthropic.results_of(TASK)
    assert started.is_error is False, started.text
    assert "moved to the background as task" in started.text, started.text
    task_id = re.search(r'TaskStop with task_id "(\w+)"', started.text)
    job_id = re.search(r"started server-side task (job_\w+)", started.text)
    assert task_id and job_id, started.text
    return task_id.group(1), job_id.group(1)


def stored_job(kimi: KimiUnderTest, job_id: str):
    store = JobStore(kimi.home / "kimi-mcp-state" / STORE_FILE)
    try:
        return store.get(job_id)
    finally:
        store.close()


def kimi_processes(home: Path) -> list[str]:
    """Kimi, its Node and the commands Kimi started (not Claude Code, uv or the server)."""
    left = []
    for proc in processes_of(home):
        try:
            line = " ".join(proc.cmdline())
        except Exception:
            continue
        if "kimi-mcp" not in line and "claude" not in line and " uv " not in f" {line} ":
            left.append(line)
    return left


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # one dialect: see the module's notes
def test_a_long_kimi_call_runs_as_a_claude_code_background_task(
    tui: ClaudeTUI, kimi: KimiUnderTest, fake: FakeMoonshot, fake_anthropic: FakeAnthropic, workspace: Path
):
    add_kimi(tui, kimi)
    fake.script(
        [
            Reply.tool(*kimi.write("hello.py", HELLO)),
            Reply.tool(*kimi.shell(f"sleep {KIMI_SLEEP_S}")),
            Reply.text_reply("Created hello.py."),
        ]
    )
    fake_anthropic.script(
        [
            Step.tool(TASK, {"task_description": "Create hello.py with a hello() function"}),
            Step.final("Kimi is working on it in the background."),
            Step.final("Kimi finished: hello.py is there."),
        ]
    )
    tui.start()
    tui.ask("Ask Kimi to create hello.py")
    tui.wait_until(lambda: fake_anthropic.pending() == 0, 240, "task notification")

    task_id, job_id = background_notice(fake_anthropic)
    [note] = fake_anthropic.notifications()
    assert f"<task-id>{task_id}</task-id>" in note and "<status>completed</status>" in note, note
    result = json.loads(
        html.unescape(note.split("<result>")[1].split("</result>")[0])
    )  # Claude Code escapes &<>
    assert result["job_id"] == job_id and result["status"] == "done" and result["success"] is True
    assert result["files_created"] == ["hello.py"] and result["file_contents"] == {"hello.py": HELLO}
    assert result["output"] == "Created hello.py."
    assert result["duration_s"] * 1000 > int(TOOL_TIMEOUT_MS)  # longer than a foreground call may last
    assert (workspace / "hello.py").read_text() == HELLO
    assert stored_job(kimi, job_id).status == "done"
    tui.close()
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # one dialect: see the module's notes
def test_task_stop_in_claude_code_cancels_the_job_and_leaves_no_kimi(
    tui: ClaudeTUI, kimi: KimiUnderTest, fake: FakeMoonshot, fake_anthropic: FakeAnthropic, workspace: Path
):
    add_kimi(tui, kimi, KIMI_MCP_STANDBY="off")  # no standby Kimi: every Kimi process left would be the job's
    fake.script(
        [
            Reply.tool(*kimi.write("hello.py", HELLO)),
            Reply.tool(*kimi.shell("sleep 300")),
            Reply.text_reply("Never reached."),
        ]
    )

    def stop_once_kimi_wrote(previous: ToolResult | None) -> dict:
        deadline = time.monotonic() + 120  # the model's next step waits until Kimi is in the middle
        while not (workspace / "hello.py").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # Kimi went on to its `sleep 300`
        assert previous is not None
        return {"task_id": re.search(r'TaskStop with task_id "(\w+)"', previous.text).group(1)}

    fake_anthropic.script(
        [
            Step.tool(TASK, {"task_description": "Create hello.py, then wait"}),
            Step.tool(STOP, stop_once_kimi_wrote),
            Step.final("Stopped Kimi."),
        ]
    )
    tui.start()
    tui.ask("Ask Kimi to create hello.py")
    tui.wait_until(lambda: fake_anthropic.pending() == 0, 240, "TaskStop")

    _task_id, job_id = background_notice(fake_anthropic)
    [stopped] = fake_anthropic.results_of(STOP)
    assert stopped.is_error is False and "is stopped" in stopped.text, stopped.text
    tui.wait_until(lambda: stored_job(kimi, job_id).status != "running", 30, "cancelled job")
    job = stored_job(kimi, job_id)
    assert job.status == "cancelled", job
    assert job.result["files_created"] == ["hello.py"] and job.result["error"]["type"] == "cancelled"
    assert (workspace / "hello.py").read_text() == HELLO
    assert kimi_processes(kimi.home) == []  # Kimi, its shell and `sleep 300` are gone with the job
    tui.close()
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # one dialect: see the module's notes
def test_a_person_answers_kimis_question_in_claude_codes_form(
    tui: ClaudeTUI, kimi: KimiUnderTest, fake: FakeMoonshot, fake_anthropic: FakeAnthropic
):
    """Kimi calls AskUserQuestion (Which colour? Red/Blue/Green) in a job Claude Code runs as a background
    task (measured: Claude Code 2.1.330 declares the tasks extension, so this is the path taken; the model is
    told the call moved to the background at once). The task goes ``input_required`` and Claude Code shows
    "MCP server “kimi” requests your input" with the question: the options as a list under "Colour", a free
    text "Other", then Accept / Decline. The person answers Blue with the keys: → (expands the options, the
    cursor on Red), ↓ (Blue), Enter (picks it: "✔ Colour: Blue", the cursor goes on to Other), ↓ (Accept),
    Enter. The answer reaches Kimi's model, the job finishes, and the ``<task-notification>`` Claude Code
    hands its model carries the finished job's result."""
    add_kimi(tui, kimi)
    fake.script([Reply.tool("AskUserQuestion", COLOUR), Reply.text_reply("painting it blue")])
    fake_anthropic.script(
        [
            Step.tool(TASK, {"task_description": "Pick a colour, then paint"}),
            Step.final("Kimi is working on it in the background."),
            Step.final("Kimi painted it."),
        ]
    )
    tui.start()
    tui.ask("Ask Kimi to paint")
    form = tui.wait_for_text("MCP server “kimi” requests your input", 240)
    assert "Kimi asks: Which colour?" in form and "Colour: ▸ not set" in form, form
    tui.press("right", "down")
    tui.wait_for_text("❯ ◯ Blue", 30)  # the options expanded, the cursor on Blue
    tui.press("enter", "down")
    picked = tui.wait_for_text("❯ Accept", 30)
    assert "✔ Colour: Blue" in picked, picked
    assert fake.pending() == 1  # Kimi still waits on the question: its last reply was not asked for
    tui.press("enter")
    tui.wait_until(lambda: fake_anthropic.pending() == 0, 240, "task notification")

    task_id, job_id = background_notice(fake_anthropic)
    assert answered_with(fake)["answers"] == {"Which colour?": "Blue"}  # what Kimi's model was told
    [note] = fake_anthropic.notifications()
    assert f"<task-id>{task_id}</task-id>" in note and "<status>completed</status>" in note, note
    result = json.loads(html.unescape(note.split("<result>")[1].split("</result>")[0]))
    assert result["job_id"] == job_id and result["status"] == "done" and result["success"] is True, result
    assert result["output"] == "painting it blue"
    assert any("answered: Blue" in n for n in result["notes"]), result["notes"]
    assert "requests your input" not in tui.screen.text  # the form is gone
    assert stored_job(kimi, job_id).status == "done"
    tui.close()
    assert wait_until_gone(kimi.home) == []
