"""``kimi-mcp watch JOB_ID``: a running job's Kimi screen, redrawn until the job ends; read-only.

The server running the job publishes its (masked) screen text to the job store when it changed (it looks
every ``jobs.SCREEN_TICK``, a quarter of a second); this reads it every ``--interval`` seconds (default the
same) and draws it again when it (or the job's status) changed: on a
terminal the terminal is cleared first, into a pipe or file each frame follows its header line. The header
says the job, its status and how long it has run; a waiting job's question follows it. The screen is
printed as text: escape sequences and control characters in it (anything Kimi printed) are removed first.

When the job ends, its final status and summary are printed: exit 0 (also for a job that had ended
already, and on Ctrl-C). An unknown job: exit 2. A store that cannot be read: exit 1. Nothing is ever
written to the store (a job whose server died is reported as interrupted, not recorded as such).

Imported to build ``--help``: nothing heavy at module level; ``run`` imports what it needs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from ..job_text import elapsed, human_age, printable
from .jobs import fail, open_store, store_path

if TYPE_CHECKING:
    from ..jobs import JobRecord, JobStore

CLEAR = "\x1b[H\x1b[2J"  # cursor home, erase the screen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``kimi-mcp watch``."""
    parser.add_argument("job_id", metavar="JOB_ID", help="the job to watch (kimi-mcp jobs lists them)")
    parser.add_argument(
        "--interval",
        type=_seconds,
        default=0.25,  # the server's screen cadence (jobs.SCREEN_TICK, not imported: --help stays light)
        metavar="S",
        help="seconds between looks at the job store (default 0.25)",
    )


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not (seconds > 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return seconds


def run(args: argparse.Namespace) -> int:
    """Watch ``args.job_id`` until it ends: 0 (also on Ctrl-C); 2 if there is no such job; 1 if the store
    cannot be read."""
    out = sys.stdout
    tty = out.isatty()
    try:
        return _run(args, out, tty)
    except KeyboardInterrupt:  # Ctrl-C: leave, the prompt on a line of its own
        _quietly(out, "\n" if tty else "")
        return 0
    except BrokenPipeError:  # `kimi-mcp watch ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace, out: TextIO, tty: bool) -> int:
    import sqlite3

    path, _env = store_path()
    if not path.exists():
        return fail("watch", f"no job {args.job_id}: there is no job store at {path} yet", 2)
    try:
        store = open_store(path)
    except (sqlite3.Error, OSError) as exc:
        return fail("watch", f"cannot open the job store {path}: {exc}")
    try:
        return watch(store, args.job_id, args.interval, out, tty=tty)
    except sqlite3.Error as exc:
        return fail("watch", f"cannot read the job store {path}: {exc}")
    finally:
        store.close()


def _quietly(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except (OSError, ValueError):
        pass


def watch(store: JobStore, job_id: str, interval: float, out: TextIO, *, tty: bool) -> int:
    """Draw the job's screen on ``out`` whenever it changed, until the job ends; then its end."""
    from ..jobs import FINISHED, owner_alive  # loaded only when the command runs: its --help answers at once

    record = store.get(job_id)
    if record is None:
        return fail("watch", f"no job {job_id} in the job store {store.path}", 2)
    if record.status in FINISHED:
        _write(out, ending(record, already=True))
        return 0
    last: tuple[str, str | None] | None = None
    while True:
        seen = store.screen(job_id)
        if seen is None:
            return fail("watch", f"the job {job_id} is no longer in the job store (pruned)")
        if seen[0] in FINISHED:
            break
        if not owner_alive(record.owner):
            seen = store.screen(job_id)  # it may have finished just before its server left
            if seen is None or seen[0] not in FINISHED:
                _write(out, f"{job_id} interrupted: the kimi-mcp server running it stopped\n")
                return 0
            break
        if seen != last:
            question = _question(store, job_id) if seen[0] == "waiting" else ""
            _write(out, frame(job_id, seen[0], record.started_at, seen[1], question, tty=tty))
            last = seen
        time.sleep(interval)
    final = store.get(job_id)
    _write(out, ending(final) if final else f"{job_id} finished\n")
    return 0


def _question(store: JobStore, job_id: str) -> str:
    record = store.get(job_id)
    question = record.question if record else None
    return str(question.get("text", "")) if question else ""


def _write(out: TextIO, text: str) -> None:
    out.write(text)
    out.flush()


def frame(
    job_id: str, status: str, started_at: float, screen: str | None, question: str, *, tty: bool
) -> str:
    """One drawing: (on a terminal, the clearing), the header line, a waiting job's question, the screen."""

    lines = [f"── {job_id}  {status}  {elapsed(time.time() - started_at)} ──"]
    if question:
        lines.append("? " + " ".join(printable(question).split()))
    if screen is None:
        lines.append("(no screen yet)")
    else:
        text = "\n".join(line.rstrip() for line in printable(screen).split("\n")).rstrip("\n")
        lines.append(text)
    return (CLEAR if tty else "") + "\n".join(lines) + "\n"


def ending(record: JobRecord, *, already: bool = False) -> str:
    """How the job ended: its status, when, its summary."""

    took = elapsed(record.duration_s or 0.0)
    if already:
        ago = human_age(time.time() - (record.finished_at or record.started_at))
        head = f"{record.job_id} finished already: {record.status} {ago} ago, after {took}"
    else:
        head = f"{record.job_id} {record.status} after {took}"
    summary = " ".join(printable(record.summary).split())
    return head + (f"\n{summary}" if summary else "") + "\n"
