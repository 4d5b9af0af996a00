"""Kimi Code needs Node >= 22.19: the node its script would run on is checked before Kimi is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_mcp.drivers import KimiInstall, check_node
from kimi_mcp.errors import InstallError


def fake_node(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    node = folder / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n")
    node.chmod(0o755)
    return node


def kimi_script(tmp_path: Path, shebang: str = "#!/usr/bin/env node") -> KimiInstall:
    script = tmp_path / "kimi.mjs"
    script.write_text(f"{shebang}\nimport './main.mjs'\n")
    return KimiInstall(binary=str(script), version="2.1.0", dialect="kimi-code")


def test_an_old_node_on_the_path_is_an_install_error_naming_the_requirement(tmp_path: Path) -> None:
    node = fake_node(tmp_path / "old", "v20.20.2")
    with pytest.raises(InstallError) as info:
        check_node(kimi_script(tmp_path), {"PATH": str(node.parent)})
    assert "needs Node >= 22.19" in info.value.message and "v20.20.2" in info.value.message
    assert info.value.details["node"] == str(node)


def test_a_recent_node_passes_and_is_reported(tmp_path: Path) -> None:
    node = fake_node(tmp_path / "new", "v22.19.0")
    assert check_node(kimi_script(tmp_path), {"PATH": str(node.parent)}) == "v22.19.0"


def test_no_node_at_all_is_an_install_error(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="no `node` on the PATH"):
        check_node(kimi_script(tmp_path), {"PATH": str(tmp_path / "empty")})


def test_nothing_to_check_for_legacy_or_a_native_launcher(tmp_path: Path) -> None:
    legacy = KimiInstall(binary=str(tmp_path / "kimi"), version="1.50.0", dialect="legacy")
    assert check_node(legacy, {"PATH": ""}) is None
    assert check_node(kimi_script(tmp_path, "#!/bin/sh"), {"PATH": ""}) is None
