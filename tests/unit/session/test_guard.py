"""The guard a Kimi runs under (``session/_guard.py``): Kimi's exit status passes through, and nothing below
it survives Kimi's exit, the server's death (SIGKILL included) or a SIGTERM; a Ctrl-C is Kimi's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kimi_mcp.session._process import GUARD, guarded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard is Linux's")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def read_pid(path: Path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"no pid in {path}")


def test_argv_runs_under_the_guard_of_this_server() -> None:
    assert guarded(["kimi", "-m", "x"]) == [
        sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), "--", "kimi", "-m", "x",
    ]  # fmt: skip


def test_kimis_exit_status_passes_through() -> None:
    assert subprocess.run(guarded(["sh", "-c", "exit 7"]), timeout=30).returncode == 7
    assert subprocess.run(guarded(["sh", "-c", "kill -TERM $$"]), timeout=30).returncode == 128 + 15
    assert subprocess.run(guarded(["/nonexistent/kimi"]), timeout=30, capture_output=True).returncode == 127


def test_what_kimi_left_in_a_session_of_its_own_ends_with_kimi(tmp_path: Path) -> None:
    script = f"setsid sleep 300 & echo $! > {tmp_path / 'pid'}"
    assert subprocess.run(guarded(["sh", "-c", script]), timeout=30).returncode == 0
    assert wait_gone(read_pid(tmp_path / "pid"))


def test_everything_ends_when_the_server_is_killed(tmp_path: Path) -> None:
    """A stand-in server (its own process) starts the guard, then dies by SIGKILL."""
    script = f"setsid sleep 300 & echo $! > {tmp_path / 'pid'}; exec sleep 300"
    server_code = (
        "import subprocess, sys, time\n"
        "from kimi_mcp.session._process import guarded\n"
        f"subprocess.Popen(guarded(['sh', '-c', {script!r}]))\n"
        "time.sleep(300)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", server_code])
    try:
        detached = read_pid(tmp_path / "pid")
        guard = next(p for p in psutil.Process(server.pid).children() if str(GUARD) in p.cmdline())
        below = [p.pid for p in guard.children(recursive=True)]
        assert detached in below or alive(detached)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert wait_gone(guard.pid) and wait_gone(detached) and all(wait_gone(pid) for pid in below)
    finally:
        server.kill()


def test_sigterm_stops_kimi_and_all_below_and_ctrl_c_is_left_to_kimi(tmp_path: Path) -> None:
    script = f"trap '' INT; setsid sleep 300 & echo $! > {tmp_path / 'pid'}; sleep 300"
    guard = subprocess.Popen(guarded(["sh", "-c", script]))
    try:
        detached = read_pid(tmp_path / "pid")
        guard.send_signal(signal.SIGINT)  # what the pty sends the foreground group on Ctrl-C
        time.sleep(0.5)
        assert guard.poll() is None and alive(detached)
        guard.send_signal(signal.SIGTERM)
        assert guard.wait(timeout=10) == 128 + 15
        assert wait_gone(detached)
    finally:
        guard.kill()
