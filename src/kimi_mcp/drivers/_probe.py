"""Find the Kimi binary and tell which version and dialect it is, without running more than ``--version``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from .. import own_kimi
from ..errors import InstallError
from .base import KimiInstall

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_STUB_TEXT = "no longer maintained"
_cache: dict[tuple[str, int, int, str], KimiInstall] = {}
_cache_lock = threading.Lock()

LEGACY_REMEDY = "uv tool install --python 3.13 kimi-cli==1.51.0"
INSTALL_KIMI = (
    "`kimi-mcp install-kimi` (Kimi Code and Node 22 into kimi-mcp's own data directory, where kimi-mcp "
    "finds them without PATH changes)"
)
KIMI_CODE_REMEDY = f"{INSTALL_KIMI}, or npm install -g @moonshot-ai/kimi-code with Node >= 22.19"
NODE_OLDEST = (22, 19)  # what Kimi Code's package declares
LEGACY_OLDEST = (1, 31)  # --plan, the session log and the approval panels as driven here
LEGACY_NEWEST = (1, 51)  # 1.51.0 ships 1.50.0's code; 1.52.0 is the deprecation stub
SUPPORTED = "legacy kimi-cli 1.31.0-1.51.0, or Kimi Code (0.43.1 and 2.x)"
#: what only the deprecation stub ships (kimi-cli 1.52.0): it tells the stub by what it is, not its number
_STUB_MODULE = ("kimi_cli", "deprecation.py")
_LEGACY_BANNER = "kimi, version"  # what kimi-cli's --version prints; Kimi Code prints the bare version


def find_binary(configured: str | None, env: dict[str, str], own_prefix: Path | None = None) -> str:
    """``KIMI_MCP_KIMI_BIN`` if set, else kimi-mcp's own Kimi Code (``install-kimi`` into ``own_prefix``),
    else ``kimi`` on the PATH the child will see."""
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise InstallError(
                f"KIMI_MCP_KIMI_BIN={configured} is not an executable file",
                details={"kimi_bin": configured},
            )
        return str(path)
    own = own_kimi.find(own_prefix) if own_prefix is not None else None
    found = str(own) if own is not None else shutil.which("kimi", path=env.get("PATH"))
    if not found:
        own_place = f", nor in kimi-mcp's own install ({own_prefix})" if own_prefix is not None else ""
        raise InstallError(
            f"The Kimi CLI (`kimi`) was not found on PATH{own_place}",
            details={"PATH": env.get("PATH", ""), "own_install": str(own_prefix)},
            suggestion=(
                f"Run {INSTALL_KIMI}. Or install Kimi Code yourself (npm install -g @moonshot-ai/kimi-code, "
                f"Node >= 22.19) or the legacy kimi-cli ({LEGACY_REMEDY}): MCP clients often start servers "
                "with a minimal PATH, so then set KIMI_MCP_KIMI_BIN to the absolute path of `kimi`."
            ),
        )
    return found


def check_node(install: KimiInstall, env: dict[str, str]) -> str | None:
    """For Kimi Code run by ``node`` from the PATH (its script's ``#!/usr/bin/env node``): that node's
    version, refused with an ``install`` error when it is older than Node 22.19 (Kimi Code would only die
    at startup). ``None`` when there is nothing to check (legacy kimi-cli, or a launcher without node)."""
    if install.dialect != "kimi-code":
        return None
    try:
        with open(os.path.realpath(install.binary), "rb") as script:
            shebang = script.readline(200).decode("utf-8", "replace")
    except OSError:
        return None
    if not shebang.startswith("#!") or "node" not in shebang:
        return None
    env = install.environment(env)  # kimi-mcp's own install runs on the Node installed with it
    named = shebang[2:].split()
    node = shutil.which("node", path=env.get("PATH")) if Path(named[0]).name == "env" else named[0]
    if not node:
        raise InstallError(
            "Kimi Code needs Node >= 22.19, and there is no `node` on the PATH kimi-mcp gives Kimi",
            details={"kimi_bin": install.binary, "PATH": env.get("PATH", "")},
            suggestion=f"Install Node 22.19 or newer and put it first on the server's PATH, or run {INSTALL_KIMI}.",
        )
    version = _node_version(node, env)
    match = _VERSION.search(version or "")
    if match is None or (int(match.group(1)), int(match.group(2))) < NODE_OLDEST:
        raise InstallError(
            f"Kimi Code needs Node >= 22.19; the node on the PATH kimi-mcp gives Kimi ({node}) is "
            f"{version or 'of unknown version'}",
            details={"node": node, "node_version": version, "kimi_bin": install.binary},
            suggestion=(
                "Put Node 22.19 or newer first on the PATH the MCP client starts kimi-mcp with (e.g. the "
                f"client's env for the server), or run {INSTALL_KIMI}; that one is used unless "
                "KIMI_MCP_KIMI_BIN names another Kimi."
            ),
        )
    return version


_node_cache: dict[tuple[str, int], str | None] = {}


def _node_version(node: str, env: dict[str, str]) -> str | None:
    """``node --version`` (cached per binary and its mtime)."""
    try:
        key = (os.path.realpath(node), os.stat(node).st_mtime_ns)
    except OSError:
        return None
    with _cache_lock:
        if key in _node_cache:
            return _node_cache[key]
    try:
        proc = subprocess.run(
            [node, "--version"], env=env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
        version = proc.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        version = None
    with _cache_lock:
        _node_cache[key] = version
    return version


def installed_version(binary: str) -> tuple[str, str] | None:
    """(version, dialect) read from the installed package's metadata, without running anything.

    Kimi Code: the ``package.json`` of ``@moonshot-ai/kimi-code`` next to the resolved ``main.mjs``.
    kimi-cli: the ``kimi_cli-<version>.dist-info`` in the site-packages of the interpreter named by the
    script's shebang; its dialect is ``"stub"`` when the package is the deprecation stub (it ships
    ``kimi_cli/deprecation.py``). None when the layout is not recognised (then ``kimi --version`` is asked).
    """
    real = Path(os.path.realpath(binary))
    for folder in list(real.parents)[:4]:
        package = folder / "package.json"
        if package.is_file():
            try:
                meta = json.loads(package.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if meta.get("name") == "@moonshot-ai/kimi-code" and isinstance(meta.get("version"), str):
                return meta["version"], "kimi-code"
            return None
    try:
        with open(real, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    interpreter = Path(first[2:].decode("utf-8", "replace").strip().split()[0])
    if "python" not in interpreter.name:
        return None
    for dist in interpreter.parent.parent.glob("lib/python3*/site-packages/kimi_cli-*.dist-info"):
        version = dist.name.removeprefix("kimi_cli-").removesuffix(".dist-info")
        if _VERSION.fullmatch(version):
            return version, "stub" if dist.parent.joinpath(*_STUB_MODULE).is_file() else "legacy"
    return None


def probe(binary: str, env: dict[str, str], forced: str = "auto") -> KimiInstall:
    """Which Kimi this is: from the package metadata when possible, else ``kimi --version``.

    Nothing else is ever run here: the stub (kimi-cli 1.52.0) starts a ``curl | bash`` installer when run
    bare.
    """
    try:
        stat = os.stat(binary)
    except OSError as exc:
        raise InstallError(f"cannot stat Kimi binary {binary}: {exc}") from exc
    key = (os.path.realpath(binary), stat.st_mtime_ns, stat.st_size, forced)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    static = installed_version(binary)
    if static is not None:
        version, dialect = static
        if dialect == "stub":
            raise _stub_error(binary, version, {"version": version, "stub_module": "/".join(_STUB_MODULE)})
        output = f"{_LEGACY_BANNER} {version}" if dialect == "legacy" else version
        install = _classify(binary, output, 0, forced, known=dialect)
        with _cache_lock:
            _cache[key] = install
        return install
    try:
        proc = subprocess.run(
            [binary, "--version"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"`{binary} --version` failed: {exc}", details={"kimi_bin": binary}) from exc
    output = (proc.stdout + "\n" + proc.stderr).strip()
    install = _classify(binary, output, proc.returncode, forced)
    with _cache_lock:
        _cache[key] = install
    return install


def _classify(
    binary: str, output: str, returncode: int, forced: str, known: str | None = None
) -> KimiInstall:
    """The install ``output`` (of ``--version``) describes; ``known``: the dialect from the package name."""
    tail = output[-800:]
    if _STUB_TEXT in output:
        version = _VERSION.search(output)
        raise _stub_error(binary, version.group(0) if version else ">=1.51", {"version_output": tail})
    match = _VERSION.search(output)
    if returncode != 0 or not match:
        hint = ""
        if "SyntaxError" in output or "node:" in output or "Unsupported engine" in output:
            hint = " (Kimi Code needs Node >= 22.19 on the PATH)"
        raise InstallError(
            f"`{binary} --version` did not report a version{hint}",
            details={"kimi_bin": binary, "returncode": returncode, "version_output": tail},
        )
    version = match.group(0)
    dialect = known or _dialect_of(output, int(match.group(1)))
    if dialect == "legacy":
        _check_legacy(binary, version, (int(match.group(1)), int(match.group(2))))
    chosen = dialect if forced == "auto" else forced
    node_dir = own_kimi.node_dir(binary) if chosen == "kimi-code" else None
    return KimiInstall(binary=binary, version=version, dialect=chosen, node_dir=node_dir)  # type: ignore[arg-type]


def _dialect_of(output: str, major: int) -> str:
    """Without package metadata: kimi-cli prints ``kimi, version X``; Kimi Code prints the bare version
    (0.x is Kimi Code's pre-2.0 numbering, the same product)."""
    if _LEGACY_BANNER in output.lower():
        return "legacy"
    return "kimi-code" if major >= 2 or major == 0 else "legacy"


def _check_legacy(binary: str, version: str, major_minor: tuple[int, int]) -> None:
    if major_minor > LEGACY_NEWEST:
        raise _stub_error(binary, version, {"version": version})
    if major_minor < LEGACY_OLDEST:
        raise InstallError(
            f"{binary} is kimi-cli {version}, older than kimi-mcp supports ({SUPPORTED})",
            details={"kimi_bin": binary, "version": version},
            suggestion=(
                f"Upgrade to the last legacy release ({LEGACY_REMEDY}) or install Kimi Code ({KIMI_CODE_REMEDY})."
            ),
        )


def _stub_error(binary: str, version: str, details: dict[str, str]) -> InstallError:
    return InstallError(
        f"{binary} is kimi-cli {version}, the deprecated stub (the last working legacy release is 1.51.0); "
        "it cannot run tasks",
        details={"kimi_bin": binary, **details},
        suggestion=(
            f"Install Kimi Code CLI ({KIMI_CODE_REMEDY}; unset a KIMI_MCP_KIMI_BIN naming this stub) or pin "
            f"the last working legacy CLI ({LEGACY_REMEDY}) and point KIMI_MCP_KIMI_BIN at it."
        ),
    )
