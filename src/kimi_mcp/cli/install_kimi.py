"""``kimi-mcp install-kimi``: install Kimi Code and a Node 22 to run it on, with the system's npm, into
kimi-mcp's own data directory, where the server finds them without any PATH change.

Imported to build ``--help``: nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from .. import own_kimi

NPM_MISSING = (
    "kimi-mcp install-kimi: npm is not on PATH. It only needs npm itself (any Node version runs it), e.g. "
    "`sudo apt install npm` (Debian/Ubuntu), `brew install node` (macOS) or https://nodejs.org; then run "
    "`kimi-mcp install-kimi` again."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version",
        dest="kimi_version",
        default=own_kimi.KIMI_CODE_VERSION,
        metavar="X",
        help="the Kimi Code version to install (default: %(default)s, the one kimi-mcp is tested with)",
    )
    parser.add_argument(
        "--prefix",
        type=Path,
        metavar="DIR",
        help="install into DIR instead of kimi-mcp's data directory ($XDG_DATA_HOME/kimi-mcp/kimi-code, "
        "else ~/.local/share/kimi-mcp/kimi-code); the server then needs KIMI_MCP_KIMI_BIN=DIR/node_modules/.bin/kimi",
    )


def run(args: argparse.Namespace) -> int:
    """Install (or find already installed) and say where; 0 on success, 1 with the reason otherwise."""
    from ..config import configured, kimi_code_prefix, load_env_file, read_environment  # not for --help

    load_env_file()  # the server reads it too: XDG_DATA_HOME set there moves the data directory for both
    env = read_environment()
    settings, _problem = configured(env)
    default = kimi_code_prefix(env)
    prefix = (args.prefix.expanduser().absolute() if args.prefix else default).resolve()
    npm = shutil.which("npm")
    if npm is None:
        return _fail(NPM_MISSING)
    try:
        node_package = own_kimi.node_package()
    except own_kimi.UnsupportedPlatform as exc:
        return _fail(
            f"kimi-mcp install-kimi: npm has no Node {own_kimi.NODE_MAJOR} package for {exc}. Install Node "
            ">= 22.19 and Kimi Code yourself (npm install -g @moonshot-ai/kimi-code), then set "
            "KIMI_MCP_KIMI_BIN to its `kimi` or put it on the server's PATH."
        )
    if own_kimi.marker(prefix).exists() and not own_kimi.is_own(prefix):
        return _fail(
            f"kimi-mcp install-kimi: {prefix} holds another npm project ({own_kimi.marker(prefix).name}), "
            "which it will not touch; choose a new or empty directory with --prefix."
        )
    installed = _installed_version(prefix)
    if installed == args.kimi_version:
        print(f"Kimi Code {installed} is already installed in {prefix}")
    else:
        code = _npm_install(npm, prefix, node_package, args.kimi_version)
        if code != 0:
            return _fail(f"kimi-mcp install-kimi: npm install failed (exit {code}); its output is above.")
        if _installed_version(prefix) is None:
            return _fail(
                f"kimi-mcp install-kimi: npm finished, but there is no Kimi Code with Node in {prefix}."
            )
    _report(prefix, own=prefix == default.resolve(), kimi_bin=settings.kimi_bin)
    return 0


def _installed_version(prefix: Path) -> str | None:
    """The Kimi Code version complete in ``prefix`` (Node included), else None."""
    from ..drivers import installed_version  # loaded only when the command runs: its --help answers at once

    kimi = own_kimi.find(prefix)
    found = installed_version(str(kimi)) if kimi is not None else None
    return found[0] if found is not None and found[1] == "kimi-code" else None


def _npm_install(npm: str, prefix: Path, node_package: str, version: str) -> int:
    """npm installs both into ``prefix`` in one go (Kimi Code's install scripts find that Node first on
    their PATH). A local install: Kimi Code's postinstall leaves global ``kimi`` shims alone."""
    prefix.mkdir(parents=True, exist_ok=True)
    own_kimi.write_marker(prefix)
    specs = [f"{node_package}@{own_kimi.NODE_MAJOR}", f"{own_kimi.KIMI_CODE_PACKAGE}@{version}"]
    print(f"Installing {' and '.join(specs)} into {prefix} with {npm} ...", file=sys.stderr, flush=True)
    command = [
        npm,
        "install",
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--global=false",
        "--save-exact",
        *specs,
    ]
    # npm's output goes to descriptor 2 (stderr) itself, so stdout keeps only the summary
    return subprocess.run(command, cwd=prefix, stdout=2, stdin=subprocess.DEVNULL).returncode


def _report(prefix: Path, *, own: bool, kimi_bin: str | None) -> None:
    kimi, node = own_kimi.kimi_path(prefix), own_kimi.node_path(prefix).resolve()
    node_version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"Kimi Code {_installed_version(prefix)} on Node {node_version or '(unknown version)'}")
    print(f"  kimi: {kimi}\n  node: {node}")
    if not own:
        print(f"Point the server at it: KIMI_MCP_KIMI_BIN={kimi} (it runs on the Node above by itself).")
    elif kimi_bin:
        print(
            f"Note: KIMI_MCP_KIMI_BIN={kimi_bin} is set, and wins: unset it for the server to use this install."
        )
    else:
        print("kimi-mcp finds it there by itself (before any `kimi` on PATH); `kimi-mcp --check` shows it.")
    print(
        f"Log Kimi in once with `{node} {kimi}` and /login, or give the server MOONSHOT_API_KEY "
        "(kimi-mcp then logs Kimi in at the first call)."
    )


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 1
