"""The ``kimi-mcp`` command line: ``--help`` and ``--version`` answer without loading the server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kimi_mcp import __version__

PROBE = """
import sys
from kimi_mcp import cli
try:
    cli.main([{arg!r}])
except SystemExit as exit:
    code = exit.code
heavy = sorted(m for m in ("fastmcp", "mcp", "pydantic", "pexpect", "kimi_mcp.server") if m in sys.modules)
print("HEAVY:" + ",".join(heavy), "CODE:" + str(code))
"""


@pytest.mark.parametrize("arg", ["--help", "--version"])
def test_help_and_version_import_nothing_heavy(arg: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(arg=arg)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "HEAVY: CODE:0" in done.stdout, done.stdout + done.stderr
    if arg == "--version":
        assert f"kimi-mcp {__version__}" in done.stdout
    else:
        assert "--http" in done.stdout and "kimi_continue" in done.stdout


def test_a_bad_argument_is_refused_by_the_parser() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kimi_mcp", "--nope"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "unrecognized arguments: --nope" in done.stderr


def test_the_server_loads_kimis_machinery_only_at_the_first_call() -> None:
    probe = (
        "import sys, kimi_mcp.server\n"
        "from kimi_mcp.config import Settings\n"
        "kimi_mcp.server.create_server(Settings())\n"
        "print(sorted(m for m in ('kimi_mcp.runner', 'kimi_mcp.session', 'kimi_mcp.tracker', 'pexpect', 'psutil')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
