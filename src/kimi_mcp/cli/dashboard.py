"""``kimi-mcp dashboard``: serve the web dashboard (``kimi_mcp.dashboard``) over the job store a server
started here would use, until Ctrl-C. On loopback by default; any other host needs ``KIMI_MCP_HTTP_TOKEN``
(the rule of ``--http``). ``--open`` opens it in the browser (without the token, which would show on the
browser's command line: a browser presents it once as ``?token=``, which the page trades for a cookie).

Exit status 0 on Ctrl-C; 2 when the host is refused (off loopback without a token, or a token too short);
1 when the port cannot be bound. Imported to build ``--help``: nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .jobs import fail

if TYPE_CHECKING:
    from ..config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kimi-mcp dashboard``."""
    parser.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="the port (default 8765)")
    parser.add_argument("--open", action="store_true", help="open the dashboard in the default browser")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted: 0; 2 if the host needs a token that is not there (said on stderr)."""
    from .. import config  # loaded only when the command runs: its --help answers at once
    from ..http_token import required_token

    config.load_env_file()
    env = config.read_environment()
    settings, _problem = config.configured(env)  # a bad setting elsewhere does not hide the jobs
    try:
        token = required_token(args.host, settings.http_token)
    except config.ConfigError as exc:
        return fail("dashboard", str(exc), 2)
    return serve(args, settings, env, token)


def serve(args: argparse.Namespace, settings: Settings, env: dict[str, str], token: str | None) -> int:
    """Serve the dashboard over ``settings``' job store until Ctrl-C: 0; 1 if it could not start."""
    import uvicorn  # loaded only to serve (start-up speed)

    from .._malloc import limit_malloc_arenas
    from ..dashboard import Source, create_app

    limit_malloc_arenas()  # its worker threads read the store: two arenas keep its RSS down

    source = Source(settings, env)
    app = create_app(source, token=token)
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{args.port}/"
    print(f"kimi-mcp dashboard: {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    if token:
        print(
            "kimi-mcp dashboard: open it once with ?token=<KIMI_MCP_HTTP_TOKEN>", file=sys.stderr, flush=True
        )
    if args.open:
        import webbrowser

        webbrowser.open(url)  # never with the token: a browser's command line is visible to every local user
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off"
        )
    )
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        source.close()
    return 0 if server.started else 1
