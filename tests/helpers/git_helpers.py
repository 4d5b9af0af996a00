"""git for tests: a fixed identity, no user or system config, and never refreshing a repository's index (a
test that compares a repository before and after must not change it by looking)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_AUTHOR_DATE="@1700000000 +0000",
        GIT_COMMITTER_DATE="@1700000000 +0000",
    )
    return env


def git(cwd: Path, *args: str) -> str:
    """Run git (read-only commands with --no-optional-locks, so they never refresh the index)."""
    done = subprocess.run(
        ["git", "--no-optional-locks", *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"git {args} failed: {done.stderr}"
    return done.stdout


def committed_repo(repo: Path, files: dict[str, str]) -> Path:
    """``repo`` (made if missing) as a git repository whose first commit holds ``files`` (name → text)."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo
