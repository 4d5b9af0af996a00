"""What the runner builds from the settings for one call."""

from __future__ import annotations

from kimi_mcp.config import load_settings
from kimi_mcp.runner._factory import tracker_options


def test_tracker_switches_and_budgets_come_from_the_settings(tmp_path) -> None:
    env = {
        "XDG_CONFIG_HOME": str(tmp_path),
        "KIMI_MCP_TRACKER_WATCH": "off",
        "KIMI_MCP_TRACKER_SPILL": "false",
    }
    options = tracker_options(load_settings(env))
    assert (options.watch, options.fork, options.spill) == (False, True, False)
    defaults = tracker_options(load_settings({"XDG_CONFIG_HOME": str(tmp_path)}))
    assert (defaults.watch, defaults.fork, defaults.spill) == (True, True, True)
    assert defaults.max_total_chars == load_settings({"XDG_CONFIG_HOME": str(tmp_path)}).max_total_chars


def test_a_standby_that_cannot_start_never_fails_the_call(tmp_path, caplog) -> None:
    """Issue 13 item 8: the standby started after a successful turn sits inside the result's contract."""
    import types

    from kimi_mcp.config import Settings
    from kimi_mcp.runner import Runner, TaskRequest
    from kimi_mcp.runner._run import TaskRun
    from kimi_mcp.scope import Scope

    class Broken(Runner):
        def prewarm(self, *args, **kwargs) -> None:
            raise OSError("no pty left")

    call = TaskRun(
        Broken(), TaskRequest("x", tmp_path), Settings(standby="after-call"),
        scope=Scope.detached(), environ={"HOME": str(tmp_path)},
    )  # fmt: skip
    call.key = types.SimpleNamespace(lists_workspace=True)  # type: ignore[assignment]
    call.install = types.SimpleNamespace()  # type: ignore[assignment]
    call._next_standby(turn_done=True)  # must not raise
    result = call._report()
    assert result.success is True
    assert "could not start a standby Kimi" in caplog.text
