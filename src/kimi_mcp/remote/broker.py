"""The job broker (``KIMI_MCP_BROKER``): Docket on Redis between kimi-mcp servers and workers.

One shared docket (``DOCKET``) carries new jobs to whichever worker is free; each worker also has a docket of
its own (:func:`worker_docket`) for the follow-ups of the conversations it holds. One task, registered by name
(``TASK``): :func:`.worker_job.run_job`, with one plain dict argument (the worker registers it; a server only
names it). Besides Docket's own keys, a few of kimi-mcp's under ``kimi-mcp:``: the bundles and conversations
in flight (``blob:``), a job's cancel flag (``cancel:``), attempts (``attempts:``), question (``asked:``),
tokens spent (``tokens:``), answers and messages (``control:``), the channel that tells its worker to look
(``poke:``) and the docket it went to (``route:``); which worker holds a conversation (``session:``), the
commits a worker holds per origin (``have:``) and the workers' announcements (``workers``).

Docket pickles its messages: whoever can write to this Redis can run code on every worker and on the server
(``config.broker_problem`` refuses a broker off loopback without a password).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import BrokerError
from ..question import Option, Question

if TYPE_CHECKING:
    from docket import Docket

DOCKET = "kimi-mcp-jobs"  # its keys are "kimi-mcp-jobs:...": none of them is one of kimi-mcp's own ("kimi-mcp:...")
TASK = "kimi_mcp_job"
PREFIX = "kimi-mcp:"
WORKERS = PREFIX + "workers"  # hash: worker name → its announcement (JSON)
BLOB_TTL_S = 86_400
SESSION_TTL_S = 7 * 86_400
HAVE_TTL_S = 30 * 86_400
HEARTBEAT_S = 2.0
STALE_S = 15.0  # a worker not heard from for this long is gone
HEALTH_CHECK_S = 1  # seconds a pooled Redis connection may idle before it is pinged on its next use


def worker_docket(name: str) -> str:
    """The docket of one worker's own queue (the follow-ups of the conversations it holds)."""
    return f"{DOCKET}.worker.{name}"


def blob_key() -> str:
    return f"{PREFIX}blob:{secrets.token_hex(12)}"


def cancel_key(job_id: str) -> str:
    return f"{PREFIX}cancel:{job_id}"


def attempts_key(job_id: str) -> str:
    return f"{PREFIX}attempts:{job_id}"


def asked_key(job_id: str) -> str:
    """The question a job on a worker waits on (JSON, see :func:`asked_json`), while it waits."""
    return f"{PREFIX}asked:{job_id}"


def poke_channel(job_id: str) -> str:
    """The channel a server publishes on when it sent a job on a worker something (cancel, an answer, a
    message): the worker looks at once instead of at its next look."""
    return f"{PREFIX}poke:{job_id}"


def control_key(job_id: str) -> str:
    """Answers and messages for a job on a worker (a list of JSON ``{"kind", "payload"}``, oldest first)."""
    return f"{PREFIX}control:{job_id}"


def asked_json(asked: Any) -> str | None:
    """An inbox's question (``scope.Asked``) as the broker carries it, or None."""
    if asked is None:
        return None
    question = {"question": asked.question.to_dict(), "kind": asked.kind, "asked_at": asked.asked_at}
    return json.dumps(question | {"id": asked.id})


def asked_question(raw: str | bytes) -> tuple[Any, str, str]:
    """(the ``Question``, its kind, its id) from :func:`asked_json`'s text."""
    data = json.loads(raw)
    q = data["question"]
    options = tuple(Option(o["label"], o.get("description", "")) for o in q.get("options", []))
    question = Question(
        q["question"],
        q.get("header", ""),
        options,
        bool(q.get("multi_select")),
        bool(q.get("free_text", True)),
    )
    return question, data.get("kind", "question"), str(data.get("id") or "")


def answer_payload(choice: Any, question_id: str | None) -> dict[str, Any]:
    """An inbox's answer (a ``Choice`` or ``DECLINED``) to the question ``question_id``, as
    ``scope.Inbox.deliver`` takes it."""
    answer = (
        {"declined": True} if isinstance(choice, str) else {"picks": list(choice.picks), "text": choice.text}
    )
    return answer | {"question": question_id}


def session_id_key(job_id: str) -> str:
    """Kimi's session id of a job on a worker, as soon as Kimi has one (a follow-up can be queued on the
    running conversation; a server that dies mid-turn keeps it)."""
    return f"{PREFIX}sid:{job_id}"


def tokens_key(job_id: str) -> str:
    """The tokens a job on a worker has spent so far (its worker sets it as they grow; the server reads it)."""
    return f"{PREFIX}tokens:{job_id}"


