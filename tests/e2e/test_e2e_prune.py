"""``kimi-mcp prune`` after real Kimi calls (both dialects): the sessions the calls created in Kimi's own
store and the isolated copy are removed with their jobs (a conversation of two jobs: one session, one copy);
any other session and the user's repository stay."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from git_helpers import committed_repo, git
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e


def test_prune_all_removes_the_jobs_sessions_and_copy(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
) -> None:
    committed_repo(workspace, {"app.py": "print('hi')\n"})
    fake.script([Reply.tool(*kimi.write("iso.txt", "i\n")), Reply.text_reply("isolated")], marker="ISO")
    fake.script([Reply.text_reply("revised")], marker="AGAIN")
    fake.script([Reply.tool(*kimi.write("plain.txt", "p\n")), Reply.text_reply("plain")], marker="PLAIN")
    env = {**kimi.env, "KIMI_MCP_STATE_DIR": str(tmp_path / "state")}

    async def body(client: Client) -> list[dict]:
        iso = await client.call_tool(
            "kimi_code_task", {"task_description": "ISO", "isolation": "worktree"}, raise_on_error=False
        )
        again = await client.call_tool(
            "kimi_continue", {"session_id": iso.structured_content["session_id"], "message": "AGAIN"}
        )
        plain = await client.call_tool("kimi_code_task", {"task_description": "PLAIN"}, raise_on_error=False)
        return [iso.structured_content, again.structured_content, plain.structured_content]

    iso, again, plain = asyncio.run(with_client(env, workspace, tmp_path / "server.log", body))
    assert iso["success"] and again["success"] and plain["success"], (iso, again, plain)
    assert again["session_id"] == iso["session_id"] != plain["session_id"]
    for proc in processes_with_home(kimi.home):  # the server is gone; its Kimis exit with it
        proc.wait(timeout=15)
    store = kimi.home / (".kimi" if kimi.name == "legacy" else ".kimi-code") / "sessions"
    ours = [next(store.glob(f"*/{r['session_id']}")) for r in (iso, plain)]
    mine = ours[1].parent / "a-session-of-my-own"  # the user's own Kimi session, beside ours
    (mine / "wire.jsonl").parent.mkdir()
    (mine / "wire.jsonl").write_text("{}\n")
    others = {p for p in store.glob("*/*") if p.is_dir()} - set(ours)
    copy = tmp_path / "state" / "worktrees" / iso["job_id"]
    assert copy.is_dir() and all(p.is_dir() for p in ours)

    done = subprocess.run(
        [sys.executable, "-m", "kimi_mcp", "prune", "--all"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Removed 3 finished jobs (any age), 1 isolated copy and 2 Kimi sessions: ")
    assert not copy.exists() and not any(p.exists() for p in ours)
    assert {p for p in store.glob("*/*") if p.is_dir()} == others and (mine / "wire.jsonl").is_file()
    assert (workspace / "plain.txt").read_text() == "p\n" and not (workspace / "iso.txt").exists()
    assert git(workspace, "status", "--porcelain") == "?? plain.txt\n"
