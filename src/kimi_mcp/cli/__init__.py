"""The ``kimi-mcp`` command: its arguments are parsed before anything heavy is imported, so ``--help`` and
``--version`` answer at once; then ``server.serve`` runs the server."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .. import __version__
from .._connect import FastConnect  # the standard library only: answers the handshake before the SDK loads
from ..instructions import INSTRUCTIONS

#: the subcommands besides serving (the default): name → (module, help); each module has
#: ``add_arguments(parser)`` and ``run(args) -> int``, imported only when its command runs
COMMANDS: dict[str, tuple[str, str]] = {
    "prune": (
        "prune",
        "remove finished jobs, their isolated copies and the Kimi sessions kimi-mcp created for them "
        "(older than KIMI_MCP_JOB_TTL_DAYS, --older-than DAYS, or --all), and print what that freed",
    ),
    "jobs": (
        "jobs",
        "list the recent jobs of every kimi-mcp server sharing the job store: status, tool, workspace, "
        "tokens, age, and what a waiting job asks or else its summary (--json for a JSON list)",
    ),
    "watch": (
        "watch",
        "show a running job's Kimi screen, redrawn as it changes until the job ends (read-only; Ctrl-C "
        "leaves)",
    ),
    "dashboard": (
        "dashboard",
        "serve a web page of every job of the job store, live: status, Kimi's screen, results, questions "
        "(answer them), isolated changes (apply or discard them), usage (loopback only without "
        "KIMI_MCP_HTTP_TOKEN)",
    ),
    "worker": (
        "worker",
        "run kimi-mcp servers' jobs on this machine, taken from the broker (--broker URL or KIMI_MCP_BROKER: "
        "Docket on Redis), with this machine's Kimi",
    ),
    "install-kimi": (
        "install_kimi",
        "install Kimi Code and Node 22 (with npm) into kimi-mcp's own data directory, where the server finds "
        "them without PATH changes",
    ),
}


def parser() -> argparse.ArgumentParser:
    commands = argparse.ArgumentParser(prog="kimi-mcp", description=INSTRUCTIONS)
    commands.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    commands.add_argument("--host", default="127.0.0.1")
    commands.add_argument("--port", type=int, default=8765)
    commands.add_argument("--version", action="version", version=f"kimi-mcp {__version__}")
    commands.add_argument(
        "--check",
        action="store_true",
        help="check the configuration and the Kimi install (no model call), print what is wrong, and exit",
    )
    if COMMANDS:
        sub = commands.add_subparsers(dest="command", metavar="COMMAND", help="(default: serve MCP)")
        for name, (module, summary) in COMMANDS.items():
            command = sub.add_parser(name, help=summary, description=summary)
            command.set_defaults(module=module)
            importlib.import_module(f"{__package__}.{module}").add_arguments(command)
    return commands


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if getattr(args, "command", None):
        raise SystemExit(importlib.import_module(f"{__package__}.{args.module}").run(args))
    if args.check:
        raise SystemExit(check())
    relay = None
    if not args.http:
        relay = FastConnect.start()  # the client's handshake is answered while the MCP SDK loads
    os.environ.setdefault("FASTMCP_LOG_LEVEL", "WARNING")  # FastMCP reads it when it is imported, below
    try:
        from ..server import serve  # the configuration, then FastMCP and the rest: only to serve

        serve(args, relay)
    except BaseException as exc:
        if relay is not None:
            relay.refused(exc)  # a server that could not start: the client's requests are told why
        raise


def check() -> int:
    """``--check``: 0 when kimi-mcp can run Kimi as configured, else 1 (each problem printed)."""
    from .. import config, status  # loaded only to check: --help and --version answer at once

    config.load_env_file()
    settings, problem = config.configured()
    report = status.status_report(settings, problem, env=config.read_environment())
    try:
        print("\n".join(status.check_lines(report)), flush=True)
    except BrokenPipeError:  # `kimi-mcp --check | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if report.success else 1
