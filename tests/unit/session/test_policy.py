"""Unit tests for kimi_mcp.session._policy: what lies inside the workspace and which tool calls are approved."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_mcp.session._policy import ApprovalPolicy, is_inside


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    (path / "src").mkdir(parents=True)
    return path


# --------------------------------------------------------------------------------------------- is_inside


@pytest.mark.parametrize("target", ["a.txt", "src/a.py", "./src/../src/a.py", "new/dir/file.txt", "."])
def test_relative_targets_inside(ws: Path, target: str) -> None:
    assert is_inside(ws, target) is True


def test_absolute_target_inside(ws: Path) -> None:
    assert is_inside(ws, str(ws / "src" / "a.py")) is True
    assert is_inside(ws, str(ws)) is True


@pytest.mark.parametrize("target", ["../x.txt", "src/../../x.txt", "..", "/etc/passwd", "/"])
def test_targets_outside(ws: Path, target: str) -> None:
    assert is_inside(ws, target) is False


def test_sibling_with_common_prefix_is_outside(ws: Path) -> None:
    assert is_inside(ws, str(ws.parent / (ws.name + "2") / "x")) is False


def test_symlinked_dir_pointing_outside_counts_as_outside(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside, target_is_directory=True)
    assert is_inside(ws, "link/new.txt") is False
    assert is_inside(ws, str(ws / "link" / "new.txt")) is False


def test_symlinked_file_pointing_outside_counts_as_outside(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "victim.txt").write_text("x")
    (ws / "innocent.txt").symlink_to(tmp_path / "victim.txt")
    assert is_inside(ws, "innocent.txt") is False


def test_nonexistent_target_inside_is_inside(ws: Path) -> None:
    assert not (ws / "does" / "not" / "exist.txt").exists()
    assert is_inside(ws, "does/not/exist.txt") is True


def test_workspace_given_through_symlink(ws: Path, tmp_path: Path) -> None:
    link = tmp_path / "wslink"
    link.symlink_to(ws, target_is_directory=True)
    assert is_inside(link, "a.txt") is True
    assert is_inside(link, str(ws / "a.txt")) is True  # real path of the same place
    assert is_inside(link, str(link / "a.txt")) is True
    assert is_inside(link, str(tmp_path / "other.txt")) is False


def test_tilde_target_is_outside(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert is_inside(ws, "~/.bashrc") is False


# ---------------------------------------------------------------------------------------- ApprovalPolicy


def test_unrecognised_request_is_rejected(ws: Path) -> None:
    for read_only in (True, False):
        approve, reason = ApprovalPolicy(ws, read_only=read_only).decide(None, [])
        assert approve is False
        assert reason


@pytest.mark.parametrize("read_only", [True, False])
def test_read_tools_are_always_approved(ws: Path, read_only: bool) -> None:
    approve, _ = ApprovalPolicy(ws, read_only=read_only, allow_shell=False).decide("read", [])
    assert approve is True


@pytest.mark.parametrize("kind", ["edit", "shell", "other"])
def test_read_only_task_rejects_everything_but_reads(ws: Path, kind: str) -> None:
    approve, reason = ApprovalPolicy(ws, read_only=True).decide(kind, ["a.txt"])  # type: ignore[arg-type]
    assert approve is False
    assert "read-only" in reason


def test_write_task_approves_edit_inside(ws: Path) -> None:
    policy = ApprovalPolicy(ws, read_only=False)
    assert policy.decide("edit", ["src/a.py"])[0] is True
    assert policy.decide("edit", [str(ws / "new.txt")])[0] is True


def test_write_task_rejects_edit_without_target(ws: Path) -> None:
    approve, reason = ApprovalPolicy(ws, read_only=False).decide("edit", [])
    assert approve is False
    assert "path" in reason


def test_write_task_rejects_edit_with_any_target_outside(ws: Path, tmp_path: Path) -> None:
    outside = str(tmp_path / "evil.txt")
    approve, reason = ApprovalPolicy(ws, read_only=False).decide("edit", ["src/ok.py", outside])
    assert approve is False
    assert outside in reason
    assert "src/ok.py" not in reason


def test_write_task_rejects_edit_through_escaping_symlink(ws: Path, tmp_path: Path) -> None:
    (ws / "out").symlink_to(tmp_path, target_is_directory=True)
    assert ApprovalPolicy(ws, read_only=False).decide("edit", ["out/x.txt"])[0] is False


def test_write_task_rejects_dotdot_edit(ws: Path) -> None:
    assert ApprovalPolicy(ws, read_only=False).decide("edit", ["../x.txt"])[0] is False


def test_shell_approved_when_allowed(ws: Path) -> None:
    assert ApprovalPolicy(ws, read_only=False, allow_shell=True).decide("shell", [])[0] is True


def test_shell_rejected_when_disabled(ws: Path) -> None:
    approve, reason = ApprovalPolicy(ws, read_only=False, allow_shell=False).decide("shell", [])
    assert approve is False
    assert "shell" in reason


def test_allow_shell_defaults_to_true(ws: Path) -> None:
    assert ApprovalPolicy(ws, read_only=False).allow_shell is True


def test_other_tools_approved_in_write_tasks(ws: Path) -> None:
    assert ApprovalPolicy(ws, read_only=False, allow_shell=False).decide("other", [])[0] is True


def test_write_task_rejects_tilde_edit(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    approve, _ = ApprovalPolicy(ws, read_only=False).decide("edit", ["~/.bashrc"])
    assert approve is False
