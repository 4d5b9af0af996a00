"""Isolated jobs through FastMCP's in-memory client, with a fake runner that edits whatever workspace it is
given (the isolated copy) and real git: the user's tree is untouched until ``kimi_apply``; the diff covers
every turn of the conversation; apply is three-way and once; discard is idempotent; attempts run at once
and are ranked by ``verify_command``; bad isolation arguments are ``bad_input``; stale copies are pruned."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from fastmcp import Client
from git_helpers import git

from kimi_mcp import worktree
from kimi_mcp.config import Settings, state_dir
from kimi_mcp.models import TaskResult, VerifyOutcome
from kimi_mcp.server import create_server
from kimi_mcp.tools import prune_copies


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def repo_state(repo: Path) -> tuple:
    return (
        tree_hashes(repo),
        (repo / ".git" / "index").read_bytes(),
        git(repo, "status", "--porcelain"),
        git(repo, "worktree", "list"),
        git(repo, "branch", "-a"),
        git(repo, "stash", "list"),
    )


class EditingRunner:
    """A fake Kimi turn: ``edits[n]`` (path → text, None deletes) applied in the n-th request's workspace,
    then the request's ``verify_command`` run there, as the runner does."""

    def __init__(self, edits: list[dict[str, str | None]], barrier: threading.Barrier | None = None) -> None:
        self.edits, self.barrier = edits, barrier
        self.requests: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, request, settings, **_kw) -> TaskResult:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # every attempt runs at the same time
        created, modified, deleted = [], [], []
        for path, text in self.edits[index].items():
            target = request.workspace / path
            existed = target.exists()
            if text is None:
                target.unlink()
                deleted.append(path)
            else:
                target.write_text(text)
                (modified if existed else created).append(path)
        result = TaskResult(
            success=True, workspace=str(request.workspace), output=f"turn {index}", files_created=created,
            files_modified=modified, files_deleted=deleted, session_id=request.session_id or f"sess-{index}",
        )  # fmt: skip
        if request.verify_command:
            outcome = worktree.verify_in(request.workspace, request.verify_command, 10)
            result.verify = VerifyOutcome(**outcome.to_dict())
        return result


def run(body) -> Any:
    return asyncio.run(body())


async def call(client: Client, name: str, args: dict) -> Any:
    return await client.call_tool(name, args, raise_on_error=False)


def test_a_worktree_job_leaves_the_tree_alone_until_it_is_applied(repo: Path) -> None:
    runner = EditingRunner(
        [
            {"app.py": "ONE\ntwo\nthree\nfour\nFIVE\n", "new.txt": "v1\n"},
            {"new.txt": "v2\n"},
        ]
    )
    before = repo_state(repo)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            args = {"task_description": "x", "work_dir": str(repo), "isolation": "worktree"}
            first = (await call(client, "kimi_code_task", args)).structured_content
            untouched = repo_state(repo)
            revised = (
                await call(client, "kimi_continue", {"session_id": first["session_id"], "message": "again"})
            ).structured_content
            (repo / "app.py").write_text("ONE\nTWO\nthree\nfour\nfive\n")  # the user edits meanwhile
            applied = await call(client, "kimi_apply", {"job_id": revised["job_id"]})
            twice = await call(client, "kimi_apply", {"job_id": first["job_id"]})
            return first, untouched, revised, applied, twice

    first, untouched, revised, applied, twice = run(body)
    assert untouched == before  # the job changed nothing in the user's tree
    assert first["workspace"] == str(repo.resolve()) and first["worktree"]["path"] != str(repo.resolve())
    assert Path(first["worktree"]["path"]).is_relative_to(state_dir(Settings(), os.environ))
    assert first["files_created"] == ["new.txt"] and first["files_modified"] == ["app.py"]
    assert "-five\n+FIVE\n" in first["diff"] and "+v1\n" in first["diff"]
    assert "-one" not in first["diff"] and "+ONE" not in first["diff"]  # the base holds the user's edit
    assert first["worktree"]["files_changed"] == 2 and first["worktree"]["insertions"] == 2
    assert runner.requests[1].workspace == runner.requests[0].workspace  # the follow-up: the same copy
    assert revised["files_modified"] == ["new.txt"]  # this turn
    assert "+v2\n" in revised["diff"] and "+FIVE\n" in revised["diff"]  # every turn against the base
    assert revised["worktree"]["id"] == first["worktree"]["id"]
    assert applied.structured_content["success"] is True
    assert sorted(applied.structured_content["applied"]) == ["app.py", "new.txt"]
    assert (repo / "app.py").read_text() == "ONE\nTWO\nthree\nfour\nFIVE\n"  # both edits kept
    assert (repo / "new.txt").read_text() == "v2\n"
    assert git(repo, "status", "--porcelain") == " M app.py\n?? new.txt\n?? notes.txt\n"
    assert twice.is_error and twice.structured_content["error"]["type"] == "bad_input"
    assert "already applied" in twice.structured_content["error"]["message"]


