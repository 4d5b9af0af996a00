"""The ``kimi-mcp`` command line: ``--help`` and ``--version`` answer without loading the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_mcp import __version__

PROBE = """
import sys
from kimi_mcp import cli
try:
    cli.main({argv!r})
except SystemExit as exit:
    code = exit.code
heavy = ("fastmcp", "mcp", "pydantic", "pexpect", "kimi_mcp.server", "kimi_mcp.jobs")
print("HEAVY:" + ",".join(sorted(m for m in heavy if m in sys.modules)), "CODE:" + str(code))
"""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--help"], ["--http", "kimi_continue"]),
        (["--version"], [f"kimi-mcp {__version__}"]),
        (["prune", "--help"], ["--older-than DAYS"]),
        (["install-kimi", "--help"], ["--prefix"]),
        (["jobs", "--help"], ["--status", "--json"]),
        (["watch", "--help"], ["JOB_ID", "--interval S"]),
    ],
)
def test_help_and_version_import_nothing_heavy(argv: list[str], says: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "HEAVY: CODE:0" in done.stdout, done.stdout + done.stderr
    assert all(text in done.stdout for text in says), done.stdout


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


def test_check_fails_on_an_unknown_tool_and_warns_of_a_misspelt_variable(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "KIMI_MCP_KIMI_BIN": str(tmp_path / "nope"),
        "KIMI_MCP_TOOLS": "kimi_consul", "KIMI_MCP_TIMOUT": "5",
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "kimi_mcp", "--check"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PROBLEM (config): KIMI_MCP_TOOLS names unknown tools ['kimi_consul']" in done.stdout
    assert (
        "WARNING: KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored; did you mean KIMI_MCP_TIMEOUT?"
        in (done.stdout)
    )


def test_check_into_a_pipe_closed_early_says_nothing_more(tmp_path: Path) -> None:
    """`kimi-mcp --check | true`: the reader is gone before the report is written."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KIMI_MCP_KIMI_BIN": str(tmp_path / "nope")}
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        done = subprocess.run(
            [sys.executable, "-m", "kimi_mcp", "--check"], env=env, stdout=closed, stderr=subprocess.PIPE,
            text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1 and done.stderr == "", done.stderr
