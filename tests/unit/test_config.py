"""Unit tests for kimi_mcp.config: defaults < TOML config file < environment, and the .env loader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimi_mcp.config import (
    MAX_FILE_CHARS,
    MAX_TOTAL_CHARS,
    ConfigError,
    Settings,
    config_file_path,
    configured,
    data_dir,
    env_file_path,
    kimi_code_prefix,
    load_env_file,
    load_settings,
    state_dir,
)
from kimi_mcp.tracker import TrackerOptions


@pytest.fixture
def xdg(tmp_path: Path) -> Path:
    """An empty XDG_CONFIG_HOME, so the user's real config file never leaks into a test."""
    path = tmp_path / "xdg"
    path.mkdir()
    return path


def write_toml(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- defaults


def test_defaults_without_file_or_environment(xdg: Path) -> None:
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg)})
    assert settings == Settings()
    assert settings.kimi_bin is None
    assert settings.dialect == "auto"
    assert settings.timeout == 300.0
    assert settings.startup_timeout == 60.0
    assert settings.workspace is None
    assert settings.max_file_chars == 20_000
    assert settings.max_total_chars == 30_000
    assert settings.max_result_chars == 40_000
    assert settings.max_context_bytes == 200_000
    assert settings.allow_shell is True
    assert settings.exclude_dirs == []
    assert settings.max_concurrent == 2
    assert settings.log_level == "INFO"
    assert settings.platform == "moonshot.ai"
    assert settings.tools is None
    assert settings.tracker_watch is True
    assert settings.tracker_fork is True
    assert settings.tracker_spill is True
    assert settings.wait_s is None  # a call waits for its turn unless told otherwise
    assert settings.session_idle == 900.0 and settings.max_live_sessions == 3 and settings.max_standbys == 1
    assert settings.job_ttl_days == 7.0 and settings.state_dir is None


def test_content_budgets_have_one_default() -> None:
    """The tracker's defaults are the settings' defaults (one constant each, in config)."""
    options = TrackerOptions()
    assert (options.max_file_chars, options.max_total_chars) == (MAX_FILE_CHARS, MAX_TOTAL_CHARS)
    assert (Settings().max_file_chars, Settings().max_total_chars) == (MAX_FILE_CHARS, MAX_TOTAL_CHARS)


def test_unrelated_environment_variables_are_ignored(xdg: Path) -> None:
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), "TIMEOUT": "5", "KIMI_TIMEOUT": "7"})
    assert settings.timeout == 300.0


def test_empty_environment_value_is_ignored(xdg: Path) -> None:
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_TIMEOUT": ""})
    assert settings.timeout == 300.0


# ------------------------------------------------------------------------------------------- config file


def test_config_file_path_prefers_kimi_mcp_config(tmp_path: Path) -> None:
    explicit = tmp_path / "mine.toml"
    env = {"KIMI_MCP_CONFIG": str(explicit), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert config_file_path(env) == explicit


def test_config_file_path_uses_xdg_config_home(tmp_path: Path) -> None:
    assert config_file_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "kimi-mcp" / "config.toml"


def test_config_file_path_expands_user_in_explicit_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_file_path({"KIMI_MCP_CONFIG": "~/c.toml"}) == tmp_path / "c.toml"


def test_explicit_config_file_is_loaded(tmp_path: Path, xdg: Path) -> None:
    path = write_toml(
        tmp_path / "cfg.toml",
        'timeout = 600\ndialect = "legacy"\nallow_shell = false\nexclude_dirs = ["build", "dist"]\n',
    )
    settings = load_settings({"KIMI_MCP_CONFIG": str(path), "XDG_CONFIG_HOME": str(xdg)})
    assert settings.timeout == 600.0
    assert settings.dialect == "legacy"
    assert settings.allow_shell is False
    assert settings.exclude_dirs == ["build", "dist"]
    # untouched fields keep their defaults
    assert settings.max_concurrent == 2


def test_xdg_config_file_is_loaded(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", 'max_concurrent = 5\nmodel = "kimi-k2"\n')
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg)})
    assert settings.max_concurrent == 5
    assert settings.model == "kimi-k2"


