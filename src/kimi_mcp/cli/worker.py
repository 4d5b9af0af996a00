"""``kimi-mcp worker``: run kimi-mcp servers' jobs on this machine, taken from the broker (Docket on Redis).

The worker takes jobs from the shared queue and from a queue of its own (the follow-ups of the
conversations it holds), runs each with this machine's Kimi (installed and logged in, or
``MOONSHOT_API_KEY``) through its own runner, and announces itself every few seconds (name, host, dialect,
Kimi version, models, free slots) for ``kimi_status``. A lost broker is waited for and taken up again.
Ctrl-C or SIGTERM: it stops taking jobs and leaves no Kimi behind; a job it was running is run again by
another worker once its lease runs out, as for a worker that died.
"""

from __future__ import annotations

import argparse

#: seconds a job's lease lasts on the broker (Docket's ``redelivery_timeout``): a worker renews the lease of
#: each job it runs every quarter of it (one XCLAIM per running job every 5 s), and the idle workers look
#: for jobs whose lease ran out every quarter of it (jittered ±25 %); so a job whose worker was killed runs
#: again on another worker 15-26 s later (plus Kimi's start), and a worker cut off from Redis for longer
#: than this loses its job to another one
REDELIVERY_TIMEOUT_S = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kimi-mcp worker``."""
    parser.add_argument("--broker", metavar="URL", help="the broker's Redis URL (default: KIMI_MCP_BROKER)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="jobs at once (default: KIMI_MCP_MAX_CONCURRENT)",
    )
    parser.add_argument("--name", help="this worker's name (default: the host name and the process id)")
    parser.add_argument(
        "--redelivery-timeout",
        type=float,
        default=REDELIVERY_TIMEOUT_S,
        metavar="SECONDS",
        help="a job whose worker went silent this long (killed, cut off) is run again by another worker, "
        "within about 1.3 times this; a running job's lease is renewed 4 times per period "
        f"(default {REDELIVERY_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--keep-copies",
        type=float,
        default=86_400.0,
        metavar="SECONDS",
        help="a copy no job used this long goes from this machine, with Kimi's files of its conversation (the "
        "server keeps both: a later follow-up brings them back); default 86400 (a day)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Docket's Prometheus metrics (with kimi-mcp's when OpenTelemetry is configured) on this port "
        "(Docket's --metrics-port; needs the otel extra)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve jobs until stopped: 0, or 2 when the configuration is unusable (said on stderr)."""
    from ..remote.worker_service import start  # Docket, redis and the runner load only when the command runs

    return start(args)
