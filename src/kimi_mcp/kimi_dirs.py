"""Where either Kimi keeps its own state (sessions, caches, config, login) for the environment it runs in:
never a task's change, and where Kimi's stored keys are found; and kimi-mcp's own cache folder."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def kimi_state_dirs(env: Mapping[str, str]) -> list[Path]:
    """Both dialects' homes: ``~/.kimi`` (kimi-cli; ``KIMI_SHARE_DIR`` moves it) and ``~/.kimi-code`` (Kimi
    Code; ``KIMI_CODE_HOME``), ``~`` being the ``HOME`` of ``env``."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    dirs = [home / ".kimi", home / ".kimi-code"]
    dirs += [Path(env[name]) for name in ("KIMI_SHARE_DIR", "KIMI_CODE_HOME") if env.get(name)]
    return dirs


def cache_dir(env: Mapping[str, str]) -> Path:
    """kimi-mcp's cache (files it can make again): ``$XDG_CACHE_HOME/kimi-mcp``, else ``~/.cache/kimi-mcp``
    (``~``: the ``HOME`` of ``env``; not created here)."""
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")) / "kimi-mcp"
