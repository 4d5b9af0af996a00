"""A job on a worker: the Docket task (``broker.TASK``) that ``kimi-mcp worker`` runs.

The request is one plain dict (see ``executors._remote``): the job's spec, the copy it works in and, for a
copy this worker does not hold yet, the bundle of its base. The worker checks the base out (one bare
repository per origin, one work tree per copy, kept for the conversation's follow-ups), runs the spec there
as the local executor would (Kimi through this worker's runner, then the tool's finishing step), runs the
verify command, and answers with the result and a bundle of the turn's commit. Progress goes out as
Docket progress messages; a cancel flag in Redis interrupts the turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docket import Progress

from . import broker
from ._logging import get_logger
from .errors import KimiMCPError, SessionError
from .executors import Runtime
from .executors._local import run_turn
from .jobs import deliver_to
from .models import ErrorInfo, TaskResult, VerifyOutcome
from .scope import Scope, TokenMeter
from .task import RunWatch

log = get_logger("worker")

CANCEL_POLL_S = 0.2  # seconds between looks at the job's cancel flag, question and inbox in Redis


@dataclass
class WorkerContext:
    """What this process's worker runs jobs with (set by ``kimi-mcp worker``)."""

    name: str
    runtime: Runtime
    url: str  # the broker
    busy: int = 0  # jobs running here
    generation: int = 0  # bumped when the broker comes back after an outage


CURRENT: WorkerContext | None = None


async def run_job(request: dict[str, Any], progress: Progress = Progress()) -> dict[str, Any]:  # noqa: B008
    """The Docket task: run one job here; answers {"result", "bundle", "ref", "start", "end", "worker"}."""
    worker = CURRENT
    if worker is None:
        raise SessionError("this process is not a kimi-mcp worker")
    job_id = request["job_id"]
    loop = asyncio.get_running_loop()
    spec = request["spec"]
    scope = Scope(
        deadline=float("inf"), tokens=TokenMeter(spec.get("max_tokens")), approvals=spec.get("approvals", "policy"),
        questions=request.get("questions", "ask"), question_timeout=request.get("question_timeout", 600.0),
    )  # fmt: skip
    scope.sink = lambda message: asyncio.run_coroutine_threadsafe(progress.set_message(message), loop)
    async with broker.redis_client(worker.url) as redis:
        attempt = await redis.incr(broker.attempts_key(job_id))
        await redis.expire(broker.attempts_key(job_id), broker.BLOB_TTL_S)
        if attempt > request.get("retries", 2) + 1:
            return _given_up(worker, request, attempt - 1)
        if attempt > 1:
            scope.note(
                f"Run again on the worker {worker.name}: the worker that ran it before stopped mid-turn."
            )
        blob = await redis.get(request["bundle"]) if request.get("bundle") else None
        work = asyncio.ensure_future(asyncio.to_thread(_run, worker, request, blob, scope))
        try:
            await _relay(redis, job_id, scope, work)
        finally:
            await redis.delete(broker.asked_key(job_id), broker.control_key(job_id))
        answer = work.result()
        if answer.get("have"):  # what this worker holds now: later bundles leave it out
            key = broker.have_key(request["origin"], worker.name)
            await redis.sadd(key, *answer.pop("have"))
            await redis.expire(key, broker.HAVE_TTL_S)
        if answer.get("needs_full"):
            return answer
        data = answer.pop("_bundle")
        if data is not None:
            key = broker.blob_key()
            await redis.set(key, data, ex=broker.BLOB_TTL_S)
            answer["bundle"] = key
        session = answer["result"].get("session_id")
        if session:
            await redis.set(broker.session_key(session), worker.name, ex=broker.SESSION_TTL_S)
    return answer


