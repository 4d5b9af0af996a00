"""kimi_code_task end to end: fastmcp.Client → kimi-mcp server process → real Kimi TUI → fake API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path

import anyio
import not_ready_kimi
import psutil
import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import FAKE_KEY, KimiUnderTest
from mcp_helpers import call_tool, processes_with_home, with_client

pytestmark = pytest.mark.e2e


def run(kimi: KimiUnderTest, workspace: Path, tmp_path: Path, args: dict, progress: list | None = None):
    arguments = {"work_dir": str(workspace), **args}
    result = call_tool(kimi.env, workspace, tmp_path / "server.log", "kimi_code_task", arguments, progress)
    return result, result.structured_content


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # dialect-independent behaviour
def test_tool_is_listed_with_schema_and_annotations(kimi: KimiUnderTest, workspace: Path, tmp_path: Path):
    async def body(client):
        return await client.list_tools()

    tools = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    tool = {t.name: t for t in tools}["kimi_code_task"]
    assert tool.output_schema["properties"]["files_created"]["type"] == "array"
    assert set(tool.input_schema["required"]) == {"task_description"}
    assert tool.annotations.destructive_hint is True
    assert tool.annotations.read_only_hint is False


def test_create_modify_delete_are_reported_exactly(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "keep.txt").write_text("untouched\n")
    (workspace / "old.txt").write_text("old\n")
    (workspace / "gone.txt").write_text("bye\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "gone2.txt").write_text("bye2\n")
    fake.script(
        [
            Reply.tools(
                [
                    kimi.write("new.py", "print('new')\n"),
                    kimi.shell("printf 'changed\\n' > old.txt && rm gone.txt && rm -r sub"),
                ],
                text="Working on it.",
            ),
            Reply.text_reply("Created new.py, changed old.txt, removed gone.txt and sub/."),
        ]
    )
    progress: list = []
    result, data = run(kimi, workspace, tmp_path, {"task_description": "reorganise the files"}, progress)

    assert result.is_error is False, data
    assert data["success"] is True and data["error"] is None
    assert data["output"] == "Created new.py, changed old.txt, removed gone.txt and sub/."
    assert data["files_created"] == ["new.py"]
    assert data["files_modified"] == ["old.txt"]
    assert data["files_deleted"] == ["gone.txt", "sub/gone2.txt"]
    assert data["file_contents"] == {"new.py": "print('new')\n", "old.txt": "changed\n"}
    # the disk agrees with the report
    assert (workspace / "new.py").read_text() == "print('new')\n"
    assert (workspace / "old.txt").read_text() == "changed\n"
    assert not (workspace / "gone.txt").exists() and (workspace / "keep.txt").read_text() == "untouched\n"
    names = [c["name"] for c in data["evidence"]["tools_run"]]
    assert names == [kimi.write_tool, kimi.shell_tool]
    assert all(
        c["approval"] in ("approved", "auto") and not c["is_error"] for c in data["evidence"]["tools_run"]
    )
    assert data["usage"]["output_tokens"] > 0
    assert data["session_id"] and data["dialect"] == kimi.name and data["duration_s"] > 0
    assert progress, "the server must send progress notifications while Kimi works"
    assert any("Kimi" in (msg or "") for _, _, msg in progress)
    # the prompt reached the model intact
    assert "reorganise the files" in json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_plain_answer_changes_nothing(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "a.txt").write_text("a\n")
    fake.script([Reply.text_reply("The answer is 42.\nNo files were changed.")])
    result, data = run(kimi, workspace, tmp_path, {"task_description": "what is the answer?"})
    assert data["success"] is True
    assert data["output"] == "The answer is 42.\nNo files were changed."
    assert data["files_created"] == data["files_modified"] == data["files_deleted"] == []
    assert data["evidence"]["tools_run"] == []


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # dialect-independent behaviour
def test_multi_step_turn_and_context_files(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "lib.py").write_text("def f():\n    return 1\n")
    fake.script(
        [
            Reply.tool(*kimi.write("step1.txt", "one\n")),
            Reply.tool(*kimi.write("step2.txt", "two\n")),
            Reply.tool(*kimi.shell("cat step1.txt step2.txt > both.txt")),
            Reply.text_reply("Three steps done."),
        ]
    )
    result, data = run(
        kimi, workspace, tmp_path, {"task_description": "do three steps", "context_files": ["lib.py"]}
    )
    assert data["success"] is True, data
    assert data["output"] == "Three steps done."
    assert data["files_created"] == ["both.txt", "step1.txt", "step2.txt"]
    assert data["file_contents"]["both.txt"] == "one\ntwo\n"
    assert len(data["evidence"]["tools_run"]) == 3
    first_prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "def f():" in first_prompt and "lib.py" in first_prompt


def test_writes_outside_the_workspace_are_rejected(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    outside = tmp_path / "outside.txt"
    fake.script(
        [
            Reply.tool(*kimi.write(str(outside), "escaped\n")),
            Reply.text_reply("I could not write there."),
        ]
    )
    result, data = run(kimi, workspace, tmp_path, {"task_description": "write outside"})
    assert not outside.exists()
    assert data["evidence"]["tools_run"][0]["approval"] == "rejected"
    assert data["files_created"] == []


def test_secrets_binary_and_budgets(kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path):
    big = "x" * 30_000
    fake.script(
        [
            Reply.tools(
                [
                    kimi.shell("printf 'API_TOKEN=supersecretvalue\\n' > .env"),
                    kimi.write("big.txt", big),
                    kimi.shell("printf 'PNG\\000\\001\\002' > image.bin"),
                ]
            ),
            Reply.text_reply("done"),
        ]
    )
    result, data = run(kimi, workspace, tmp_path, {"task_description": "make files"})
    assert data["success"] is True, data
    assert data["files_created"] == [".env", "big.txt", "image.bin"]
    assert ".env" in data["secret_files"] and ".env" not in data["file_contents"]
    assert "supersecretvalue" not in json.dumps(result.structured_content)
    assert "supersecretvalue" not in "".join(getattr(c, "text", "") for c in result.content)
    assert data["binary_files"] == ["image.bin"]
    assert len(data["file_contents"]["big.txt"]) == 20_000
    cut = {t["path"]: t for t in data["truncated"]}
    assert cut["big.txt"]["reason"] == "file_too_large" and cut["big.txt"]["size_bytes"] == 30_000


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # dialect-independent behaviour
def test_bad_input_is_a_clear_error_and_kimi_is_not_started(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / ".env").write_text("SECRET=1\n")
    (tmp_path / "outside.txt").write_text("outside\n")

    async def body(client):
        results = []
        for args in (
            {"task_description": "x", "work_dir": str(tmp_path / "missing")},
            {"task_description": "x", "work_dir": str(workspace), "context_files": ["../outside.txt"]},
            {"task_description": "x", "work_dir": str(workspace), "context_files": [".env", "nope.py"]},
            {"task_description": "   ", "work_dir": str(workspace)},
        ):
            results.append(await client.call_tool("kimi_code_task", args, raise_on_error=False))
        # the server is still up and answers
        tools = await client.list_tools()
        return results, tools

    results, tools = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert [r.is_error for r in results] == [True] * 4
    errors = [r.structured_content["error"] for r in results]
    assert errors[0]["type"] == "filesystem" and "does not exist" in errors[0]["message"]
    assert errors[1]["type"] == "bad_input" and "'..'" in errors[1]["message"]
    assert errors[2]["type"] == "bad_input"
    assert "nope.py does not exist" in errors[2]["message"]  # (.env alone would be left out, said in notes)
    assert "SECRET=1" not in json.dumps(errors)
    assert errors[3]["type"] == "bad_input"
    assert all(e["suggestion"] for e in errors)
    assert fake.chat_requests() == []
    assert tools


def test_api_401_is_an_auth_error(kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path):
    fake.script([Reply.error(401, "fake 401 error")])
    result, data = run(kimi, workspace, tmp_path, {"task_description": "hello"})
    assert result.is_error is True
    assert data["success"] is False
    assert data["error"]["type"] == "auth" and data["error"]["retryable"] is False
    assert "MOONSHOT_API_KEY" in data["error"]["suggestion"] or "login" in data["error"]["suggestion"]
    assert FAKE_KEY not in json.dumps(data)
    assert not processes_with_home(kimi.home)


def test_timeout_kills_the_process_group_and_reports_partial_work(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    kimi.env["KIMI_MCP_TIMEOUT"] = "18"
    fake.script(
        [
            Reply.tool(*kimi.write("partial.txt", "written before the stall\n")),
            Reply.tool(*kimi.shell("sleep 300")),
            Reply.text_reply("never reached"),
        ]
    )
    result, data = run(kimi, workspace, tmp_path, {"task_description": "start and stall"})
    assert result.is_error is True
    assert data["error"]["type"] == "timeout" and data["error"]["retryable"] is True
    assert data["files_created"] == ["partial.txt"]
    assert data["file_contents"]["partial.txt"] == "written before the stall\n"
    assert not processes_with_home(kimi.home), "Kimi or its shell children survived the timeout"


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # dialect-independent behaviour
def test_cancel_stops_kimi_and_server_keeps_serving(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.hang(120)], marker="HANGME")
    fake.script([Reply.text_reply("second call works")], marker="SECOND")
    seen_progress: list = []

    async def body(client):
        async def on_progress(done, total, message):
            seen_progress.append(message)

        with anyio.move_on_after(12):
            await client.call_tool(
                "kimi_code_task",
                {"task_description": "HANGME please", "work_dir": str(workspace)},
                progress_handler=on_progress,
            )
        # give the server a moment to interrupt and reap Kimi, then check nothing is left
        for _ in range(100):
            if not processes_with_home(kimi.home):
                break
            await anyio.sleep(0.1)
        left = processes_with_home(kimi.home)
        second = await client.call_tool(
            "kimi_code_task",
            {"task_description": "SECOND call", "work_dir": str(workspace)},
            raise_on_error=False,
        )
        return left, second

    left, second = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert left == []
    assert second.structured_content["success"] is True
    assert second.structured_content["output"] == "second call works"


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_event_loop_stays_responsive_during_a_turn(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script([Reply.text_reply("slow answer " * 20, token_delay=0.3, chunk_chars=12)])
    order: list[str] = []

    async def body(client):
        async def long_call():
            await client.call_tool("kimi_code_task", {"task_description": "slow", "work_dir": str(workspace)})
            order.append("task")

        async def pings():
            await anyio.sleep(3)
            for _ in range(3):
                assert await client.list_tools()
                bad = await client.call_tool(
                    "kimi_code_task",
                    {"task_description": "x", "work_dir": "/nonexistent"},
                    raise_on_error=False,
                )
                assert bad.structured_content["error"]["type"] == "filesystem"
            order.append("pings")

        async with anyio.create_task_group() as group:
            group.start_soon(long_call)
            group.start_soon(pings)

    asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert order == ["pings", "task"]


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # dialect-independent behaviour
def test_stdout_carries_only_json_rpc(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Drive the server with raw JSON-RPC and check every stdout line is a JSON-RPC message."""
    import subprocess

    from mcp_helpers import INITIALIZE, SERVER

    fake.script([Reply.tool(*kimi.write("x.txt", "x\n")), Reply.text_reply("ok")])
    messages = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "kimi_code_task",
                "arguments": {"task_description": "write x", "work_dir": str(workspace)},
            },
        },
    ]
    proc = subprocess.Popen(
        [SERVER],
        env=kimi.env,
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if json.loads(line).get("id") == 2:
                break
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        stderr = proc.stderr.read()
    parsed = [json.loads(line) for line in lines]  # raises on any non-JSON byte on stdout
    assert all(p.get("jsonrpc") == "2.0" for p in parsed)
    final = [p for p in parsed if p.get("id") == 2][0]
    assert final["result"]["structuredContent"]["files_created"] == ["x.txt"]
    assert "kimi ready" in stderr  # logs went to stderr


def test_same_prompt_twice_reads_its_own_session_log(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Two identical prompts in the same Kimi home: each call must follow its own session, not the last one."""

    async def body(client):
        results = []
        for name in ("first.txt", "second.txt"):
            fake.script([Reply.tool(*kimi.write(name, name + "\n")), Reply.text_reply(f"wrote {name}")])
            args = {"task_description": "write the file", "work_dir": str(workspace)}
            results.append((await client.call_tool("kimi_code_task", args)).structured_content)
        return results

    first, second = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert first["files_created"] == ["first.txt"] and first["output"] == "wrote first.txt"
    assert second["files_created"] == ["second.txt"] and second["output"] == "wrote second.txt"
    assert first["session_id"] != second["session_id"]


def test_llm_not_set_after_kimi_code_looked_ready_is_retried_once_in_a_fresh_kimi(
    kimi_code_env: dict[str, str], fake: FakeMoonshot, workspace: Path, tmp_path: Path, home: Path
):
    """Issue 29 item 8: the first Kimi shows its model, then says "LLM not set" to the message (Kimi Code under
    heavy load); the message never reached the model, so a fresh (real) Kimi Code gets it and the call
    succeeds, with no trace of the fault but a progress message."""
    real = Path(kimi_code_env["KIMI_MCP_KIMI_BIN"])
    env = dict(
        kimi_code_env, KIMI_MCP_KIMI_BIN=str(not_ready_kimi.wrapper(tmp_path, real)), KIMI_MCP_STANDBY="off"
    )
    fake.script([Reply.tool("Write", {"path": "made.txt", "content": "made\n"}), Reply.text_reply("made it")])
    progress: list = []
    result = call_tool(
        env, workspace, tmp_path / "server.log", "kimi_code_task", {"task_description": "make it"}, progress
    )
    data = result.structured_content
    assert data["success"] is True, data
    assert data["output"] == "made it" and data["files_created"] == ["made.txt"]
    assert (tmp_path / "not-ready-started").is_dir()  # the first Kimi was the one that was not ready
    messages = [message for _, _, message in progress]
    assert any("not ready after all" in (m or "") and "starting a fresh Kimi" in (m or "") for m in messages)
    assert len(fake.chat_requests()) == 2  # the message reached the model once, from the fresh Kimi
    assert not processes_with_home(home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # Kimi Code retries with backoff, minutes long
def test_time_running_out_while_kimi_retries_a_failing_api_is_an_api_error(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Issue 13 item 18: the provider's error, not a generic timeout, when that is what the turn waited on."""
    kimi.env["KIMI_MCP_TIMEOUT"] = "12"
    kimi.env["KIMI_LOOP_MAX_ATTEMPTS_PER_STEP"] = "10"
    fake.script([Reply.error(500, "fake upstream 500")])
    result, data = run(kimi, workspace, tmp_path, {"task_description": "hello"})
    assert result.is_error is True and data["success"] is False
    error = data["error"]
    assert error["type"] == "api" and error["retryable"] is True, error
    assert "fake upstream 500" in error["message"] and "still retrying" in error["message"]
    assert error["details"]["status"] == 500
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # its shell children leave its process group
def test_kimi_killed_mid_turn_leaves_none_of_its_shell_children(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """Issue 13 item 16: every descendant the session saw ends with its Kimi, however Kimi dies."""
    fake.script(
        [Reply.tool(*kimi.shell("echo started > started.txt && sleep 300")), Reply.text_reply("never")]
    )

    async def body(client):
        call = asyncio.create_task(
            client.call_tool(
                "kimi_code_task",
                {"task_description": "run it", "work_dir": str(workspace)},
                raise_on_error=False,
            )
        )
        for _ in range(600):
            if (workspace / "started.txt").exists():
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # at least one record of Kimi's descendants after the shell started
        procs = processes_with_home(kimi.home)
        guards = [p for p in procs if "_guard.py" in " ".join(p.cmdline())]
        roots = [p for p in procs if p.ppid() in {g.pid for g in guards}]  # Kimi itself, below its guard
        assert any("sleep" in " ".join(p.cmdline()) for p in procs), [p.cmdline() for p in procs]
        for root in roots:
            root.kill()  # kill -9, as the OOM killer would
        return await call

    result = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert result.structured_content["success"] is False
    assert (workspace / "started.txt").exists()
    left = processes_with_home(kimi.home)
    assert not left, [p.cmdline() for p in left]


def test_a_server_killed_by_sigkill_leaves_nothing_kimi_started(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """However the server ends (a crashing client takes it down with SIGKILL), Kimi and every command it
    started end too: Kimi Code runs its shell commands in sessions of their own, which no hangup reaches."""
    fake.script(
        [Reply.tool(*kimi.shell("echo started > started.txt && sleep 300")), Reply.text_reply("never")]
    )
    seen: dict[str, object] = {}

    async def body(client):
        asyncio.create_task(
            client.call_tool("kimi_code_task", {"task_description": "run it", "work_dir": str(workspace)})
        )
        for _ in range(600):
            if (workspace / "started.txt").exists():
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        seen["before"] = [" ".join(p.cmdline()) for p in processes_with_home(kimi.home)]
        server = next(
            p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline())
        )
        server.send_signal(signal.SIGKILL)
        seen["killed"] = time.monotonic()

    with contextlib.suppress(Exception):  # the client sees its server vanish
        asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert any("sleep 300" in line for line in seen["before"]), seen  # Kimi's command ran when it died
    deadline = time.monotonic() + 30
    while processes_with_home(kimi.home) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_with_home(kimi.home)
    assert not left, [p.cmdline() for p in left]
    print(f"nothing left {time.monotonic() - seen['killed']:.2f} s after the server's SIGKILL")
