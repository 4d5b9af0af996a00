"""kimi_review at the tool layer (issue 31 item 4), through FastMCP's in-memory client with the runner replaced
by a fake: what reaches Kimi (read-only, the range's diff, secret files withheld, cut to the message limit),
the result's shape, and bad ranges refused before anything starts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from git_helpers import committed_repo, git

from kimi_mcp.adapter.dry_run import typed_message
from kimi_mcp.config import Settings
from kimi_mcp.message import estimated_tokens
from kimi_mcp.models import TaskResult
from kimi_mcp.server import create_server

SECRET = "apiSecret-0123456789abcdef"
ANSWER = {
    "verdict": "request_changes",
    "summary": "one bug",
    "findings": [
        {
            "file": "app.py",
            "line": 2,
            "severity": "major",
            "title": "wrong value",
            "detail": "B",
            "suggestion": "b",
        },
        {"file": "elsewhere.py", "line": 1, "severity": "minor", "title": "not in the diff", "detail": "x"},
    ],
}


class Answering:
    def __init__(self, answer: dict) -> None:
        self.answer, self.requests = answer, []

    def __call__(self, request, settings, **_kwargs) -> TaskResult:
        self.requests.append(request)
        output = "Review done.\n```json\n" + json.dumps(self.answer) + "\n```"
        return TaskResult(success=True, workspace=str(request.workspace), output=output)


def review(runner: Answering, args: dict[str, Any], settings: Settings | None = None) -> dict:
    async def body() -> dict:
        async with Client(create_server(settings or Settings(), run=runner)) as client:
            return (await client.call_tool("kimi_review", args, raise_on_error=False)).structured_content

    return asyncio.run(body())


@pytest.fixture
def feature(tmp_path: Path) -> Path:
    """A repository on branch feature: app.py changed, big.py and .env added, against main."""
    repo = committed_repo(tmp_path / "repo", {"app.py": "a\nb\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "app.py").write_text("a\nB\n")
    (repo / "big.py").write_text("".join(f"line_{n} = {n}\n" for n in range(600)))
    (repo / "small.py").write_text("y = 1\n")
    (repo / ".env").write_text(f"API_KEY={SECRET}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "feature work")
    return repo


def test_a_branch_is_reviewed_read_only_and_findings_outside_its_diff_are_dropped(feature: Path) -> None:
    runner = Answering(ANSWER)
    data = review(runner, {"range": "main...feature", "focus": "correctness", "work_dir": str(feature)})
    assert data["success"] is True and data["parse_ok"] is True, data
    assert data["verdict"] == "request_changes" and data["summary"] == "one bug"
    assert data["findings"] == [ANSWER["findings"][0]]
    assert any("elsewhere.py: not in the diff" in note for note in data["notes"])
    assert data["reviewed"] == {
        "range": "main...feature",
        "commits": 1,
        "files": 4,
        "insertions": 603,
        "deletions": 1,
    }
    (request,) = runner.requests
    assert request.read_only is True  # plan mode, every write rejected
    assert "-b\n+B" in request.prompt and "feature work" in request.prompt and "correctness" in request.prompt
    assert SECRET not in request.prompt and "- .env" in request.prompt  # named as withheld, never shown


def test_a_diff_over_the_message_limit_is_cut_by_file_and_the_dry_run_says_so(feature: Path) -> None:
    settings = Settings(max_message_tokens=1500)
    runner = Answering(ANSWER)
    args = {"range": "main...feature", "work_dir": str(feature)}
    dry = review(runner, args | {"dry_run": True}, settings)
    assert runner.requests == []
    assert dry["dry_run"]["files_sent"] == ["app.py", "small.py"] and dry["dry_run"]["redacted"] == [".env"]
    assert [(t["path"], t["reason"]) for t in dry["dry_run"]["truncated"]] == [("big.py", "message_limit")]
    assert dry["reviewed"]["files"] == 4 and dry["dry_run"]["prompt_tokens"] <= 1500
    data = review(runner, args, settings)
    assert [(t["path"], t["reason"]) for t in data["truncated"]] == [("big.py", "message_limit")]
    prompt = runner.requests[0].prompt
    assert "line_599" not in prompt and "- big.py" in prompt and "+y = 1" in prompt
    assert estimated_tokens(typed_message(prompt, 1500)[0]) == dry["dry_run"]["prompt_tokens"]


def test_bad_ranges_are_refused_before_anything_starts(feature: Path, tmp_path: Path) -> None:
    runner = Answering(ANSWER)
    (tmp_path / "plain").mkdir()
    cases = [
        ({"range": "main...nope"}, "unknown revision 'nope'"),
        ({"range": "HEAD..HEAD"}, "nothing to review"),
        ({"range": "working_tree"}, "nothing to review"),
        ({"range": "   "}, "range is empty"),
        ({"range": "working_tree", "work_dir": str(tmp_path / "plain")}, "not"),
    ]
    for args, message in cases:
        data = review(runner, {"work_dir": str(feature)} | args)
        assert data["success"] is False and data["error"]["type"] == "bad_input", args
        assert message in data["error"]["message"], (args, data["error"])
    assert runner.requests == []