async def _relay(redis: Any, job_id: str, scope: Scope, work: asyncio.Future) -> None:
    """While the job runs: its cancel flag, its question out, answers and messages in (through Redis)."""
    published: str | None = None
    while not work.done():
        if await redis.exists(broker.cancel_key(job_id)):
            scope.cancel.set()
        asked = broker.asked_json(scope.inbox.asked)
        if asked != published:
            if asked is None:
                await redis.delete(broker.asked_key(job_id))
            else:
                await redis.set(broker.asked_key(job_id), asked, ex=broker.BLOB_TTL_S)
            published = asked
        while (item := await redis.lpop(broker.control_key(job_id))) is not None:
            entry = json.loads(item)
            deliver_to(scope.inbox, entry["kind"], entry["payload"])
        await asyncio.wait([work], timeout=CANCEL_POLL_S)


def _given_up(worker: WorkerContext, request: dict[str, Any], runs: int) -> dict[str, Any]:
    """The answer for a job whose workers stopped ``runs`` times (``KIMI_MCP_JOB_RETRIES`` + 1)."""
    error = SessionError(
        f"the job's worker stopped before it finished, {runs} times; it was not run again",
        details={"interrupted": True, "runs": runs},
        suggestion="Look at the workers (kimi_status lists them), then start the task again.",
        retryable=True,
    )
    failed = TaskResult(
        success=False, workspace=request["spec"]["workspace"], error=ErrorInfo.from_exception(error)
    )
    return {"result": failed.model_dump(mode="json"), "worker": worker.name}


def _run(worker: WorkerContext, request: dict[str, Any], blob: bytes | None, scope: Scope) -> dict[str, Any]:
    """In a thread: check the tree out, run the spec, pack the turn; every failure is the job's result."""
    from .jobs import JobSpec
    from .worktree import bundles, run_verify
    from .worktree._model import Isolated

    runtime = worker.runtime
    spec = JobSpec.from_dict(request["spec"])
    copy, state = request["copy"], runtime.state_dir
    origin = state / "origins" / f"{request['origin']}.git"
    root = state / "checkouts" / copy
    iso = Isolated(
        id=copy, root=root, repo=root, subdir=request["subdir"], base=request["base"], created_at=0.0
    )
    worker.busy += 1
    try:
        if blob is not None:
            if iso.checkout.exists():  # a job run again here: start over from the base
                bundles.remove_checkout(origin, iso.checkout)
            with tempfile.NamedTemporaryFile(suffix=".bundle") as file:
                file.write(blob)
                file.flush()
                try:
                    bundles.check_out_base(
                        origin, Path(file.name), request["base"], iso.checkout, copy, request["exclude"]
                    )
                except bundles.MissingCommits:  # made for workers holding commits this one lacks
                    return {"needs_full": True, "worker": worker.name, "_bundle": None}
        elif not iso.checkout.is_dir():
            raise SessionError(
                f"the worker {worker.name} no longer holds the copy {copy}",
                suggestion="Start the task again (kimi_code_task), or continue where its copy is.",
                retryable=True,
            )
        here = dataclasses.replace(
            spec, workspace=str(iso.workspace), isolation="none", copy=None, verify_command=None
        )  # the checkout is the copy: verified below, once
        result = run_turn(here, runtime, scope=scope, watch=RunWatch(), isolated=True)
        if spec.verify_command and result.success:
            outcome = run_verify(iso, spec.verify_command, runtime.settings.verify_timeout)
            result.verify = VerifyOutcome(**dataclasses.asdict(outcome))
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "turn.bundle"
            ref, end = bundles.pack_turn(iso.checkout, request["start"], out, copy)
            data = out.read_bytes()
    except KimiMCPError as exc:
        failed = TaskResult(success=False, workspace=spec.workspace, error=ErrorInfo.from_exception(exc))
        return {"result": failed.model_dump(mode="json"), "_bundle": None, "worker": worker.name}
    finally:
        worker.busy -= 1
    result.worker = worker.name
    have = [c for c in (request.get("head"), request["base"]) if c]
    return {
        "result": result.model_dump(mode="json"), "_bundle": data, "ref": ref, "start": request["start"],
        "end": end, "worker": worker.name, "at": time.time(), "have": have,
    }  # fmt: skip
