"""The first call's Kimi, started while the server still loads (start-up speed).

Over stdio the fast connect (``_connect``) reads a client's requests from the first instant, while the
server spends a second or more importing the MCP SDK before it can read them. When the first request that
runs Kimi arrives in that time, its Kimi starts at once, as a standby for the workspace and mode that call
will run in (``Runner.prewarm_for``); the call, once the server reads it, takes that standby (still starting,
or ready): Kimi's own start overlaps the server's. Nothing starts when the server is up already (the call
starts its Kimi itself), with ``KIMI_MCP_STANDBY=off``, with a broker (jobs run on workers), with a
configuration the server refuses, or for a call a standby would not serve (a follow-up,
an isolated or several-attempt call, a named model, a dry run). A call whose client roots name another
workspace than the one guessed here (its ``work_dir``, else ``KIMI_MCP_WORKSPACE``, else the server's
directory) leaves the standby to whatever call comes next there, or to its idle timeout.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

from ._logging import get_logger
from .config import Settings
from .lazy_runner import LazyRunner
from .tool_names import TOOLS

log = get_logger("first_call")

#: the GIL's switch interval while a first call's Kimi starts beside the SDK's import (Python's default 5 ms):
#: that start reads hundreds of files, and after each read it waited for the importing thread's whole slice
#: (announced → Kimi spawned 0.27 s; 0.035 s alone)
SWITCH_INTERVAL = 0.0005

#: the tools that start a fresh Kimi, by the mode it runs in (read-only or not)
READ_ONLY = {name: TOOLS[name] == "read" for name in TOOLS if TOOLS[name] in ("write", "read")}
#: arguments with which a call does not run in a plain standby of its workspace
_OWN_KIMI = ("model", "isolation", "attempts", "session_id")


def standby_for(params: Any) -> tuple[str | None, bool] | None:
    """(``work_dir`` or None, read-only) of a ``tools/call`` a standby would serve, else None."""
    if not isinstance(params, dict) or params.get("name") not in READ_ONLY:
        return None
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, dict) or arguments.get("dry_run") is True:
        return None
    if any(arguments.get(name) not in (None, "", "none", 1) for name in _OWN_KIMI):
        return None
    work_dir = arguments.get("work_dir")
    return (work_dir if isinstance(work_dir, str) else None), READ_ONLY[params["name"]]


class FirstCall:
    """Starts the standby for a first call announced before the server is up (see the module)."""

    def __init__(self, runner: LazyRunner, settings: Settings, env: Mapping[str, str]) -> None:
        self._runner, self._settings, self._env = runner, settings, env
        self._up = threading.Event()
        self._interval: float | None = None  # Python's switch interval, while a shorter one holds
        self._lock = threading.Lock()

    def announced(self, params: Any) -> None:
        """The fast connect saw the client's first ``tools/call`` (called in its thread: returns at once)."""
        wanted = standby_for(params)
        if wanted is None or self._up.is_set() or self._settings.standby == "off" or self._settings.broker:
            return  # (with a broker the call runs on a worker)
        with self._lock:
            if self._interval is None and not self._up.is_set():
                self._interval = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL)
        threading.Thread(target=self._start, args=wanted, name="kimi-first-call", daemon=True).start()

    def _start(self, work_dir: str | None, read_only: bool) -> None:
        if self._up.is_set():
            return
        log.info("a first call came while the server loads: starting its Kimi now")
        self._runner.prewarm_for(self._settings, self._env, work_dir, read_only)

    def server_up(self) -> None:
        """The server reads requests itself from now on: a call announced later starts its own Kimi (and
        the import that shared the interpreter with the first call's start is over)."""
        with self._lock:
            self._up.set()
            if self._interval is not None:
                sys.setswitchinterval(self._interval)
                self._interval = None
