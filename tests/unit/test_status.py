"""``status_report`` (``kimi_status``, ``kimi-mcp --check``): the login state read from Kimi's own files and
environment, without running anything but ``--version``."""

from __future__ import annotations

from pathlib import Path

import kimi_install

from kimi_mcp.config import Settings
from kimi_mcp.status import check_lines, status_report


def test_login_state_from_the_environment_the_config_file_or_the_key(tmp_path: Path) -> None:
    binary = str(kimi_install.install_legacy())
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
