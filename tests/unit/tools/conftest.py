"""Fixtures the tool-layer tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_helpers import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a committed file, an uncommitted edit to it and an untracked file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("one\ntwo\nthree\nfour\nfive\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "app.py").write_text("ONE\ntwo\nthree\nfour\nfive\n")  # uncommitted
    (repo / "notes.txt").write_text("untracked\n")
    return repo
