"""What ``kimi_review`` reviews: a git range of the workspace as one unified diff, split by file.

A range is ``"working_tree"`` (every uncommitted change against HEAD, untracked files included),
``"staged"`` (the index against HEAD), one commit (``HEAD``, a sha, a tag: against its first parent) or
``A..B`` / ``A...B`` (``git diff``'s meaning: B against A, or B against its merge base with A; an empty side
is HEAD). Only read-only git commands run, in the workspace, so paths are relative to it and a workspace
below the repository's top reviews only its own files (``--relative``). A secret file's change
(:func:`~kimi_mcp.secrets.is_secret_path`) is named, never read (an untracked one) or kept (a tracked one's
section is dropped). Bad input is the caller's error: not a git repository, an unknown revision (named), a
range with nothing in it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BadInput
from .message import TAB_MARK, estimated_tokens
from .models import TruncatedItem
from .secrets import is_secret_path
from .worktree._git import GitFailed, git, lines, split_z

__all__ = ["FileDiff", "ReviewDiff", "cut", "review_diff"]

WORKING_TREE, STAGED = "working_tree", "staged"
MAX_SUBJECTS = 50  # commit subjects shown to Kimi
_DIFF = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", "--relative"]
_DIFF += ["--src-prefix=a/", "--dst-prefix=b/"]
_SECTION = re.compile(rb"^diff --git ", re.M)
_REVISION = re.compile(r"^[^\s\x00-\x1f\x7f~^:?*\[\\-][^\s\x00-\x1f\x7f]*$")
_HINT = (
    "Pass range='working_tree', 'staged', a commit (HEAD, a sha, a tag) or 'A..B' / 'A...B' of revisions "
    "this repository has (git log --oneline lists them)."
)


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One file's part of the diff (``text``: its ``diff --git`` section; empty for a secret file)."""

    path: str
    text: str
    insertions: int = 0
    deletions: int = 0
    secret: bool = False


@dataclass(slots=True)
class ReviewDiff:
    """A range's change: its files in git's order, the number of commits in it and their subjects."""

    range: str
    files: list[FileDiff]
    commits: int = 0
    subjects: list[str] = field(default_factory=list)

    @property
    def insertions(self) -> int:
        return sum(f.insertions for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions for f in self.files)

    def reviewed(self) -> dict[str, object]:
        """``reviewed`` of the tool's result: the range, its commits, files, insertions and deletions."""
        return {"range": self.range, "commits": self.commits, "files": len(self.files),
                "insertions": self.insertions, "deletions": self.deletions}  # fmt: skip


def review_diff(workspace: Path, range_: str, max_file_bytes: int) -> ReviewDiff:
    """The change ``range_`` names in the repository of ``workspace`` (see the module docstring); an
    untracked file over ``max_file_bytes`` is named with its size, not shown."""
    given = range_.strip()
    _check_repository(workspace)
    if given == WORKING_TREE:
        base = _head(workspace) or _empty_tree(workspace)
        files = _sections(workspace, [base]) + _untracked(workspace, max_file_bytes)
        found = ReviewDiff(given, sorted(files, key=lambda f: f.path))
    elif given == STAGED:
        found = ReviewDiff(given, _sections(workspace, ["--cached"]))
    else:
        found = _revisions(workspace, given)
    if not found.files:
        raise BadInput(
            f"nothing to review: the range {given!r} has no changes in {workspace}",
            details={"range": given, "workspace": str(workspace)},
            suggestion=_HINT,
        )
    return found


def cut(files: list[FileDiff], budget_tokens: int) -> tuple[list[FileDiff], list[TruncatedItem]]:
    """The files whose sections fit in ``budget_tokens`` together (whole files, in order; one that does not
    fit is left out and later smaller ones still go in), and what was left out. Tokens are counted as Kimi
    counts them, a tab as the mark Kimi Code gets instead (the dearer dialect)."""
    kept: list[FileDiff] = []
    left: list[TruncatedItem] = []
    spent = 0
    for item in files:
        cost = estimated_tokens(item.text.replace("\t", TAB_MARK)) + 1  # and the newline joining it
        if spent + cost <= budget_tokens:
            kept.append(item)
            spent += cost
        else:
            size = len(item.text.encode("utf-8", "replace"))
            left.append(
                TruncatedItem(path=item.path, reason="message_limit", size_bytes=size, returned_chars=0)
            )
    return kept, left


# -- the repository and its revisions ----------------------------------------------------------------
def _check_repository(workspace: Path) -> None:
    done = git(["rev-parse", "--is-inside-work-tree"], cwd=workspace, ok_codes=range(256))
    if done.returncode != 0 or lines(done.stdout) != ["true"]:
        raise BadInput(
            f"kimi_review needs the workspace inside a git working tree: {workspace} is not",
            details={"work_dir": str(workspace), "git": done.stderr.decode("utf-8", "replace")[-500:]},
            suggestion="Pass the repository (or a directory in it) as work_dir; kimi_analyze_code reviews "
            "files outside git.",
        )


def _head(workspace: Path) -> str | None:
    done = git(["rev-parse", "-q", "--verify", "HEAD^{commit}"], cwd=workspace, ok_codes=range(256))
    return lines(done.stdout)[0] if done.returncode == 0 and done.stdout.strip() else None


def _empty_tree(workspace: Path) -> str:
    return lines(git(["hash-object", "-t", "tree", "--stdin"], cwd=workspace, stdin=b"").stdout)[0]


def _commit(workspace: Path, revision: str) -> str:
    """The commit ``revision`` names; BadInput naming it when there is none."""
    if _REVISION.match(revision):
        done = git(
            ["rev-parse", "-q", "--verify", f"{revision}^{{commit}}"], cwd=workspace, ok_codes=range(256)
        )
        if done.returncode == 0 and done.stdout.strip():
            return lines(done.stdout)[0]
    raise BadInput(
        f"unknown revision {revision!r}: no commit of this repository has that name",
        details={"revision": revision},
        suggestion=_HINT,
    )


def _revisions(workspace: Path, given: str) -> ReviewDiff:
    """A commit against its first parent, or ``A..B`` / ``A...B``."""
    dots = "..." if "..." in given else ".." if ".." in given else ""
    if not dots:
        commit = _commit(workspace, given)
        parent = git(["rev-parse", "-q", "--verify", f"{commit}^1"], cwd=workspace, ok_codes=range(256))
        base = lines(parent.stdout)[0] if parent.returncode == 0 and parent.stdout.strip() else None
        found = ReviewDiff(given, _sections(workspace, [base or _empty_tree(workspace), commit]), 1)
        found.subjects = _subjects(workspace, [commit, "-n", "1"])
        return found
    left, _, right = given.partition(dots)
    start, end = _commit(workspace, left or "HEAD"), _commit(workspace, right or "HEAD")
    if dots == "...":
        bases = git(["merge-base", start, end], cwd=workspace, ok_codes=range(256))
        if bases.returncode != 0 or not bases.stdout.strip():
            raise BadInput(
                f"{left or 'HEAD'} and {right or 'HEAD'} have no common ancestor", suggestion=_HINT
            )
        start = lines(bases.stdout)[0]
    count = git(["rev-list", "--count", f"{start}..{end}"], cwd=workspace).stdout
    found = ReviewDiff(given, _sections(workspace, [start, end]), int(count.strip() or 0))
    found.subjects = _subjects(workspace, [f"{start}..{end}", "-n", str(MAX_SUBJECTS)])
    return found


def _subjects(workspace: Path, args: list[str]) -> list[str]:
    return lines(git(["log", "--no-color", "--format=%h %s", *args], cwd=workspace).stdout)


