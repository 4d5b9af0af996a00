"""Run one Kimi turn in a workspace and report what it said and every file it changed.

The "before" snapshot is taken while Kimi starts up (off the critical path), or right away when a ready
standby Kimi serves the call (see ``_pool``). After the turn ends the "after" diff runs while Kimi sits
idle; then a cleanly finished Kimi exits in the background and the result is returned without waiting
for it. On error, timeout or cancellation the session is closed before returning, and the files already
changed are still reported. ``Runner.shutdown()`` stops every Kimi the runner still owns; the server holds
its runner through ``lazy_runner.LazyRunner``, which makes it at the first call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._logging import get_logger
from ..config import Settings, kimi_code_prefix
from ..drivers import KimiInstall, find_binary, probe
from ..errors import KimiMCPError
from ..scope import Scope
from ..secrets import Redactor, configured_secrets
from ..session import KimiSession
from ..task import RunWatch, TaskRequest
from ..workspace import resolve_workspace
from ._factory import model_alias, model_run, new_session, standby_key, start_flag
from ._pool import SessionPool, StandbyKey
from ._slots import Slots

if TYPE_CHECKING:
    from ..models import TaskResult

__all__ = ["RunWatch", "Runner", "TaskRequest"]

log = get_logger("runner")


class Runner:
    """Runs tasks; owns the concurrency slots and every Kimi process that outlives a call."""

    def __init__(self) -> None:
        self.slots = Slots()
        self.pool = SessionPool()

    def run(
        self,
        request: TaskRequest,
        settings: Settings,
        *,
        scope: Scope,
        environ: Mapping[str, str],
        watch: RunWatch | None = None,
    ) -> TaskResult:
        """Blocking: run the task in ``environ`` (the server's, read at its start) under ``scope`` (its
        deadline starts now); always a TaskResult (``success=False`` with ``error`` on failure). ``watch``
        is kept current while it runs (queued, session id, files changed so far)."""
        # a turn's whole machinery (result models, evidence, fix rounds) loads at the first run, not for a
        # standby a first call starts while the server still loads (start-up speed: 0.1 s of CPU there)
        from ._run import TaskRun

        return TaskRun(self, request, settings, scope=scope, environ=environ, watch=watch).run()

    def prewarm(self, key: StandbyKey, install: KimiInstall, settings: Settings, env: dict[str, str]) -> None:
        """Start a standby Kimi for ``key`` in the background (see ``_pool``)."""

        def factory(cancel: threading.Event) -> KimiSession:
            deadline = time.monotonic() + settings.startup_timeout
            scope = Scope(deadline=deadline, cancel=cancel, redactor=Redactor(configured_secrets(env)))
            workspace = Path(key.workspace)
            return new_session(
                install, workspace, key.read_only, settings, env, scope=scope,
                model=start_flag(install, key.model, env),
            )  # fmt: skip

        self.pool.prewarm(key, factory, settings.standby_idle, settings.max_standbys)

    def prewarm_default(self, settings: Settings, environ: Mapping[str, str]) -> None:
        """``standby = "startup"``: a write-mode standby for the default workspace, started at server start."""
        self.prewarm_for(settings, environ, None, read_only=False)

    def prewarm_for(
        self, settings: Settings, environ: Mapping[str, str], work_dir: str | None, read_only: bool
    ) -> None:
        """A standby for a call's ``work_dir`` (else the default workspace) in that mode, on the default model."""
        env = dict(environ)
        try:
            workspace = resolve_workspace(
                work_dir, [], settings.workspace, allow_home=settings.allow_home_workspace
            )
            binary = find_binary(settings.kimi_bin, env, kimi_code_prefix(env))
            install = probe(binary, env, settings.dialect)
            model = model_run(install, model_alias(install, None, settings, env), env)
        except (KimiMCPError, OSError) as exc:
            log.info("no standby started: %s", exc)
            return
        key = standby_key(binary, install, workspace, read_only, settings, model)
        self.prewarm(key, install, settings, env)

    def shutdown(self) -> None:
        """Stop every standby and finish every background exit (server shutdown)."""
        self.pool.shutdown()
