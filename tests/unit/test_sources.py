"""The light ``.env`` reader (``_sources.read_env_file``, stdlib only, read before the server loads) reads a file
as python-dotenv (which the server loads it with) does, and the environment the settings will see is the
process's over the ``.env`` file's."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from dotenv import dotenv_values

from kimi_mcp._sources import read_env_file, settings_environment

TRICKY = """\ufeff# a comment
KIMI_MCP_FAST_CONNECT=false
export KIMI_MCP_TOOLS = kimi_status,kimi_jobs   # trailing comment
KIMI_MCP_MODEL=k2#not-a-comment
EMPTY=
SPACED_COMMENT= # only a comment
SINGLE='it''s ${HOME} \\' \\\\ \\n'
DOUBLE="tab\\there \\"quoted\\" # kept ${HOME}"
MULTI="first
second"
'QUOTED_KEY'=quoted key
CRLF=windows\r
NO_EQUALS
REFERENCE=${KIMI_MCP_MODEL}/${MISSING:-fallback}/${MISSING}/${HOME}
TRAILING="value" junk
  INDENTED=yes
BROKEN="unterminated
AFTER_BROKEN=swallowed
"""


@pytest.mark.parametrize("text", [TRICKY, "A=1\nB=${A}2\nC='${B}'\n", "", "\n\n", "X=1", "export Y='a b'  "])
def test_the_env_file_is_read_as_python_dotenv_reads_it(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.delenv("MISSING", raising=False)
    expected = {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}
    assert read_env_file(text) == expected
    if text is TRICKY:  # the cases above are really there
        assert expected["KIMI_MCP_TOOLS"] == "kimi_status,kimi_jobs" and expected["MULTI"] == "first\nsecond"
        assert (
            expected["REFERENCE"] == "k2#not-a-comment/fallback///home/someone" and "TRAILING" not in expected
        )


def test_the_settings_see_the_environment_over_the_env_file(tmp_path: Path) -> None:
    dot_env = tmp_path / "server.env"
    dot_env.write_text("KIMI_MCP_TOOLS=kimi_status\nKIMI_MCP_FAST_CONNECT=false\nREF=${KIMI_MCP_TOOLS}\n")
    view, raw = settings_environment({"KIMI_MCP_ENV_FILE": str(dot_env), "KIMI_MCP_TOOLS": "kimi_jobs"})
    assert view["KIMI_MCP_TOOLS"] == "kimi_jobs" and view["KIMI_MCP_FAST_CONNECT"] == "false"
    assert view["REF"] == "kimi_jobs" and raw == dot_env.read_bytes()
    view, raw = settings_environment({"KIMI_MCP_ENV_FILE": str(tmp_path / "missing.env")})
    assert raw == b"" and "KIMI_MCP_FAST_CONNECT" not in view
