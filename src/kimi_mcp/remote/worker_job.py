"""A job on a worker: the Docket task (``broker.TASK``) that ``kimi-mcp worker`` runs.

The request is one plain dict (see ``executors._remote``): the job's spec, the copy it works in and, for a
copy this worker does not hold yet, the bundle of its base. The worker checks the base out (one bare
repository per origin, one work tree per copy, kept for the conversation's follow-ups), runs the spec there
as the local executor would (Kimi through this worker's runner, its verify command and fix rounds, then the
tool's finishing step), and answers with the result and a bundle of the turn's commit. Progress goes out as
Docket progress messages; a cancel flag in Redis interrupts the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docket import Progress

from .. import telemetry
from .._logging import get_logger
from ..drivers import driver_class
from ..errors import KimiMCPError, SessionError
from ..executors import Runtime
from ..executors._local import run_turn
from ..job_spec import JobSpec
from ..models import ErrorInfo, TaskResult
from ..scope import Scope, TokenMeter
from ..task import RunWatch
from ..worktree import Isolated, bundles
from . import broker
from .sessions import pack, place
from .worker_reclaim import InUse, record_use

log = get_logger("worker")

LOCAL_S = 0.1  # seconds between looks at the job's question here (no Redis)
CONTROL_LOOK_S = 1.0  # seconds between looks at its cancel flag and inbox in Redis, unless the server pokes


@dataclass
class WorkerContext:
    """What this process's worker runs jobs with (set by ``kimi-mcp worker``)."""

    name: str
    runtime: Runtime
    url: str  # the broker
    dialect: str | None = None  # of this worker's Kimi (None: it has none)
    in_use: InUse = field(default_factory=InUse)  # the copies jobs run in now
    generation: int = 0  # bumped when the broker comes back after an outage

    @property
    def busy(self) -> int:
        """Jobs running here."""
        return len(self.in_use)


#: this process's worker (set by ``worker_service.serve``): a Docket task takes plain arguments only, so the
#: task finds the runtime it runs jobs with here
CURRENT: WorkerContext | None = None

ELSEWHERE = object()  # the owner of a job's tokens spent outside this run, in its meter (see ``_meter``)


