"""kimi_review and dry runs end to end (issue 31 items 4 and 5): fastmcp.Client → kimi-mcp → real Kimi → fake
API. One dialect each: the git range, the cut, the answer's parsing and the dry run are all above the runner
(the tool-layer and unit tests cover their cases)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from git_helpers import committed_repo, git
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

from kimi_mcp.jobs import STORE_FILE, JobStore

pytestmark = pytest.mark.e2e

SECRET = "reviewSecret-0123456789abc"


def fenced(payload: dict) -> Reply:
    return Reply.text_reply(f"Reviewed.\n\n```json\n{json.dumps(payload, indent=2)}\n```\n")


def test_a_branch_is_reviewed_against_main_and_bad_ranges_are_refused(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    repo = committed_repo(workspace, {"api.py": "def get(db, user):\n    return db[user]\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "api.py").write_text("def get(db, user):\n    return db.get(user) or db[user]\n")
    (repo / ".env").write_text(f"API_KEY={SECRET}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lookup with a fallback")
    finding = {
        "file": "api.py", "line": 2, "severity": "major", "title": "fallback still raises",
        "detail": "db[user] raises KeyError when get() returned None", "suggestion": "return db.get(user)",
    }  # fmt: skip
    outside = {"file": "models.py", "line": 9, "severity": "nit", "title": "not in the diff", "detail": "x"}
    fake.script(
        [fenced({"verdict": "request_changes", "summary": "one bug", "findings": [finding, outside]})]
    )
    (tmp_path / "plain").mkdir()
    bad = [
        {"range": "main...nope"},
        {"range": "HEAD..HEAD"},
        {"range": "working_tree", "work_dir": str(tmp_path / "plain")},
    ]

    async def body(client):
        args = {"work_dir": str(repo), "range": "main...feature", "wait_s": 120}
        reviewed = await client.call_tool("kimi_review", args, raise_on_error=False)
        refused = [
            await client.call_tool("kimi_review", {"work_dir": str(repo)} | case, raise_on_error=False)
            for case in bad
        ]
        return reviewed.structured_content, [r.structured_content for r in refused]

    data, refused = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    assert data["success"] is True and data["parse_ok"] is True, data
    assert data["findings"] == [finding] and data["verdict"] == "request_changes"
    assert data["reviewed"] == {
        "range": "main...feature",
        "commits": 1,
        "files": 2,
        "insertions": 2,
        "deletions": 1,
    }
    assert any("models.py: not in the diff" in note for note in data["notes"])
    assert any(".env" in note for note in data["notes"])  # withheld, and said so
    prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "return db.get(user) or db[user]" in prompt and "lookup with a fallback" in prompt
    assert SECRET not in prompt and SECRET not in json.dumps(data)
    assert [r["error"]["type"] for r in refused] == ["bad_input"] * 3
    assert "unknown revision 'nope'" in refused[0]["error"]["message"]
    assert "nothing to review" in refused[1]["error"]["message"]
    assert "git working tree" in refused[2]["error"]["message"]
    assert len(fake.chat_requests()) == 1  # the refused ranges never reached Kimi


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # one dialect: a dry run never starts Kimi
def test_a_dry_run_starts_no_kimi_and_stores_no_job(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "app.py").write_text("def main():\n    return 1\n")
    (workspace / ".env").write_text(f"API_KEY={SECRET}\n")
    env = dict(kimi.env, KIMI_MCP_STATE_DIR=str(tmp_path / "state"))
    args = {"work_dir": str(workspace), "file_paths": ["app.py", ".env"], "dry_run": True}

    async def body(client):
        result = await client.call_tool("kimi_analyze_code", args, raise_on_error=False)
        return result.structured_content, processes_with_home(kimi.home)  # while the server still runs

    data, running = asyncio.run(with_client(env, workspace, tmp_path / "server.log", body))
    assert data["success"] is True and running == [] and fake.requests == []
    info = data["dry_run"]
    assert info["files_sent"] == ["app.py"] and info["redacted"] == [".env"] and info["prompt_tokens"] > 0
    assert (info["workspace"], info["runs_on"], info["isolation"]) == (str(workspace), "local", "none")
    assert SECRET not in json.dumps(data)
    store_file = tmp_path / "state" / STORE_FILE
    if store_file.exists():
        store = JobStore(store_file)
        try:
            assert store.list() == []
        finally:
            store.close()