def test_explicit_config_wins_over_xdg_file(tmp_path: Path, xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", "max_concurrent = 5\n")
    explicit = write_toml(tmp_path / "explicit.toml", "max_concurrent = 7\n")
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_CONFIG": str(explicit)})
    assert settings.max_concurrent == 7


def test_environment_overrides_config_file(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", 'timeout = 600\nlog_level = "DEBUG"\n')
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_TIMEOUT": "42.5"})
    assert settings.timeout == 42.5
    assert settings.log_level == "DEBUG"  # from the file, not overridden


def test_environment_values_are_coerced(xdg: Path) -> None:
    env = {
        "XDG_CONFIG_HOME": str(xdg),
        "KIMI_MCP_TIMEOUT": "12",
        "KIMI_MCP_MAX_CONCURRENT": "4",
        "KIMI_MCP_ALLOW_SHELL": "false",
        "KIMI_MCP_DIALECT": "kimi-code",
        "KIMI_MCP_PLATFORM": "moonshot.cn",
        "KIMI_MCP_KIMI_BIN": "/opt/kimi/bin/kimi",
        "KIMI_MCP_MAX_CONTEXT_BYTES": "1000",
    }
    settings = load_settings(env)
    assert settings.timeout == 12.0
    assert settings.max_concurrent == 4
    assert settings.allow_shell is False
    assert settings.dialect == "kimi-code"
    assert settings.platform == "moonshot.cn"
    assert settings.kimi_bin == "/opt/kimi/bin/kimi"
    assert settings.max_context_bytes == 1000


@pytest.mark.parametrize("raw", ["true", "1", "yes", "on"])
def test_truthy_allow_shell(xdg: Path, raw: str) -> None:
    assert load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_ALLOW_SHELL": raw}).allow_shell is True


@pytest.mark.parametrize("raw", ["false", "0", "no", "off"])
def test_falsy_allow_shell(xdg: Path, raw: str) -> None:
    assert load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_ALLOW_SHELL": raw}).allow_shell is False


TRACKER_SWITCHES = ("tracker_watch", "tracker_fork", "tracker_spill")


@pytest.mark.parametrize("name", TRACKER_SWITCHES)
@pytest.mark.parametrize("raw", ["false", "0", "no", "off", "FALSE", "Off"])
def test_falsy_tracker_switches(xdg: Path, name: str, raw: str) -> None:
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), f"KIMI_MCP_{name.upper()}": raw})
    assert getattr(settings, name) is False
    assert all(getattr(settings, other) is True for other in TRACKER_SWITCHES if other != name)


@pytest.mark.parametrize("name", TRACKER_SWITCHES)
@pytest.mark.parametrize("raw", ["true", "1", "yes", "on"])
def test_truthy_tracker_switches(xdg: Path, name: str, raw: str) -> None:
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), f"KIMI_MCP_{name.upper()}": raw})
    assert getattr(settings, name) is True


def test_tracker_switches_from_config_file(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", "tracker_watch = false\ntracker_spill = false\n")
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg)})
    assert (settings.tracker_watch, settings.tracker_fork, settings.tracker_spill) == (False, True, False)


def test_invalid_tracker_switch_names_the_variable(xdg: Path) -> None:
    with pytest.raises(ConfigError, match="KIMI_MCP_TRACKER_FORK"):
        load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_TRACKER_FORK": "maybe"})


# -------------------------------------------------------------------------------------------------- CSV


def test_csv_exclude_dirs_and_tools_from_environment(xdg: Path) -> None:
    env = {
        "XDG_CONFIG_HOME": str(xdg),
        "KIMI_MCP_EXCLUDE_DIRS": " build, dist ,,node_modules ",
        "KIMI_MCP_TOOLS": "kimi_code_task,kimi_review",
    }
    settings = load_settings(env)
    assert settings.exclude_dirs == ["build", "dist", "node_modules"]
    assert settings.tools == ["kimi_code_task", "kimi_review"]


