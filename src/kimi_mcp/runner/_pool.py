"""Kimi processes that outlive one tool call: ready standbys and sessions still exiting.

A *standby* is a Kimi started for the same workspace and mode ahead of the next call (or at server start),
so that call skips Kimi's startup (about 2–2.7 s: the README's "Kimi's startup"). Kimi reads ``AGENTS.md``
into the model's system prompt at startup, and kimi-cli 1.x also the workspace's top two directory levels
(Kimi Code lists the workspace at the first message instead), so a standby is used only while what it read
is unchanged since it was spawned; otherwise it is stopped and the call starts a fresh Kimi. A standby that
is not used within ``idle`` seconds exits.

An *active* session is serving a call right now (registered so that shutdown can stop it too).

A *live* session has finished a turn and stays alive, idle, for a follow-up in the same conversation
(``kimi_continue``): kept ``idle`` seconds after its last turn, at most ``limit`` of them (the least recently
used is closed first). A live session closes with Kimi's own exit, so Kimi saves the conversation and a
later follow-up resumes it from Kimi's session store.

A *retiring* session has finished its turn and exits in the background, so a result does not wait for
Kimi's own shutdown (0.5–2 s).

``shutdown()`` stops all of them (server exit, SIGTERM, ``atexit``): nothing outlives the server.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._logging import CLIENT, for_client, get_logger
from ..session import KimiSession

log = get_logger("pool")

HALT_WAIT = 5.0  # seconds a standby's thread has to stop before its Kimi is killed under it
_INSTRUCTION_FILES = frozenset({"agents.md", "claude.md"})


@dataclass(frozen=True, slots=True)
class StandbyKey:
    """What a standby must match to serve a call."""

    binary: str
    version: str
    workspace: str
    read_only: bool
    allow_shell: bool
    lists_workspace: bool  # the dialect reads the workspace listing at startup (part of the signature)
    model: str | None = None  # the model alias Kimi runs (named, or its default; None: none yet)


def workspace_signature(root: Path, listing: bool = True) -> tuple:
    """What Kimi reads into its system prompt at startup: the instruction files and (``listing``) two
    levels of names."""
    entries: list[tuple] = []
    try:
        with os.scandir(root) as top:
            for entry in top:
                is_dir = entry.is_dir(follow_symlinks=False)
                if entry.name.lower() in _INSTRUCTION_FILES:
                    st = entry.stat(follow_symlinks=False)
                    entries.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
                if not listing:
                    continue
                entries.append((entry.name, is_dir))
                if is_dir:
                    try:
                        with os.scandir(entry.path) as inner:
                            names = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in inner)
                    except OSError:
                        names = [("?unreadable", False)]
                    entries.append((entry.name, tuple(names)))
    except OSError:
        return ("?unreadable",)
    return tuple(sorted(entries, key=repr))


class _Standby:
    def __init__(
        self,
        key: StandbyKey,
        signature: tuple,
        factory: Callable[[threading.Event], KimiSession],
        *,
        live: bool = False,
    ) -> None:
        self.key = key
        self.live = live  # a session kept after its turn (else a fresh standby)
        self.signature = signature
        self.session: KimiSession | None = None
        self.failed = False
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.timer: threading.Timer | None = None
        self._factory = factory
        self.thread = threading.Thread(target=self._run, name="kimi-standby", daemon=True)

    def _run(self) -> None:
        try:
            self.session = self._factory(self.stop)  # halting a standby also aborts its startup
            if not self.live:  # a live session has started long ago
                self.session.start()
        except Exception as exc:  # the next call starts Kimi itself and reports the real error
            log.info("standby Kimi did not start: %s", exc, extra=CLIENT)
            self.failed = True
            if self.session is not None:
                self.session.kill()
            self.ready.set()
            return
        self.ready.set()
        self.session.idle_until(self.stop)

    def halt(self, wait: float) -> KimiSession | None:
        """Stop the idle loop; returns the session (now owned by the caller) if it started. A thread that
        does not stop within ``wait`` seconds has its Kimi killed under it (it then ends on Kimi's exit)."""
        self.stop.set()
        if self.timer is not None:
            self.timer.cancel()
        if self.session is not None:
            self.session.wake()
        self.thread.join(timeout=wait)
        if self.thread.is_alive():
            log.warning("a standby Kimi did not stop within %.0fs; killing it", wait)
            if self.session is not None:
                self.session.kill()  # signals only: the standby's thread still owns the terminal
            self.thread.join(timeout=wait)
            return None
        return None if self.failed else self.session


class SessionPool:
    """Standbys per :class:`StandbyKey` and sessions exiting in the background."""

    def __init__(self, halt_wait: float = HALT_WAIT) -> None:
        self.halt_wait = halt_wait
        self._lock = threading.Lock()
        self._standbys: dict[StandbyKey, _Standby] = {}
        self._live: dict[str, _Standby] = {}  # session id -> live session, least recently used first
        self._retiring: dict[threading.Thread, KimiSession | None] = {}
        self._active: set[KimiSession] = set()
        self._closed = False

    # -- sessions serving a call ---------------------------------------------------------------------------
    def adopt(self, session: KimiSession) -> None:
        """Register a session that serves a call now."""
        with self._lock:
            self._active.add(session)

    def release(self, session: KimiSession) -> None:
        """The call is done with ``session`` (closed, or handed to :meth:`retire`)."""
        with self._lock:
            self._active.discard(session)

    # -- standbys --------------------------------------------------------------------------------------
    def prewarm(
        self, key: StandbyKey, factory: Callable[[threading.Event], KimiSession], idle: float, limit: int
    ) -> None:
        """Start a standby for ``key`` in the background unless one exists already; at most ``limit`` of
        them (the oldest exits; 0: none).

        ``factory(cancel)`` builds the (unstarted) session; ``cancel`` is set when the standby is stopped.
        """
        if limit <= 0:
            return
        signature = workspace_signature(Path(key.workspace), key.lists_workspace)  # before Kimi reads it
        with self._lock:
            if self._closed or key in self._standbys:
                return
            standby = _Standby(key, signature, factory)
            evicted = self._add(self._standbys, key, standby, idle, limit)
        for old in evicted:
            self._retire_standby(old)
        log.info(
            "standby Kimi starting for %s (%s)", key.workspace, "read-only" if key.read_only else "write"
        )

    def take(
        self, key: StandbyKey, cancel: threading.Event, deadline: float, job_id: str | None = None
    ) -> KimiSession | None:
        """A ready standby for ``key`` if there is one and the workspace still matches, else ``None``;
        ``job_id``: the taking job (what happened is told its client)."""
        with self._lock:
            standby = self._standbys.pop(key, None)
        if standby is None:
            return None
        if workspace_signature(Path(key.workspace), key.lists_workspace) != standby.signature:
            log.info(
                "workspace changed since the standby started; starting a fresh Kimi", extra=for_client(job_id)
            )
            self._retire_standby(standby)
            return None
        while not standby.ready.wait(0.05):  # still starting: waiting beats a cold start
            if cancel.is_set() or time.monotonic() >= deadline:
                self._retire_standby(standby)
                return None
        session = standby.halt(self.halt_wait)
        if session is None or not session.usable(limit=1.0):
            if session is not None:
                self.retire(session, graceful=False)
            return None
        log.info("using the standby Kimi for %s", key.workspace, extra=for_client(job_id))
        return session

    def _add(self, table: dict, key: object, holder: _Standby, idle: float, limit: int) -> list[_Standby]:
        """Under the lock: start ``holder`` and file it in ``table`` (standbys or live sessions), with its
        idle timer; returns the oldest ones it displaced beyond ``limit`` (the caller retires them)."""
        evicted = []
        while len(table) >= limit:
            evicted.append(table.pop(next(iter(table))))
        table[key] = holder
        holder.timer = threading.Timer(idle, self._expire, args=(table, key, holder))
        holder.timer.daemon = True
        holder.thread.start()  # under the lock: shutdown never sees an unstarted one
        holder.timer.start()
        return evicted

    def _expire(self, table: dict, key: object, holder: _Standby) -> None:
        with self._lock:
            if table.get(key) is not holder:
                return
            del table[key]
        what = "live Kimi session (a follow-up resumes it)" if holder.live else "unused standby Kimi"
        log.info("closing the idle %s for %s", what, holder.key.workspace)
        self._retire_standby(holder, graceful=True)

    def _retire_standby(self, standby: _Standby, graceful: bool = False) -> None:
        def stop() -> None:
            session = standby.halt(self.halt_wait)
            if session is not None:
                session.close() if graceful else session.kill()

        self._background(stop, standby.session)

    # -- live sessions (kimi_continue) ---------------------------------------------------------------------
    def keep(self, session: KimiSession, key: StandbyKey, idle: float, limit: int) -> bool:
        """Keep ``session`` (its turn just ended cleanly) alive for a follow-up; ``False`` when it cannot be
        kept (no session id, ``limit`` 0, shutting down): the caller retires it."""
        session_id = session.session_id
        if session_id is None or limit <= 0:
            return False
        live = _Standby(key, (), lambda _stop: session, live=True)
        with self._lock:
            if self._closed:
                return False
            evicted = self._add(self._live, session_id, live, idle, limit)
        for old in evicted:
            log.info("closing the least recently used live Kimi session")
            self._retire_standby(old, graceful=True)
        return True

    def take_live(
        self, session_id: str, model: str | None = None, job_id: str | None = None
    ) -> KimiSession | None:
        """The live session ``session_id``, ready for the next turn, or ``None`` (gone: resume it). A live
        session started with another ``model`` is closed first (Kimi saves the conversation on its exit),
        so the follow-up resumes the conversation with the model asked for; ``job_id``: the taking job."""
        with self._lock:
            live = self._live.pop(session_id, None)
        if live is None:
            return None
        if live.key.model != model:
            log.info(
                "the live Kimi session runs another model; resuming it with %s",
                model or "the default",
                extra=for_client(job_id),
            )
            self._close_now(live)  # not in the background: the resumed Kimi must not overlap it
            return None
        session = live.halt(self.halt_wait)
        if session is None or not session.ready_again(limit=1.0):
            if session is not None:
                self.retire(session, graceful=False)
            return None
        return session

    def close_live(self, session_id: str) -> None:
        """Close the live session ``session_id`` now, if there is one (its workspace is going away)."""
        with self._lock:
            live = self._live.pop(session_id, None)
        if live is not None:
            self._close_now(live)

    def _close_now(self, live: _Standby) -> None:
        """Stop a live session's idle loop and let Kimi exit (it saves the conversation), waiting for it."""
        session = live.halt(self.halt_wait)
        if session is not None:
            session.close()

    def live(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._live

    # -- retiring ----------------------------------------------------------------------------------------
    def retire(self, session: KimiSession, graceful: bool = True) -> None:
        """Let ``session`` exit in the background (graceful: Kimi's own exit; else terminate it)."""
        self._background(session.close if graceful else session.kill, session)

    def _background(self, work: Callable[[], None], session: KimiSession | None) -> None:
        def run() -> None:
            try:
                work()
            except Exception:
                log.exception("closing a Kimi session failed")
            finally:
                with self._lock:
                    self._retiring.pop(threading.current_thread(), None)

        thread = threading.Thread(target=run, name="kimi-retire", daemon=True)
        with self._lock:
            self._retiring[thread] = session
        thread.start()

    # -- shutdown ----------------------------------------------------------------------------------------
    def shutdown(self, grace: float = 1.0) -> None:
        """Stop every standby and finish every exit; idempotent. Kills what is not gone after ``grace``."""
        with self._lock:
            self._closed = True
            standbys = [*self._standbys.values(), *self._live.values()]
            self._standbys.clear()
            self._live.clear()
            active = list(self._active)
        for session in active:  # calls still running when the server goes away
            self._background(lambda session=session: session.kill(grace=0.5), session)
        for standby in standbys:  # live sessions exit gracefully: Kimi saves the conversation
            self._retire_standby(standby, graceful=standby.live)
        end = time.monotonic() + grace
        while True:
            with self._lock:
                pending = dict(self._retiring)
            if not pending:
                return
            if time.monotonic() >= end:
                break
            next(iter(pending)).join(timeout=max(0.0, min(0.1, end - time.monotonic())))
        log.info("%d Kimi session(s) still exiting at shutdown; terminating them", len(pending))
        sessions = [s for s in pending.values() if s is not None]
        sessions += [sb.session for sb in standbys if sb.session is not None]
        killers = [threading.Thread(target=s.kill, kwargs={"grace": 0.5}, daemon=True) for s in sessions]
        for thread in killers:
            thread.start()
        for thread in killers:
            thread.join(timeout=3.0)

    def counts(self) -> tuple[int, int, int]:
        """(standbys, sessions serving calls, sessions exiting) — for tests and logs."""
        with self._lock:
            return len(self._standbys), len(self._active), len(self._retiring)

    def live_count(self) -> int:
        with self._lock:
            return len(self._live)
