"""Isolated jobs end to end (real client → real server → real Kimi, both dialects): a worktree job changes
nothing in the user's tree (every file hashed before and after) and reports the exact change and diff;
``kimi_continue`` revises it in the same copy; ``kimi_apply`` lands it keeping the user's uncommitted edit;
a conflicting edit makes it refuse with the conflict listed and the tree unchanged; ``kimi_discard`` leaves
the repository as it was. Also: attempts ranked by ``verify_command``, parallel attempts of one prompt each
carrying their own answer, a server killed mid-job leaves no copy after the next start, and a workspace
outside git is a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from git_helpers import committed_repo, git
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver

pytestmark = pytest.mark.e2e

APP = "def greet():\n    return 'hi'\n\n\ndef main():\n    print(greet())\n"


@pytest.fixture
def repo(workspace: Path) -> Path:
    """The workspace as a repository: a committed file with an uncommitted edit, an untracked file and an
    ignored build directory."""
    committed_repo(workspace, {"app.py": APP, ".gitignore": "build/\n"})
    (workspace / "app.py").write_text("# my edit\n" + APP)  # uncommitted
    (workspace / "notes.txt").write_text("untracked\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.bin").write_bytes(os.urandom(200_000))
    return workspace


def snapshot(repo: Path) -> tuple:
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    gitdir = (repo / ".git" / "index").read_bytes(), git(repo, "for-each-ref"), git(repo, "rev-parse", "HEAD")
    lists = [git(repo, *cmd) for cmd in (["status", "--porcelain"], ["worktree", "list"], ["branch", "-a"])]
    return files, gitdir, lists, git(repo, "stash", "list"), git(repo, "count-objects", "-v")


def run(kimi: KimiUnderTest, workspace: Path, log: Path, body, **env: str):
    return asyncio.run(with_client({**kimi.env, **env}, workspace, log, body))


async def call(client: Client, tool: str, args: dict):
    return await client.call_tool(tool, args, raise_on_error=False)


@pytest.mark.parametrize(
    "kimi", ["legacy"], indirect=True
)  # one dialect: the copy and kimi_apply are above the runner
def test_review_revise_apply_conflict_and_discard(
    kimi: KimiUnderTest, fake: FakeMoonshot, repo: Path, tmp_path: Path
):
    changed = APP.replace("'hi'", "'hello'")
    fake.script(
        [Reply.tool(*kimi.write("app.py", "# my edit\n" + changed)), Reply.text_reply("greeting")],
        marker="T1",
    )
    fake.script([Reply.tool(*kimi.write("test_app.py", "assert True\n")), Reply.text_reply("test added")])
    fake.script(
        [Reply.tool(*kimi.write("app.py", "# my edit\n" + changed + "# end\n")), Reply.text_reply("ok")],
        marker="T2",
    )
    before = snapshot(repo)

    async def body(client: Client):
        task = {"task_description": "T1", "isolation": "worktree"}
        first = (await call(client, "kimi_code_task", task)).structured_content
        untouched = snapshot(repo)
        revised = await call(
            client, "kimi_continue", {"session_id": first["session_id"], "message": "add a test"}
        )
        (repo / "notes.txt").write_text("untracked, edited meanwhile\n")
        applied = (await call(client, "kimi_apply", {"job_id": first["job_id"]})).structured_content
        landed = {p: (repo / p).read_text() for p in ("app.py", "test_app.py", "notes.txt")}
        status = git(repo, "status", "--porcelain")
        # a second job whose change conflicts with an edit the user makes meanwhile
        second = await call(client, "kimi_code_task", {"task_description": "T2", "isolation": "worktree"})
        (repo / "app.py").write_text("# my edit\n" + changed + "# mine\n")
        mine = snapshot(repo)
        conflict = await call(client, "kimi_apply", {"job_id": second.structured_content["job_id"]})
        after_conflict = snapshot(repo)
        discarded = await call(client, "kimi_discard", {"job_id": second.structured_content["job_id"]})
        return (
            first,
            untouched,
            revised.structured_content,
            applied,
            landed,
            status,
            second,
            mine,
            conflict,
            after_conflict,
            discarded,
        )

    first, untouched, revised, applied, landed, status, second, mine, conflict, after_conflict, discarded = (
        run(kimi, repo, tmp_path / "server.log", body)
    )
    assert untouched == before  # the job touched no file, index, ref, object, branch, stash or worktree
    assert first["success"] is True and first["workspace"] == str(repo.resolve())
    assert first["files_modified"] == ["app.py"] and first["files_created"] == []
    assert first["file_contents"] == {"app.py": "# my edit\n" + changed}
    assert "-    return 'hi'\n+    return 'hello'\n" in first["diff"]
    assert "my edit" not in first["diff"].replace(" # my edit", "")  # the base holds the uncommitted edit
    assert first["worktree"]["files_changed"] == 1 and first["worktree"]["insertions"] == 1
    assert revised["files_created"] == ["test_app.py"]
    assert "+assert True\n" in revised["diff"] and "+    return 'hello'" in revised["diff"]  # both turns
    assert applied["success"] is True and sorted(applied["applied"]) == ["app.py", "test_app.py"]
    assert landed == {
        "app.py": "# my edit\n" + changed,
        "test_app.py": "assert True\n",
        "notes.txt": "untracked, edited meanwhile\n",
    }
    assert status == " M app.py\n?? notes.txt\n?? test_app.py\n"  # nothing staged
    conflict_result = conflict.structured_content
    assert conflict_result["success"] is False and conflict_result["applied"] == []
    assert [c["path"] for c in conflict_result["conflicts"]] == ["app.py"]
    assert "# mine" in conflict_result["conflicts"][0]["hunks"][0]
    assert "# end" in conflict_result["conflicts"][0]["hunks"][0]
    assert after_conflict == mine  # nothing written
    assert discarded.structured_content["discarded"] is True
    assert not Path(second.structured_content["worktree"]["path"]).exists()
    files, gitdir, lists, stash, objects = snapshot(repo)
    assert (gitdir, lists[1:], stash, objects) == (before[1], before[2][1:], before[3], before[4])
    assert git(repo, "fsck", "--no-dangling") == ""
    copy = Path(first["worktree"]["path"])  # kept after kimi_apply (kimi_discard or the TTL removes it)
    assert (copy / "notes.txt").is_file() and not (copy / "build").exists()  # untracked yes, ignored no
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # one dialect: ranking is above the runner
def test_attempts_are_ranked_by_verify_command(
    kimi: KimiUnderTest, fake: FakeMoonshot, repo: Path, tmp_path: Path
):
    """Two attempts (one at a time here, so the scripted model answers each in turn; that they run at once
    within KIMI_MCP_MAX_CONCURRENT is a unit test's): the one whose verify_command passes comes first,
    whichever ran first."""
    fake.script([Reply.tool(*kimi.write("answer.txt", "wrong\n")), Reply.text_reply("first try")])
    fake.script([Reply.tool(*kimi.write("answer.txt", "42\n")), Reply.text_reply("second try")])
    before = snapshot(repo)

    async def body(client: Client):
        args = {
            "task_description": "answer", "isolation": "worktree", "attempts": 2,
            "verify_command": "grep -qx 42 answer.txt",
        }  # fmt: skip
        return (await call(client, "kimi_code_task", args)).structured_content

    result = run(kimi, repo, tmp_path / "server.log", body, KIMI_MCP_MAX_CONCURRENT="1")
    attempts = result["attempts"]
    assert [a["verify"]["passed"] for a in attempts] == [True, False]
    assert attempts[1]["verify"]["exit_code"] == 1
    assert result["job_id"] == attempts[0]["job_id"] and result["output"] == "second try"
    assert "+42\n" in result["diff"]
    assert snapshot(repo) == before
    assert not processes_with_home(kimi.home)


#: a prompt taller than Kimi's screen: its echo pushes the welcome box (where Kimi Code shows the session id
#: once the first message made one) off the screen, so the session log is found by the prompt it begins with
TALL = "answer, given these notes:\n" + "".join(f"- note {n}: nothing to do here\n" for n in range(60))


def test_parallel_attempts_of_one_prompt_each_follow_their_own_kimi(
    kimi: KimiUnderTest, fake: FakeMoonshot, repo: Path, tmp_path: Path
):
    """Issue 29 item 8: two attempts of the same prompt at once, each on its own copy. Each attempt's Kimi
    gets its own answer from the model (the first request of each writes its own file; the reply after that
    depends on which file the conversation wrote), and each result carries its own attempt's answer, its
    approval panel answered, from its own session log (in the folder Kimi keys by that copy's path)."""
    fake.script(
        [Reply.tool(*kimi.shell(f"echo {mark} > answer.txt")) for mark in ("ANSWER-ONE", "ANSWER-TWO")]
    )
    for mark in ("ANSWER-ONE", "ANSWER-TWO"):
        fake.script([Reply.text_reply(f"wrote {mark}")], marker=mark, history=True)
    before = snapshot(repo)

    async def body(client: Client):
        args = {
            "task_description": TALL, "isolation": "worktree", "attempts": 2,
            "verify_command": "grep -q ANSWER answer.txt",
        }  # fmt: skip
        result = (await call(client, "kimi_code_task", args)).structured_content
        jobs = [a["job_id"] for a in result["attempts"]]
        return result, [(await call(client, "kimi_job", {"job_id": j})).structured_content for j in jobs]

    result, attempts = run(kimi, repo, tmp_path / "server.log", body, KIMI_MCP_MAX_CONCURRENT="2")
    assert [a["status"] for a in result["attempts"]] == ["done", "done"], result
    assert sorted(a["output"] for a in attempts) == ["wrote ANSWER-ONE", "wrote ANSWER-TWO"]
    driver = LegacyDriver if kimi.name == "legacy" else KimiCodeDriver
    root = driver.sessions_root(kimi.env)
    for attempt in attempts:
        mark = attempt["output"].removeprefix("wrote ")
        assert attempt["file_contents"] == {"answer.txt": f"{mark}\n"}  # its own copy's file
        assert f"+{mark}\n" in attempt["diff"] and attempt["verify"]["passed"] is True
        assert [t["approval"] for t in attempt["evidence"]["tools_run"]] == ["approved"], attempt["evidence"]
        copy = os.path.realpath(attempt["worktree"]["path"])
        assert (root / driver.store_key(copy) / attempt["session_id"]).is_dir()
    assert attempts[0]["session_id"] != attempts[1]["session_id"]
    requests = fake.chat_requests()
    assert len(requests) == 4  # two steps each: nothing answered twice, nothing left waiting
    assert snapshot(repo) == before
    assert not processes_with_home(kimi.home)


def test_a_server_killed_mid_job_leaves_no_copy_after_the_next_start(
    kimi: KimiUnderTest, fake: FakeMoonshot, repo: Path, tmp_path: Path
):
    fake.script([Reply.tool(*kimi.write("half.txt", "h\n")), Reply.hang()], marker="HANGS")
    state = tmp_path / "state"
    env = {"KIMI_MCP_STATE_DIR": str(state)}
    copies = state / "worktrees"

    async def first_server(client: Client):
        await call(
            client, "kimi_code_task", {"task_description": "HANGS", "isolation": "worktree", "wait_s": 0}
        )
        for _ in range(300):  # until Kimi has written into its copy and waits on the model
            if list(copies.glob("*/tree/half.txt")):
                break
            await asyncio.sleep(0.1)
        server = next(
            p for p in psutil.Process().children(recursive=True) if "kimi-mcp" in " ".join(p.cmdline())
        )
        os.kill(server.pid, signal.SIGKILL)
        return list(copies.iterdir())

    with contextlib.suppress(Exception):  # the client may see its server vanish
        run(kimi, repo, tmp_path / "one.log", first_server, **env)
    for proc in processes_with_home(kimi.home):  # Kimi lost its terminal with the server: it exits
        proc.wait(timeout=15)
    assert len(list(copies.iterdir())) == 1

    async def second_server(client: Client):
        deadline = time.monotonic() + 20
        while list(copies.iterdir()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return await call(client, "kimi_jobs", {})

    listed = run(kimi, repo, tmp_path / "two.log", second_server, **env).structured_content
    assert list(copies.iterdir()) == []
    assert listed["jobs"][0]["status"] == "interrupted"
    assert git(repo, "worktree", "list").count("\n") == 1
    assert not processes_with_home(kimi.home)


def test_worktree_needs_a_git_repository(
    legacy_env: dict, fake: FakeMoonshot, workspace: Path, tmp_path: Path, home: Path
):
    kimi = KimiUnderTest("legacy", legacy_env, home)

    async def body(client: Client):
        return await call(client, "kimi_code_task", {"task_description": "x", "isolation": "worktree"})

    result = run(kimi, workspace, tmp_path / "server.log", body)
    error = result.structured_content["error"]
    assert result.is_error and error["type"] == "bad_input" and "git repository" in error["message"]
    assert "isolation" in result.content[0].text
    assert fake.chat_requests() == [] and not processes_with_home(home)
