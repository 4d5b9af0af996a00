"""A start-up fault, retried once in a fresh Kimi.

Kimi may look ready and not be: Kimi Code under heavy load showed its model, then answered the message with
"LLM not set" (``StartupFault``). The turn never began and the message never reached the model, so sending
it once more, to a fresh Kimi, is safe; a second fault is the call's error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._logging import get_logger
from ..errors import StartupFault
from ..session import TurnTrace
from . import _factory

if TYPE_CHECKING:
    from ._run import TaskRun

log = get_logger("runner")


def first_turn(run: TaskRun, message: str) -> TurnTrace:
    """The call's first turn in ``run.session``; after a start-up fault, in a fresh Kimi that replaces it
    (``run.session`` is then the fresh one, which the call's cleanup ends)."""
    old = run.session
    assert old is not None and run.install is not None
    try:
        return old.run_turn(message)
    except StartupFault as fault:
        log.warning("start-up fault (%s); starting a fresh Kimi", fault.message)
        run.progress(f"Kimi was not ready after all ({fault.message}); starting a fresh Kimi")
    pool = run.runner.pool
    old.close()
    pool.release(old)
    run.result.warm_start = False
    run.session = fresh = _factory.call_session(
        run.install, run.request, run.settings, run.env, run.scope, run.model_flag
    )
    pool.adopt(fresh)
    fresh.start()
    run.watch.session_id = fresh.session_id or run.watch.session_id
    return fresh.run_turn(message)