def allowance(meter: Any) -> dict[str, Any]:
    """A job's token limits as a worker gets them with the request (``scope.TokenMeter``): its ``max_tokens``,
    the daily budget and what the last 24 hours spent without this job, and what the job's meter spent before
    this run (its other attempts and turns)."""
    return {
        "max_tokens": meter.max_tokens, "daily": meter.daily, "daily_used": meter.daily_used,
        "spent": meter.spent,
    }  # fmt: skip


def route_key(job_id: str) -> str:
    """Which worker's own docket a job went to ("": the shared one): a restarted server finds it there."""
    return f"{PREFIX}route:{job_id}"


def have_key(origin: str, worker: str) -> str:
    """The commits of ``origin`` that ``worker`` holds (a set): later bundles leave out what they hold."""
    return f"{PREFIX}have:{origin}:{worker}"


async def common_commits(redis: Any, origin: str) -> list[str]:
    """The commits of ``origin`` every live worker holds (none if no worker is live)."""
    names = [w["name"] for w in await live_workers(redis)]
    if not names:
        return []
    common: set[str] | None = None
    for name in names:
        held = {
            c.decode() if isinstance(c, bytes) else c for c in await redis.smembers(have_key(origin, name))
        }
        common = held if common is None else common & held
    return sorted(common or ())


def session_key(session_id: str) -> str:
    return f"{PREFIX}session:{session_id}"


def unreachable(url_host: str, exc: BaseException) -> BrokerError:
    """The error of a call that cannot reach the broker (never the URL: it may carry the password)."""
    return BrokerError(
        f"the job broker (KIMI_MCP_BROKER, Redis on {url_host}) cannot be reached: {type(exc).__name__}",
        details={"broker": url_host},
    )


def broker_host(url: str) -> str:
    """Where the broker is, for messages: host:port or the socket's path, never the password."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname}:{parts.port or 6379}"


def redis_client(url: str) -> Any:
    """A plain Redis client on the broker (``async with``): kimi-mcp's own keys."""
    from redis.asyncio import Redis

    return Redis.from_url(checked_url(url))


def checked_url(url: str) -> str:
    """``url`` with a connection health check: a pooled connection idle for a second is pinged before use,
    so one that a Redis restart closed is replaced instead of failing the command (and the job) on it. The
    ping is retried once on a new connection only with a retry policy, which redis-py gives a connection
    only for ``retry_on_timeout`` among the URL's options (Docket makes its pools from the URL alone); so
    a command that times out is sent once more too (no client here sets a socket timeout but Docket's, for
    its blocking reads)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.setdefault("health_check_interval", str(HEALTH_CHECK_S))
    query.setdefault("retry_on_timeout", "true")
    return urlunsplit(parts._replace(query=urlencode(query)))


def open_docket(url: str, name: str = DOCKET, task: Callable[..., Any] | None = None) -> Docket:
    """A Docket on the broker (enter it with ``async with``) with kimi-mcp's task registered under ``TASK``:
    the worker gives its :func:`.worker_job.run_job`; a server, which only queues and follows jobs by that
    name, registers :func:`_runs_on_a_worker` in its place."""
    from docket import Docket  # Docket (and redis) load only with a broker

    docket = Docket(name=name, url=checked_url(url), execution_ttl=_execution_ttl())
    docket.register(task or _runs_on_a_worker, names=[TASK])
    return docket


async def _runs_on_a_worker(request: dict[str, Any]) -> dict[str, Any]:
    """The server's stand-in for the worker's task: Docket wants a function behind the name it queues."""
    raise BrokerError("a kimi-mcp job runs on a worker (kimi-mcp worker), never in the server")


def _execution_ttl() -> Any:
    from datetime import timedelta

    return timedelta(days=1)  # a server restarted within a day still finds its jobs' outcomes


async def announce(redis: Any, name: str, facts: dict[str, Any]) -> None:
    await redis.hset(WORKERS, name, json.dumps({**facts, "name": name, "heartbeat": time.time()}))


async def withdraw(redis: Any, name: str) -> None:
    await redis.hdel(WORKERS, name)


async def live_workers(redis: Any) -> list[dict[str, Any]]:
    """The workers heard from in the last ``STALE_S`` seconds, by name."""
    now = time.time()
    found = []
    for raw in (await redis.hgetall(WORKERS)).values():
        facts = json.loads(raw)
        if now - float(facts.get("heartbeat", 0)) <= STALE_S:
            found.append(facts)
    return sorted(found, key=lambda facts: facts["name"])
