"""Logging: the events marked for the MCP client are kept, masked, until a tool call relays them: an event
of a job only for the calls about that job, a server-wide one once for each client."""

from __future__ import annotations

import logging

import pytest

from kimi_mcp._logging import CLIENT, CLIENT_EVENTS, ClientEvents, for_client, get_logger, setup_logging


@pytest.fixture
def events() -> ClientEvents:
    """A fresh router on a logger of its own (the process-wide one is shared by every in-process server)."""
    handler = ClientEvents(limit=3)
    logger = logging.getLogger("routing-test")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)


def texts(events) -> list[tuple[str, str]]:
    return [(event.level, event.message) for event in events]


def test_events_for_the_client_are_kept_masked_until_relayed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONSHOT_API_KEY", "sk-abcdefghijklmnopqrstuvwx1234")
    setup_logging("INFO")
    CLIENT_EVENTS.take("masking-test")
    log = get_logger("test")
    log.info("a plain record stays on stderr")
    log.info("login with sk-abcdefghijklmnopqrstuvwx1234 done", extra=for_client("job_mask"))
    log.warning("KIMI_MCP_TIMOUT is ignored", extra=CLIENT)
    assert texts(CLIENT_EVENTS.take("masking-test", ["job_mask"])) == [
        ("info", "login with *** done"),
        ("warning", "KIMI_MCP_TIMOUT is ignored"),
    ]
    assert CLIENT_EVENTS.take("masking-test", ["job_mask"]) == []
    assert not CLIENT_EVENTS.pending("masking-test", ["job_mask"])
    logging.getLogger("kimi_mcp").handlers.clear()
    logging.getLogger("kimi_mcp").addHandler(CLIENT_EVENTS)


def test_a_jobs_event_goes_to_that_job_only_and_never_to_the_server_wide_events(events: ClientEvents) -> None:
    log = logging.getLogger("routing-test")
    log.info("using the standby Kimi for /ws-a", extra=for_client("job_a"))
    log.info("automated login done; model m", extra=for_client("job_b"))
    log.info("not for any client")
    assert not events.pending("session-b") and events.take("session-b") == []
    assert events.take(None) == [] and events.take("session-b", ["job_c"]) == []
    assert events.pending("session-b", ["job_a"])
    assert texts(events.take("session-a", ["job_a"])) == [("info", "using the standby Kimi for /ws-a")]
    assert events.take("session-a", ["job_a"]) == [] and not events.pending("session-a", ["job_a"])
    assert texts(events.take(None, ["job_b"])) == [("info", "automated login done; model m")]


def test_a_server_wide_event_reaches_each_client_once(events: ClientEvents) -> None:
    log = logging.getLogger("routing-test")
    log.warning("KIMI_MCP_TIMOUT is ignored", extra=CLIENT)
    log.info("a standby's login", extra=for_client(None))  # a scope of no job's: server-wide
    expected = [("warning", "KIMI_MCP_TIMOUT is ignored"), ("info", "a standby's login")]
    assert events.pending("a") and events.pending("b")
    assert texts(events.take("a")) == expected
    assert not events.pending("a") and events.take("a") == []
    log.warning("3 job(s) were interrupted", extra=CLIENT)
    assert texts(events.take("a")) == [("warning", "3 job(s) were interrupted")]
    assert texts(events.take("b")) == [*expected, ("warning", "3 job(s) were interrupted")]
    assert events.take("b") == [] and events.take("a") == []
    # a request nothing identifies (2026-07-28 over HTTP) gets every event kept, each time
    assert len(events.take(None)) == 3 and len(events.take(None)) == 3 and events.pending(None)


def test_the_newest_events_are_kept_for_a_call_that_comes_late(
    events: ClientEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kimi_mcp._logging.MAX_JOBS", 2)
    log = logging.getLogger("routing-test")
    for n in range(5):
        log.info("event %d", n, extra=CLIENT)
        log.info("job event %d", n, extra=for_client("job_x"))
    log.info("of job y", extra=for_client("job_y"))
    log.info("of job z", extra=for_client("job_z"))  # job_x is the least recent of three
    assert [event.message for event in events.take("late")] == ["event 2", "event 3", "event 4"]
    assert events.take("late", ["job_x"]) == []  # job_x's events are forgotten
    assert [event.message for event in events.take("late", ["job_y", "job_z"])] == ["of job y", "of job z"]


def test_events_keep_their_order_across_jobs_and_the_server(events: ClientEvents) -> None:
    log = logging.getLogger("routing-test")
    log.info("one", extra=for_client("job_1"))
    log.info("two", extra=CLIENT)
    log.info("three", extra=for_client("job_2"))
    log.info("four", extra=for_client("job_1"))
    assert [event.message for event in events.take("c", ["job_1", "job_2"])] == [
        "one",
        "two",
        "three",
        "four",
    ]
