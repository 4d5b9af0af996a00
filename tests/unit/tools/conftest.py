"""Fixtures the tool-layer tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_helpers import committed_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a committed file, an uncommitted edit to it and an untracked file."""
    repo = committed_repo(tmp_path / "repo", {"app.py": "one\ntwo\nthree\nfour\nfive\n"})
    (repo / "app.py").write_text("ONE\ntwo\nthree\nfour\nfive\n")  # uncommitted
    (repo / "notes.txt").write_text("untracked\n")
    return repo
