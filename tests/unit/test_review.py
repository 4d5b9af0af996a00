"""kimi_review's pieces: a git range as a diff by file (review.review_diff), the cut to the message limit
(review.cut), Kimi's answer (answers.ReviewAnswer) and the finishing step's filter (finish.reviewed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from git_helpers import committed_repo, git

from kimi_mcp import answers, review
from kimi_mcp.config import Settings
from kimi_mcp.errors import BadInput
from kimi_mcp.finish import reviewed
from kimi_mcp.job_spec import JobSpec
from kimi_mcp.message import estimated_tokens
from kimi_mcp.models import TaskResult

SECRET = "dbPassword-9f8e7d6c5b4a"
MAX_BYTES = 200_000


def commit(repo: Path, message: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def branched(tmp_path: Path) -> Path:
    """main: app.py, lib/util.py; feature (checked out) branches off, changes app.py, adds new.py and a .env,
    renames lib/util.py; main then moves on (main.py) after the branch point."""
    repo = committed_repo(tmp_path / "repo", {"app.py": "a\nb\nc\n", "lib/util.py": "def f():\n    pass\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "change app", {"app.py": "a\nB\nc\nd\n", "new.py": "x = 1\n"})
    git(repo, "mv", "lib/util.py", "lib/helpers.py")
    commit(repo, "rename util, add env", {".env": f"DB_PASSWORD={SECRET}\n"})
    git(repo, "checkout", "-q", "main")
    commit(repo, "main moves on", {"main.py": "print(1)\n"})
    git(repo, "checkout", "-q", "feature")
    return repo


def by_path(found: review.ReviewDiff) -> dict[str, review.FileDiff]:
    return {f.path: f for f in found.files}


def test_a_branch_against_its_base_is_the_branchs_change_only(branched: Path) -> None:
    found = review.review_diff(branched, "main...feature", MAX_BYTES)
    files = by_path(found)
    assert list(files) == [".env", "app.py", "lib/helpers.py", "new.py"]  # not main.py: main's own change
    assert (files["app.py"].insertions, files["app.py"].deletions) == (2, 1)
    assert "-b\n+B\n" in files["app.py"].text and files["app.py"].text.startswith("diff --git a/app.py")
    assert "rename from lib/util.py" in files["lib/helpers.py"].text  # a rename is its new path
    assert (
        files[".env"].secret and files[".env"].text == "" and files[".env"].insertions == 1
    )  # counted, not shown
    assert all(SECRET not in f.text for f in found.files)
    assert (found.commits, found.subjects[0].split(" ", 1)[1]) == (2, "rename util, add env")
    assert found.reviewed() == {
        "range": "main...feature", "commits": 2, "files": 4, "insertions": 4, "deletions": 1,
    }  # fmt: skip


def test_two_dots_diff_the_tips_and_an_empty_side_is_head(branched: Path) -> None:
    tips = by_path(review.review_diff(branched, "main..", MAX_BYTES))
    assert "main.py" in tips and tips["main.py"].deletions == 1  # feature has no main.py: it goes
    assert review.review_diff(branched, "main..", MAX_BYTES).commits == 2


def test_one_commit_is_against_its_first_parent_and_a_root_commit_against_nothing(branched: Path) -> None:
    head = review.review_diff(branched, "HEAD~1", MAX_BYTES)
    assert sorted(by_path(head)) == ["app.py", "new.py"] and head.commits == 1
    root = git(branched, "rev-list", "--max-parents=0", "HEAD").strip()
    first = by_path(review.review_diff(branched, root[:10], MAX_BYTES))
    assert sorted(first) == ["app.py", "lib/util.py"] and first["app.py"].insertions == 3


def test_the_working_tree_holds_uncommitted_and_untracked_files_and_staged_the_index(branched: Path) -> None:
    (branched / "app.py").write_text("changed\n")
    (branched / "todo.txt").write_text("one\ntwo\n")
    (branched / "id_rsa").write_text(f"{SECRET}\n")  # untracked secret: never read
    (branched / "blob.bin").write_bytes(b"\x00\x01\x02")
    files = by_path(review.review_diff(branched, "working_tree", MAX_BYTES))
    assert sorted(files) == ["app.py", "blob.bin", "id_rsa", "todo.txt"]
    assert (
        files["todo.txt"].text.endswith("@@ -0,0 +1,2 @@\n+one\n+two\n") and files["todo.txt"].insertions == 2
    )
    assert files["id_rsa"].secret and SECRET not in json.dumps([f.text for f in files.values()])
    assert "Binary files" in files["blob.bin"].text
    git(branched, "add", "todo.txt")
    assert list(by_path(review.review_diff(branched, "staged", MAX_BYTES))) == ["todo.txt"]


def test_a_workspace_below_the_top_reviews_its_own_files_relative_to_it(branched: Path) -> None:
    found = review.review_diff(branched / "lib", "main...feature", MAX_BYTES)
    assert [f.path for f in found.files] == ["helpers.py"]


def test_bad_ranges_are_the_callers_error(branched: Path, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    cases = {
        "nope...feature": "unknown revision 'nope'",
        "main..nope": "unknown revision 'nope'",
        "deadbeef": "unknown revision 'deadbeef'",
        "--output=/tmp/x": "unknown revision '--output=/tmp/x'",  # never an option of git's
        "HEAD..HEAD": "nothing to review",
        "staged": "nothing to review",
        "working_tree": "nothing to review",
    }
    for given, message in cases.items():
        with pytest.raises(BadInput) as raised:
            review.review_diff(branched, given, MAX_BYTES)
        assert message in raised.value.message, given
    with pytest.raises(BadInput) as raised:
        review.review_diff(tmp_path / "plain", "working_tree", MAX_BYTES)
    assert "not" in raised.value.message and "git working tree" in raised.value.message


def test_the_cut_keeps_whole_files_in_order_and_names_what_it_left_out() -> None:
    small = review.FileDiff("a.py", "diff --git a/a.py b/a.py\n+x\n", 1)
    big = review.FileDiff("big.py", "diff --git a/big.py b/big.py\n" + "+" + "y" * 4000 + "\n", 1)
    tabs = review.FileDiff("t.go", "diff --git a/t.go b/t.go\n+\t\t\tx\n", 1)
    budget = estimated_tokens(small.text) + estimated_tokens(tabs.text.replace("\t", "\u21e5")) + 2
    kept, left = review.cut([small, big, tabs], budget)
    assert [f.path for f in kept] == ["a.py", "t.go"]  # a later smaller file still goes in
    assert [(i.path, i.reason, i.returned_chars) for i in left] == [("big.py", "message_limit", 0)]
    assert left[0].size_bytes == len(big.text)
    kept, left = review.cut([small, big, tabs], budget - 2)  # tabs count as Kimi Code's marks
    assert [f.path for f in kept] == ["a.py"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("./a.py", "a.py"),
        ("a.py", "a.py"),
        ("{ws}/src/b.py", "src/b.py"),
        ("/elsewhere/c.py", "/elsewhere/c.py"),
    ],
)
def test_a_findings_path_is_made_relative_to_the_workspace(tmp_path: Path, given: str, expected: str) -> None:
    assert review.workspace_path(tmp_path, given.format(ws=tmp_path)) == expected


def test_the_answer_maps_severities_and_verdicts_and_needs_a_verdict() -> None:
    text = json.dumps(
        {
            "verdict": "Changes requested",
            "summary": "two problems",
            "findings": [
                {"file": "a.py:3", "severity": "HIGH", "title": "off by one", "detail": "d", "fix": "use <="},
                {"path": "b.py", "line": "L7", "severity": "nitpick", "title": "naming"},
                {"file": "c.py", "severity": "weird", "description": "unclear"},
                {"title": "no file given"},
            ],
        }
    )
    parsed, _ = answers.parse_answer(text, answers.ReviewAnswer)
    assert parsed is not None and parsed.verdict == "request_changes" and parsed.summary == "two problems"
    found = [(f.file, f.line, f.severity, f.suggestion) for f in parsed.findings]
    assert found == [("a.py", 3, "major", "use <="), ("b.py", 7, "nit", ""), ("c.py", None, "minor", "")]
    for verdict, expected in (("LGTM", "approve"), ("comment", "comment"), ("approved", "approve")):
        parsed, _ = answers.parse_answer(json.dumps({"verdict": verdict}), answers.ReviewAnswer)
        assert parsed is not None and parsed.verdict == expected
    assert answers.parse_answer('{"verdict": "maybe"}', answers.ReviewAnswer)[0] is None
    assert answers.parse_answer('{"summary": "no verdict"}', answers.ReviewAnswer)[0] is None


def spec(**arguments: object) -> JobSpec:
    reviewed_ = {"range": "main...feature", "commits": 2, "files": 2, "insertions": 3, "deletions": 1}
    return JobSpec(
        tool="kimi_review", prompt="p", workspace="/w", read_only=True,
        arguments={"range": "main...feature", "reviewed": reviewed_, "diff_files": ["a.py", "lib/b.py"]}
        | arguments,
    )  # fmt: skip


def test_the_finishing_step_keeps_findings_on_the_diffs_files_and_says_what_it_dropped(
    tmp_path: Path,
) -> None:
    answer = {
        "verdict": "request_changes",
        "summary": "s",
        "findings": [
            {"file": "./a.py", "line": 2, "severity": "critical", "title": "kept", "detail": "d"},
            {"file": str(tmp_path / "lib/b.py"), "title": "kept too", "detail": "d"},
            {"file": "other.py", "line": 1, "title": "outside", "detail": "d"},
        ],
    }
    base = TaskResult(success=True, output="prose\n```json\n" + json.dumps(answer) + "\n```")
    left = [{"path": "big.py", "reason": "message_limit", "size_bytes": 9000, "returned_chars": 0}]
    result = reviewed(spec(left_out=left), base, tmp_path, Settings())
    assert result.parse_ok and result.verdict == "request_changes" and result.summary == "s"
    assert [(f.file, f.title) for f in result.findings] == [("a.py", "kept"), ("lib/b.py", "kept too")]
    assert result.notes == ["1 finding(s) on files outside the reviewed diff dropped: other.py: outside"]
    assert result.reviewed is not None and result.reviewed.commits == 2
    assert [(t.path, t.reason) for t in result.truncated] == [("big.py", "message_limit")]


def test_an_answer_that_does_not_parse_keeps_the_prose_as_summary(tmp_path: Path) -> None:
    result = reviewed(spec(), TaskResult(success=True, output="looks fine to me"), tmp_path, Settings())
    assert (result.parse_ok, result.verdict, result.summary, result.findings) == (
        False, None, "looks fine to me", [],
    )  # fmt: skip


def test_a_repository_without_commits_reviews_against_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    (repo / "b.txt").write_text("b\n")
    assert [f.path for f in review.review_diff(repo, "working_tree", MAX_BYTES).files] == ["a.txt", "b.txt"]
    assert [f.path for f in review.review_diff(repo, "staged", MAX_BYTES).files] == ["a.txt"]
    with pytest.raises(BadInput, match="unknown revision 'HEAD'"):
        review.review_diff(repo, "HEAD", MAX_BYTES)
