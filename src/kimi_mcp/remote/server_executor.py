"""The remote executor (``KIMI_MCP_BROKER``): each job goes to a ``kimi-mcp worker`` through Docket on Redis.

The tree travels as git: the job's isolated copy is made here as for a local worktree job, its base goes to
the worker as a bundle, and the worker's turn comes back as a bundle that is applied to the copy's work
tree; so ``diff``, ``kimi_apply``, ``kimi_discard`` and the resources behave as for a local copy. A job
with ``isolation="none"`` is applied to the user's tree when it returns (three-way, all or nothing; a
conflict leaves it unapplied and ``kimi_apply`` can retry). A follow-up goes to the worker that holds the
conversation (its own queue). A workspace outside a git work tree cannot travel: it runs here, and the
result's notes say so.

The request is one plain dict: ``job_id``, ``spec`` (``JobSpec.to_dict()``), ``copy``, ``origin``, ``subdir``,
``base``, ``start`` (the commit the turn starts from), ``exclude`` (the user's ``info/exclude``) and ``bundle``
(the Redis key of the base's bundle, for a copy the worker does not hold).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import telemetry, worktree
from .._logging import get_logger
from ..errors import BadInput, BrokerError, KimiMCPError, SessionError, TaskCancelled
from ..executors._base import Executor
from ..executors._local import Local, Runtime, describe
from ..finish import result_class
from ..models import TaskResult
from ..scope import Scope
from ..task import RunWatch
from ..worktree import bundles
from . import broker

if TYPE_CHECKING:
    from ..job_spec import JobSpec
    from ..worktree import Isolated

log = get_logger("executors")

Bundler = Callable[[list[str]], bytes]  # the base's bundle without what the given commits hold

LOCAL_S = 0.1  # seconds between looks at the client's side of a job (cancel, answer, messages): no Redis
RELAY_S = 1.0  # seconds between looks for the worker's question in Redis (at once when its progress moves)
SYNC_S = 5.0  # seconds between outright reads of a job's state, besides Docket's published changes
CONVERSATION_FILE = "conversation.tar.gz"  # in a copy's folder: Kimi's files of its conversation
RESENDS = 3  # times a job's whole copy is sent again to workers that lack it
ADOPT_WAIT_S = 5.0  # seconds the broker has to say whether it still has a dead server's job
_TERMINAL = ("completed", "failed", "cancelled")
_WAITING = ("scheduled", "queued")


class Remote(Executor):
    """Runs each job on a worker (see the module's notes); ``url``: the broker."""

    name = "remote"

    def __init__(self, runtime: Runtime, url: str) -> None:
        self.runtime, self.url = runtime, url
        self.local = Local(runtime)
        self.host = broker.broker_host(url)

    def run(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        state = self.runtime.state_dir
        try:
            worktree.repo_top(Path(spec.workspace), state)
        except BadInput as exc:
            scope.note(f"This job ran in the kimi-mcp server, not on a worker: {exc.message}; only a git work "
                       "tree can travel to a worker.")  # fmt: skip
            return self.local.run(spec, job_id=job_id, scope=scope, watch=watch)
        if spec.copy is not None:
            iso = worktree.load(state, spec.copy)
        else:
            iso = worktree.create(Path(spec.workspace), state, job_id)
        request = self._request(spec, job_id, iso)
        request["tokens"] = broker.allowance(scope.tokens)
        copy = _Copy(
            functools.partial(self._base_bundle, iso), iso.root / CONVERSATION_FILE, spec.copy is None
        )
        answer = telemetry.handoff(request, self._dispatch, request, copy, spec.session_id, scope, watch)
        return self._finish(spec, iso, request, answer, scope)

    def adoptable(self, job_id: str) -> bool:
        """Whether the broker still has a job a dead server queued (then this server follows it)."""
        try:
            return _run_apart(lambda: asyncio.wait_for(_known(self.url, job_id), ADOPT_WAIT_S))
        except Exception as exc:
            log.info("job %s: the broker cannot say whether it still runs it: %s", job_id, type(exc).__name__)
            return False

    def resume(self, spec: JobSpec, *, job_id: str, scope: Scope, watch: RunWatch) -> TaskResult:
        iso = worktree.load(self.runtime.state_dir, spec.copy or job_id)
        request = self._request(spec, job_id, iso)
        request["tokens"] = broker.allowance(scope.tokens)
        try:
            answer = asyncio.run(
                _Dispatch(self.url, request, None, spec.session_id, scope, watch, resume=True).run()
            )
        except (OSError, TimeoutError) as exc:
            raise broker.unreachable(self.host, exc) from exc
        scope.note("This server restarted while a worker ran the job; it picked the result up.")
        return self._finish(spec, iso, request, answer, scope)

    def _request(self, spec: JobSpec, job_id: str, iso: Isolated) -> dict[str, Any]:
        exclude = iso.checkout / ".git" / "info" / "exclude"
        return {
            "job_id": job_id, "spec": spec.to_dict(), "copy": iso.id, "origin": origin_of(iso),
            "subdir": iso.subdir, "base": iso.base, "start": bundles.turn_start(iso),
            "exclude": exclude.read_text() if exclude.is_file() else "", "bundle": None, "head": iso.head,
            "retries": self.runtime.settings.job_retries, "questions": self.runtime.settings.questions,
            "question_timeout": self.runtime.settings.question_timeout,
        }  # fmt: skip

    def _base_bundle(self, iso: Isolated, have: list[str]) -> bytes:
        """The base as a bundle, without what the commits in ``have`` hold (every live worker has them)."""
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "base.bundle"
            bundles.pack_base(iso, out, have)
            log.info("job %s: base bundle %d bytes (%d commit(s) every worker holds left out)",
                     iso.id, out.stat().st_size, len(have))  # fmt: skip
            limit = self.runtime.settings.bundle_max_mb
            if not bundles.bundle_size_ok(out, limit):
                size = out.stat().st_size / 1024 / 1024
                raise BadInput(
                    f"the workspace's repository makes a {size:.0f} MB bundle, more than KIMI_MCP_BUNDLE_MAX_MB="
                    f"{limit:g}",
                    suggestion="Raise KIMI_MCP_BUNDLE_MAX_MB, or run this task without a broker.",
                )
            return out.read_bytes()

    def _dispatch(
        self, request: dict[str, Any], copy: _Copy, session: str | None, scope: Scope, watch: RunWatch
    ) -> dict[str, Any]:
        try:
            return asyncio.run(_Dispatch(self.url, request, copy, session, scope, watch).run())
        except KimiMCPError:
            raise
        except (OSError, TimeoutError) as exc:
            raise broker.unreachable(self.host, exc) from exc
        except Exception as exc:
            if type(exc).__module__.startswith("redis"):
                raise broker.unreachable(self.host, exc) from exc
            raise

    def _finish(
        self, spec: JobSpec, iso: Isolated, request: dict[str, Any], answer: dict[str, Any], scope: Scope
    ) -> TaskResult:
        result = result_class(spec.tool).model_validate(answer["result"])
        result.worker = answer.get("worker")
        if result.usage is not None:  # the turn's last tokens, which the relay may not have read yet
            scope.tokens.record(scope, 0, result.usage.input_tokens + result.usage.output_tokens)
        if answer.get("session_bytes") is not None:  # Kimi's files of the conversation, for a move
            _keep_conversation(iso.root / CONVERSATION_FILE, answer["session_bytes"])
        data = answer.get("bundle_bytes")
        if data is not None:
            with tempfile.TemporaryDirectory() as folder:
                file = Path(folder) / "turn.bundle"
                file.write_bytes(data)
                bundles.unpack_turn(iso, file, answer["ref"], request["start"], answer["end"])
        describe(result, iso)
        result.workspace = spec.workspace
        result.notes.extend(n for n in scope.notes if n not in result.notes)
        if not spec.isolated and result.worktree is not None and result.worktree.files_changed:
            _apply_on_return(iso, result)
        return result


@dataclass(frozen=True)
class _Copy:
    """What a job's copy can send a worker: its bundle (``bundler``), and Kimi's files of its conversation
    (``conversation``, kept from the last turn); ``fresh``: a new job (else a follow-up, whose holder has
    the copy unless it is gone)."""

    bundler: Bundler
    conversation: Path
    fresh: bool


def _keep_conversation(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def origin_of(iso: Isolated) -> str:
    """The origin a worker keeps one repository for: this machine and the user's repository."""
    return hashlib.sha256(f"{socket.gethostname()}:{iso.repo}".encode()).hexdigest()[:20]


def _apply_on_return(iso: Isolated, result: TaskResult) -> None:
    """``isolation="none"``: the worker's change lands in the user's tree now (all or nothing)."""
    applied = worktree.apply(iso)
    if applied.ok:
        result.notes.append(f"Applied to your tree: {len(applied.applied)} path(s) (Kimi ran on a worker).")
    else:
        paths = ", ".join(c.path for c in applied.conflicts)
        result.notes.append(
            f"Not applied: {paths} changed in your tree meanwhile. Nothing was written; resolve them and "
            f"retry with kimi_apply(job_id={result.job_id or '...'}), or ask Kimi to adapt (kimi_continue)."
        )


class _Dispatch:
    """One job's round trip through the broker (in the job's thread, on an event loop of its own);
    ``copy``: what the job's copy can send (None when resuming); ``resume``: the job was queued by a server
    that died, follow it from where it is."""

    def __init__(
        self, url: str, request: dict[str, Any], copy: _Copy | None, session: str | None, scope: Scope,
        watch: RunWatch, *, resume: bool = False,
    ) -> None:  # fmt: skip
        self.url, self.request, self.copy, self.session = url, request, copy, session
        self.scope, self.watch, self.resume = scope, watch, resume
        self.job_id: str = request["job_id"]
        self.asked: str | None = None  # the question last seen in Redis (JSON)
        tokens = request.get("tokens") or {}
        #: the (tokens spent elsewhere, daily used) the worker knows of
        self.told = (int(tokens.get("spent") or 0), int(tokens.get("daily_used") or 0))

    async def run(self) -> dict[str, Any]:
        async with broker.open_docket(self.url) as shared:
            async with shared.redis() as redis:
                holder, key = await self._route(redis)
            if holder:
                async with broker.open_docket(self.url, broker.worker_docket(holder)) as own:
                    answer = await self._follow(own, holder, key)
                if answer.get("needs_copy"):  # the holder no longer has the copy: it moves like a gone one's
                    async with shared.redis() as redis:
                        await self._send_copy(redis, f"the worker {holder} no longer had its copy")
                        key = await self._routed(redis, "", f"{self.job_id}.moved")
                    answer = await self._follow(shared, key=key)
            else:
                answer = await self._follow(shared, key=key)
            for sending in range(RESENDS):
                # a worker without the commits the bundle leaves out, or a job run again after its first
                # worker took the bundle (a worker deletes it once read): the whole bundle, once more
                if not _needs(answer) or self.copy is None:
                    break
                async with shared.redis() as redis:
                    await redis.delete(self.request["bundle"])
                    await self._send_bundle(redis, [])
                    key = await self._routed(redis, "", f"{self.job_id}.full{sending or ''}")
                answer = await self._follow(shared, key=key)
            async with shared.redis() as redis:
                await self._collect(redis, answer)
        if _needs(answer):
            raise BrokerError(
                f"no worker could check the job's copy out ({RESENDS} sendings)", retryable=True
            )
        return answer

    async def _route(self, redis: Any) -> tuple[str, str]:
        """(the worker whose own docket takes the job, "" for the shared one; Docket's key for it), after
        sending what the worker needs: a new job's base; a follow-up's copy and conversation when the
        worker that held it is gone. Recorded in Redis, so a restarted server finds the job."""
        if self.resume:
            return route_of(await _decoded(redis.get(broker.route_key(self.job_id))), self.job_id)
        assert self.copy is not None
        holder = ""
        if self.copy.fresh:
            await self._send_bundle(redis, await broker.common_commits(redis, self.request["origin"]))
        else:
            holder, gone = await self._holder(redis)
            if not holder:
                await self._send_copy(redis, f"the worker that held it ({gone}) is gone")
        return holder, await self._routed(redis, holder, self.job_id)

    async def _routed(self, redis: Any, holder: str, key: str) -> str:
        await redis.set(broker.route_key(self.job_id), json.dumps([holder, key]), ex=broker.BLOB_TTL_S)
        return key

    async def _collect(self, redis: Any, answer: dict[str, Any]) -> None:
        """Take the worker's bundle and conversation files out of Redis; drop what this job left there."""
        for name in ("bundle", "session"):
            if self.request.get(name):
                await redis.delete(self.request[name])
            if answer.get(name):
                answer[f"{name}_bytes"] = await redis.get(answer[name])
                await redis.delete(answer[name])
        await redis.delete(broker.route_key(self.job_id))

    async def _send_bundle(self, redis: Any, have: list[str]) -> None:
        assert self.copy is not None
        blob = await asyncio.to_thread(self.copy.bundler, have)
        self.request["bundle"] = key = broker.blob_key()
        await redis.set(key, blob, ex=broker.BLOB_TTL_S)

    async def _send_copy(self, redis: Any, because: str) -> None:
        """A follow-up whose holder is gone or let the copy go (``because`` says which): the copy (its base
        and newest turn) and Kimi's files of its conversation go to whichever worker takes it, which resumes
        it."""
        assert self.copy is not None
        if not self.copy.conversation.is_file():
            raise SessionError(
                f"conversation {self.session} cannot go on: {because}, and Kimi's files of it never reached "
                "this server",
                suggestion="Start the task again; its copy and diff are kept here (kimi_apply still works).",
            )
        await self._send_bundle(redis, await broker.common_commits(redis, self.request["origin"]))
        self.request["session"] = key = broker.blob_key()
        await redis.set(key, self.copy.conversation.read_bytes(), ex=broker.BLOB_TTL_S)
        self.request["moved_because"] = because
        log.info("job %s: conversation %s moves on (%s)", self.job_id, self.session, because)

    async def _holder(self, redis: Any) -> tuple[str, str]:
        """(the live worker that holds a follow-up's conversation, or ""; the one that held it, if gone)."""
        name = await _decoded(redis.get(broker.session_key(self.session or "")))
        live = {w["name"] for w in await broker.live_workers(redis)}
        if name and name in live:
            return name, ""
        return "", name or "an unknown worker"

    async def _follow(self, docket: Any, holder: str | None = None, key: str = "") -> dict[str, Any]:
        """Queue the job on ``docket`` (or find it there, resuming) and follow it to its answer; ``holder``:
        the one worker that can run it (a follow-up), whose going away ends the job; ``key``: Docket's key
        for it (the job's id, else its second sending). Its state and progress come as Docket publishes
        them; Redis is asked for the worker's question once a second, or at once when its progress moves;
        the client's cancel, answer and messages go out as soon as they are here."""
        if self.resume:
            execution = await docket.get_execution(key or self.job_id)
            if execution is None:
                raise _gone(f"the broker no longer knows job {self.job_id} (its server stopped)")
        else:
            execution = await docket.add(broker.TASK, key=key or self.job_id)(self.request)
        cancel_sent, now = False, time.monotonic()
        next_holder, next_relay, next_sync = now + broker.HEARTBEAT_S, now, now + SYNC_S
        async with docket.redis() as redis, _Watch(execution, self._progressed) as watch:
            while not watch.ended.is_set():
                now = time.monotonic()
                if holder and now >= next_holder:
                    next_holder = now + broker.HEARTBEAT_S
                    if holder not in {w["name"] for w in await broker.live_workers(redis)}:
                        raise _gone(
                            f"the worker {holder}, which held this conversation, stopped",
                            "Send the message again (kimi_continue): the conversation moves to another worker "
                            "from its last finished turn.",
                        )
                if self.scope.cancel.is_set() and not cancel_sent:
                    if watch.state in _WAITING:  # no worker took it yet: it never will
                        await docket.cancel(key or self.job_id)
                        raise TaskCancelled("the job was cancelled before a worker took it")
                    await redis.set(broker.cancel_key(self.job_id), "1", ex=3600)
                    await redis.publish(broker.poke_channel(self.job_id), "cancel")
                    cancel_sent = True
                if now >= next_relay or watch.moved.is_set() or self.scope.inbox.outgoing():
                    watch.moved.clear()
                    next_relay = now + RELAY_S
                    await self._relay(redis)
                if now >= next_sync:  # in case the subscription missed something (Redis came back)
                    next_sync = now + SYNC_S
                    await watch.sync()
                await watch.wait(LOCAL_S)
        try:
            return await execution.get_result()
        except KimiMCPError:
            raise
        except Exception as exc:
            raise BrokerError(
                f"the worker failed the job: {type(exc).__name__}: {exc}", retryable=True
            ) from exc

    def _progressed(self, message: str) -> None:
        self.watch.queued = False
        self.scope.progress(message)

    async def _relay(self, redis: Any) -> None:
        """The worker's question into this job's inbox (its waiters ask the client); the client's answer and
        messages (kimi_steer, a queued kimi_continue) out to the worker."""
        inbox = self.scope.inbox
        keys = (
            broker.asked_key(self.job_id),
            broker.tokens_key(self.job_id),
            broker.session_id_key(self.job_id),
        )
        raw, spent, session_id = (
            None if value is None else value.decode() for value in await redis.mget(*keys)
        )
        sent = self._tokens(int(spent or 0))
        if session_id and session_id != self.watch.session_id:  # the job records it at once
            self.watch.session_id = session_id
            self.scope.on_session(session_id)
        if raw != self.asked:
            self.asked = raw
            if raw is not None:
                question, kind, question_id = broker.asked_question(raw)
                inbox.ask(question, kind, question_id)
            elif inbox.asked is not None:
                inbox.withdraw()
        if (answer := inbox.take_answer()) is not None:
            sent.append({"kind": "answer", "payload": broker.answer_payload(answer, inbox.answered_id)})
        while (message := inbox.next_message(("steer", "interrupt", "queue"))) is not None:
            sent.append({"kind": "message", "payload": message.to_payload()})
        if sent:
            await redis.rpush(broker.control_key(self.job_id), *(json.dumps(item) for item in sent))
            await redis.expire(broker.control_key(self.job_id), broker.BLOB_TTL_S)
            await redis.publish(broker.poke_channel(self.job_id), "control")

    def _tokens(self, spent: int) -> list[dict[str, Any]]:
        """The worker's tokens into this job's meter (shared with its other attempts, and read by the daily
        budget of every job in the store); what the worker must know to stop within one step as a local run
        would: the tokens its meter spent elsewhere (other attempts, earlier turns) and the day's use by
        other jobs, sent when they changed."""
        meter = self.scope.tokens
        meter.record(self.scope, 0, spent)
        told = (meter.spent - meter.spent_by(self.scope), meter.daily_used)
        if told == self.told:
            return []
        self.told = told
        return [{"kind": "tokens", "payload": {"elsewhere": told[0], "daily_used": told[1]}}]


class _Watch:
    """A Docket execution's state and progress, as Docket publishes them (``Execution.subscribe``; a lost
    subscription is taken up again, and :meth:`sync` reads them outright). ``ended``: it reached a final
    state; ``moved``: its progress message changed (``on_progress`` got it) since the last look."""

    def __init__(self, execution: Any, on_progress: Callable[[str], None]) -> None:
        self.execution, self.on_progress = execution, on_progress
        self.state: str = execution.state.value
        self.said: str | None = None
        self.ended, self.moved = asyncio.Event(), asyncio.Event()
        self._woken = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> _Watch:
        self._task = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def wait(self, timeout: float) -> None:
        """Until the execution ends, its progress moves, or ``timeout`` seconds pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), timeout)
        self._woken.clear()

    async def sync(self) -> None:
        await self.execution.sync()
        self._state(self.execution.state.value)
        self._progress(self.execution.progress.message)

    async def _listen(self) -> None:
        while not self.ended.is_set():
            try:
                async for event in self.execution.subscribe():
                    if event["type"] == "state":
                        self._state(event["state"].value)
                    elif event["type"] == "progress":
                        self._progress(event.get("message"))
                    if self.ended.is_set():
                        return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the subscription was lost (Redis restarted): subscribe again
                log.debug("job %s: subscription lost: %s", self.execution.key, type(exc).__name__)
            await asyncio.sleep(LOCAL_S * 10)

    def _state(self, state: str) -> None:
        self.state = state
        if state in _TERMINAL:
            self.ended.set()
            self._woken.set()

    def _progress(self, message: str | None) -> None:
        if message and message != self.said:
            self.said = message
            self.on_progress(message)
            self.moved.set()
            self._woken.set()


def _needs(answer: dict[str, Any]) -> bool:
    """Whether a worker answered that it needs the whole copy sent (it did not run the job)."""
    return bool(answer.get("needs_full") or answer.get("needs_copy"))


def _gone(
    message: str, suggestion: str = "Start the task again; its copy and diff are kept here."
) -> SessionError:
    return SessionError(message, details={"interrupted": True}, suggestion=suggestion, retryable=True)


async def _decoded(pending: Any) -> str | None:
    value = await pending
    return value.decode() if isinstance(value, bytes) else value


async def _known(url: str, job_id: str) -> bool:
    """Whether the broker still has the job (queued, running, or its outcome kept)."""
    async with broker.open_docket(url) as shared:
        async with shared.redis() as redis:
            holder, key = route_of(await _decoded(redis.get(broker.route_key(job_id))), job_id)
        if not holder:
            return await shared.get_execution(key) is not None
    async with broker.open_docket(url, broker.worker_docket(holder)) as own:
        return await own.get_execution(key) is not None


def _run_apart(coroutine: Callable[[], Any]) -> Any:
    """``asyncio.run`` of a coroutine, also from a thread that runs an event loop (the job store may first
    be opened there): then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coroutine())).result()


def route_of(raw: str | None, job_id: str) -> tuple[str, str]:
    """(worker, Docket key) from a job's route in Redis ("" worker: the shared docket)."""
    if not raw:
        return "", job_id
    if raw.startswith("["):
        holder, key = json.loads(raw)
        return holder, key
    return raw, job_id  # a route written before the key was recorded
