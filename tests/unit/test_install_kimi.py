"""``kimi-mcp install-kimi`` with a fake npm: what it asks npm for, where, what it says, and that a second run
installs nothing. (The real npm: tests/e2e/test_e2e_install_kimi.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from own_install import fake_npm, fake_own_install

from kimi_mcp import own_kimi
from kimi_mcp.cli import main


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh data directory, no .env, no KIMI_MCP_KIMI_BIN; npm is the fake's folder only."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr("kimi_mcp.config._checkout_env_file", lambda: None)
    for name in ("KIMI_MCP_KIMI_BIN", "KIMI_MCP_ENV_FILE", "KIMI_MCP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "npm-bin"))
    return tmp_path / "data" / "kimi-mcp" / "kimi-code"


def install_kimi(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(["install-kimi", *args])
    return int(exit_.value.code or 0)


def npm_calls(log: Path) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_installs_kimi_code_and_node_into_the_data_dir_then_installs_nothing_again(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "npm.log"
    fake_npm(tmp_path / "npm-bin", log)
    assert install_kimi() == 0
    [(cwd, argv)] = npm_calls(log)
    node_spec = f"{own_kimi.node_package()}@22"
    assert (
        Path(cwd) == data
        and argv[0] == "install"
        and argv[-2:] == [node_spec, "@moonshot-ai/kimi-code@2.1.0"]
    )
    assert "--save-exact" in argv and "--global=false" in argv
    assert json.loads((data / "package.json").read_text())["name"] == own_kimi.MARKER
    out = capsys.readouterr().out
    assert "Kimi Code 2.1.0 on Node v22.23.3" in out and f"kimi: {data}/node_modules/.bin/kimi" in out
    assert "kimi-mcp finds it there by itself" in out

    assert install_kimi() == 0  # idempotent: the same version is there, npm is not run
    assert len(npm_calls(log)) == 1
    assert f"Kimi Code 2.1.0 is already installed in {data}" in capsys.readouterr().out


def test_another_version_or_prefix_is_installed_and_told_how_the_server_finds_it(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "npm.log"
    fake_npm(tmp_path / "npm-bin", log)
    fake_own_install(data, version="2.0.0")
    assert install_kimi("--version", "2.1.0") == 0
    assert npm_calls(log)[0][1][-1] == "@moonshot-ai/kimi-code@2.1.0"
    prefix = tmp_path / "elsewhere"
    assert install_kimi("--prefix", str(prefix)) == 0
    assert npm_calls(log)[1][0] == str(prefix)
    assert f"KIMI_MCP_KIMI_BIN={prefix}/node_modules/.bin/kimi" in capsys.readouterr().out


def test_a_set_kimi_mcp_kimi_bin_is_named_since_it_wins(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_own_install(data)
    monkeypatch.setenv("KIMI_MCP_KIMI_BIN", "/opt/kimi")
    fake_npm(tmp_path / "npm-bin", tmp_path / "npm.log")
    assert install_kimi() == 0
    assert "KIMI_MCP_KIMI_BIN=/opt/kimi is set, and wins" in capsys.readouterr().out


def test_another_npm_project_is_never_touched(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_npm(tmp_path / "npm-bin", tmp_path / "npm.log")
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "mine"}')
    assert install_kimi("--prefix", str(project)) == 1
    assert "holds another npm project" in capsys.readouterr().err
    assert (project / "package.json").read_text() == '{"name": "mine"}'
    assert not (tmp_path / "npm.log").exists()


def test_without_npm_it_says_what_to_install(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install_kimi() == 1
    err = capsys.readouterr().err
    assert "npm is not on PATH" in err and "apt install npm" in err and "brew install node" in err
    assert not data.exists()


def test_a_failing_npm_or_an_unsupported_platform_is_a_clear_failure(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_npm(tmp_path / "npm-bin", tmp_path / "npm.log", exit_code=3)
    assert install_kimi() == 1
    assert "npm install failed (exit 3)" in capsys.readouterr().err
    monkeypatch.setattr("platform.system", lambda: "Darwin")
    monkeypatch.setattr("platform.machine", lambda: "arm64")
    assert install_kimi() == 1
    err = capsys.readouterr().err
    assert "no Node 22 package for Darwin arm64" in err and "KIMI_MCP_KIMI_BIN" in err
    assert os.access(tmp_path / "npm-bin" / "npm", os.X_OK)
