"""Logging: the events marked for the MCP client are kept, masked, until a tool call relays them."""

from __future__ import annotations

import logging

import pytest

from kimi_mcp._logging import CLIENT, CLIENT_EVENTS, get_logger, setup_logging


def test_events_for_the_client_are_kept_masked_until_relayed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONSHOT_API_KEY", "sk-abcdefghijklmnopqrstuvwx1234")
    setup_logging("INFO")
    CLIENT_EVENTS.drain()
    log = get_logger("test")
    log.info("a plain record stays on stderr")
    log.info("login with sk-abcdefghijklmnopqrstuvwx1234 done", extra=CLIENT)
    log.warning("KIMI_MCP_TIMOUT is ignored", extra=CLIENT)
    assert CLIENT_EVENTS.drain() == [
        ("info", "login with *** done"),
        ("warning", "KIMI_MCP_TIMOUT is ignored"),
    ]
    assert CLIENT_EVENTS.drain() == [] and not CLIENT_EVENTS.pending()
    logging.getLogger("kimi_mcp").handlers.clear()
    logging.getLogger("kimi_mcp").addHandler(CLIENT_EVENTS)