def test_csv_string_in_config_file_is_split(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", 'exclude_dirs = "a, b"\n')
    assert load_settings({"XDG_CONFIG_HOME": str(xdg)}).exclude_dirs == ["a", "b"]


def test_csv_environment_replaces_config_file_list(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", 'exclude_dirs = ["from_file"]\n')
    settings = load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_EXCLUDE_DIRS": "from_env"})
    assert settings.exclude_dirs == ["from_env"]


def test_settings_model_splits_csv_directly() -> None:
    assert Settings(exclude_dirs="x,y").exclude_dirs == ["x", "y"]  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("KIMI_MCP_TIMEOUT", "abc"),
        ("KIMI_MCP_TIMEOUT", "0"),
        ("KIMI_MCP_TIMEOUT", "-5"),
        ("KIMI_MCP_STARTUP_TIMEOUT", "soon"),
        ("KIMI_MCP_MAX_CONCURRENT", "0"),
        ("KIMI_MCP_MAX_CONCURRENT", "two"),
        ("KIMI_MCP_MAX_FILE_CHARS", "-1"),
        ("KIMI_MCP_MAX_CONTEXT_BYTES", "0"),
        ("KIMI_MCP_ALLOW_SHELL", "maybe"),
        ("KIMI_MCP_DIALECT", "kimi-3"),
        ("KIMI_MCP_PLATFORM", "example.com"),
        ("KIMI_MCP_WAIT_S", "-1"),
        ("KIMI_MCP_SESSION_IDLE", "0"),
        ("KIMI_MCP_MAX_LIVE_SESSIONS", "-1"),
        ("KIMI_MCP_JOB_TTL_DAYS", "never"),
    ],
)
def test_invalid_environment_value_names_the_variable(xdg: Path, variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"XDG_CONFIG_HOME": str(xdg), variable: raw})
    assert variable in str(info.value)


