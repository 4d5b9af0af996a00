"""``kimi-mcp prune``: remove finished jobs with what they left behind, and print what that freed.

A job leaves three things: its row in the job store, its isolated copy (``isolation="worktree"``: a copy
under ``<state>/worktrees/<id>/``, named after the job that made it and shared by the later turns of its
conversation) and the Kimi session it ran in (a directory in Kimi's own session store: legacy kimi-cli
``~/.kimi/sessions/<md5 of the workspace>/<session id>/``, Kimi Code
``~/.kimi-code/sessions/<workspace key>/<session id>/``, their homes moved by ``KIMI_SHARE_DIR`` and
``KIMI_CODE_HOME`` as the drivers read them). Which jobs go: the finished ones (``done``, ``failed``,
``cancelled``, ``interrupted``; a running job whose server died counts as interrupted now) that ended more
than ``--older-than`` days ago (default ``KIMI_MCP_JOB_TTL_DAYS``), or all of them (``--all``). A job
running in a live server never goes, nor one that ended less than ``KIMI_MCP_SESSION_IDLE`` seconds ago in
a live server (its Kimi may still be alive for a follow-up).

The rows go first, in one transaction that also reads every job left, so a follow-up recorded meanwhile
keeps what it uses. A session goes only if no job left names it; a copy only if no job left names it (its
result, or it made it) and no job left belongs to the conversation of a job that named it. Only
directories inside the stores go: a session is a real directory two levels below its store (a store may be
a symlink, nothing below it is followed), and nothing else there is touched.

Imported to build ``--help``: nothing heavy at module level; ``run`` imports what it needs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kimi-mcp prune``."""
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--older-than",
        type=_days,
        metavar="DAYS",
        help="finished jobs that ended more than DAYS days ago (default: KIMI_MCP_JOB_TTL_DAYS, 7)",
    )
    when.add_argument("--all", action="store_true", help="every finished job, whatever its age")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list every job, copy and session removed"
    )


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days >= 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}")
    return days


def run(args: argparse.Namespace) -> int:
    """Prune as ``args`` say; print what was (or would be) freed. 0 on success; 1 (with a one-line error
    on stderr) when the configuration or the job store cannot be read, or something could not be removed."""
    import sqlite3

    from .. import config, jobs  # loaded only when the command runs: its --help answers at once
    from ..jobs.prune import prune  # likewise

    config.load_env_file()
    env = config.read_environment()
    try:
        settings = config.load_settings(env)
    except config.ConfigError as exc:
        return _fail(str(exc))
    path = config.state_dir(settings, env) / jobs.STORE_FILE
    if not path.exists():
        print(f"No job store at {path}: nothing to prune.")
        return 0
    try:
        store = jobs.JobStore(path)
    except (sqlite3.Error, OSError) as exc:
        return _fail(f"cannot open the job store {path}: {exc}")
    try:
        report = prune(store, settings, env, args)
    except sqlite3.Error as exc:
        return _fail(f"cannot prune the job store {path}: {exc}")
    finally:
        store.close()
    print("\n".join(report.lines(args.verbose or args.dry_run)))
    return 1 if report.failures else 0


def _fail(message: str) -> int:
    print(f"kimi-mcp prune: error: {message}", file=sys.stderr)
    return 1
