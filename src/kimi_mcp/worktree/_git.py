"""Running git: a clean environment, closed stdin, a timeout, and errors as ``KimiMCPError``s.

Every git process of this package goes through :func:`git`. It never inherits ``GIT_DIR``,
``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ``GIT_OBJECT_DIRECTORY`` or any other ``GIT_*`` variable of the
server's environment (a server started from a git hook would otherwise point every command at the hook's
repository); the repository, work tree and index are always named explicitly by the caller.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import BadInput, WorkspaceError

GIT_TIMEOUT_S = 300.0
_STDERR_TAIL = 2000

# Settings for every command: no fsmonitor daemon bound to a copy (it would outlive the call), no hooks,
# no automatic gc or maintenance, readable UTF-8 paths in patches, no advice on stderr.
_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.quotePath=false",
    "advice.addEmbeddedRepo=false",
    "advice.detachedHead=false",
)


def git_binary() -> str:
    """The git executable on PATH; BadInput if there is none."""
    found = shutil.which("git")
    if found is None:
        raise BadInput(
            "git is needed for isolation='worktree' but is not installed (not found on PATH)",
            suggestion="Install git, or run the task with isolation='none'.",
        )
    return found


def scrubbed_env() -> dict[str, str]:
    """The server's environment without any ``GIT_*`` variable, and git never prompting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``scrubbed_env()`` plus the fixed settings of this package's git commands and ``extra``."""
    env = scrubbed_env()
    env.update(
        GIT_OPTIONAL_LOCKS="0",  # read-only commands never refresh (rewrite) an index on the side
        GIT_LFS_SKIP_SMUDGE="1",  # copies get LFS pointers: there is no LFS store to smudge from
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    index: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    ok_codes: Sequence[int] = (0,),
    timeout: float = GIT_TIMEOUT_S,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command and return it (stdout/stderr as bytes).

    ``git_dir``/``work_tree`` become ``--git-dir``/``--work-tree``, ``index`` becomes ``GIT_INDEX_FILE``.
    An exit code outside ``ok_codes`` or a timeout raises WorkspaceError with the command's stderr.
    """
    proc = start_git(
        args, cwd=cwd, git_dir=git_dir, work_tree=work_tree, index=index, env=env, stdin=stdin is not None
    )
    return finish_git(proc, args, cwd=cwd, stdin=stdin, ok_codes=ok_codes, timeout=timeout)


def start_git(
    args: Sequence[str],
    *,
    cwd: Path,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    index: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a git command (see :func:`git`) without waiting for it; :func:`finish_git` collects it."""
    argv = [git_binary()]
    for setting in _CONFIG:
        argv += ["-c", setting]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    argv += list(args)
    extra = dict(env or {})
    if index is not None:
        extra["GIT_INDEX_FILE"] = str(index)
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=git_env(extra),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:  # cwd vanished, or git since which()
        raise WorkspaceError(f"cannot run git in {cwd}: {exc.strerror}", details={"cwd": str(cwd)}) from exc


def finish_git(
    proc: subprocess.Popen[bytes],
    args: Sequence[str],
    *,
    cwd: Path,
    stdin: bytes | None = None,
    ok_codes: Sequence[int] = (0,),
    timeout: float = GIT_TIMEOUT_S,
) -> subprocess.CompletedProcess[bytes]:
    """Wait for a started git command (killing it after ``timeout``); errors as in :func:`git`."""
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise WorkspaceError(
            f"git {args[0]} took longer than {timeout:.0f}s and was stopped",
            details={"command": ["git", *args], "cwd": str(cwd)},
            suggestion="The repository may be very large or on a slow disk; retry, or use isolation='none'.",
            retryable=True,
        ) from exc
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if done.returncode not in ok_codes:
        raise GitFailed(args, cwd, done)
    return done


class GitFailed(WorkspaceError):
    """A git command exited with an unexpected code; ``details`` has the command and stderr tail."""

    def __init__(self, args: Sequence[str], cwd: Path, done: subprocess.CompletedProcess[bytes]) -> None:
        self.stderr = done.stderr.decode("utf-8", "replace").strip()
        self.returncode = done.returncode
        super().__init__(
            f"git {args[0]} failed (exit {done.returncode}): {self.stderr[-_STDERR_TAIL:] or 'no message'}",
            details={"command": ["git", *args], "cwd": str(cwd), "exit_code": done.returncode},
            suggestion="Check the repository with `git status` and `git fsck`; the message above is git's.",
        )


def lines(out: bytes) -> list[str]:
    """Decoded, non-empty output lines (paths keep undecodable bytes as surrogates)."""
    return [os.fsdecode(line) for line in out.splitlines() if line]


def split_z(out: bytes) -> list[str]:
    """The fields of ``-z`` output, decoded like file names."""
    fields = out.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    return [os.fsdecode(field) for field in fields]


def blob_id(data: bytes, object_format: str) -> str:
    """The object id git gives a blob with these bytes (without writing it anywhere)."""
    digest = hashlib.new("sha256" if object_format == "sha256" else "sha1")
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()
