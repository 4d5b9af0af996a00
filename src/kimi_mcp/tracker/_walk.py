"""The per-directory comparison of ``diff`` (``DiffWalk``), shared by the watched diff and the full walk.

One directory at a time is compared with its snapshot records; the full walk's forked helper runs it too.
"""

from __future__ import annotations

import dataclasses
import os
import stat as stat_mod
from dataclasses import dataclass, field

from ._fs import UNTRACKABLE, ident, open_dir
from ._ignore import IgnoreRules, chain_ignores
from ._model import Changes, TrackerOptions, excluded_dirs
from ._records import NO_FILES, Files, Tree
from ._snapshot import Snapshot

__all__ = ["DiffWalk", "Findings"]

"""Skip listing a directory whose (mtime, ctime, inode) are those recorded at snapshot time: creating,
deleting or renaming an entry always updates the directory's mtime and ctime on POSIX filesystems (git's
untracked cache relies on the same rule). Known files in it are still lstat'ed one by one."""

_S_ISDIR = stat_mod.S_ISDIR


@dataclass(slots=True)
class Findings:
    """What a walk found so far, in plain lists (a forked helper sends them back with ``marshal``)."""

    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)  # snapshot directories that were walked again
    unreadable: list[str] = field(default_factory=list)  # directories we may not read: files not reported
    linked: list[str] = field(default_factory=list)  # changed or new files with other names (see track_links)

    def lists(self) -> tuple[list[str], ...]:
        """Every list, in field order."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def merge(self, lists: tuple[list[str], ...]) -> None:
        """Add another walk's ``lists()``."""
        for mine, theirs in zip(self.lists(), lists, strict=True):
            mine.extend(theirs)


