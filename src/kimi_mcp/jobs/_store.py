"""The job store: one SQLite row per job (tool, arguments, workspace, session, status, times, result).

A job outlives the tool call that started it, and may outlive its server: a finished job's whole result is
kept here, so ``kimi_job`` still returns it after a restart. Two kimi-mcp servers (two Claude Code windows)
share one store file (its WAL mode, busy timeout and schema versions: ``_database``). Each server sees the
other's jobs, but only a job's *owner* (:func:`owner_id`, the pid plus the process start time, so a reused
pid is not mistaken for the old server) runs it; another server asks it to stop through
``cancel_requested``, which the owner polls. A job whose owner died is marked ``interrupted`` by the next
server that starts (:meth:`JobStore.interrupt_orphans`), never left ``running`` forever.

The store is never the only copy of anything the user owns: files live in the workspace, the store holds
results and each job's spec, what it runs as data (arguments and spec arrive with secrets already masked).
JSON is stored as text. The result is the last column, so listing jobs never reads its overflow pages.
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

from ._spending import Spending

STATUSES: frozenset[str] = frozenset(
    {"done", "running", "starting", "queued", "waiting", "failed", "cancelled", "interrupted"}
)
FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled", "interrupted"})
UNFINISHED: frozenset[str] = STATUSES - FINISHED

STORE_FILE = "jobs.sqlite3"  # the file's name inside the state directory
REMOTE_GRACE_S = (
    86_400.0  # how long a dead server's job on a worker waits to be adopted (Docket keeps it a day)
)
INTERRUPTED_MESSAGE = "the kimi-mcp server running this job stopped before it finished"
INTERRUPTED_SUGGESTION = (
    "Continue the conversation with kimi_continue(session_id, ...) if it has a session_id, "
    "or start the task again."
)

_HAVE_PROC = os.path.exists("/proc/self/stat")

# Every column but the cancel flag, the screen and the result, in JobRecord's order.
_COLUMNS = (
    "job_id, tool, workspace, read_only, status, session_id, arguments, owner, started_at, finished_at, "
    "summary, progress, tokens, model, copy, question, job_group"
)
_REF_COLUMNS = "job_id, status, owner, session_id, copy, COALESCE(finished_at, started_at)"
_NEWEST_FIRST = "ORDER BY started_at DESC, rowid DESC"
_IN_FINISHED = "IN ({})".format(", ".join(f"'{s}'" for s in sorted(FINISHED)))
_IN_UNFINISHED = "IN ({})".format(", ".join(f"'{s}'" for s in sorted(UNFINISHED)))


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as stored."""

    job_id: str  # "job_" + 16 hex characters
    tool: str  # e.g. "kimi_code_task", "kimi_continue"
    workspace: str
    read_only: bool
    status: str  # a JobStatus
    session_id: str | None
    arguments: dict[str, Any]  # secrets already masked by the caller
    owner: str  # the server that runs the job (owner_id())
    started_at: float  # unix time
    finished_at: float | None
    summary: str  # one line
    progress: dict[str, Any] | None  # while running
    result: dict[str, Any] | None  # the whole result once finished; None from JobStore.list()
    cancel_requested: bool
    tokens: int = 0  # input + output tokens spent (so far, while it runs)
    model: str | None = None  # the model alias Kimi ran with
    copy: str | None = None  # its isolated copy (worktree.id), if any
    question: dict[str, Any] | None = None  # what it waits on (status "waiting")
    group: str | None = None  # the caller's group of jobs (kimi_wait, kimi_jobs and cancel take it)

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish, or so far while unfinished (to 0.1 s)."""
        end = time.time() if self.finished_at is None else self.finished_at
        return round(max(0.0, end - self.started_at), 1)


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a job holds outside its row: its Kimi session and its isolated copy (``copy``: the
    ``worktree.id`` of its result; a copy is named after the job that made it), with its status, owner
    and when it ended (or started, while unfinished or if no end was recorded)."""

    job_id: str
    status: str
    owner: str
    session_id: str | None
    copy: str | None
    ended_at: float


