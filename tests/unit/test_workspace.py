"""Unit tests for kimi_mcp.workspace: workspace resolution, root URIs, safe paths and context files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimi_mcp.errors import BadInput, WorkspaceError
from kimi_mcp.workspace import (
    ContextFile,
    read_context_files,
    resolve_workspace,
    roots_to_paths,
    safe_relative,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


def make_dirs(base: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = base / name
        path.mkdir(parents=True)
        paths.append(path.resolve())
    return paths


# ------------------------------------------------------------------------------------- resolve_workspace


def test_work_dir_wins_over_roots_and_default(tmp_path: Path) -> None:
    work, root, default = make_dirs(tmp_path, "work", "root", "default")
    assert resolve_workspace(str(work), [str(root)], str(default)) == work


def test_first_root_wins_over_default(tmp_path: Path) -> None:
    root1, root2, default = make_dirs(tmp_path, "root1", "root2", "default")
    assert resolve_workspace(None, [str(root1), str(root2)], str(default)) == root1


def test_blank_work_dir_is_treated_as_absent(tmp_path: Path) -> None:
    (root,) = make_dirs(tmp_path, "root")
    assert resolve_workspace("   ", [str(root)], None) == root
    assert resolve_workspace("", [str(root)], None) == root


def test_default_used_when_no_work_dir_or_roots(tmp_path: Path) -> None:
    (default,) = make_dirs(tmp_path, "default")
    assert resolve_workspace(None, [], str(default)) == default


def test_default_expands_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (proj,) = make_dirs(tmp_path, "home/proj")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_workspace(None, [], "~/proj") == proj


def test_cwd_is_the_last_resort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (cwd,) = make_dirs(tmp_path, "cwd")
    monkeypatch.chdir(cwd)
    assert resolve_workspace(None, [], None) == cwd


def test_relative_work_dir_is_resolved_against_first_root(tmp_path: Path) -> None:
    root, other = make_dirs(tmp_path, "root", "other")
    (sub,) = make_dirs(root, "pkg/sub")
    make_dirs(other, "pkg/sub")
    assert resolve_workspace("pkg/sub", [str(root), str(other)], None) == sub


def test_relative_work_dir_without_roots_uses_default(tmp_path: Path) -> None:
    (default,) = make_dirs(tmp_path, "default")
    (sub,) = make_dirs(default, "sub")
    assert resolve_workspace("sub", [], str(default)) == sub


def test_relative_work_dir_without_roots_or_default_uses_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (cwd,) = make_dirs(tmp_path, "cwd")
    (sub,) = make_dirs(cwd, "sub")
    monkeypatch.chdir(cwd)
    assert resolve_workspace("sub", [], None) == sub


def test_relative_work_dir_with_tilde_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (sub,) = make_dirs(tmp_path, "home/proj/sub")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert resolve_workspace("sub", [], "~/proj") == sub


def test_work_dir_expands_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (proj,) = make_dirs(tmp_path, "home/proj")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_workspace("~/proj", [], None) == proj


def test_result_is_resolved_through_symlinks(tmp_path: Path) -> None:
    (real,) = make_dirs(tmp_path, "real")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert resolve_workspace(str(link), [], None) == real


def test_missing_work_dir_is_filesystem_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(WorkspaceError) as info:
        resolve_workspace(str(missing), [], None)
    assert info.value.type == "filesystem"
    assert "does not exist" in info.value.message
    assert info.value.details["work_dir"] == str(missing)


def test_missing_root_is_filesystem_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError) as info:
        resolve_workspace(None, [str(tmp_path / "gone")], None)
    assert info.value.type == "filesystem"


def test_missing_default_is_filesystem_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="does not exist"):
        resolve_workspace(None, [], str(tmp_path / "gone"))


def test_file_instead_of_directory_is_filesystem_error(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(WorkspaceError) as info:
        resolve_workspace(str(file), [], None)
    assert info.value.type == "filesystem"
    assert "not a directory" in info.value.message


def test_filesystem_root_is_refused_as_bad_input() -> None:
    with pytest.raises(BadInput) as info:
        resolve_workspace("/", [], None)
    assert info.value.type == "bad_input"
    assert "filesystem root" in info.value.message
    with pytest.raises(BadInput):  # the opt-in for the home never lets / through
        resolve_workspace("/", [], None, allow_home=True)


def test_root_uri_of_filesystem_root_is_refused() -> None:
    with pytest.raises(BadInput):
        resolve_workspace(None, roots_to_paths(["file:///"]), None)


def test_symlink_to_filesystem_root_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "slash"
    link.symlink_to("/", target_is_directory=True)
    with pytest.raises(BadInput):
        resolve_workspace(str(link), [], None)


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "users" / "me"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize("how", ["work_dir", "tilde", "root", "default", "cwd"])
def test_home_directory_is_refused_from_every_source(
    fake_home: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.chdir(fake_home)
    args = {
        "work_dir": (str(fake_home), [], None),
        "tilde": ("~", [], None),
        "root": (None, [str(fake_home)], None),
        "default": (None, [], "~"),
        "cwd": (None, [], None),
    }[how]
    with pytest.raises(BadInput) as info:
        resolve_workspace(*args)
    assert "home directory" in info.value.message
    assert "KIMI_MCP_ALLOW_HOME_WORKSPACE" in info.value.suggestion


def test_home_directory_is_allowed_with_the_opt_in(fake_home: Path) -> None:
    assert resolve_workspace(str(fake_home), [], None, allow_home=True) == fake_home.resolve()


def test_a_directory_above_the_home_is_always_refused(fake_home: Path) -> None:
    for above in (fake_home.parent, fake_home.parent.parent):
        with pytest.raises(BadInput, match="contains your home"):
            resolve_workspace(str(above), [], None, allow_home=True)


def test_a_project_inside_the_home_and_a_sibling_of_it_are_fine(fake_home: Path) -> None:
    assert resolve_workspace("~/proj", [], None) == (fake_home / "proj").resolve()
    sibling = fake_home.parent / "other"
    sibling.mkdir()
    assert resolve_workspace(str(sibling), [], None) == sibling.resolve()


# ---------------------------------------------------------------------------------------- roots_to_paths


def test_roots_to_paths_decodes_file_uris_and_ignores_others() -> None:
    uris = [
        "file:///home/user/my%20project",
        "https://example.com/repo",
        "file:///tmp/caf%C3%A9",
        "git+ssh://host/repo",
        "file://localhost/srv/app",
    ]
    assert roots_to_paths(uris) == ["/home/user/my project", "/tmp/café", "/srv/app"]


def test_roots_to_paths_empty() -> None:
    assert roots_to_paths([]) == []


def test_roots_to_paths_result_usable_as_workspace(tmp_path: Path) -> None:
    (spaced,) = make_dirs(tmp_path, "with space")
    uri = "file://" + str(spaced).replace(" ", "%20")
    assert resolve_workspace(None, roots_to_paths([uri]), None) == spaced


# ----------------------------------------------------------------------------------------- safe_relative


def test_safe_relative_plain_relative(ws: Path) -> None:
    assert safe_relative(ws, "src/app.py") == "src/app.py"
    assert safe_relative(ws, "./src/app.py") == "src/app.py"
    assert safe_relative(ws, "  notes.md  ") == "notes.md"


def test_safe_relative_accepts_absolute_inside(ws: Path) -> None:
    assert safe_relative(ws, str(ws / "a" / "b.txt")) == "a/b.txt"


@pytest.mark.parametrize("raw", ["../x", "a/../../x", "a/../b", ".."])
def test_safe_relative_rejects_dotdot(ws: Path, raw: str) -> None:
    with pytest.raises(BadInput) as info:
        safe_relative(ws, raw)
    assert info.value.type == "bad_input"
    assert ".." in info.value.message


def test_safe_relative_rejects_absolute_outside(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    with pytest.raises(BadInput, match="outside the workspace"):
        safe_relative(ws, str(outside))
    with pytest.raises(BadInput):
        safe_relative(ws, "/etc/passwd")


def test_safe_relative_rejects_sibling_with_common_prefix(ws: Path) -> None:
    sibling = ws.parent / (ws.name + "-evil")
    sibling.mkdir()
    with pytest.raises(BadInput):
        safe_relative(ws, str(sibling / "x.txt"))


def test_safe_relative_rejects_symlink_escaping(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (ws / "escape").symlink_to(outside, target_is_directory=True)
    (ws / "file_link").symlink_to(outside / "secret.txt")
    with pytest.raises(BadInput, match="outside"):
        safe_relative(ws, "escape/secret.txt")
    with pytest.raises(BadInput, match="outside"):
        safe_relative(ws, "file_link")


def test_safe_relative_accepts_symlink_staying_inside(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "alias").symlink_to(ws / "real", target_is_directory=True)
    assert safe_relative(ws, "alias/f.txt") == "alias/f.txt"


def test_safe_relative_with_symlinked_workspace(tmp_path: Path, ws: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(ws, target_is_directory=True)
    assert safe_relative(link, "a.txt") == "a.txt"
    assert safe_relative(link, str(link / "a.txt")) == "a.txt"


@pytest.mark.parametrize("raw", ["", "   ", "a\x00b"])
def test_safe_relative_rejects_empty_or_nul(ws: Path, raw: str) -> None:
    with pytest.raises(BadInput):
        safe_relative(ws, raw)


# ------------------------------------------------------------------------------------ read_context_files


def test_read_context_files_reads_text_and_dedups(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("print('a')\n", encoding="utf-8")
    (ws / "notes.md").write_text("héllo ✓\n", encoding="utf-8")
    files = read_context_files(
        ws, ["src/a.py", "notes.md", "./src/a.py", str(ws / "src" / "a.py")], max_bytes=1000
    )
    assert files == [ContextFile("src/a.py", "print('a')\n"), ContextFile("notes.md", "héllo ✓\n")]


def test_read_context_files_empty_list(ws: Path) -> None:
    assert read_context_files(ws, [], max_bytes=10) == []


def test_read_context_files_file_exactly_at_limit_is_accepted(ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"x" * 10)
    assert read_context_files(ws, ["f.txt"], max_bytes=10) == [ContextFile("f.txt", "x" * 10)]


def test_read_context_files_reports_every_problem_at_once(ws: Path, tmp_path: Path) -> None:
    secret_value = "MOONSHOT_API_KEY=sk-super-secret-value-123"
    (ws / ".env").write_text(secret_value + "\n", encoding="utf-8")
    (ws / "adir").mkdir()
    (ws / "blob.bin").write_bytes(b"abc\x00def")
    (ws / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (ws / "big.txt").write_bytes(b"y" * 101)
    (ws / "ok.txt").write_text("fine", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("out")

    with pytest.raises(BadInput) as info:
        read_context_files(
            ws,
            [
                "ok.txt",
                "missing.txt",
                "adir",
                ".env",
                "blob.bin",
                "latin1.txt",
                "big.txt",
                "../outside.txt",
                str(tmp_path / "outside.txt"),
            ],
            max_bytes=100,
        )
    err = info.value
    assert err.type == "bad_input"
    message = err.message
    problems = err.details["problems"]
    assert len(problems) == 8
    for expected in ["missing.txt", "adir", ".env", "blob.bin", "latin1.txt", "big.txt", "outside.txt"]:
        assert expected in message
    assert "does not exist" in message
    assert "not a regular file" in message
    assert "secret" in message
    assert "binary" in message
    assert "not UTF-8" in message
    assert "101 bytes" in message
    assert "100-byte" in message
    assert "'..'" in message
    assert "outside the workspace" in message
    assert "ok.txt" not in message  # the good file is not a problem
    # the secret's contents never appear anywhere in the error
    everything = " ".join([str(err), err.message, err.suggestion, repr(err.details)])
    assert "sk-super-secret-value-123" not in everything


@pytest.mark.parametrize("name", [".env", ".env.local", "id_rsa", "server.pem", "credentials.json"])
def test_read_context_files_refuses_secret_files(ws: Path, name: str) -> None:
    (ws / name).write_text("TOPSECRET-abc", encoding="utf-8")
    with pytest.raises(BadInput) as info:
        read_context_files(ws, [name], max_bytes=1000)
    assert "secret" in info.value.message
    assert "TOPSECRET-abc" not in info.value.message


def test_read_context_files_redacts_secret_files_when_asked_and_never_reads_them(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.py").write_text("x = 1\n", encoding="utf-8")
    (ws / ".env").write_text("TOPSECRET-abc", encoding="utf-8")
    (ws / "alias.txt").symlink_to(ws / ".env")
    read: list[str] = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self.name) or original(self))
    redacted: list[str] = []
    files = read_context_files(ws, [".env", "a.py", "alias.txt"], max_bytes=1000, redacted=redacted)
    assert files == [ContextFile("a.py", "x = 1\n")] and redacted == [".env", "alias.txt"]
    assert read == ["a.py"]


def test_read_context_files_env_example_is_allowed(ws: Path) -> None:
    (ws / ".env.example").write_text("KEY=\n", encoding="utf-8")
    assert read_context_files(ws, [".env.example"], max_bytes=1000) == [ContextFile(".env.example", "KEY=\n")]


def test_read_context_files_oversized_is_not_read(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"z" * 50)
    with pytest.raises(BadInput, match="50 bytes"):
        read_context_files(ws, ["big.txt"], max_bytes=49)


def test_read_context_files_symlink_outside_is_refused(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "host.txt").write_text("host data")
    os.symlink(tmp_path / "host.txt", ws / "link.txt")
    with pytest.raises(BadInput, match="outside"):
        read_context_files(ws, ["link.txt"], max_bytes=1000)


def test_read_context_files_symlink_alias_to_secret_is_refused(ws: Path) -> None:
    (ws / ".env").write_text("MOONSHOT_API_KEY=sk-alias-secret\n", encoding="utf-8")
    (ws / "notes.txt").symlink_to(ws / ".env")
    with pytest.raises(BadInput) as info:
        read_context_files(ws, ["notes.txt"], max_bytes=1000)
    assert "sk-alias-secret" not in info.value.message
