"""The job store's SQLite file: created readable by its owner only, opened in WAL mode (readers never block
the writer, the writer never blocks readers) with a busy timeout (two writers wait for each other instead of
failing) and ``synchronous=NORMAL`` (no fsync per commit: a power loss may drop the last jobs' rows, never
corrupt the file); its schema created, or migrated from an older version, on open (``PRAGMA user_version``);
one connection shared by the threads behind a lock, and the transactions :class:`~._store.JobStore`'s
queries run in."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 4  # PRAGMA user_version; each migration steps it

_TABLE = """
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    workspace TEXT NOT NULL,
    read_only INTEGER NOT NULL,
    status TEXT NOT NULL,
    session_id TEXT,
    owner TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    summary TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    progress TEXT,
    tokens INTEGER NOT NULL DEFAULT 0,
    model TEXT,
    copy TEXT,
    question TEXT,
    arguments TEXT NOT NULL,
    screen TEXT,
    job_group TEXT,
    spec TEXT,
    result TEXT
)"""
_INDEXES = """
-- Ascending indexes scanned backwards give "started_at DESC, rowid DESC" with no sort step.
CREATE INDEX IF NOT EXISTS jobs_started ON jobs (started_at);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, started_at);
CREATE INDEX IF NOT EXISTS jobs_workspace ON jobs (workspace, started_at);
CREATE INDEX IF NOT EXISTS jobs_session ON jobs (session_id, started_at);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at);
CREATE INDEX IF NOT EXISTS jobs_group ON jobs (job_group, started_at);
-- What is sent to a running job (answers, messages) for its owner to take: across servers.
CREATE TABLE IF NOT EXISTS control (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    taken_at REAL
);
CREATE INDEX IF NOT EXISTS control_job ON control (job_id, taken_at);
"""
# Version 1 had neither the control table nor the columns tokens, model, copy, question and screen: its
# rows are copied over, with what the new columns hold taken from their results.
_FROM_V1 = """
INSERT INTO jobs (job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at,
    summary, cancel_requested, progress, tokens, model, copy, arguments, result)
SELECT job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at, summary,
    cancel_requested, progress,
    COALESCE(json_extract(result, '$.usage.input_tokens'), 0)
        + COALESCE(json_extract(result, '$.usage.output_tokens'), 0),
    json_extract(result, '$.model'), json_extract(result, '$.worktree.id'), arguments, result
FROM jobs_old
"""
# Version 2 lacked the spec (older jobs keep none).
_FROM_V2 = """
INSERT INTO jobs (job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at,
    summary, cancel_requested, progress, tokens, model, copy, question, arguments, screen, result)
SELECT job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at, summary,
    cancel_requested, progress, tokens, model, copy, question, arguments, screen, result
FROM jobs_old
"""
# Version 3 lacked the group (older jobs belong to none).
_FROM_V3 = """
INSERT INTO jobs (job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at,
    summary, cancel_requested, progress, tokens, model, copy, question, arguments, screen, spec, result)
SELECT job_id, tool, workspace, read_only, status, session_id, owner, started_at, finished_at, summary,
    cancel_requested, progress, tokens, model, copy, question, arguments, screen, spec, result
FROM jobs_old
"""
_MIGRATIONS = {1: _FROM_V1, 2: _FROM_V2, 3: _FROM_V3}  # the version a store has → how its rows move over


class Database:
    """One connection to the store file at ``path``, migrated to :data:`SCHEMA_VERSION`; safe to use from
    many threads."""

    def __init__(self, path: Path, *, busy_timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _create_private(self.path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def _migrate(self) -> None:
        with self._write():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"the job store {self.path} has schema version {version}, newer than this "
                    f"kimi-mcp's {SCHEMA_VERSION}: update kimi-mcp or set another KIMI_MCP_STATE_DIR"
                )
            if version < SCHEMA_VERSION:
                exists = self._conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
                ).fetchone()
                if exists:  # an older version (an empty store has no table yet): copied into the new table
                    self._conn.execute("ALTER TABLE jobs RENAME TO jobs_old")
                self._conn.execute(_TABLE)
                if exists:
                    self._conn.execute(_MIGRATIONS.get(version, _FROM_V1))
                    self._conn.execute("DROP TABLE jobs_old")  # its indexes go with it
                for statement in _INDEXES.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the lock. ``BEGIN IMMEDIATE`` takes the file's write lock at once
        (waiting up to the busy timeout), so a read inside it never has to upgrade and fail as busy."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _execute(self, sql: str, params: tuple[Any, ...]) -> int:
        """One autocommitted statement; returns the rows it changed."""
        with self._lock:
            return self._conn.execute(sql, params).rowcount

    def compact(self) -> None:
        """Give the space of deleted jobs back to the file system (``VACUUM``, then the write-ahead log
        truncated); sqlite3.OperationalError when another server keeps the store busy."""
        with self._lock:
            self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only (SQLite gives its -wal and -shm files the
    same mode); an existing file is left as it is."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)
