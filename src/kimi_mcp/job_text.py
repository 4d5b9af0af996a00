"""A job's facts as text a person reads: its status names, tokens, age and duration, workspace path, and
anything it recorded made printable. Shared by ``kimi-mcp jobs`` / ``watch`` (``cli/``) and the dashboard;
the standard library only (``kimi-mcp jobs --help`` imports it)."""

from __future__ import annotations

import re

#: the job statuses (``jobs._store.STATUSES``, spelt out so ``--help`` imports nothing)
STATUSES = ("done", "running", "starting", "queued", "waiting", "failed", "cancelled", "interrupted")
WORKSPACE_WIDTH = 32  # a longer workspace keeps its end: "…/project/sub"

# A whole escape sequence (CSI, OSC, or ESC + one character), then any other control character but "\n".
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def short_path(path: str, home: str) -> str:
    """``path`` with ``~`` for the home directory, its end kept if it is still long."""
    if home and home != "/" and (path == home or path.startswith(home.rstrip("/") + "/")):
        path = "~" + path[len(home.rstrip("/")) :]
    return path if len(path) <= WORKSPACE_WIDTH else "…" + path[-(WORKSPACE_WIDTH - 1) :]


def human_tokens(n: int) -> str:
    """``0``, ``950``, ``12.3k``, ``1.5M``."""
    if n < 1000:
        return str(n)
    if n < 999_950:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def human_age(seconds: float) -> str:
    """``12s``, ``3m``, ``2h``, ``5d``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def elapsed(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def printable(text: str) -> str:
    """``text`` without escape sequences or control characters (newlines kept, tabs as spaces): what a job
    recorded cannot drive the reader's terminal (nor a page's markup, once escaped)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text.replace("\t", "    ")))
