"""Logging setup: stderr (and optionally a file), never stdout, which belongs to JSON-RPC. Every record is
masked: configured keys and anything shaped like an API key never reach a log."""

from __future__ import annotations

import logging
import sys
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
    logger.propagate = False
    return logger


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
