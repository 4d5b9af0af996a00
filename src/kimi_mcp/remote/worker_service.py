"""The worker's service (``kimi-mcp worker``, whose options ``cli.worker`` reads): it takes jobs from the
shared queue and from a queue of its own (the follow-ups of the conversations it holds), runs each with this
machine's Kimi through its own runner (:mod:`.worker_job`), announces itself every few seconds (name, host,
dialect, Kimi version, models, free slots) for ``kimi_status``, and lets unused copies go
(:mod:`.worker_reclaim`). A lost broker is waited for and taken up again. On SIGINT or SIGTERM it stops
taking jobs and leaves no Kimi behind; a job it was running is run again by another worker once its lease
runs out, as for a worker that died.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from datetime import timedelta
from typing import Any

from docket import Worker

from .. import config, telemetry
from .._logging import setup_logging
from ..config import state_dir
from ..executors import Runtime
from ..lazy_runner import LazyRunner
from ..secrets import configured_secrets
from ..status import status_report
from . import broker, worker_job, worker_reclaim

RECONNECT_S = 3.0  # seconds between tries to reach a lost broker
RECLAIM_EVERY_S = 300.0  # seconds between looks for copies to let go (at most)


def start(args: argparse.Namespace) -> int:
    """``kimi-mcp worker`` with its options (``cli.worker``): serve jobs until stopped; 0, or 2 when the
    configuration is unusable (said on stderr)."""
    from ..remote.worker_service import serve  # the worker side loads only when the command runs

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
    concurrency = settings.max_concurrent if args.concurrency is None else args.concurrency
    if concurrency < 1:
        return _refuse(f"--concurrency must be at least 1, not {concurrency}")
    if not args.redelivery_timeout > 0:
        return _refuse(f"--redelivery-timeout must be positive, not {args.redelivery_timeout}")
    if not args.keep_copies > 0:
        return _refuse(f"--keep-copies must be positive, not {args.keep_copies}")
    settings = settings.model_copy(update={"max_concurrent": concurrency, "standby": "off"})
    setup_logging(settings.log_level, settings.log_file, [*configured_secrets(env), url])
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    telemetry.setup("kimi-mcp-worker", env, content=settings.otel_content, prometheus_port=args.metrics_port)
    try:
        with contextlib.suppress(KeyboardInterrupt), telemetry.prometheus(args.metrics_port):
            asyncio.run(serve(url, name, concurrency, settings, env, args))
    finally:
        telemetry.shutdown()  # what is pending goes out before the worker exits
    return 0


def _refuse(message: str) -> int:
    print(f"kimi-mcp worker: {message}", file=sys.stderr)
    return 2


async def serve(
    url: str, name: str, concurrency: int, settings: Any, env: dict[str, str], args: argparse.Namespace
) -> None:
    lease = timedelta(seconds=args.redelivery_timeout)
    runner = LazyRunner()
    runtime = Runtime(settings, dict(env), state_dir(settings, env), runner)
    facts = await asyncio.to_thread(_facts, settings, env, concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    context = worker_job.WorkerContext(name=name, runtime=runtime, url=url, dialect=facts["dialect"])
    worker_job.CURRENT = context
    tasks = [
        asyncio.create_task(_consume(url, broker.DOCKET, name, concurrency, lease, context)),
        asyncio.create_task(_consume(url, broker.worker_docket(name), name, concurrency, lease, context)),
        asyncio.create_task(_heartbeat(url, name, facts, context, concurrency)),
        asyncio.create_task(_reclaim(url, context, args.keep_copies)),
    ]
    print(f"kimi-mcp worker {name}: ready ({broker.broker_host(url)})", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            async with broker.redis_client(url) as redis:
                await broker.withdraw(redis, name)
        worker_job.CURRENT = None
        with contextlib.suppress(Exception):
            runner.shutdown()


async def _consume(url: str, docket_name: str, name: str, concurrency: int, lease: Any, context: Any) -> None:
    """Take jobs from one docket until cancelled. A lost broker is waited for; once it is back (the heartbeat
    says so: ``context.generation``), the docket is opened anew as soon as no job runs here, since Docket's
    pooled connections from before an outage fail the first command that uses them (its result store's)."""
    while True:
        generation = context.generation
        try:
            async with (
                broker.open_docket(url, docket_name, worker_job.run_job) as docket,
                Worker(docket, name=name, concurrency=concurrency, redelivery_timeout=lease) as worker,
            ):
                running = asyncio.create_task(worker.run_forever())
                while not running.done():
                    await asyncio.wait([running], timeout=1.0)
                    if context.generation != generation and context.busy == 0:
                        running.cancel()
                        await asyncio.gather(running, return_exceptions=True)
                        break
                else:
                    running.result()
                continue  # a fresh docket for the broker that came back
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            print(
                f"kimi-mcp worker {name}: the broker was lost ({type(exc).__name__}); trying again in "
                f"{RECONNECT_S:g} s",
                file=sys.stderr,
                flush=True,
            )
        await asyncio.sleep(RECONNECT_S)


async def _heartbeat(url: str, name: str, facts: dict[str, Any], context: Any, concurrency: int) -> None:
    """Announce this worker every few seconds; an outage of the broker and its end bump
    ``context.generation`` (the consumers then open their dockets anew)."""
    lost = False
    while True:
        try:
            async with broker.redis_client(url) as redis:
                while True:
                    free = max(0, concurrency - context.busy)
                    await broker.announce(redis, name, {**facts, "free_slots": free})
                    if lost:
                        lost = False
                        context.generation += 1
                    await asyncio.sleep(broker.HEARTBEAT_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            lost = True
        await asyncio.sleep(broker.HEARTBEAT_S)


async def _reclaim(url: str, context: Any, keep_s: float) -> None:
    """Now and then, let go of the copies no job used for ``keep_s`` seconds (see ``reclaim``); an origin
    that goes is no longer announced as held, so the next bundle for it is whole."""
    runtime = context.runtime
    while True:
        try:
            done = await asyncio.to_thread(
                worker_reclaim.reclaim,
                runtime.state_dir,
                runtime.env,
                keep_s,
                context.in_use,
                runtime.run.close_live,
            )
            if done.origins:
                async with broker.redis_client(url) as redis:
                    await redis.delete(*(broker.have_key(origin, context.name) for origin in done.origins))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broker or disk hiccup: the next round tries again
            print(
                f"kimi-mcp worker {context.name}: reclaiming disk failed: {exc!r}",
                file=sys.stderr,
                flush=True,
            )
        await asyncio.sleep(min(max(keep_s / 2, 1.0), RECLAIM_EVERY_S))


def _facts(settings: Any, env: dict[str, str], concurrency: int) -> dict[str, Any]:
    """What this worker can run: its host, Kimi's dialect and version, the models, its slots."""
    report = status_report(settings, env=env)
    return {
        "host": socket.gethostname(),
        "dialect": report.dialect,
        "kimi_version": report.kimi_version,
        "models": list(report.models),
        "slots": concurrency,
        "problems": [p.message for p in report.problems],
    }
