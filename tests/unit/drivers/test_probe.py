"""Version detection from installed package metadata (nothing is executed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_installs import fake_kimi_cli, fake_kimi_code

from kimi_mcp.drivers import installed_version, probe
from kimi_mcp.errors import InstallError


def test_kimi_code_version_from_package_json(tmp_path: Path) -> None:
    assert installed_version(str(fake_kimi_code(tmp_path, "2.1.0"))) == ("2.1.0", "kimi-code")


def test_other_npm_package_is_not_taken_for_kimi_code(tmp_path: Path) -> None:
    assert installed_version(str(fake_kimi_code(tmp_path, "9.9.9", name="some-other-kimi"))) is None


def test_legacy_version_from_dist_info(tmp_path: Path) -> None:
    assert installed_version(str(fake_kimi_cli(tmp_path, "1.50.0"))) == ("1.50.0", "legacy")


def test_probe_uses_metadata_and_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    install = probe(str(fake_kimi_cli(tmp_path, "1.50.0")), {"PATH": "/usr/bin:/bin"})
    assert (install.version, install.dialect) == ("1.50.0", "legacy")
    install = probe(str(fake_kimi_code(tmp_path / "kc", "2.1.0")), {"PATH": "/usr/bin:/bin"})
    assert (install.version, install.dialect) == ("2.1.0", "kimi-code")
    assert not (tmp_path / "RAN").exists()


@pytest.mark.parametrize(("version", "stub"), [("1.52.0", True), ("1.52.0", False), ("1.51.0", True)])
def test_the_stub_is_refused_by_its_module_or_its_number_without_running_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, stub: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InstallError) as caught:
        probe(str(fake_kimi_cli(tmp_path, version, stub=stub)), {"PATH": "/usr/bin:/bin"}, forced="legacy")
    assert f"kimi-cli {version}, the deprecated stub" in caught.value.message
    assert (
        "kimi-cli==1.51.0" in caught.value.suggestion and "@moonshot-ai/kimi-code" in caught.value.suggestion
    )
    assert not (tmp_path / "RAN").exists()


def test_kimi_cli_1_51_0_is_accepted(tmp_path: Path) -> None:
    install = probe(str(fake_kimi_cli(tmp_path, "1.51.0")), {"PATH": "/usr/bin:/bin"})
    assert (install.version, install.dialect) == ("1.51.0", "legacy")


def test_unrecognised_layout_falls_back_to_version_flag(tmp_path: Path) -> None:
    script = tmp_path / "kimi"
    script.write_text("#!/bin/sh\necho 'kimi, version 1.50.0'\n")
    script.chmod(0o755)
    assert installed_version(str(script)) is None
    assert probe(str(script), {"PATH": "/usr/bin:/bin"}).version == "1.50.0"


# ------------------------------------------------------------------ issue 13, item 4: which releases are driven


def test_kimi_code_under_its_pre_2_numbering_is_kimi_code(tmp_path: Path) -> None:
    install = probe(str(fake_kimi_code(tmp_path, "0.43.1")), {"PATH": "/usr/bin:/bin"})
    assert (install.version, install.dialect) == ("0.43.1", "kimi-code")


@pytest.mark.parametrize("version", ["1.30.0", "1.20.0", "1.7.2"])
def test_legacy_below_1_31_is_refused_at_once_naming_the_supported_range(
    tmp_path: Path, version: str
) -> None:
    with pytest.raises(InstallError) as caught:
        probe(str(fake_kimi_cli(tmp_path, version)), {"PATH": "/usr/bin:/bin"})
    error = caught.value
    assert error.type == "install" and error.retryable is False
    assert f"kimi-cli {version}, older than kimi-mcp supports" in error.message
    assert "1.31.0-1.51.0" in error.message and "kimi-cli==1.51.0" in error.suggestion


@pytest.mark.parametrize("version", ["1.31.0", "1.50.0"])
def test_the_supported_legacy_range_is_accepted(tmp_path: Path, version: str) -> None:
    assert probe(str(fake_kimi_cli(tmp_path, version)), {"PATH": "/usr/bin:/bin"}).dialect == "legacy"


@pytest.mark.parametrize(
    ("printed", "version", "dialect"),
    [
        ("kimi, version 1.40", "1.40", "legacy"),  # two-part versions are versions
        ("Kimi, version 1.50.0", "1.50.0", "legacy"),
        ("0.43.1", "0.43.1", "kimi-code"),  # bare version: Kimi Code, whatever the major
        ("2.1", "2.1", "kimi-code"),
    ],
)
def test_version_flag_output_tells_version_and_dialect(
    tmp_path: Path, printed: str, version: str, dialect: str
) -> None:
    script = tmp_path / "kimi"
    script.write_text(f"#!/bin/sh\necho '{printed}'\n")
    script.chmod(0o755)
    install = probe(str(script), {"PATH": "/usr/bin:/bin"})
    assert (install.version, install.dialect) == (version, dialect)


def test_an_old_legacy_seen_through_the_version_flag_is_refused_too(tmp_path: Path) -> None:
    script = tmp_path / "kimi"
    script.write_text("#!/bin/sh\necho 'kimi, version 1.0'\n")
    script.chmod(0o755)
    with pytest.raises(InstallError, match="kimi-cli 1.0, older than kimi-mcp supports"):
        probe(str(script), {"PATH": "/usr/bin:/bin"})