def owner_id() -> str:
    """This process as a job owner: ``"<pid>:<start time in clock ticks>"``."""
    pid = os.getpid()
    return f"{pid}:{_start_ticks(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process named by :func:`owner_id`'s string still runs: the pid exists and started at the
    recorded time (a reused pid does not count). Anything malformed is not alive."""
    pid_text, sep, ticks_text = owner.partition(":")
    if not (sep and pid_text.isdigit() and ticks_text.isdigit()) or int(pid_text) <= 0:
        return False
    ticks = _start_ticks(int(pid_text))
    return ticks is not None and ticks == int(ticks_text)


def _start_ticks(pid: int) -> int | None:
    """A process's start time (``/proc/<pid>/stat`` field 22, clock ticks after boot); None if it is gone
    or a zombie (it will run nothing more)."""
    if not _HAVE_PROC:
        return _start_ticks_psutil(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2 (the command name) may hold spaces and parentheses: count fields after its last ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":  # fields[0] is field 3 (the state), fields[19] field 22
        return None
    return int(fields[19])


def _start_ticks_psutil(pid: int) -> int | None:
    """The same without ``/proc`` (macOS, BSD): psutil's creation time in hundredths of a second."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time() * 100)
    except psutil.Error:
        return None


class JobStore(Spending):
    """The jobs of every kimi-mcp server sharing ``path``. Safe to use from many threads."""

    def create(
        self,
        *,
        tool: str,
        workspace: str,
        read_only: bool,
        arguments: dict[str, Any],
        owner: str,
        status: str = "queued",
        session_id: str | None = None,
        summary: str = "",
        spec: dict[str, Any] | None = None,
        group: str | None = None,
    ) -> JobRecord:
        """Record a new, unfinished job and return it (``spec``: its work as data, ``JobSpec.to_dict()``;
        ``group``: the caller's group it belongs to)."""
        _check_status(status, UNFINISHED)
        record = JobRecord(
            job_id="job_" + secrets.token_hex(8),
            tool=tool,
            workspace=workspace,
            read_only=read_only,
            status=status,
            session_id=session_id,
            arguments=arguments,
            owner=owner,
            started_at=time.time(),
            finished_at=None,
            summary=_one_line(summary),
            progress=None,
            result=None,
            cancel_requested=False,
            group=group,
        )
        values = (*_row_values(record), None if spec is None else _dumps(spec))
        self._execute(
            f"INSERT INTO jobs ({_COLUMNS}, spec, cancel_requested) VALUES ({', '.join('?' * len(values))}, 0)",
            values,
        )
        return record

    def update(
        self,
        job_id: str,
        *,
        status: str | None = None,
        session_id: str | None = None,
        progress: dict[str, Any] | None = None,
        summary: str | None = None,
        tokens: int | None = None,
        question: dict[str, Any] | None | EllipsisType = ...,
        screen: str | None = None,
    ) -> None:
        """Change only the given fields of an unfinished job (a finished or unknown job is left alone, so a
        late progress report cannot touch a finished one; ``question=None`` clears the question, ``...``
        leaves it). Finishing is :meth:`finish`'s."""
        fields: dict[str, Any] = {}
        if status is not None:
            _check_status(status, UNFINISHED)
            fields["status"] = status
        if session_id is not None:
            fields["session_id"] = session_id
        if progress is not None:
            fields["progress"] = _dumps(progress)
        if summary is not None:
            fields["summary"] = _one_line(summary)
        if tokens is not None:
            fields["tokens"] = int(tokens)
        if question is not ...:
            fields["question"] = None if question is None else _dumps(question)
        if screen is not None:
            fields["screen"] = screen
        if fields:
            assignments = ", ".join(f"{name} = ?" for name in fields)
            self._execute(
                f"UPDATE jobs SET {assignments} WHERE job_id = ? AND finished_at IS NULL",
                (*fields.values(), job_id),
            )

    def finish(
        self, job_id: str, *, status: str, result: dict[str, Any], summary: str, session_id: str | None = None
    ) -> None:
        """Record a job's end: its finished status, whole result and summary, and what the other columns
        take from the result (tokens, model, copy); clears its progress, question and screen."""
        _check_status(status, FINISHED)
        usage = result.get("usage") or {}
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        copy = (result.get("worktree") or {}).get("id")
        self._execute(
            "UPDATE jobs SET status = ?, result = ?, summary = ?, session_id = COALESCE(?, session_id), "
            "finished_at = ?, progress = NULL, question = NULL, screen = NULL, tokens = MAX(tokens, ?), "
            "model = COALESCE(?, model), copy = COALESCE(?, copy) WHERE job_id = ?",
            (status, _dumps(result), _one_line(summary), session_id, time.time(), tokens, result.get("model"),
             copy, job_id),
        )  # fmt: skip

    def screen(self, job_id: str) -> tuple[str, str | None] | None:
        """(status, the masked screen its owner published last) of a job, or None if it is unknown."""
        rows = self._query("SELECT status, screen FROM jobs WHERE job_id = ?", (job_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    # -- what is sent to a running job, for its owner -------------------------------------------------
    def send(self, job_id: str, kind: str, payload: dict[str, Any]) -> None:
        """Leave an answer or a message for an unfinished job (its owner takes it at its next tick)."""
        with self._write() as conn:
            running = conn.execute(
                "SELECT 1 FROM jobs WHERE job_id = ? AND finished_at IS NULL", (job_id,)
            ).fetchone()
            if running:
                conn.execute(
                    "INSERT INTO control (job_id, kind, payload, created_at) VALUES (?, ?, ?, ?)",
                    (job_id, kind, _dumps(payload), time.time()),
                )

    def take_sent(self, job_id: str) -> builtins.list[tuple[str, dict[str, Any]]]:
        """What was left for ``job_id`` and not taken yet, oldest first (taken now: never twice). The owner
        asks every tick: a plain read answers when nothing was left, without taking the write lock."""
        unread = "SELECT id, kind, payload FROM control WHERE job_id = ? AND taken_at IS NULL ORDER BY id"
        if not self._query(unread, (job_id,)):
            return []
        with self._write() as conn:
            rows = conn.execute(unread, (job_id,)).fetchall()
            if rows:
                marks = ", ".join("?" * len(rows))
                conn.execute(
                    f"UPDATE control SET taken_at = ? WHERE id IN ({marks})",
                    (time.time(), *(r[0] for r in rows)),
                )
        return [(kind, json.loads(payload)) for _id, kind, payload in rows]

    def spec(self, job_id: str) -> dict[str, Any] | None:
        """The job's spec as recorded (``JobSpec.to_dict()``, masked), or None (unknown, or older than specs)."""
        rows = self._query("SELECT spec FROM jobs WHERE job_id = ?", (job_id,))
        return json.loads(rows[0][0]) if rows and rows[0][0] is not None else None

    def get(self, job_id: str) -> JobRecord | None:
        """One job with its result, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS}, cancel_requested, result FROM jobs WHERE job_id = ?", (job_id,)
        )
        return _record(rows[0]) if rows else None

    def list(
        self,
        *,
        limit: int = 20,
        status: str | None = None,
        workspace: str | None = None,
        group: str | None = None,
        within: Sequence[str] = (),
    ) -> list[JobRecord]:
        """The newest ``limit`` jobs, optionally of one status, workspace and/or group, and only in the
        folders ``within`` (a client's roots) if any are given; ``result`` is None."""
        where, params = [], []
        if group is not None:
            where.append("job_group = ?")
            params.append(group)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if workspace is not None:
            where.append("workspace = ?")
            params.append(workspace)
        if within:
            inside = "workspace = ? OR substr(workspace, 1, length(?)) = ?"  # the root, or a folder in it
            where.append("(" + " OR ".join(inside for _ in within) + ")")
            for root in within:
                below = root.rstrip("/") + "/"
                params += [root, below, below]
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._query(
            f"SELECT {_COLUMNS}, cancel_requested, NULL FROM jobs {clause}{_NEWEST_FIRST} LIMIT ?",
            (*params, max(0, limit)),
        )
        return [_record(row) for row in rows]

    def latest_for_session(self, session_id: str) -> JobRecord | None:
        """The newest job of a Kimi session, with its result, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS}, cancel_requested, result FROM jobs WHERE session_id = ? {_NEWEST_FIRST} LIMIT 1",
            (session_id,),
        )
        return _record(rows[0]) if rows else None

    def request_cancel(self, job_id: str) -> None:
        """Ask a job's owner (maybe another server, which polls :meth:`cancel_requested`) to cancel it."""
        self._execute(
            "UPDATE jobs SET cancel_requested = 1 WHERE job_id = ? AND finished_at IS NULL", (job_id,)
        )

    def cancel_requested(self, job_id: str) -> bool:
        rows = self._query("SELECT cancel_requested FROM jobs WHERE job_id = ?", (job_id,))
        return bool(rows and rows[0][0])

    def interrupt_orphans(self, is_alive: Callable[[str], bool] = owner_alive) -> builtins.list[str]:
        """Mark every running or queued job whose owner is gone ``interrupted`` (with a session error
        result naming its session); returns their ids. Each owner is checked once. A job its server sent to
        a worker (``spec.executor`` "remote") is left for a server with the broker to adopt
        (:meth:`adopt`) for ``REMOTE_GRACE_S`` after it started: the worker may still be running it."""
        rows = self._query(
            f"SELECT job_id, owner, session_id, workspace FROM jobs WHERE status {_IN_UNFINISHED} AND NOT "
            "(COALESCE(json_extract(spec, '$.executor'), '') = 'remote' AND started_at > ?)",
            (time.time() - REMOTE_GRACE_S,),
        )
        alive = {owner: is_alive(owner) for owner in {row[1] for row in rows}}
        orphans = [row for row in rows if not alive[row[1]]]
        interrupted: builtins.list[str] = []
        if not orphans:
            return interrupted
        now = time.time()
        with self._write() as conn:
            for job_id, owner, session_id, workspace in orphans:
                changed = conn.execute(
                    "UPDATE jobs SET status = 'interrupted', finished_at = ?, result = ?, progress = NULL, "
                    "question = NULL, screen = NULL "
                    f"WHERE job_id = ? AND owner = ? AND status {_IN_UNFINISHED}",
                    (now, _dumps(_interrupted_result(job_id, session_id, workspace)), job_id, owner),
                ).rowcount
                if changed:  # another server starting at the same time may have got there first
                    interrupted.append(job_id)
        return interrupted

    def orphans(self, is_alive: Callable[[str], bool] = owner_alive) -> builtins.list[JobRecord]:
        """The unfinished jobs whose owner is gone (before :meth:`interrupt_orphans` or :meth:`adopt`)."""
        rows = self._query(
            f"SELECT {_COLUMNS}, cancel_requested, NULL FROM jobs WHERE status {_IN_UNFINISHED}"
        )
        records = [_record(row) for row in rows]
        alive = {owner: is_alive(owner) for owner in {r.owner for r in records}}
        return [r for r in records if not alive[r.owner]]

    def adopt(self, job_id: str, previous: str, owner: str) -> bool:
        """Make ``owner`` the owner of an unfinished job ``previous`` owned; False if another server got
        there first (or the job finished meanwhile)."""
        return bool(
            self._execute(
                f"UPDATE jobs SET owner = ? WHERE job_id = ? AND owner = ? AND status {_IN_UNFINISHED}",
                (owner, job_id, previous),
            )
        )

    def prune(self, ttl_days: float) -> int:
        """Delete finished jobs that ended (or started, if no end was recorded) over ``ttl_days`` ago;
        returns how many."""
        cutoff = time.time() - ttl_days * 86400
        return self._execute(
            f"DELETE FROM jobs WHERE status {_IN_FINISHED} AND COALESCE(finished_at, started_at) < ?",
            (cutoff,),
        )

    def prune_finished(self, ttl_days: float) -> tuple[builtins.list[JobRef], builtins.list[JobRef]]:
        """As :meth:`prune`, returning (the deleted, every job left) as :meth:`delete` does: what the
        deleted jobs held (Kimi sessions) can then go with them."""
        cutoff = time.time() - ttl_days * 86400
        return self.delete(
            ref.job_id for ref in self.refs() if ref.status in FINISHED and ref.ended_at < cutoff
        )

    def refs(self) -> builtins.list[JobRef]:
        """Every job as :class:`JobRef` (what it holds besides its row), oldest first."""
        return [JobRef(*row) for row in self._query(f"SELECT {_REF_COLUMNS} FROM jobs ORDER BY started_at")]

    def delete(self, job_ids: Iterable[str]) -> tuple[builtins.list[JobRef], builtins.list[JobRef]]:
        """Delete these jobs if they are finished; returns (the deleted, every job left), read in the same
        transaction, so a job recorded meanwhile is among those left, never missed."""
        wanted = sorted(set(job_ids))
        with self._write() as conn:
            deleted: builtins.list[JobRef] = []
            for start in range(0, len(wanted), 500):  # SQLite's limit on host parameters is 999 or more
                chunk = wanted[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                where = f"WHERE job_id IN ({marks}) AND status {_IN_FINISHED}"
                deleted += [
                    JobRef(*row) for row in conn.execute(f"SELECT {_REF_COLUMNS} FROM jobs {where}", chunk)
                ]
                conn.execute(f"DELETE FROM jobs {where}", chunk)
            conn.execute(  # what was sent to jobs that are finished or gone
                "DELETE FROM control WHERE taken_at IS NOT NULL "
                "OR job_id NOT IN (SELECT job_id FROM jobs WHERE finished_at IS NULL)"
            )
            left = [JobRef(*row) for row in conn.execute(f"SELECT {_REF_COLUMNS} FROM jobs")]
        return deleted, left


def _check_status(status: str, allowed: frozenset[str]) -> None:
    if status not in allowed:
        raise ValueError(f"job status {status!r} is not one of {sorted(allowed)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def _row_values(record: JobRecord) -> tuple[Any, ...]:
    """``record`` as the values of :data:`_COLUMNS`."""
    return (
        record.job_id,
        record.tool,
        record.workspace,
        int(record.read_only),
        record.status,
        record.session_id,
        _dumps(record.arguments),
        record.owner,
        record.started_at,
        record.finished_at,
        record.summary,
        None if record.progress is None else _dumps(record.progress),
        record.tokens,
        record.model,
        record.copy,
        None if record.question is None else _dumps(record.question),
        record.group,
    )


def _record(row: tuple[Any, ...]) -> JobRecord:
    """A row of ``_COLUMNS, cancel_requested, result`` as a record."""
    (job_id, tool, workspace, read_only, status, session_id, arguments, owner, started_at, finished_at) = row[
        :10
    ]
    summary, progress, tokens, model, copy, question, group, cancel, result = row[10:]
    return JobRecord(
        job_id=job_id,
        tool=tool,
        workspace=workspace,
        read_only=bool(read_only),
        status=status,
        session_id=session_id,
        arguments=json.loads(arguments),
        owner=owner,
        started_at=started_at,
        finished_at=finished_at,
        summary=summary,
        progress=_loads(progress),
        result=_loads(result),
        cancel_requested=bool(cancel),
        tokens=int(tokens or 0),
        model=model,
        copy=copy,
        question=_loads(question),
        group=group,
    )


def _interrupted_result(job_id: str, session_id: str | None, workspace: str) -> dict[str, Any]:
    """What ``kimi_job`` returns for a job whose server died under it."""
    return {
        "success": False,
        "status": "interrupted",
        "job_id": job_id,
        "session_id": session_id,
        "workspace": workspace,
        "error": {
            "type": "session",
            "message": INTERRUPTED_MESSAGE,
            "details": {},
            "suggestion": INTERRUPTED_SUGGESTION,
            "retryable": True,
        },
    }
