"""The FastMCP server (``cli`` starts it): stdio or ``--http``. stdout carries JSON-RPC only; logs go to
stderr. The MCP SDK loads once the configuration is read (start-up speed: a first call the fast connect
announces meanwhile starts its Kimi while the SDK loads, see ``first_call``)."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import __version__, telemetry
from ._logging import CLIENT, setup_logging
from ._malloc import limit_malloc_arenas
from .config import (
    ConfigError,
    Settings,
    broker_problem,
    configured,
    load_env_file,
    read_environment,
    unknown_variables,
)
from .errors import KimiMCPError, SettingsError
from .first_call import FirstCall
from .http_token import required_token
from .instructions import INSTRUCTIONS
from .lazy_runner import LazyRunner
from .secrets import configured_secrets

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.auth import TokenVerifier

    from ._connect import FastConnect
    from .executors import RunTask


def create_server(
    settings: Settings,
    auth: TokenVerifier | None = None,
    run: RunTask | None = None,
    problem: KimiMCPError | None = None,
    on_load: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
    runner: LazyRunner | None = None,
) -> FastMCP:
    """The MCP server with the enabled tools (loaded at its first request after ``initialize``, then
    ``on_load()``); ``run`` runs a Kimi turn (a fake in the tool layer's tests; default: ``runner``, the
    server's, made at the first call); ``problem``: the configuration was invalid (the server serves, every
    Kimi call says why); ``env``: the environment Kimi runs in (default: the process's, read now)."""
    # the MCP SDK and the tools' machinery: loaded once the configuration is read (start-up speed)
    from .state_store import KimiFastMCP
    from .tools import register_tools

    mcp = KimiFastMCP("kimi-mcp", version=__version__, instructions=INSTRUCTIONS, auth=auth)
    env = read_environment() if env is None else env
    register_tools(mcp, settings, run, problem, on_load, env=env, runner=runner or LazyRunner())
    return mcp


def serve(args: argparse.Namespace, relay: FastConnect | None = None) -> None:
    """Run the server until the client hangs up or a signal ends it (``cli.main`` parsed ``args``; ``relay``:
    the fast connect over stdio, which tells of a first call that comes while the SDK loads)."""
    limit_malloc_arenas()
    settings, problem, env = _configure(args)
    auth = _http_auth(args, settings)
    runner = LazyRunner()  # made at the first Kimi call
    first = FirstCall(runner, settings, env)
    if relay is not None and problem is None:
        relay.on_first_call(first.announced)
    if settings.standby == "startup":  # before the SDK loads: Kimi's start overlaps the server's
        threading.Thread(target=runner.prewarm_default, args=(settings, env), daemon=True).start()
    mcp = _server(settings, auth, problem, env, runner)
    if args.http:
        _mount_dashboard(mcp, settings, env, runner, required_token(args.host, settings.http_token))
    from .tools import shutdown_jobs  # loaded with the server above

    atexit.register(runner.shutdown)  # also on paths that skip the finally below
    atexit.register(shutdown_jobs)  # runs first (atexit is last in, first out)
    for signum in _EXIT_SIGNALS:
        signal.signal(signum, _exit_on_signal)
    first.server_up()
    try:
        if args.http:
            mcp.run(
                transport="http",
                host=args.host,
                port=args.port,
                show_banner=False,
                host_origin_protection="auto",
            )
        else:
            mcp.run(transport="stdio", show_banner=False)
    finally:
        shutdown_jobs()  # jobs still running are recorded as interrupted
        runner.shutdown()  # no Kimi (standby, live, exiting or mid-call) outlives the server
        telemetry.shutdown()  # the spans and metrics still pending go out
        if _signalled:
            # the transport's stdin reader thread would keep the process alive until the client hangs up
            logging.shutdown()
            os._exit(128 + _signalled[0])


def _configure(args: argparse.Namespace) -> tuple[Settings, KimiMCPError | None, dict[str, str]]:
    """The settings (and why they were refused), the environment; logging set up. Exits 2 on a broker it must
    not use (one open to anyone)."""
    load_env_file()
    settings, problem = configured()
    env = read_environment()
    if (broker := env.get("KIMI_MCP_BROKER", "").strip()) and (why := broker_problem(broker)):
        refused = ConfigError(f"KIMI_MCP_BROKER refused: {why}")  # pickles: never an open Redis
        print(f"kimi-mcp: {refused}", file=sys.stderr)
        raise SystemExit(2) from refused
    logger = setup_logging(settings.log_level, settings.log_file, configured_secrets(env))
    for warning in unknown_variables(env):
        logger.warning("%s", warning, extra=CLIENT)
    telemetry.setup("kimi-mcp", env, content=settings.otel_content)  # a no-op unless OTEL_* configures it
    return settings, problem, env


def _http_auth(args: argparse.Namespace, settings: Settings) -> TokenVerifier | None:
    if not args.http:
        return None
    from .http_auth import http_auth  # the SDK's HTTP machinery: only to serve HTTP (start-up speed)

    try:
        return http_auth(args.host, settings.http_token)
    except ConfigError as exc:  # never serve HTTP off loopback without its token
        print(f"kimi-mcp: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _server(
    settings: Settings, auth: TokenVerifier | None, problem: KimiMCPError | None, env: dict[str, str],
    runner: LazyRunner,
) -> FastMCP:  # fmt: skip
    """The server (``create_server``); ``KIMI_MCP_TOOLS`` naming unknown tools serves them all, each saying
    why."""
    holder: list[FastMCP] = []

    def prune_later() -> None:  # the tools are loaded: remove isolated copies a dead server left
        threading.Thread(target=_prune_copies, args=(holder[0],), daemon=True).start()

    try:
        mcp = create_server(settings, auth, problem=problem, on_load=prune_later, env=env, runner=runner)
    except ValueError as exc:
        problem = SettingsError(str(exc), details={"problems": [str(exc)]})
        settings = settings.model_copy(update={"tools": None})
        mcp = create_server(settings, auth, problem=problem, on_load=prune_later, env=env, runner=runner)
    holder.append(mcp)
    if problem is not None:
        print(f"kimi-mcp: {problem.message} (serving anyway: every call reports it)", file=sys.stderr)
    return mcp


def _mount_dashboard(
    mcp: FastMCP, settings: Settings, env: dict[str, str], runner: LazyRunner, token: str | None
) -> None:
    """``--http`` also serves the dashboard at ``/dashboard``, behind the same token (loopback only without
    one); discarding an isolated job there closes its live Kimi in this server first, as kimi_discard does."""
    from starlette.routing import Mount  # the dashboard loads only with --http (start-up speed)

    from .dashboard import Source, create_app
    from .http_auth import DASHBOARD_PATH  # the SDK's HTTP machinery: only to serve HTTP (start-up speed)

    app = create_app(Source(settings, env, close_live=runner.close_live), token=token)
    # FastMCP's custom_route() registers a Route; a Mount joins the same list of the app's extra routes
    mcp._additional_http_routes.append(Mount(DASHBOARD_PATH, app=app))


def _prune_copies(mcp: FastMCP) -> None:
    """Remove isolated copies a dead server left behind (in the background: the client is connecting)."""
    from .tools import prune_copies  # loaded with the server

    try:
        prune_copies(mcp)
    except Exception:
        logging.getLogger("kimi_mcp.server").exception("could not prune stale isolated copies")


_signalled: list[int] = []
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP end the server through its ``finally`` (which stops every Kimi) — once."""
    for other in _EXIT_SIGNALS:  # a second signal, of either kind, must not interrupt that cleanup
        signal.signal(other, signal.SIG_IGN)
    _signalled.append(signum)
    raise SystemExit(128 + signum)
