"""Where a task runs and which files it may read: workspace resolution and context files."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from .config import DEFAULT_EXCLUDED_DIRS
from .errors import BadInput, WorkspaceError
from .secrets import is_secret_path


def resolve_workspace(
    work_dir: str | None, roots: list[str], default: str | None, *, allow_home: bool = False
) -> Path:
    """``work_dir`` if given, else the client's first root, else ``KIMI_MCP_WORKSPACE``, else the cwd.

    The filesystem root, the user's home and any directory above the home are refused (Kimi would run
    with every file of the user in reach, and the change list would walk them all); ``allow_home`` lets
    the home itself through, never ``/`` or what lies above the home.
    """
    if work_dir is not None and work_dir.strip():
        raw = os.path.expanduser(work_dir.strip())
        base = roots[0] if roots else (os.path.expanduser(default) if default else os.getcwd())
        candidate = Path(raw if os.path.isabs(raw) else os.path.join(base, raw))
        source = "work_dir"
    elif roots:
        candidate, source = Path(roots[0]), "client root"
    elif default:
        candidate, source = Path(os.path.expanduser(default)), "KIMI_MCP_WORKSPACE"
    else:
        candidate, source = Path.cwd(), "server working directory"
    if not candidate.exists():
        raise WorkspaceError(f"{source} {candidate} does not exist", details={"work_dir": str(candidate)})
    if not candidate.is_dir():
        raise WorkspaceError(f"{source} {candidate} is not a directory", details={"work_dir": str(candidate)})
    resolved = candidate.resolve()
    _refuse_too_wide(resolved, source, allow_home)
    return resolved


def user_home() -> Path:
    """The user's home as the server sees it (``$HOME``, else the password database)."""
    return Path(os.path.expanduser("~")).resolve()


def _refuse_too_wide(resolved: Path, source: str, allow_home: bool) -> None:
    home = user_home()
    if resolved == Path(resolved.anchor):
        what = "the filesystem root"
    elif resolved == home and not allow_home:
        what = "your home directory"
    elif resolved != home and home.is_relative_to(resolved):
        what = "a directory that contains your home directory"
    else:
        return
    raise BadInput(
        f"refusing to use {what} ({resolved}, the {source}) as the workspace: Kimi would run with every "
        "file in it in reach, and the change list would walk all of them",
        details={"work_dir": str(resolved), "source": source},
        suggestion=(
            "Pass the project directory as work_dir (or open the MCP client in the project). "
            + (
                "KIMI_MCP_ALLOW_HOME_WORKSPACE=1 allows the home directory itself."
                if what == "your home directory"
                else "The home directory itself needs KIMI_MCP_ALLOW_HOME_WORKSPACE=1; / and what lies "
                "above the home are never allowed."
            )
        ),
    )


def roots_to_paths(uris: list[str]) -> list[str]:
    """``file://`` root URIs announced by the MCP client, as local paths (others are ignored)."""
    paths = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            paths.append(unquote(parsed.path))
    return paths


@dataclass(frozen=True, slots=True)
class ContextFile:
    path: str  # relative to the workspace, POSIX
    text: str


