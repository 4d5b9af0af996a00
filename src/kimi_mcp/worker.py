"""``kimi-mcp worker``: run kimi-mcp servers' jobs on this machine, taken from the broker (Docket on Redis).

The worker takes jobs from the shared queue and from a queue of its own (the follow-ups of the
conversations it holds), runs each with this machine's Kimi (installed and logged in, or
``MOONSHOT_API_KEY``) through its own runner, and announces itself every few seconds (name, host, dialect,
Kimi version, models, free slots) for ``kimi_status``. Ctrl-C or SIGTERM: it stops taking jobs, interrupts
the running ones (their results say so) and leaves no Kimi behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from typing import Any


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
        default=300.0,
        metavar="SECONDS",
        help="a job whose worker went silent this long (killed, cut off) is run again by another worker; a "
        "running job's lease is renewed meanwhile (default 300)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve jobs until stopped: 0, or 2 when the configuration is unusable (said on stderr)."""
    from . import config
    from ._logging import setup_logging
    from .secrets import configured_secrets

    config.load_env_file()
    env = config.read_environment()
    url = (args.broker or env.get("KIMI_MCP_BROKER") or "").strip()
    if not url:
        return _refuse("no broker: pass --broker URL or set KIMI_MCP_BROKER")
    if why := config.broker_problem(url):
        return _refuse(f"broker refused: {why}")
    env_for_settings = {k: v for k, v in env.items() if k != "KIMI_MCP_BROKER"}  # the worker runs jobs here
    settings, problem = config.configured(env_for_settings)
    if problem is not None:
        return _refuse(problem.message)
    concurrency = args.concurrency or settings.max_concurrent
    if concurrency < 1:
        return _refuse(f"--concurrency must be at least 1, not {concurrency}")
    if not args.redelivery_timeout > 0:
        return _refuse(f"--redelivery-timeout must be positive, not {args.redelivery_timeout}")
    settings = settings.model_copy(update={"max_concurrent": concurrency, "standby": "off"})
    setup_logging(settings.log_level, settings.log_file, [*configured_secrets(env), url])
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(url, name, concurrency, settings, env, args.redelivery_timeout))
    return 0


def _refuse(message: str) -> int:
    print(f"kimi-mcp worker: {message}", file=sys.stderr)
    return 2


async def _serve(
    url: str, name: str, concurrency: int, settings: Any, env: dict[str, str], redelivery_s: float
) -> None:
    from datetime import timedelta

    from docket import Worker

    from . import broker, remote
    from .config import state_dir
    from .executors import Runtime
    from .lazy_runner import LazyRunner

    lease = timedelta(seconds=redelivery_s)
    runner = LazyRunner()
    runtime = Runtime(settings, dict(env), state_dir(settings, env), runner)
    facts = await asyncio.to_thread(_facts, settings, env, concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with (
            broker.open_docket(url) as shared,
            broker.open_docket(url, broker.worker_docket(name)) as own,
        ):
            context = remote.WorkerContext(name=name, runtime=runtime, docket=shared)
            remote.CURRENT = context
            async with (
                Worker(shared, name=name, concurrency=concurrency, redelivery_timeout=lease) as on_shared,
                Worker(own, name=name, concurrency=concurrency, redelivery_timeout=lease) as on_own,
            ):
                tasks = [
                    asyncio.create_task(on_shared.run_forever()),
                    asyncio.create_task(on_own.run_forever()),
                    asyncio.create_task(_heartbeat(shared, name, facts, context, concurrency)),
                ]
                print(
                    f"kimi-mcp worker {name}: ready ({broker.broker_host(url)})", file=sys.stderr, flush=True
                )
                await stop.wait()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            async with shared.redis() as redis:
                await broker.withdraw(redis, name)
    finally:
        remote.CURRENT = None
        with contextlib.suppress(Exception):
            runner.shutdown()


async def _heartbeat(docket: Any, name: str, facts: dict[str, Any], context: Any, concurrency: int) -> None:
    from . import broker

    while True:
        with contextlib.suppress(Exception):
            async with docket.redis() as redis:
                await broker.announce(
                    redis, name, {**facts, "free_slots": max(0, concurrency - context.busy)}
                )
        await asyncio.sleep(broker.HEARTBEAT_S)


def _facts(settings: Any, env: dict[str, str], concurrency: int) -> dict[str, Any]:
    """What this worker can run: its host, Kimi's dialect and version, the models, its slots."""
    from .status import status_report

    report = status_report(settings, env=env)
    return {
        "host": socket.gethostname(),
        "dialect": report.dialect,
        "kimi_version": report.kimi_version,
        "models": list(report.models),
        "slots": concurrency,
        "problems": [p.message for p in report.problems],
    }
