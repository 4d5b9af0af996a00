"""Masking by content: which values count as secrets, and that they are masked wherever they appear."""

from __future__ import annotations

import logging
from pathlib import Path

from kimi_mcp._logging import MaskSecrets
from kimi_mcp.secrets import (
    MASK,
    Redactor,
    WorkspaceSecrets,
    configured_secrets,
    file_secret_values,
    scan_workspace_secrets,
)


def test_dotenv_values_that_look_secret_are_taken_plain_settings_are_not() -> None:
    text = "\n".join(
        [
            "# a comment with longwordsinside",
            "API_TOKEN=supersecretvalue",
            'export DB_PASSWORD="hunter22"',
            "DATABASE_URL=postgres://app:pw0rd@db/app",
            "NODE_ENV=production",
            "DEBUG=true",
            "PORT=8080",
            "SHORT_KEY=abc",
            "AUTHOR=Jane",
        ]
    )
    values = file_secret_values(text)
    assert values == ["supersecretvalue", "hunter22", "postgres://app:pw0rd@db/app"]


def test_key_material_and_netrc_passwords_are_taken() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
    assert file_secret_values(pem) == ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"]
    assert file_secret_values("machine example.com login me password S3cretPassw0rd") == ["S3cretPassw0rd"]


def test_redactor_masks_longest_first_and_key_shapes_it_was_never_told() -> None:
    redact = Redactor(["abcdefgh", "abcdefghijkl", "tiny"])  # "tiny" is too short to mask safely
    assert redact("x abcdefghijkl y abcdefgh z tiny") == f"x {MASK} y {MASK} z tiny"
    assert redact("401 Incorrect API key provided: sk-proj-AbCdEf0123456789xyz.") == (
        f"401 Incorrect API key provided: {MASK}."
    )
    assert redact("task-sk-notakey") == "task-sk-notakey"  # "sk-" inside a word, too short anyway


def test_mask_tree_masks_values_not_keys() -> None:
    redact = Redactor(["secretvalue1"])
    tree = {"secretvalue1": ["a secretvalue1", {"n": 1, "t": "secretvalue1"}], "ok": None}
    assert redact.mask_tree(tree) == {"secretvalue1": [f"a {MASK}", {"n": 1, "t": MASK}], "ok": None}


def test_configured_secrets_come_from_the_environment_and_kimis_stored_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kimi").mkdir(parents=True)
    (home / ".kimi" / "config.toml").write_text('[providers.x]\napi_key = "sk-stored-in-legacy-config"\n')
    (home / ".kimi-code" / "credentials").mkdir(parents=True)
    (home / ".kimi-code" / "credentials" / "c.json").write_text('{"access_token": "oauth-access-123456"}')
    env = {
        "HOME": str(home),
        "MOONSHOT_API_KEY": "sk-from-env-000000000",
        "KIMI_MCP_HTTP_TOKEN": "httptoken123",
    }
    values = configured_secrets(env)
    assert {
        "sk-from-env-000000000",
        "httptoken123",
        "sk-stored-in-legacy-config",
        "oauth-access-123456",
    } <= set(values)


def test_workspace_scan_finds_ignored_secret_files_and_skips_heavy_dirs(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text(".env\n")
    (tmp_path / ".env").write_text("API_KEY=value-in-root-env\n")
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / ".env.local").write_text("SECRET=nested-secret-1\n")
    (tmp_path / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "node_modules" / "pkg" / ".env").write_text("TOKEN=ignored-in-node-modules\n")
    (tmp_path / ".env.example").write_text("API_KEY=placeholder-value\n")
    (tmp_path / "outside.env").write_text("TOKEN=not-a-secret-name\n")
    (tmp_path / "link.pem").symlink_to(tmp_path / "outside.env")
    values, folders = scan_workspace_secrets(tmp_path)
    assert sorted(values) == ["nested-secret-1", "value-in-root-env"]
    assert sorted(folders) == [tmp_path, tmp_path / "svc"]


def test_workspace_secrets_also_picks_up_files_created_during_the_turn(tmp_path: Path) -> None:
    redactor = Redactor()
    found = WorkspaceSecrets(redactor, tmp_path)
    (tmp_path / ".env").write_text("API_TOKEN=created-during-turn\n")
    found.finish()
    assert redactor("cat says created-during-turn") == f"cat says {MASK}"


def test_log_records_are_masked(caplog) -> None:
    logger = logging.getLogger("kimi_mcp.test_mask")
    handler_filter = MaskSecrets(Redactor(["configured-secret-1"]))
    record = logger.makeRecord(
        "x", logging.INFO, "f", 1, "key %s and %s", ("configured-secret-1", "sk-abcdefghijklmnop12"), None
    )
    handler_filter.filter(record)
    assert record.getMessage() == f"key {MASK} and {MASK}"
