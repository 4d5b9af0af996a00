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