def test_a_conflict_writes_nothing_and_discard_leaves_the_repository_as_it_was(repo: Path) -> None:
    runner = EditingRunner([{"app.py": "ONE\ntwo\nthree\nfour\nFIVE\n", "other.txt": "o\n"}])
    before = repo_state(repo)

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            args = {"task_description": "x", "work_dir": str(repo), "isolation": "worktree"}
            first = (await call(client, "kimi_code_task", args)).structured_content
            (repo / "app.py").write_text("ONE\ntwo\nthree\nfour\nfive!\n")  # the same line as Kimi's
            mine = repo_state(repo)
            conflict = (await call(client, "kimi_apply", {"job_id": first["job_id"]})).structured_content
            after_conflict = repo_state(repo)
            (repo / "app.py").write_text("ONE\ntwo\nthree\nfour\nfive\n")
            gone = (await call(client, "kimi_discard", {"job_id": first["job_id"]})).structured_content
            again = (await call(client, "kimi_discard", {"job_id": first["job_id"]})).structured_content
            late = await call(client, "kimi_apply", {"job_id": first["job_id"]})
            return first, mine, conflict, after_conflict, gone, again, late

    first, mine, conflict, after_conflict, gone, again, late = run(body)
    assert conflict["success"] is False and conflict["applied"] == []
    assert [c["path"] for c in conflict["conflicts"]] == ["app.py"]
    assert "five!" in conflict["conflicts"][0]["hunks"][0] and "FIVE" in conflict["conflicts"][0]["hunks"][0]
    assert after_conflict == mine  # all or nothing: other.txt was not written either
    assert gone["discarded"] is True and again["success"] is True
    assert again["notes"] == ["The isolated copy was already gone."]
    assert not Path(first["worktree"]["path"]).exists()
    assert repo_state(repo) == before
    assert late.is_error and late.structured_content["error"]["type"] == "bad_input"


def test_attempts_run_at_once_and_are_ranked_by_verify_then_size(repo: Path) -> None:
    runner = EditingRunner(
        [{"a.txt": "x\n" * 5}, {"a.txt": "x\n" * 2, "ok": "1"}, {"a.txt": "x\n", "ok": "1"}],
        barrier=threading.Barrier(3),
    )

    async def body():
        async with Client(create_server(Settings(max_concurrent=3), run=runner)) as client:
            args = {
                "prompt": "x", "work_dir": str(repo), "isolation": "worktree", "attempts": 3,
                "verify_command": "test -f ok",
            }  # fmt: skip
            return (await call(client, "kimi_prompt", args)).structured_content

    result = run(body)
    attempts = result["attempts"]
    assert len(attempts) == 3 and len({a["job_id"] for a in attempts}) == 3
    assert [a["verify"]["passed"] for a in attempts] == [True, True, False]
    assert [a["insertions"] for a in attempts] == [2, 3, 5]  # passed, smaller first
    assert result["job_id"] == attempts[0]["job_id"] and result["verify"]["passed"] is True
    assert len({r.workspace for r in runner.requests}) == 3  # each on its own copy
    assert (repo / "a.txt").exists() is False