# -- the diff, by file --------------------------------------------------------------------------------
def _sections(workspace: Path, args: list[str]) -> list[FileDiff]:
    try:
        out = git([*_DIFF, *args, "--", "."], cwd=workspace).stdout
    except GitFailed as exc:
        raise BadInput(f"git cannot diff {' '.join(args)}: {exc.stderr[-500:]}", suggestion=_HINT) from exc
    starts = [m.start() for m in _SECTION.finditer(out)]
    return [_file_diff(out[a:b]) for a, b in zip(starts, [*starts[1:], len(out)][: len(starts)], strict=True)]


def _file_diff(section: bytes) -> FileDiff:
    """One file's section; a secret file's keeps only its counts (an untracked one is never read at all)."""
    text = section.decode("utf-8", "replace")
    head, _, _ = text.partition("\n@@")
    path, old = _section_paths(head)
    added = removed = 0
    for line in text.split("\n")[len(head.split("\n")) :]:
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    secret = is_secret_path(path) or (old is not None and is_secret_path(old))
    return FileDiff(
        path=path, text="" if secret else text, insertions=added, deletions=removed, secret=secret
    )


def _section_paths(head: str) -> tuple[str, str | None]:
    """(the file's path, its old path when renamed) from a section's header lines."""
    new = old = None
    for line in head.split("\n"):
        if line.startswith("rename to "):
            new = line[len("rename to ") :]
        elif line.startswith("rename from "):
            old = line[len("rename from ") :]
        elif line.startswith("+++ b/") and new is None:
            new = line[len("+++ b/") :]
        elif line.startswith("--- a/") and new is None and old is None:
            old = line[len("--- a/") :]
    if new is None and old is None:  # a mode change or a binary file: "diff --git a/P b/P"
        rest = head.split("\n", 1)[0][len("diff --git ") :]
        half = (len(rest) - 5) // 2
        new = rest[2 : 2 + half] if rest == f"a/{rest[2 : 2 + half]} b/{rest[2 : 2 + half]}" else rest
    if new is None:  # deleted
        return old or "", None
    return new, old if old != new else None


def _untracked(workspace: Path, max_file_bytes: int) -> list[FileDiff]:
    """Untracked files that are not ignored, as "new file" sections (a secret one only named)."""
    listed = git(["ls-files", "--others", "--exclude-standard", "-z", "--", "."], cwd=workspace).stdout
    return [_new_file(workspace, path, max_file_bytes) for path in split_z(listed)]


def _new_file(workspace: Path, path: str, max_file_bytes: int) -> FileDiff:
    if is_secret_path(path):
        return FileDiff(path=path, text="", secret=True)
    full = workspace / path
    header = f"diff --git a/{path} b/{path}\nnew file mode 100644\n"
    if full.is_symlink() or not full.is_file():
        return FileDiff(path=path, text=header + "(not a regular file: not shown)\n")
    size = full.stat().st_size
    if size > max_file_bytes:
        return FileDiff(
            path=path, text=header + f"({size} bytes, over KIMI_MCP_MAX_CONTEXT_BYTES: not shown)\n"
        )
    data = full.read_bytes()
    if b"\x00" in data[:8192]:
        return FileDiff(path=path, text=header + f"Binary files /dev/null and b/{path} differ\n")
    body = data.decode("utf-8", "replace").split("\n")
    if body and body[-1] == "":
        body.pop()
    hunk = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(body)} @@\n" if body else ""
    text = header + hunk + "".join(f"+{line}\n" for line in body)
    return FileDiff(path=path, text=text, insertions=len(body))


def workspace_path(workspace: Path, path: str) -> str:
    """``path`` (as a model may write it: ``./x``, ``a/x``, ``b/x`` or absolute) relative to the workspace."""
    text = path.strip().replace("\\", "/")
    if os.path.isabs(text):
        try:
            return Path(text).resolve().relative_to(workspace.resolve()).as_posix()
        except ValueError:
            return text
    return text.removeprefix("./")
