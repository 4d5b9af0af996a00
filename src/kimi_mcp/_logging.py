"""Logging setup: stderr (and optionally a file), never stdout, which belongs to JSON-RPC. Every record is
masked: configured keys and anything shaped like an API key never reach a log. Records marked for the
client (important events: a login, a standby used or refused, jobs interrupted, configuration warnings) are
also kept (``CLIENT_EVENTS``) for the MCP clients, which the tools relay as log notifications: an event of a
job (``extra=for_client(scope.job_id)``) only to the calls about that job, a server-wide one
(``extra=CLIENT``) to each client once."""

from __future__ import annotations

import collections
import itertools
import logging
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from .secrets import Redactor

LOGGER_NAME = "kimi_mcp"


class MaskSecrets(logging.Filter):
    """Replaces a record's message by its masked text (arguments merged in first)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.redactor(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


CLIENT = {"client": True}
"""``extra=CLIENT`` on a log call: a server-wide event (a misspelt variable, jobs found interrupted): each MCP
client sees it once, as a log notification."""

MAX_CLIENTS = 1000  # clients whose share of the server-wide events is remembered (the least recent forgotten)
MAX_JOBS = 256  # jobs whose events wait for a call about them (the least recent forgotten)


def for_client(job_id: str | None) -> dict[str, object]:
    """``extra=for_client(scope.job_id)`` on a log call: an event of that job, for the client whose call it
    belongs to: the calls about that job relay it (``job_id`` None, a scope of no job's, e.g. a standby's:
    a server-wide event, as ``CLIENT``)."""
    return {"client": True, "job_id": job_id}


@dataclass(frozen=True, slots=True)
class Event:
    """One event for the client: its place among all events (``seq``: they go out in order), level and text."""

    seq: int
    level: str
    message: str


class ClientEvents(logging.Handler):
    """The records marked for the client (masked), kept until a call relays them: an event of a job until
    a call about that job takes it (the newest ``limit`` per job, of the ``MAX_JOBS`` jobs heard of last); a
    server-wide one (the newest ``limit``) until each client has had it once."""

    def __init__(self, limit: int = 100) -> None:
        super().__init__(level=logging.DEBUG)
        self.limit = limit
        self._shared: collections.deque[Event] = collections.deque(maxlen=limit)
        self._jobs: collections.OrderedDict[str, collections.deque[Event]] = collections.OrderedDict()
        #: the last server-wide event each client had (by ``seq``), the least recently served first
        self._had: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "client", False):
            return
        job_id: str | None = getattr(record, "job_id", None)
        with self._lock:
            event = Event(next(self._seq), record.levelname.lower(), record.getMessage())
            if job_id is None:
                self._shared.append(event)
                return
            if job_id not in self._jobs:
                self._jobs[job_id] = collections.deque(maxlen=self.limit)
            self._jobs[job_id].append(event)
            self._jobs.move_to_end(job_id)
            _trim(self._jobs, MAX_JOBS)

    def pending(self, client: str | None, jobs: Iterable[str] = ()) -> bool:
        """Whether an event waits for this call (see :meth:`take`)."""
        with self._lock:
            shared = bool(self._shared) and self._shared[-1].seq > self._had_by(client)
            return shared or any(job_id in self._jobs for job_id in jobs)

    def take(self, client: str | None, jobs: Iterable[str] = ()) -> list[Event]:
        """For a call of ``client`` about ``jobs`` (their ids), oldest first: the events of those jobs, and
        the server-wide events ``client`` has not had yet (from now on it has had them). ``client`` None: a
        request nothing ties to an earlier one (each is its own connection) gets every server-wide event kept."""
        events = self.take_jobs(jobs)
        with self._lock:
            had = self._had_by(client)
            events += [event for event in self._shared if event.seq > had]
            if client is not None:
                self._had[client] = self._shared[-1].seq if self._shared else had
                self._had.move_to_end(client)
                _trim(self._had, MAX_CLIENTS)
        return sorted(events, key=lambda event: event.seq)

    def take_jobs(self, jobs: Iterable[str]) -> list[Event]:
        """The events of ``jobs`` (their ids), oldest first (no server-wide one)."""
        with self._lock:
            events = [event for job_id in jobs for event in self._jobs.pop(job_id, ())]
        return sorted(events, key=lambda event: event.seq)

    def _had_by(self, client: str | None) -> int:
        return self._had.get(client, 0) if client is not None else 0


def _trim(table: collections.OrderedDict, limit: int) -> None:
    while len(table) > limit:
        table.popitem(last=False)


#: one per process, as any logging handler: a log call in any thread reaches it, and the record itself says
#: whose event it is (``for_client`` names its job); the server-wide events are shared by every server here
CLIENT_EVENTS = ClientEvents()
logging.getLogger(LOGGER_NAME).addHandler(CLIENT_EVENTS)  # before setup_logging too (in-memory servers)


def setup_logging(
    level: str = "INFO", log_file: str | None = None, secrets: Iterable[str] = ()
) -> logging.Logger:
    """kimi-mcp's logger at ``level`` on stderr (and ``log_file``), every record masked: ``secrets`` (the
    configured keys) and anything shaped like an API key."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(level.upper())
    logger.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    mask = MaskSecrets(Redactor(secrets))
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    handler.addFilter(mask)
    logger.addHandler(handler)
    if log_file:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(fmt)
        file_handler.addFilter(mask)
        logger.addHandler(file_handler)
    CLIENT_EVENTS.filters.clear()
    CLIENT_EVENTS.addFilter(mask)
    logger.addHandler(CLIENT_EVENTS)
    logger.propagate = False
    return logger


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
