"""The user's repository as a copy needs it, found with read-only git commands only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput, WorkspaceError
from ._git import git, lines, split_z

# The user's settings that decide what ``git add`` records from a work tree (line endings, exec bits,
# symlinks, ignore and attribute files); the copy's repository gets the same values.
_CONFIG_KEYS = (
    r"^core\.(autocrlf|eol|safecrlf|filemode|symlinks|ignorecase|precomposeunicode|excludesfile"
    r"|attributesfile|checkstat|trustctime|sparsecheckout)$"
)
_NOT_COPIED = frozenset({"core.sparsecheckout"})  # the copy is always a full checkout
_NOT_A_REPO_HINT = "Run the task with isolation='none', or make the directory a repository (`git init`)."


@dataclass(frozen=True, slots=True)
class UserRepo:
    """Where the user's repository keeps things (absolute paths) and what the copy must mirror."""

    top: Path
    subdir: str
    index: Path
    objects: Path
    exclude: Path
    attributes: Path
    shallow: Path
    object_format: str
    head: str | None
    config: tuple[tuple[str, str], ...]

    @property
    def filemode(self) -> bool:
        """Whether git looks at exec bits in this repository (``core.filemode``, default true)."""
        return self._flag("core.filemode", default=True)

    @property
    def sparse(self) -> bool:
        """Whether the user's checkout is sparse (some index entries are marked skip-worktree)."""
        return self._flag("core.sparsecheckout", default=False)

    @property
    def copied_config(self) -> tuple[tuple[str, str], ...]:
        """The settings the copy's repository gets."""
        return tuple((k, v) for k, v in self.config if k not in _NOT_COPIED)

    def _flag(self, key: str, *, default: bool) -> bool:
        values = [v for k, v in self.config if k == key]
        if not values:
            return default
        return values[-1].lower() in ("true", "yes", "on", "1", "")


def repo_top(workspace: Path, state: Path) -> Path:
    """The top level of the repository an isolated copy of ``workspace`` would copy: a quick check before
    a job starts. BadInput/WorkspaceError exactly where ``create`` would refuse the workspace or ``state``.
    """
    user = locate(workspace, full=False)
    state_outside(user, state)
    return user.top


def state_outside(user: UserRepo, state: Path) -> Path:
    """``state`` resolved; BadInput if it lies inside the repository (or its git directory)."""
    resolved = Path(state).expanduser().resolve()
    for inside in (user.top, user.objects.parent):
        if resolved == inside or resolved.is_relative_to(inside):
            raise BadInput(
                f"the state directory {resolved} is inside the repository {inside}: the isolated copy "
                "would be part of the tree it copies",
                details={"state": str(resolved), "repo": str(user.top)},
                suggestion="Use a state directory outside the repository (the default is under "
                "~/.local/state/kimi-mcp).",
            )
    return resolved


def locate(workspace: Path, *, full: bool = True) -> UserRepo:
    """The repository whose work tree holds ``workspace``; BadInput if it is in none, or a bare one.
    ``full=False`` leaves out HEAD and the settings (one git command instead of three)."""
    workspace = Path(workspace).expanduser()
    if not workspace.is_dir():
        raise WorkspaceError(
            f"the workspace {workspace} is not a directory", details={"work_dir": str(workspace)}
        )
    workspace = workspace.resolve()
    asked = [
        "rev-parse",
        "--is-bare-repository",
        "--is-inside-work-tree",
        "--show-toplevel",
        "--show-object-format",
        *(
            arg
            for p in ("index", "objects", "info/exclude", "info/attributes", "shallow")
            for arg in ("--git-path", p)
        ),
    ]
    done = git(asked, cwd=workspace, ok_codes=range(256))
    out = lines(done.stdout)
    if done.returncode != 0 or len(out) != 9 or out[0] == "true" or out[1] != "true":
        _refuse(workspace, done.stderr.decode("utf-8", "replace").strip())
    top = Path(out[2]).resolve()
    index, objects, exclude, attributes, shallow = (Path(workspace, p).resolve() for p in out[4:9])
    subdir = workspace.relative_to(top).as_posix() if workspace != top else ""
    return UserRepo(
        top=top,
        subdir="" if subdir == "." else subdir,
        index=index,
        objects=objects,
        exclude=exclude,
        attributes=attributes,
        shallow=shallow,
        object_format=out[3],
        head=_head(workspace) if full else None,
        config=_config(workspace) if full else (),
    )


def _refuse(workspace: Path, stderr: str) -> None:
    details = {"work_dir": str(workspace), "git": stderr[-500:]}
    if "not a git repository" in stderr:
        raise BadInput(
            f"isolation='worktree' needs the workspace inside a git repository: {workspace} is not",
            details=details,
            suggestion=_NOT_A_REPO_HINT,
        )
    probe = git(
        ["rev-parse", "--is-bare-repository", "--is-inside-git-dir"], cwd=workspace, ok_codes=range(256)
    )
    answers = lines(probe.stdout)
    if answers[:1] == ["true"]:
        what = "is a bare repository (it has no working tree to copy)"
    elif answers[1:2] == ["true"]:
        what = "is inside a repository's .git directory, not its working tree"
    else:
        what = f"is not usable by git: {stderr or 'git rev-parse failed'}"
    raise BadInput(
        f"isolation='worktree' needs the workspace inside a git working tree: {workspace} {what}",
        details=details,
        suggestion=_NOT_A_REPO_HINT,
    )


def _head(workspace: Path) -> str | None:
    done = git(["rev-parse", "-q", "--verify", "HEAD^{commit}"], cwd=workspace, ok_codes=(0, 1, 128))
    found = lines(done.stdout) if done.returncode == 0 else []
    return found[0] if found else None  # None: no commit yet (unborn HEAD)


def _config(workspace: Path) -> tuple[tuple[str, str], ...]:
    done = git(["config", "-z", "--get-regexp", _CONFIG_KEYS], cwd=workspace, ok_codes=(0, 1))
    pairs = []
    for item in split_z(done.stdout):
        key, _, value = item.partition("\n")
        pairs.append((key.lower(), value))
    return tuple(pairs)


def config_text(pairs: tuple[tuple[str, str], ...]) -> str:
    """``pairs`` (``section.key``, value) as git config file text."""
    out = []
    for key, value in pairs:
        section, _, name = key.rpartition(".")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        out.append(f'[{section}]\n\t{name} = "{escaped}"\n')
    return "".join(out)