@dataclass(slots=True, eq=False)
class DiffWalk:
    """The "after" walk of ``diff`` over some subtrees of ``tree``; findings accumulate in ``found``.

    ``track_links`` (watched diffs): note changed or new files with other hard links, which the watcher may
    not have seen written."""

    tree: Tree
    root: str
    rules: IgnoreRules
    excluded: frozenset[str]
    track_links: bool = False
    trust_dir_stat: bool = True
    found: Findings = field(default_factory=Findings)

    @classmethod
    def start(cls, before: Snapshot, options: TrackerOptions, *, track_links: bool = False) -> DiffWalk:
        """A walker comparing the tree with ``before``, with no findings yet."""
        root = os.fspath(before.root)
        tree = before.tree
        rules = IgnoreRules(root, enabled=options.respect_gitignore, spec_cache=tree.spec_cache)
        return cls(tree, root, rules, excluded_dirs(options), track_links, options.trust_dir_stat)

    def fresh(self) -> DiffWalk:
        """A walker sharing this one's configuration, with no findings."""
        return dataclasses.replace(self, found=Findings())

    def walk(self, stack: list[str]) -> None:
        """Scan the directories on ``stack`` and every subdirectory they lead to."""
        while stack:
            self.scan(stack.pop(), stack)

    def scan(self, rel: str, stack: list[str]) -> None:
        """Compare one directory with its snapshot record; push the subdirectories to walk onto ``stack``."""
        record = self.tree.dirs.get(rel)
        # Read before the directory is opened: a failure to read the records must not pass for "gone".
        old = self.tree.load(rel, record) if record is not None else None
        try:
            dir_fd = open_dir(self.root, rel)
        except PermissionError:
            self.found.unreadable.append(rel)
            return
        except OSError:  # gone, or replaced by a file/symlink: its files count as deleted
            return
        try:
            stat = record.stat if record is not None and self.trust_dir_stat else None
            if old is not None and stat is not None and _same_dir(dir_fd, stat):
                self._scan_unchanged_dir(dir_fd, rel, old, stack)
            else:
                self._scan_listing(dir_fd, rel, old or NO_FILES, stack)
        except PermissionError:
            self.found.unreadable.append(rel)
            return
        except OSError:
            return
        finally:
            os.close(dir_fd)
        if old is not None:
            self.found.visited.append(rel)

    def _scan_unchanged_dir(self, dir_fd: int, rel: str, old: Files, stack: list[str]) -> None:
        """Same entries as at snapshot time (the directory's mtime/ctime/inode did not move): lstat the known
        files by name instead of listing the directory. Hot loop: once per file of an unchanged tree."""
        stats = iter(old.stats)
        lstat = os.lstat
        deleted = self.found.deleted
        for j, (name, size, mtime, ctime, ino) in enumerate(
            zip(old.names, stats, stats, stats, old.inodes, strict=True)
        ):
            try:
                st = lstat(name, dir_fd=dir_fd)
            except FileNotFoundError:  # removed after we looked at the directory
                deleted.append(_join(rel, name))
                continue
            except OSError:
                continue
            if (
                size != st.st_size or mtime != st.st_mtime_ns or ctime != st.st_ctime_ns or ino != st.st_ino
            ) and not self._changed(dir_fd, rel, name, st, old.ident(j), stack):
                deleted.append(_join(rel, name))
        excluded = self.excluded
        prefix = rel + "/" if rel else ""
        stack.extend(prefix + name for name in old.subdirs if name not in excluded)

    def _scan_listing(self, dir_fd: int, rel: str, old: Files, stack: list[str]) -> None:
        """List the directory: new entries, vanished files, changed files (``old`` is ``NO_FILES`` if new)."""
        names = old.names
        slot_of = {name: j for j, name in enumerate(names)}
        stats, inodes = old.stats, old.inodes
        seen = bytearray(len(names))
        with os.scandir(dir_fd) as it:
            for entry in it:
                name = entry.name
                j = slot_of.get(name)
                try:
                    if j is None:
                        self._unknown_entry(entry, rel, name, old, stack)
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:  # cannot tell: not reported
                    if j is not None:
                        seen[j] = 1
                    continue
                k = 3 * j
                if (
                    stats[k] != st.st_size
                    or stats[k + 1] != st.st_mtime_ns
                    or stats[k + 2] != st.st_ctime_ns
                    or inodes[j] != st.st_ino
                ) and not self._changed(dir_fd, rel, name, st, old.ident(j), stack):
                    continue  # no longer a file: deleted
                seen[j] = 1
        if seen.count(0):
            self.found.deleted.extend(_join(rel, name) for j, name in enumerate(names) if not seen[j])

    def _changed(
        self, dir_fd: int, rel: str, name: str, st: os.stat_result, old_ident: int | None, stack: list[str]
    ) -> bool:
        """A known file's stat moved: compare contents. False if it is no longer a file or symlink (the
        caller reports it deleted); a directory in its place is walked as a new one."""
        now = ident(dir_fd, name, st)
        if now is UNTRACKABLE:
            if _S_ISDIR(st.st_mode) and name not in self.excluded and not self._ignored(rel, name, True):
                stack.append(_join(rel, name))
            return False
        if now is None or old_ident is None or now != old_ident:
            self.found.modified.append(_join(rel, name))
        if self.track_links and st.st_nlink > 1 and rel not in self.tree.rescan:
            self.found.linked.append(_join(rel, name))  # linked since the snapshot
        return True

    def _unknown_entry(
        self, entry: os.DirEntry[str], rel: str, name: str, old: Files, stack: list[str]
    ) -> None:
        """An entry that was not a tracked file: a directory, a new file or a known-ignored file."""
        if entry.is_dir(follow_symlinks=False):
            if name in self.excluded or name in old.ign_dirs:
                return
            if name in old.subdirs or not self._ignored(rel, name, True):
                stack.append(_join(rel, name))
            return
        if name in old.ign_files or name == ".git":
            return
        if (entry.is_file(follow_symlinks=False) or entry.is_symlink()) and not self._ignored(
            rel, name, False
        ):
            self.found.created.append(_join(rel, name))
            if self.track_links and _has_other_names(entry):
                self.found.linked.append(_join(rel, name))

    def _ignored(self, rel: str, name: str, is_dir: bool) -> bool:
        chain = self.rules.chain_for(rel)
        return bool(chain) and chain_ignores(chain, _join(rel, name), is_dir)

    def finish(self) -> Changes:
        """Add the files of snapshot directories that were not walked again, and sort."""
        found = self.found
        visited = set(found.visited)
        for rel, old in self.tree.dirs.items():
            if rel in visited or not old.count or _under_any(rel, found.unreadable):
                continue
            found.deleted.extend(_join(rel, name) for name in self.tree.load(rel, old).names)
        return Changes(sorted(set(found.created)), sorted(set(found.modified)), sorted(set(found.deleted)))


def _has_other_names(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_nlink > 1
    except OSError:
        return True  # cannot tell


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _same_dir(dir_fd: int, recorded: tuple[int, int, int]) -> bool:
    st = os.fstat(dir_fd)
    return recorded == (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _under_any(rel: str, prefixes: list[str]) -> bool:
    return any(not p or rel == p or rel.startswith(p + "/") for p in prefixes)
