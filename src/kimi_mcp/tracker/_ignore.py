"""Git-ignore rules as the tracker applies them (excluded directory names: ``config.DEFAULT_EXCLUDED_DIRS``).

Git-ignore semantics follow git itself: ``.git/info/exclude`` has the lowest precedence, then the root
``.gitignore``, then nested ``.gitignore`` files, each relative to its own directory; the deepest file with a
matching pattern decides (so ``!`` negations in a deeper file re-include). Ignored directories are pruned by
the walker, so, as in git, nothing below an ignored directory can be re-included. ``core.excludesFile`` and
``.gitignore`` files above the root are not consulted, and a ``.gitignore`` that is a symlink is not read
(git does not follow it either).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pathspec import GitIgnoreSpec

__all__ = [
    "Chain",
    "IgnoreRules",
    "chain_ignores",
    "compile_gitignore",
    "read_small_file",
]

GITIGNORE = ".gitignore"
_MAX_IGNORE_FILE = 4 * 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

# ---------------------------------------------------------------------------------------------- gitignore

Chain = tuple[tuple[int, GitIgnoreSpec], ...]
"""Specs that apply inside one directory, deepest first: ``(prefix_len, spec)``; ``relpath[prefix_len:]``
is the path relative to the directory holding that ignore file."""


def read_small_file(path: str, dir_fd: int | None = None) -> bytes | None:
    """Contents of a regular, non-symlink file (at most 4 MiB), or None if absent/unreadable."""
    try:
        fd = os.open(path, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        # size the buffer to the file: os.read allocates what it is asked for, per ignore file
        want = min(os.fstat(fd).st_size + 1, _MAX_IGNORE_FILE)
        data = os.read(fd, want)
        while len(data) < _MAX_IGNORE_FILE and (
            more := os.read(fd, min(65536, _MAX_IGNORE_FILE - len(data)))
        ):
            data += more  # the file grew since fstat
        return data
    except OSError:  # e.g. EISDIR when ".gitignore" is a directory
        return None
    finally:
        os.close(fd)


def compile_gitignore(data: bytes) -> GitIgnoreSpec | None:
    """Compile ignore-file contents; None if it has no effective pattern."""
    lines = data.decode("utf-8", errors="surrogateescape").splitlines()
    spec = GitIgnoreSpec.from_lines(lines)
    if not any(pattern.include is not None for pattern in spec.patterns):
        return None
    return spec


def chain_ignores(chain: Chain, relpath: str, is_dir: bool) -> bool:
    """Whether ``relpath`` (POSIX, relative to the root) is ignored by ``chain``."""
    for prefix_len, spec in chain:
        sub = relpath[prefix_len:]
        include = spec.check_file(sub + "/" if is_dir else sub, ()).include
        if include is not None:
            return include
    return False


class IgnoreRules:
    """Git-ignore rules of one root, resolved lazily per directory and memoised.

    ``chain_for(dir_rel)`` reads ``<dir>/.gitignore`` the first time that directory is asked about; the
    parent's chain is resolved first. Compiled specs are shared by content via ``spec_cache`` so a later
    walk (the "after" side of a diff) does not recompile unchanged files.
    """

    __slots__ = ("root", "enabled", "spec_cache", "_chains")

    def __init__(
        self,
        root: Path | str,
        *,
        enabled: bool = True,
        spec_cache: Mapping[bytes, GitIgnoreSpec | None] | None = None,
    ) -> None:
        self.root = os.fspath(root)
        self.enabled = enabled
        self.spec_cache: dict[bytes, GitIgnoreSpec | None] = dict(spec_cache or {})
        self._chains: dict[str, Chain] = {}

    def _spec(self, data: bytes | None) -> GitIgnoreSpec | None:
        if not data:
            return None
        try:
            return self.spec_cache[data]
        except KeyError:
            spec = self.spec_cache[data] = compile_gitignore(data)
            return spec

    def _root_chain(self) -> Chain:
        chain: Chain = ()
        git_dir = os.path.join(self.root, ".git")
        if os.path.isdir(git_dir) and not os.path.islink(git_dir):
            exclude = self._spec(read_small_file(os.path.join(git_dir, "info", "exclude")))
            if exclude is not None:
                chain = ((0, exclude),)
        spec = self._spec(read_small_file(os.path.join(self.root, GITIGNORE)))
        return chain if spec is None else ((0, spec), *chain)

    def chain_for(self, dir_rel: str) -> Chain:
        """The chain that applies to entries directly inside ``dir_rel`` ("" = root)."""
        chain = self._chains.get(dir_rel)
        if chain is not None:
            return chain
        pending = [dir_rel]  # iterative: trees can be deeper than the recursion limit
        while pending[-1] and (parent := pending[-1].rpartition("/")[0]) not in self._chains:
            pending.append(parent)
        for rel in reversed(pending):
            self._chains[rel] = self._compute(rel)
        return self._chains[dir_rel]

    def _compute(self, dir_rel: str) -> Chain:
        if not self.enabled:
            return ()
        if not dir_rel:
            return self._root_chain()
        parent = self._chains[dir_rel.rpartition("/")[0]]
        spec = self._spec(read_small_file(os.path.join(self.root, dir_rel, GITIGNORE)))
        return parent if spec is None else ((len(dir_rel) + 1, spec), *parent)

    def is_ignored(self, relpath: str, is_dir: bool) -> bool:
        """Full check of one path: ignored itself or below an ignored directory (excluded dirs aside)."""
        parts = relpath.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            parent = "/".join(parts[: depth - 1])
            last = depth == len(parts)
            if chain_ignores(self.chain_for(parent), sub, is_dir or not last):
                return True
        return False
