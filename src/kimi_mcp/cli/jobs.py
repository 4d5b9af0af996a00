"""``kimi-mcp jobs``: the recent jobs of the job store (every kimi-mcp server's), newest first, as a table
for a person (or ``--json``): id, status, tool, workspace, tokens spent, age, and what a waiting job asks
(``? <question>``) or else its one-line summary, each line fitted to the terminal's width.

A running job whose server died is recorded as interrupted first, as ``kimi_jobs`` does. Exit status 0;
1 with a one-line error on stderr when the job store cannot be opened or read; a store that does not exist
yet is "no jobs yet" (and is not created).

Imported to build ``--help``: nothing heavy at module level; ``run`` imports what it needs. The store
helpers here (:func:`store_path`, :func:`open_store`, :func:`fail`) serve ``kimi-mcp watch`` too; the text
helpers are ``job_text``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..job_text import STATUSES, human_age, human_tokens, printable, short_path

if TYPE_CHECKING:
    from ..jobs import JobRecord, JobStore

MIN_TEXT_WIDTH = 12  # the question or summary gets at least this much, even on a narrow terminal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kimi-mcp jobs``."""
    parser.add_argument("--limit", type=_positive, default=20, metavar="N", help="how many jobs (default 20)")
    parser.add_argument("--status", choices=STATUSES, help="only jobs with this status")
    parser.add_argument("--workspace", metavar="DIR", help="only jobs in this workspace")
    parser.add_argument("--json", action="store_true", help="one JSON list of the jobs instead of a table")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return n


def run(args: argparse.Namespace) -> int:
    """List the jobs ``args`` select: 0, or 1 (a one-line error on stderr) if the store cannot be read."""
    import sqlite3

    path, env = store_path()
    if not path.exists():
        return _emit("[]" if args.json else f"no jobs yet (store {path})")
    workspace = str(Path(args.workspace).expanduser().resolve()) if args.workspace else None
    try:
        store = open_store(path)
    except (sqlite3.Error, OSError) as exc:
        return fail("jobs", f"cannot open the job store {path}: {exc}")
    try:
        store.interrupt_orphans()  # a running job whose server died is interrupted, as kimi_jobs says
        records = store.list(limit=args.limit, status=args.status, workspace=workspace)
    except sqlite3.Error as exc:
        return fail("jobs", f"cannot read the job store {path}: {exc}")
    finally:
        store.close()
    if args.json:
        import json

        return _emit(json.dumps([as_json(record) for record in records], ensure_ascii=False, indent=2))
    if not records:
        return _emit(f"no jobs{_filters(args)} (store {path})")
    import shutil

    width = shutil.get_terminal_size().columns
    return _emit("\n".join(table(records, now=time.time(), home=env.get("HOME", ""), width=width)))


def _filters(args: argparse.Namespace) -> str:
    said = [
        f"with status {args.status}" if args.status else "",
        f"in {args.workspace}" if args.workspace else "",
    ]
    return "".join(f" {part}" for part in said if part)


def store_path() -> tuple[Path, dict[str, str]]:
    """Where the job store is (as a server started here would find it), and the environment read."""
    from .. import config, jobs  # loaded only when the command runs: its --help answers at once

    config.load_env_file()
    env = config.read_environment()
    settings, _problem = config.configured(env)  # a bad setting elsewhere does not hide the jobs
    return config.state_dir(settings, env) / jobs.STORE_FILE, env


def open_store(path: Path) -> JobStore:
    """The existing store at ``path``, opened as a server opens it (sqlite3.Error or OSError if it cannot)."""
    from ..jobs import JobStore  # loaded only when the command runs: its --help answers at once

    return JobStore(path)


def fail(command: str, message: str, code: int = 1) -> int:
    print(f"kimi-mcp {command}: error: {message}", file=sys.stderr)
    return code


def _emit(text: str) -> int:
    """Print ``text``; a reader that left (``kimi-mcp jobs | head``) is no error. Returns 0."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader left: say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def as_json(record: JobRecord) -> dict[str, Any]:
    """One job for ``--json``: times in ISO 8601 (UTC), as ``kimi_jobs`` gives them."""
    return {
        "job_id": record.job_id,
        "tool": record.tool,
        "workspace": record.workspace,
        "status": record.status,
        "started_at": _iso(record.started_at),
        "finished_at": None if record.finished_at is None else _iso(record.finished_at),
        "duration_s": record.duration_s,
        "tokens": record.tokens,
        "model": record.model,
        "session_id": record.session_id,
        "copy": record.copy,
        "question": record.question,
        "summary": record.summary,
    }


def _iso(when: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def table(records: list[JobRecord], *, now: float, home: str, width: int) -> list[str]:
    """The jobs as aligned columns, then what a waiting job asks (``? ...``) or else its summary, cut so
    each line fits ``width`` (leaving that text at least ``MIN_TEXT_WIDTH`` characters)."""
    header = ("JOB", "STATUS", "TOOL", "WORKSPACE", "TOKENS", "AGE")
    rows = [
        (
            r.job_id,
            r.status,
            r.tool.removeprefix("kimi_"),
            short_path(r.workspace, home),
            human_tokens(r.tokens),
            human_age(now - r.started_at),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    aligned = [_columns(cells, widths) for cells in (header, *rows)]
    room = max(MIN_TEXT_WIDTH, width - len(aligned[0]) - 2)
    lines = [f"{aligned[0]}  SUMMARY"]
    for fixed, record in zip(aligned[1:], records, strict=True):
        text = _what(record)
        lines.append(f"{fixed}  {fit(text, room)}" if text else fixed.rstrip())
    return lines


def _columns(cells: tuple[str, ...], widths: list[int]) -> str:
    """The cells padded to their widths; the numbers (tokens, age: the last two) aligned right."""
    last = len(cells) - 2
    return "  ".join(
        c.rjust(w) if i >= last else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def _what(record: JobRecord) -> str:
    """What a waiting job asks, else its summary: one line of text."""
    if record.status == "waiting" and record.question:
        return "? " + " ".join(printable(str(record.question.get("text", ""))).split())
    return " ".join(printable(record.summary).split())


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
