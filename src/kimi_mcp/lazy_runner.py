"""The server's runner, made at its first Kimi call and handed down by the server: the tools run turns with
it, ``kimi_status`` and ``kimi_discard`` read its pool, the server's shutdown stops it. Until then Kimi's
machinery (pexpect, the tracker) is not imported, so a client's connect does not wait for it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings
    from .models import TaskResult
    from .runner import Runner
    from .task import TaskRequest


class LazyRunner:
    """One server's ``Runner`` (its slots, standbys and live conversations), made at the first use."""

    def __init__(self) -> None:
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    def get(self) -> Runner:
        """The runner; the first use imports it and makes it."""
        with self._lock:
            if self._runner is None:
                from .runner import Runner  # pexpect, the tracker: loaded at the first call (start-up speed)

                self._runner = Runner()
            return self._runner

    def __call__(self, request: TaskRequest, settings: Settings, **options: Any) -> TaskResult:
        """Run one Kimi turn: the executors' ``RunTask``, whose ``options`` (``environ`` and the rest) go to
        ``Runner.run`` as they are."""
        return self.get().run(request, settings, **options)

    def prewarm_default(self, settings: Settings, environ: Mapping[str, str]) -> None:
        """``standby = "startup"``: a standby for the default workspace (see ``Runner.prewarm_default``)."""
        self.get().prewarm_default(settings, environ)

    def prewarm_for(
        self, settings: Settings, environ: Mapping[str, str], work_dir: str | None, read_only: bool
    ) -> None:
        """A standby for a first call announced early (see ``first_call`` and ``Runner.prewarm_for``)."""
        self.get().prewarm_for(settings, environ, work_dir, read_only)

    def held(self) -> tuple[int, int]:
        """(standbys, live conversations) the runner holds now; none before the first call."""
        runner = self._runner
        if runner is None:
            return 0, 0
        return runner.pool.counts()[0], runner.pool.live_count()

    def close_live(self, session_id: str) -> None:
        """Close the conversation's live Kimi now, if the runner holds one."""
        if self._runner is not None:
            self._runner.pool.close_live(session_id)

    def shutdown(self) -> None:
        """Stop every Kimi the runner owns (server exit; idempotent); a runner never made owns none."""
        if self._runner is not None:
            self._runner.shutdown()