def test_all_invalid_values_are_reported_together(xdg: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_TIMEOUT": "x", "KIMI_MCP_MAX_CONCURRENT": "0"}
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert "KIMI_MCP_TIMEOUT" in str(info.value)
    assert "KIMI_MCP_MAX_CONCURRENT" in str(info.value)


def test_invalid_value_in_config_file_is_config_error(tmp_path: Path, xdg: Path) -> None:
    path = write_toml(tmp_path / "cfg.toml", "timeout = -1\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"KIMI_MCP_CONFIG": str(path), "XDG_CONFIG_HOME": str(xdg)})
    message = str(info.value)
    assert "TIMEOUT" in message
    assert str(path) in message


def test_unknown_key_in_config_file_is_rejected(tmp_path: Path, xdg: Path) -> None:
    path = write_toml(tmp_path / "cfg.toml", "timeout = 10\ntimeuot = 20\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"KIMI_MCP_CONFIG": str(path), "XDG_CONFIG_HOME": str(xdg)})
    assert "TIMEUOT" in str(info.value).upper()


def test_unknown_table_in_config_file_is_rejected(xdg: Path) -> None:
    write_toml(xdg / "kimi-mcp" / "config.toml", "[server]\ntimeout = 10\n")
    with pytest.raises(ConfigError):
        load_settings({"XDG_CONFIG_HOME": str(xdg)})


def test_malformed_toml_is_config_error(tmp_path: Path, xdg: Path) -> None:
    path = write_toml(tmp_path / "cfg.toml", "timeout = = 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"KIMI_MCP_CONFIG": str(path), "XDG_CONFIG_HOME": str(xdg)})
    assert str(path) in str(info.value)


def test_non_utf8_config_file_is_config_error(tmp_path: Path, xdg: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_bytes(b'log_level = "\xff\xfe"\n')
    with pytest.raises(ConfigError):
        load_settings({"KIMI_MCP_CONFIG": str(path), "XDG_CONFIG_HOME": str(xdg)})


def test_kimi_mcp_config_pointing_to_missing_file_is_an_error(tmp_path: Path, xdg: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_settings({"KIMI_MCP_CONFIG": str(missing), "XDG_CONFIG_HOME": str(xdg)})
    assert "KIMI_MCP_CONFIG" in str(info.value)
    assert str(missing) in str(info.value)


def test_kimi_mcp_config_pointing_to_directory_is_an_error(tmp_path: Path, xdg: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings({"KIMI_MCP_CONFIG": str(tmp_path), "XDG_CONFIG_HOME": str(xdg)})


def test_missing_default_config_file_is_fine(tmp_path: Path) -> None:
    # XDG_CONFIG_HOME without kimi-mcp/config.toml: no error, defaults
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path / "absent")}).timeout == 300.0


# ---------------------------------------------------------------------------------------------- env file


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("KIMI_MCP_ENV_FILE", "KMCP_UNIT_NEW", "KMCP_UNIT_EXISTING"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_load_env_file_loads_without_overriding(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / "server.env"
    env_file.write_text("KMCP_UNIT_NEW=from-file\nKMCP_UNIT_EXISTING=from-file\n", encoding="utf-8")
    clean_env.setenv("KIMI_MCP_ENV_FILE", str(env_file))
    clean_env.setenv("KMCP_UNIT_EXISTING", "from-process")
    # register the new variable with monkeypatch so it is removed after the test
    clean_env.setenv("KMCP_UNIT_NEW", "placeholder")
    clean_env.delenv("KMCP_UNIT_NEW")

    loaded = load_env_file()

    assert loaded == env_file
    assert os.environ["KMCP_UNIT_NEW"] == "from-file"
    assert os.environ["KMCP_UNIT_EXISTING"] == "from-process"


def test_load_env_file_reads_path_from_given_mapping(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / "x.env"
    env_file.write_text("KMCP_UNIT_NEW=1\n", encoding="utf-8")
    clean_env.setenv("KMCP_UNIT_NEW", "placeholder")
    clean_env.delenv("KMCP_UNIT_NEW")
    assert load_env_file({"KIMI_MCP_ENV_FILE": str(env_file)}) == env_file
    assert os.environ["KMCP_UNIT_NEW"] == "1"


def test_load_env_file_missing_explicit_file_returns_none(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("KMCP_UNIT_NEW", "placeholder")
    clean_env.delenv("KMCP_UNIT_NEW")
    assert load_env_file({"KIMI_MCP_ENV_FILE": str(tmp_path / "missing.env")}) is None
    assert "KMCP_UNIT_NEW" not in os.environ


def test_without_a_checkout_the_env_file_beside_the_config_file_is_read(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, xdg: Path
) -> None:
    # an installed kimi-mcp (uvx, a wheel) has no checkout
    clean_env.setattr("kimi_mcp.config._checkout_env_file", lambda: None)
    assert env_file_path({"XDG_CONFIG_HOME": str(xdg)}) is None
    beside = write_toml(xdg / "kimi-mcp" / ".env", "KMCP_UNIT_NEW=beside-config\n")
    clean_env.setenv("KMCP_UNIT_NEW", "placeholder")
    clean_env.delenv("KMCP_UNIT_NEW")
    assert load_env_file({"XDG_CONFIG_HOME": str(xdg)}) == beside
    assert os.environ["KMCP_UNIT_NEW"] == "beside-config"
    # beside KIMI_MCP_CONFIG's file when that names one
    config = write_toml(tmp_path / "elsewhere" / "kimi.toml", "")
    other = write_toml(tmp_path / "elsewhere" / ".env", "")
    assert env_file_path({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_CONFIG": str(config)}) == other


def test_env_file_order_explicit_then_checkout_then_beside_the_config_file(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, xdg: Path
) -> None:
    write_toml(xdg / "kimi-mcp" / ".env", "")
    checkout = write_toml(tmp_path / "checkout" / ".env", "")
    explicit = write_toml(tmp_path / "server.env", "")
    clean_env.setattr("kimi_mcp.config._checkout_env_file", lambda: checkout)
    assert env_file_path({"XDG_CONFIG_HOME": str(xdg)}) == checkout
    assert env_file_path({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_ENV_FILE": str(explicit)}) == explicit


def test_a_missing_explicit_env_file_is_a_configuration_problem_not_a_crash(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, xdg: Path
) -> None:
    missing = tmp_path / "missing.env"
    env = {"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_ENV_FILE": str(missing), "KIMI_MCP_TIMEOUT": "9"}
    assert load_env_file(env) is None
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    assert info.value.problems == [f"KIMI_MCP_ENV_FILE={str(missing)!r} (from the environment): no such file"]
    settings, problem = configured(env)
    assert settings.timeout == 9.0  # everything else still applies
    assert problem is not None and problem.type == "config" and str(missing) in problem.message


def test_the_data_dir_and_kimi_mcps_own_kimi_code(tmp_path: Path) -> None:
    assert data_dir({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "kimi-mcp"
    assert kimi_code_prefix({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "kimi-mcp" / "kimi-code"
    assert data_dir({"HOME": str(tmp_path)}) == tmp_path / ".local" / "share" / "kimi-mcp"
    assert data_dir({}) == Path(os.path.expanduser("~")) / ".local" / "share" / "kimi-mcp"


def test_jobs_settings_from_the_environment_and_where_the_job_store_lives(xdg: Path, tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_WAIT_S": "45", "KIMI_MCP_MAX_LIVE_SESSIONS": "0"}
    settings = load_settings(env)
    assert settings.wait_s == 45.0 and settings.max_live_sessions == 0
    assert state_dir(settings, {"XDG_STATE_HOME": "/xdg"}) == Path("/xdg/kimi-mcp")
    assert state_dir(Settings(state_dir=str(tmp_path)), {"XDG_STATE_HOME": "/xdg"}) == tmp_path
    home = Path(os.path.expanduser("~"))
    assert state_dir(Settings(), {}) == home / ".local" / "state" / "kimi-mcp"


def test_a_problem_names_the_variable_its_value_and_where_it_came_from(tmp_path: Path, xdg: Path) -> None:
    with pytest.raises(ConfigError) as from_env:
        load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_TIMEOUT": "5min"})
    assert from_env.value.problems[0].startswith("KIMI_MCP_TIMEOUT='5min' (from the environment)")
    config = write_toml(tmp_path / "c.toml", 'timeout = "soon"\n')
    with pytest.raises(ConfigError) as from_file:
        load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_CONFIG": str(config)})
    assert from_file.value.problems[0].startswith(f"timeout = 'soon' (from {config}")


def test_a_bad_configuration_keeps_the_valid_values_and_gives_the_problem(
    xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimi_mcp.config import configured

    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("KIMI_MCP_MAX_CONCURRENT", "0")
    monkeypatch.setenv("KIMI_MCP_KIMI_BIN", "/opt/kimi")
    settings, problem = configured()
    assert settings == Settings(kimi_bin="/opt/kimi")  # the valid values are kept, the bad one defaulted
    assert problem is not None and problem.type == "config"
    assert "KIMI_MCP_MAX_CONCURRENT='0' (from the environment)" in problem.message
    monkeypatch.delenv("KIMI_MCP_MAX_CONCURRENT")
    assert configured()[1] is None


def test_control_loop_settings_and_prices_are_read_and_bad_prices_refused(xdg: Path) -> None:
    env = {
        "XDG_CONFIG_HOME": str(xdg),
        "KIMI_MCP_PRICES": " kimi-k2=0.6/2.5 , provider/k2=1/4 ",
        "KIMI_MCP_MAX_TOKENS": "5000",
        "KIMI_MCP_DAILY_TOKENS": "90000",
        "KIMI_MCP_QUESTIONS": "dismiss",
        "KIMI_MCP_APPROVALS": "ask",
    }
    settings = load_settings(env)
    assert settings.prices == {"kimi-k2": (0.6, 2.5), "provider/k2": (1.0, 4.0)}
    assert (settings.max_tokens, settings.daily_tokens) == (5000, 90000)
    assert (settings.questions, settings.approvals, settings.question_timeout) == ("dismiss", "ask", 600.0)
    for bad in ("k2=1", "k2=a/b", "=1/2", "k2=-1/2", "k2=1/nan", "k2=1/inf"):
        with pytest.raises(ConfigError, match="KIMI_MCP_PRICES"):
            load_settings({"XDG_CONFIG_HOME": str(xdg), "KIMI_MCP_PRICES": bad})
    for name, bad in (("KIMI_MCP_MAX_TOKENS", "0"), ("KIMI_MCP_QUESTIONS", "maybe")):
        with pytest.raises(ConfigError, match=name):
            load_settings({"XDG_CONFIG_HOME": str(xdg), name: bad})
