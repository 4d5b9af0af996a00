"""Stopping Kimi's running turn: its interrupt key, pressed only where it means "stop"."""

from __future__ import annotations

import contextlib
import math
import time

from ..drivers.base import ScreenState
from ._terminal import Terminal
from ._wirelog import SessionLog

STOP_STEP = 0.2  # seconds between looks at the screen while a turn is being stopped
REPRESS_AFTER = 1.0  # seconds a busy Kimi has to take the interrupt key before it is pressed again
PANEL_GONE = 2.0  # seconds a panel answered while stopping has to go (its key is never pressed twice sooner)


def interrupt_turn(term: Terminal, wire: SessionLog, wait: float) -> None:
    """Stop a running turn and give Kimi ``wait`` seconds to log its end. A panel on screen is answered
    "no" first (its reject key; a dismissed question): on a panel the interrupt key may mean "reject, go
    on" and Enter "approve", so neither is pressed there. The interrupt key goes to a busy Kimi once, and
    once more after each panel answered on the way (the turn's next step may show one)."""
    driver = term.driver
    if not term.process.started or term.eof or not wire.trace.begun or wire.trace.ended:
        return

    def ended() -> bool:
        wire.read()
        return wire.trace.ended or term.eof

    end = time.monotonic() + wait
    pressed = -math.inf  # when the interrupt key was last pressed
    panels = {ScreenState.APPROVAL: driver.reject_key, ScreenState.QUESTION: driver.dismiss_question_key}

    def state() -> ScreenState:
        return driver.classify(term.screen.lines)

    with contextlib.suppress(Exception):
        while not ended() and (left := end - time.monotonic()) > 0:
            shown = state()
            if shown in panels:  # answer it, then interrupt as soon as it is gone (before the next step's)
                term.write(panels[shown])
                pressed = -math.inf
                term.waits.until(lambda shown=shown: ended() or state() is not shown, min(PANEL_GONE, left))
                continue
            if time.monotonic() - pressed >= REPRESS_AFTER and (shown is ScreenState.BUSY or pressed < 0):
                term.write(driver.interrupt_key)  # again if a busy Kimi did not take it
                pressed = time.monotonic()
            term.waits.until(lambda: ended() or state() in panels, min(STOP_STEP, left))
