"""Logging setup: stderr (and optionally a file), never stdout, which belongs to JSON-RPC. Every record is
masked: configured keys and anything shaped like an API key never reach a log. Records marked ``CLIENT``
(important events: a login, a standby used or refused, jobs interrupted, configuration warnings) are also
kept for the MCP client (``CLIENT_EVENTS``), which the tools relay as log notifications."""

from __future__ import annotations

import collections
import logging
import sys
import threading
from collections.abc import Iterable

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
"""``extra=CLIENT`` on a log call: the MCP client sees the event too (as a log notification)."""


class ClientEvents(logging.Handler):
    """The records marked ``CLIENT`` (masked), kept until a request of the client relays them; the newest
    ``limit`` when nobody asks."""

    def __init__(self, limit: int = 100) -> None:
        super().__init__(level=logging.DEBUG)
        self._events: collections.deque[tuple[str, str]] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "client", False):
            with self._lock:
                self._events.append((record.levelname.lower(), record.getMessage()))

    def pending(self) -> bool:
        return bool(self._events)

    def drain(self) -> list[tuple[str, str]]:
        """(level, message) of every event not relayed yet, oldest first."""
        with self._lock:
            events = list(self._events)
            self._events.clear()
        return events


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
