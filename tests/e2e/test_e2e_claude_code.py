"""Claude Code end to end: the real Claude Code 2.1.330 (headless) → the real kimi-mcp server over stdio,
registered with ``claude mcp add`` exactly as the README says → the real Kimi TUI → the suite's fake Moonshot
API. Claude Code's model is the suite's fake Anthropic API, scripted to call the kimi tools; what Claude Code
sends back to it as ``tool_result`` is exactly what a real model would see."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from claude_code import ClaudeCode, claude_env, kill_all, server_vars, wait_until_gone
from fake_anthropic import FakeAnthropic, Step, ToolResult
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import KimiUnderTest

pytestmark = pytest.mark.e2e

TASK = "mcp__kimi__kimi_code_task"
JOB = "mcp__kimi__kimi_job"
HELLO = "def hello() -> str:\n    return 'hello from kimi'\n"
#: a configured secret the server sees (not key-shaped: masked because it is configured)
HTTP_TOKEN = "hush-FAKE-TOKEN-4b1d2c3e9a7f0011"
#: a value in the workspace's secret file
DB_PASSWORD = "pw-fake-0a9b8c7d6e5f"


@pytest.fixture
def claude(
    claude_code: Path, fake_anthropic: FakeAnthropic, home: Path, workspace: Path
) -> Iterator[ClaudeCode]:
    """Claude Code in ``workspace`` with the same isolated HOME as the Kimi under test, so every process
    of the test (Claude Code, uv, the server, Kimi, Node, shells) can be found by its HOME."""
    claude = ClaudeCode(claude_code, workspace, claude_env(home, fake_anthropic.base_url))
    fake_anthropic.think_until(claude.tools_listed)  # the model answers once Claude Code has kimi's tools
    yield claude
    kill_all(home)  # only if a test failed before its own check: never leave processes behind


def kimi_results(fake: FakeAnthropic, name: str = TASK) -> list[ToolResult]:
    return fake.results_of(name)


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # the health check does not start Kimi
def test_mcp_add_as_the_readme_says_and_list_shows_connected(claude: ClaudeCode, kimi: KimiUnderTest):
    added = claude.add_kimi(server_vars(kimi.env))
    assert "Added stdio MCP server kimi with command: uv run --project" in added.stdout
    listed = claude.run("mcp", "list", timeout=120)
    lines = [line for line in listed.stdout.splitlines() if line.startswith("kimi:")]
    assert len(lines) == 1, listed.stdout + listed.stderr
    assert "kimi-mcp" in lines[0] and "✔ Connected" in lines[0], lines[0]
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # Claude Code meets the server, above the runner
def test_code_task_result_claude_code_hands_its_model(
    claude: ClaudeCode,
    kimi: KimiUnderTest,
    fake: FakeMoonshot,
    fake_anthropic: FakeAnthropic,
    workspace: Path,
):
    (workspace / ".env").write_text(f"DB_PASSWORD={DB_PASSWORD}\n")
    claude.add_kimi({**server_vars(kimi.env), "KIMI_MCP_HTTP_TOKEN": HTTP_TOKEN})
    fake.script(
        [
            Reply.tool(*kimi.write("hello.py", HELLO)),
            Reply.text_reply(f"Created hello.py. Token {HTTP_TOKEN}, database password {DB_PASSWORD}."),
        ]
    )
    fake_anthropic.script(
        [
            Step.tool(
                TASK, {"task_description": "Create hello.py with a hello() function returning a greeting"}
            ),
            Step.final("Kimi created hello.py."),
        ]
    )
    answer = claude.print_json("Ask Kimi to create hello.py")

    assert answer["is_error"] is False and answer["result"] == "Kimi created hello.py.", answer
    assert (workspace / "hello.py").read_text() == HELLO
    [result] = kimi_results(fake_anthropic)
    assert result.is_error is False, result.text
    data = json.loads(result.text)  # on success Claude Code hands its model the structuredContent as JSON
    assert data["success"] is True and data["status"] == "done"
    assert data["files_created"] == ["hello.py"]
    assert data["files_modified"] == [] and data["files_deleted"] == []
    assert data["file_contents"] == {"hello.py": HELLO}
    assert Path(data["workspace"]).resolve() == workspace.resolve()  # Claude Code's cwd is the workspace
    assert data["output"] == "Created hello.py. Token ***, database password ***."
    sent_to_model = json.dumps(fake_anthropic.requests)
    assert HTTP_TOKEN not in sent_to_model and DB_PASSWORD not in sent_to_model
    assert fake_anthropic.pending() == 0
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent: Kimi never starts
def test_an_error_result_says_alone_what_happened_and_what_to_do(
    claude: ClaudeCode,
    kimi: KimiUnderTest,
    fake: FakeMoonshot,
    fake_anthropic: FakeAnthropic,
    workspace: Path,
):
    missing = str(workspace.parent / "no-such-dir" / "kimi")
    claude.add_kimi({**server_vars(kimi.env), "KIMI_MCP_KIMI_BIN": missing})
    fake_anthropic.script(
        [Step.tool(TASK, {"task_description": "Create hello.py"}), Step.final("Kimi is not installed.")]
    )
    answer = claude.print_json("Ask Kimi to create hello.py")

    assert answer["result"] == "Kimi is not installed.", answer
    [result] = kimi_results(fake_anthropic)
    assert result.is_error is True
    lines = result.text.splitlines()
    assert lines[0] == f"Error (install): KIMI_MCP_KIMI_BIN={missing} is not an executable file"
    assert lines[1].startswith("What to do: Run `kimi-mcp install-kimi`") and "KIMI_MCP_KIMI_BIN" in lines[1]
    assert "Retryable: no" in lines
    assert "Files already changed: none" in lines
    ours = result.text.split("\n\n")[0]  # Claude Code may append its own note (the tool's input schema)
    assert "{" not in ours and len(ours) < 1000  # a few lines of text, not the JSON result
    assert fake.chat_requests() == []
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # Claude Code meets the server, above the runner
def test_long_task_through_the_job_handles(
    claude: ClaudeCode,
    kimi: KimiUnderTest,
    fake: FakeMoonshot,
    fake_anthropic: FakeAnthropic,
    workspace: Path,
):
    claude.add_kimi(server_vars(kimi.env))
    fake.script([Reply.tool(*kimi.write("hello.py", HELLO)), Reply.text_reply("Created hello.py.")])

    def wait_for_the_job(previous: ToolResult | None) -> dict:
        assert previous is not None and previous.name == TASK
        return {"job_id": json.loads(previous.text)["job_id"], "wait_s": 180}

    fake_anthropic.script(
        [
            Step.tool(TASK, {"task_description": "Create hello.py", "wait_s": 0}),
            Step.tool(JOB, wait_for_the_job),
            Step.final("Kimi finished."),
        ]
    )
    answer = claude.print_json("Ask Kimi to create hello.py; it may take a while")

    assert answer["result"] == "Kimi finished.", answer
    [started] = kimi_results(fake_anthropic, TASK)
    first = json.loads(started.text)
    # wait_s=0: back at once, the job still going (or not yet picked up by its worker)
    assert first["status"] in ("queued", "starting", "running") and first["job_id"].startswith("job_"), first
    assert first["success"] is None  # neither done nor failed yet
    assert first["files_created"] == []
    [waited] = kimi_results(fake_anthropic, JOB)
    assert waited.is_error is False, waited.text
    done = json.loads(waited.text)
    assert done["job_id"] == first["job_id"] and done["status"] == "done" and done["success"] is True
    assert done["files_created"] == ["hello.py"]
    assert done["file_contents"] == {"hello.py": HELLO}
    assert done["output"] == "Created hello.py."
    assert (workspace / "hello.py").read_text() == HELLO
    assert wait_until_gone(kimi.home) == []


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # connecting does not depend on the dialect
def test_under_two_cpu_burners_a_new_session_has_kimis_tools_at_once(
    claude: ClaudeCode, kimi: KimiUnderTest, fake: FakeMoonshot, fake_anthropic: FakeAnthropic
):
    """Issue 23 item 7: on a busy machine the server took longer to list its tools than Claude Code lets a
    call wait for a connecting server ("No such tool available"). After a first start it answers the
    handshake and the tool list from its record at once; here the model calls at once too (no wait)."""
    claude.add_kimi(server_vars(kimi.env))
    fake.script([Reply.text_reply("First.")])
    fake_anthropic.script([Step.tool(TASK, {"task_description": "first"}), Step.final("one")])
    assert claude.print_json("Ask Kimi once")["result"] == "one"  # the server's first start records
    fake.script([Reply.text_reply("Second.")])
    fake_anthropic.script([Step.tool(TASK, {"task_description": "second"}), Step.final("two")])
    fake_anthropic.think_until(None)  # the model calls as soon as Claude Code asks it
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        answer = claude.print_json("Ask Kimi again")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert answer["result"] == "two", answer
    second = kimi_results(fake_anthropic)[-1]
    assert second.is_error is False, second.text  # not "No such tool available"
    assert json.loads(second.text)["output"] == "Second."
    assert wait_until_gone(kimi.home) == []