async def run_job(request: dict[str, Any], progress: Progress = Progress()) -> dict[str, Any]:  # noqa: B008
    """The Docket task: run one job here; answers {"result", "bundle", "ref", "start", "end", "worker"}."""
    worker = CURRENT
    if worker is None:
        raise SessionError("this process is not a kimi-mcp worker")
    job_id = request["job_id"]
    loop = asyncio.get_running_loop()
    spec = request["spec"]
    scope = Scope(
        deadline=float("inf"), tokens=_meter(request), approvals=spec.get("approvals", "policy"),
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
        if blob is not None:  # Redis holds a bundle per transfer, not per job in flight; a job run again
            await redis.delete(request["bundle"])  # elsewhere answers needs_copy and is sent it anew
        held = await redis.get(request["session"]) if request.get("session") else None
        trace = telemetry.worker_job(request, worker.name, scope.redactor)  # continues the server's trace
        work = asyncio.ensure_future(asyncio.to_thread(trace.run, _run, worker, request, blob, held, scope))
        try:
            await _relay(redis, job_id, scope, work, progress)
        finally:
            await redis.delete(
                broker.asked_key(job_id), broker.control_key(job_id), broker.tokens_key(job_id),
                broker.session_id_key(job_id),
            )  # fmt: skip
        answer = work.result()
        if "result" in answer:
            trace.finish(TaskResult.model_validate(answer["result"]))
        if answer.get("have"):  # what this worker holds now: later bundles leave it out
            key = broker.have_key(request["origin"], worker.name)
            await redis.sadd(key, *answer.pop("have"))
            await redis.expire(key, broker.HAVE_TTL_S)
        if answer.get("needs_full") or answer.get("needs_copy"):  # not run: this was no attempt
            await redis.decr(broker.attempts_key(job_id))
            return answer
        for field, name in (("_bundle", "bundle"), ("_session", "session")):
            data = answer.pop(field, None)
            if data is not None:
                key = broker.blob_key()
                await redis.set(key, data, ex=broker.BLOB_TTL_S)
                answer[name] = key
        session = answer["result"].get("session_id")
        if session:
            await redis.set(broker.session_key(session), worker.name, ex=broker.SESSION_TTL_S)
    return answer


def _meter(request: dict[str, Any]) -> TokenMeter:
    """The job's token limits as the server sent them (``broker.allowance``): its ``max_tokens`` over all its
    attempts and turns, and the daily budget; the server tells of the tokens spent elsewhere as they grow."""
    tokens = request.get("tokens") or {"max_tokens": request["spec"].get("max_tokens")}
    meter = TokenMeter(tokens.get("max_tokens"), tokens.get("daily"), int(tokens.get("daily_used") or 0))
    meter.record(ELSEWHERE, 0, int(tokens.get("spent") or 0))
    return meter


async def _relay(redis: Any, job_id: str, scope: Scope, work: asyncio.Future, progress: Progress) -> None:
    """While the job runs: its question out (and a progress message, which the server hears at once), its
    cancel flag, answers and messages in: looked for once a second, and at once when the server pokes the
    job's channel (it sent something)."""
    published: str | None = None
    reported = _Reported()
    scope.on_session = reported.found
    pokes = await _subscribe(redis, broker.poke_channel(job_id))
    try:
        look = 0.0
        while not work.done():
            asked = broker.asked_json(scope.inbox.asked)
            if asked != published:
                published = asked
                if asked is None:
                    await redis.delete(broker.asked_key(job_id))
                else:
                    await redis.set(broker.asked_key(job_id), asked, ex=broker.BLOB_TTL_S)
                    assert scope.inbox.asked is not None
                    await progress.set_message(f"Kimi asks: {scope.inbox.asked.question.text}")
            await reported.publish(redis, job_id, scope.tokens_spent)
            if time.monotonic() >= look:
                look = time.monotonic() + CONTROL_LOOK_S
                if await redis.exists(broker.cancel_key(job_id)):
                    scope.cancel.set()
                while (item := await redis.lpop(broker.control_key(job_id))) is not None:
                    entry = json.loads(item)
                    if entry["kind"] == "tokens":
                        _told(scope.tokens, entry["payload"])
                    else:
                        scope.deliver(entry["kind"], entry["payload"])
            if await _poked(pokes, work):
                look = 0.0
    finally:
        if pokes is not None:
            with contextlib.suppress(Exception):
                await pokes.aclose()


class _Reported:
    """What a job on a worker told the server through Redis as it changed: its tokens so far, and Kimi's
    session id once Kimi has one."""

    def __init__(self) -> None:
        self.tokens = 0
        self.session_id: str | None = None
        self._found: str | None = None

    def found(self, session_id: str) -> None:  # the session tells it (any thread)
        self._found = session_id

    async def publish(self, redis: Any, job_id: str, tokens: int) -> None:
        if tokens != self.tokens:
            self.tokens = tokens
            await redis.set(broker.tokens_key(job_id), tokens, ex=broker.BLOB_TTL_S)
        if (found := self._found) is not None and found != self.session_id:
            self.session_id = found
            await redis.set(broker.session_id_key(job_id), found, ex=broker.BLOB_TTL_S)


def _told(meter: TokenMeter, payload: dict[str, Any]) -> None:
    """The server's word on the tokens spent beside this run: the job's other attempts and turns, and the
    day's other jobs; the run's next step is held to them (``TokenMeter.over``)."""
    meter.record(ELSEWHERE, 0, int(payload.get("elsewhere") or 0))
    meter.daily_used = int(payload.get("daily_used") or 0)


async def _subscribe(redis: Any, channel: str) -> Any:
    """A subscription to ``channel``, or None (then the relay only looks once a second)."""
    pokes = redis.pubsub()
    try:
        await pokes.subscribe(channel)
    except Exception as exc:
        log.info("no subscription to %s: %s", channel, type(exc).__name__)
        with contextlib.suppress(Exception):
            await pokes.aclose()
        return None
    return pokes


async def _poked(pokes: Any, work: asyncio.Future) -> bool:
    """Wait ``LOCAL_S`` (less if the job ends): whether the server poked the job meanwhile."""
    if pokes is not None:
        try:
            return await pokes.get_message(ignore_subscribe_messages=True, timeout=LOCAL_S) is not None
        except Exception:  # the subscription broke (Redis went away): plain looks from now on
            pass
    await asyncio.wait([work], timeout=LOCAL_S)
    return False


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


def _run(
    worker: WorkerContext, request: dict[str, Any], blob: bytes | None, held: bytes | None, scope: Scope
) -> dict[str, Any]:
    """In a thread: check the tree out, run the spec, pack the turn; every failure is the job's result;
    ``held``: the conversation's Kimi files, when it moves here from a worker that is gone."""

    runtime = worker.runtime
    spec = JobSpec.from_dict(request["spec"])
    iso = _isolated(worker, request)
    worker.in_use.take(iso.id)
    session: str | None = spec.session_id
    try:
        if (missing := _check_out(worker, request, blob, iso)) is not None:
            return missing
        if held is not None:
            _take_conversation(worker, held, iso.workspace, request, scope)
        here = dataclasses.replace(
            spec, workspace=str(iso.workspace), isolation="none", copy=None
        )  # the checkout is the copy (the runner runs verify_command and the fix rounds in it)
        result = run_turn(here, runtime, scope=scope, watch=RunWatch(), isolated=True)
        session = result.session_id or session
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "turn.bundle"
            ref, end = bundles.pack_turn(iso.checkout, request["start"], out, request["copy"])
            data = out.read_bytes()
        conversation = _conversation(result, runtime.env, iso.workspace)
    except KimiMCPError as exc:
        failed = TaskResult(success=False, workspace=spec.workspace, error=ErrorInfo.from_exception(exc))
        return {"result": failed.model_dump(mode="json"), "_bundle": None, "worker": worker.name}
    finally:
        if iso.checkout.is_dir():
            record_use(iso.root, request["origin"], session)
        worker.in_use.release(iso.id)
    result.worker = worker.name
    have = [c for c in (request.get("head"), request["base"]) if c]
    return {
        "result": result.model_dump(mode="json"), "_bundle": data, "ref": ref, "start": request["start"],
        "end": end, "worker": worker.name, "at": time.time(), "have": have, "_session": conversation,
    }  # fmt: skip


def _isolated(worker: WorkerContext, request: dict[str, Any]) -> Any:
    """The job's copy on this worker: ``<state>/checkouts/<copy>/tree`` (a work tree of its origin's
    repository)."""

    root = worker.runtime.state_dir / "checkouts" / request["copy"]
    return Isolated(
        id=request["copy"],
        root=root,
        repo=root,
        subdir=request["subdir"],
        base=request["base"],
        created_at=0.0,
    )


def _check_out(worker: WorkerContext, request: dict[str, Any], blob: bytes | None, iso: Any) -> dict | None:
    """Check the copy out from the request's bundle (or find it here, for a follow-up); None when done,
    else the answer that asks the server for more: the whole history, or the copy itself."""

    origin = worker.runtime.state_dir / "origins" / f"{request['origin']}.git"
    if blob is None:
        if iso.checkout.is_dir():
            return None
        log.info("job %s: the copy %s is no longer here; asking for it", request["job_id"], request["copy"])
        return {"needs_copy": True, "worker": worker.name, "_bundle": None}
    if (
        iso.checkout.exists()
    ):  # a job run again here, or a conversation coming back: start over from the bundle
        bundles.remove_checkout(origin, iso.checkout)
    with tempfile.NamedTemporaryFile(suffix=".bundle") as file:
        file.write(blob)
        file.flush()
        try:
            bundles.check_out_base(
                origin, Path(file.name), request["start"], iso.checkout, request["copy"], request["exclude"]
            )
        except bundles.MissingCommits:  # made for workers holding commits this one lacks
            return {"needs_full": True, "worker": worker.name, "_bundle": None}
    return None


def _take_conversation(
    worker: WorkerContext, held: bytes, workspace: Path, request: dict[str, Any], scope: Scope
) -> None:
    """Put a conversation that moves here into this worker's Kimi home, for the copy's new place."""

    if worker.dialect is None:
        raise SessionError(f"the worker {worker.name} has no Kimi to resume the conversation with")
    place(driver_class(worker.dialect), worker.runtime.env, held, workspace)
    scope.note(
        f"Kimi resumed this conversation on the worker {worker.name} from its own session files: "
        f"{request.get('moved_because') or 'the worker that held it is gone'}."
    )


def _conversation(result: TaskResult, env: dict[str, str], workspace: Path) -> bytes | None:
    """Kimi's files of the job's conversation (they travel with each result, so another worker can continue
    it when this one is gone)."""

    if not result.session_id or not result.dialect:
        return None
    return pack(driver_class(result.dialect), env, result.session_id, workspace)