def test_bad_isolation_arguments_are_clear_errors(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    runner = EditingRunner([])

    async def body():
        async with Client(create_server(Settings(), run=runner)) as client:
            base = {"task_description": "x", "work_dir": str(repo)}
            return [
                await call(
                    client, "kimi_code_task", {**base, "work_dir": str(plain), "isolation": "worktree"}
                ),
                await call(client, "kimi_code_task", {**base, "attempts": 2}),
                await call(client, "kimi_code_task", {**base, "fix_rounds": 2}),
                await call(
                    client, "kimi_code_task", {**base, "isolation": "worktree", "verify_command": " "}
                ),
                await call(client, "kimi_code_task", {**base, "isolation": "worktree", "attempts": 5}),
                await call(
                    client,
                    "kimi_debug",
                    {"error_message": "x", "work_dir": str(repo), "fix_rounds": 6, "verify_command": "true"},
                ),
                await call(
                    client,
                    "kimi_refactor",
                    {
                        "file_path": "app.py",
                        "refactor_instructions": "x",
                        "work_dir": str(repo),
                        "fix_rounds": -1,
                        "verify_command": "true",
                    },
                ),
                await call(client, "kimi_apply", {"job_id": "job_0000000000000000"}),
            ]

    results = run(body)
    for result in results:
        assert result.is_error
    errors = [r.structured_content["error"] for r in results if r.structured_content]
    assert errors[0]["type"] == "bad_input" and "git" in errors[0]["message"]
    assert "isolation='worktree'" in errors[1]["message"]
    assert (
        errors[2]["message"]
        == "fix_rounds needs verify_command (the check whose failing output Kimi gets to fix)"
    )
    assert errors[3]["message"] == "verify_command is empty"
    assert all(e["type"] == "bad_input" for e in errors)
    assert [e["message"].split(": ")[:2] for e in errors[-3:-1]] == [
        ["kimi_debug", "invalid arguments"],
        ["kimi_refactor", "invalid arguments"],
    ]
    assert "fix_rounds" in errors[-3]["message"] and "fix_rounds" in errors[-2]["message"]
    assert runner.requests == []


def test_a_plain_job_cannot_be_applied_and_stale_copies_are_pruned(repo: Path) -> None:
    runner = EditingRunner([{"a.txt": "a\n"}, {"b.txt": "b\n"}])
    settings = Settings()

    async def body():
        mcp = create_server(settings, run=runner)
        async with Client(mcp) as client:
            plain = await call(client, "kimi_code_task", {"task_description": "x", "work_dir": str(repo)})
            isolated = await call(
                client,
                "kimi_code_task",
                {"task_description": "x", "work_dir": str(repo), "isolation": "worktree"},
            )
            refused = await call(client, "kimi_apply", {"job_id": plain.structured_content["job_id"]})
        return mcp, isolated.structured_content, refused

    mcp, isolated, refused = run(body)
    assert (
        refused.is_error
        and "did not run on an isolated copy" in refused.structured_content["error"]["message"]
    )
    stale = worktree.create(
        repo, state_dir(settings, os.environ), "job_00000000deadbeef"
    ).root  # no job knows it
    assert prune_copies(mcp) == ["job_00000000deadbeef"]
    assert not stale.exists() and Path(isolated["worktree"]["path"]).exists()  # a finished job's stays


def test_the_copy_of_a_dead_servers_job_on_a_worker_stays_until_it_is_adopted(repo: Path) -> None:
    """A server that starts while the broker is away cannot adopt a dead server's job that a worker runs:
    the job stays unfinished (for a day) and its copy must stay for the adoption (found in an e2e run: the
    copy was pruned as stale)."""
    from kimi_mcp.jobs import JobStore

    settings = Settings()
    state = state_dir(settings, os.environ)
    dead = "999999:0"  # an owner that is not alive
    store = JobStore(state / "jobs.sqlite3")
    record = store.create(
        tool="kimi_code_task", workspace=str(repo), read_only=False, arguments={}, owner=dead, status="running",
        spec={"executor": "remote", "tool": "kimi_code_task"},
    )  # fmt: skip
    store.close()
    copy = worktree.create(repo, state, record.job_id).root
    mcp = create_server(settings, run=EditingRunner([]))

    async def body():
        async with Client(mcp) as client:
            return await call(client, "kimi_job", {"job_id": record.job_id, "action": "status"})

    status = run(body).structured_content
    assert status["status"] == "running"  # left for a server with the broker to adopt
    assert prune_copies(mcp) == [] and copy.is_dir()
