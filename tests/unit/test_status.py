"""``status_report`` (``kimi_status``, ``kimi-mcp --check``): the login state read from Kimi's own files and
environment, and the install from its package metadata: nothing is run, so a kimi-cli 1.50.0 laid out as
``uv tool install`` lays it out serves (the real one: tests/e2e/test_e2e_status.py)."""

from __future__ import annotations

from pathlib import Path

from fake_installs import fake_kimi_cli

from kimi_mcp.config import Settings
from kimi_mcp.status import check_lines, status_report


def test_login_state_from_the_environment_the_config_file_or_the_key(tmp_path: Path) -> None:
    binary = str(fake_kimi_cli(tmp_path / "kimi", "1.50.0"))
    home = tmp_path / "home"
    (home / ".kimi").mkdir(parents=True)
    base = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    settings = Settings(kimi_bin=binary)

    by_env = status_report(settings, env={**base, "KIMI_MODEL_NAME": "k2"})
    assert by_env.success and by_env.login == "logged in: k2 (from KIMI_MODEL_NAME)"

    (home / ".kimi" / "config.toml").write_text('default_model = "moonshot/kimi-k2"\n')
    by_file = status_report(settings, env=base)
    assert by_file.success and by_file.login.startswith("logged in: moonshot/kimi-k2 (from ")

    (home / ".kimi" / "config.toml").write_text('default_model = ""\n')  # what a first start leaves
    by_key = status_report(settings, env={**base, "MOONSHOT_API_KEY": "sk-x"})
    assert by_key.success and "logs Kimi in to moonshot.ai with MOONSHOT_API_KEY" in by_key.login

    nothing = status_report(settings, env=base)
    assert not nothing.success and [p.type for p in nothing.problems] == ["auth"]
    assert "1 problem(s)" in check_lines(nothing)[-1] and "login: not logged in" in check_lines(nothing)


def test_a_misspelt_variable_is_a_warning_naming_the_closest_setting(tmp_path: Path) -> None:
    binary = str(fake_kimi_cli(tmp_path / "kimi", "1.50.0"))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "KIMI_MODEL_NAME": "k2"}
    env.update(KIMI_MCP_TIMOUT="5", KIMI_MCP_CONFIG=str(tmp_path / "none.toml"), KIMI_MCP_ZZZ="1")
    report = status_report(Settings(kimi_bin=binary), env=env)
    assert report.success  # a warning does not stop kimi-mcp
    assert report.warnings == [
        "KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored; did you mean KIMI_MCP_TIMEOUT?",
        "KIMI_MCP_ZZZ is not a kimi-mcp setting and is ignored",
    ]
    lines = check_lines(report)
    assert (
        "WARNING: KIMI_MCP_TIMOUT is not a kimi-mcp setting and is ignored; did you mean KIMI_MCP_TIMEOUT?"
        in lines
    )
    assert lines[-1] == "ok"


def test_an_unknown_tool_name_is_a_problem_with_the_closest_name(tmp_path: Path) -> None:
    binary = str(fake_kimi_cli(tmp_path / "kimi", "1.50.0"))
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "KIMI_MODEL_NAME": "k2"}
    report = status_report(Settings(kimi_bin=binary, tools=["kimi_consul", "kimi_status"]), env=env)
    assert not report.success
    [problem] = report.problems
    assert problem.type == "config" and "kimi_consul" in problem.message
    assert "kimi_consul → kimi_consult" in problem.suggestion
    assert check_lines(report)[-1] == "1 problem(s)"