def safe_relative(workspace: Path, raw: str) -> str:
    """Validate a user-supplied path: inside the workspace, no ``..``, no symlink escape.

    Returns the POSIX path relative to the workspace. Raises BadInput otherwise.
    """
    if not raw or not raw.strip() or "\x00" in raw:
        raise BadInput("empty or invalid path", details={"path": raw})
    given = Path(os.path.expanduser(raw.strip()))
    if ".." in given.parts:
        raise BadInput(f"path {raw!r} contains '..'", details={"path": raw})
    absolute = given if given.is_absolute() else workspace / given
    root = os.path.realpath(workspace)
    real = os.path.realpath(absolute)
    if not (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
        raise BadInput(
            f"path {raw!r} is outside the workspace {workspace}",
            details={"path": raw, "workspace": str(workspace)},
            suggestion="Pass paths inside the workspace (relative to it), or change work_dir.",
        )
    lexical = os.path.normpath(str(absolute))
    if not (lexical == root or lexical.startswith(root.rstrip(os.sep) + os.sep)):
        # e.g. /other/link -> inside: accept only the real location's relative path
        lexical = real
    return Path(os.path.relpath(lexical, root)).as_posix()


def read_context_files(
    workspace: Path,
    paths: list[str],
    max_bytes: int,
    argument: str = "context_files",
    *,
    redacted: list[str] | None = None,
) -> list[ContextFile]:
    """Read the files a caller wants Kimi to see. Every problem is reported at once, clearly, naming the
    ``argument`` the caller passed them in. A secret file is never read: a problem, or with ``redacted``
    given, named there and left out."""
    files: list[ContextFile] = []
    problems: list[str] = []
    seen: set[str] = set()
    for raw in paths:
        try:
            rel = safe_relative(workspace, raw)
        except BadInput as exc:
            problems.append(exc.message)
            continue
        if rel in seen:
            continue
        seen.add(rel)
        full = workspace / rel
        real_rel = Path(os.path.relpath(os.path.realpath(full), os.path.realpath(workspace))).as_posix()
        if (is_secret_path(rel) or is_secret_path(real_rel)) and redacted is not None:
            redacted.append(rel)
            continue
        if is_secret_path(rel) or is_secret_path(real_rel):
            problems.append(f"{rel} looks like a secret (keys, .env, credentials) and is never sent to Kimi")
            continue
        try:
            data = _read_regular(full, max_bytes)
        except OSError as exc:
            problems.append(f"{rel}: {exc.strerror or exc}")
            continue
        if isinstance(data, str):
            problems.append(f"{rel} {data}")
            continue
        if b"\x00" in data[:8192]:
            problems.append(f"{rel} is a binary file")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(f"{rel} is not UTF-8 text")
            continue
        files.append(ContextFile(rel, text))
    if problems:
        raise BadInput(
            f"invalid {argument}: " + "; ".join(problems),
            details={"problems": problems},
            suggestion="Pass existing UTF-8 text files inside the workspace (relative paths), "
            "within KIMI_MCP_MAX_CONTEXT_BYTES.",
        )
    return files


def _read_regular(full: Path, max_bytes: int) -> bytes | str:
    """The bytes of a regular file within ``max_bytes``, or why not (OSError when it cannot be read)."""
    if not full.exists():
        return "does not exist"
    if not full.is_file():
        return "is not a regular file"
    size = full.stat().st_size
    if size > max_bytes:
        return f"is {size} bytes, over the {max_bytes}-byte context file limit"
    return full.read_bytes()


def workspace_overview(workspace: Path, limit: int = 200) -> str:
    """A short listing of the workspace's files (heavy and ignored directories skipped) for prompts."""
    try:
        import pathspec

        gitignore = workspace / ".gitignore"
        spec = (
            pathspec.GitIgnoreSpec.from_lines(
                gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
            )
            if gitignore.is_file()
            else None
        )
    except (OSError, ValueError):
        spec = None
    files: list[str] = []
    more = 0
    for current, dirs, names in os.walk(workspace):
        rel_dir = Path(os.path.relpath(current, workspace))
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in DEFAULT_EXCLUDED_DIRS
            and not (spec and spec.match_file((rel_dir / d).as_posix() + "/"))
        )
        for name in sorted(names):
            rel = (rel_dir / name).as_posix().removeprefix("./")
            if spec and spec.match_file(rel):
                continue
            if len(files) < limit:
                files.append(rel)
            else:
                more += 1
    listing = "\n".join(files)
    return listing + (f"\n… and {more} more files" if more else "")


def inside_prefixes(workspace: Path, dirs: Iterable[Path]) -> tuple[str, ...]:
    """The ``dirs`` that lie inside ``workspace``, as POSIX paths relative to it (for filtering reports)."""
    root = os.path.realpath(workspace)
    found: list[str] = []
    for folder in dirs:
        real = os.path.realpath(os.path.expanduser(str(folder)))
        if real != root and real.startswith(root.rstrip(os.sep) + os.sep):
            found.append(Path(os.path.relpath(real, root)).as_posix())
    return tuple(found)
