"""Secrets never leave the server: masking by content, not by where the text came from.

A ``Redactor`` masks every known secret value (configured API keys and the HTTP token, keys stored in
Kimi's own configuration, the values held in the workspace's secret files) and anything shaped like a
Moonshot/OpenAI key (``sk-…``), whatever text it appears in: Kimi's answer, tool arguments and results,
error messages, progress messages, transcripts, logs and file contents in results.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .config import DEFAULT_EXCLUDED_DIRS
from .kimi_dirs import kimi_state_dirs

__all__ = [
    "KEY_SHAPE",
    "MASK",
    "SECRET_ENV_VARS",
    "Redactor",
    "configured_secrets",
    "is_secret_path",
    "touches_secret",
    "withhold_arguments",
    "file_secret_values",
    "scan_workspace_secrets",
]

# ------------------------------------------------------------------------------------ secret files

_SECRET_NAMES = frozenset({".netrc", ".pgpass", ".pypirc", ".npmrc", ".htpasswd", "credentials"})
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx")
_SSH_KEY_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
_ENV_TEMPLATE_SUFFIXES = (".example", ".sample", ".template", ".dist")
_SECRET_DIRS = frozenset({".ssh", ".aws", ".gnupg"})


def is_secret_path(relpath: str) -> bool:
    """True if the file's contents must never be read or returned (keys, credentials, ``.env``...).

    Basename rules are case-insensitive; any directory component named ``.ssh``, ``.aws`` or ``.gnupg``
    makes every file below it secret. ``.env.example``/``.sample``/``.template``/``.dist`` and public
    keys (``id_rsa.pub``) are not secrets.
    """
    parts = relpath.replace("\\", "/").lower().split("/")
    name = parts[-1]
    if any(part in _SECRET_DIRS for part in parts[:-1]):
        return True
    if name in _SECRET_NAMES:
        return True
    if name == ".env" or name.startswith(".env."):
        return not name.endswith(_ENV_TEMPLATE_SUFFIXES)
    if name.endswith(_SECRET_SUFFIXES):
        return True
    if name.startswith(_SSH_KEY_PREFIXES):
        return not name.endswith(".pub")
    if name.startswith(("credentials.", "secrets.")):
        return True
    return "credentials" in name and name.endswith(".json")


# ---------------------------------------------------------------------------- secret tool calls

_PATH_KEYS = ("path", "file_path", "filename", "file")
_COMMAND_KEYS = ("command", "cmd", "script")
_SHELL_SPLIT = re.compile(r"[\s;|&<>()'\"`=]+")


def touches_secret(arguments: str) -> bool:
    """Whether a tool call names a secret file (as its path, or as a word of a shell command)."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return False
    if not isinstance(args, dict):
        return False
    if any(isinstance(args.get(k), str) and is_secret_path(args[k]) for k in _PATH_KEYS):
        return True
    commands = [args[key] for key in _COMMAND_KEYS if isinstance(args.get(key), str)]
    return any(word and is_secret_path(word) for command in commands for word in _SHELL_SPLIT.split(command))


def withhold_arguments(arguments: str) -> str:
    """The call's arguments with every value but its paths replaced by ``[withheld]``."""
    args = json.loads(arguments)
    kept = {k: (v if k in _PATH_KEYS else "[withheld]") for k, v in args.items()}
    return json.dumps(kept, ensure_ascii=False)


MASK = "***"
SECRET_ENV_VARS = (
    "MOONSHOT_API_KEY",
    "KIMI_API_KEY",
    "KIMI_MODEL_API_KEY",
    "OPENAI_API_KEY",
    "KIMI_MCP_HTTP_TOKEN",
)
#: Moonshot / OpenAI style keys (``sk-`` then at least 16 key characters), wherever they appear
KEY_SHAPE = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9][A-Za-z0-9_\-]{15,}")
MIN_SECRET_CHARS = 6

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]\s*(.*?)\s*$")
_SECRET_NAME = re.compile(r"key|secret|token|passw|pwd|pass$|credential|auth(?!or)|private|dsn|cookie", re.I)
_STORED_KEY = re.compile(
    r"""["']?(?:api_key|apiKey|access_token|refresh_token|token|secret)["']?\s*[=:]\s*["']([^"'\s]{8,})["']"""
)
_PLAIN_WORDS = frozenset({"true", "false", "null", "none", "yes", "no", "on", "off"})
_MAX_SECRET_FILE = 256 * 1024
_MAX_SCAN_ENTRIES = 200_000


class Redactor:
    """Masks known secret values and key-shaped strings. Thread-safe; values can be added as found."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        fresh = {v for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_CHARS}
        fresh = {v.strip() for v in fresh}
        with self._lock:
            if fresh <= self._values:
                return
            self._values |= fresh
            ordered = sorted(self._values, key=len, reverse=True)  # longest first: no partial masks
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def __len__(self) -> int:
        return len(self._values)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        return KEY_SHAPE.sub(MASK, text)

    def mask_tree(self, value: Any) -> Any:
        """``value`` with every string inside it (dict values, list items) masked; keys are kept."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.mask_tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask_tree(v) for v in value]
        return value


# ------------------------------------------------------------------------------------ where secrets live


def configured_secrets(env: Mapping[str, str]) -> list[str]:
    """API keys and tokens from the environment and from Kimi's own stored configuration."""
    values = [env[name] for name in SECRET_ENV_VARS if env.get(name)]
    values += _broker_password(env.get("KIMI_MCP_BROKER", ""))
    for folder in kimi_state_dirs(env):
        stored = [folder / "config.toml", folder / "config.json", *_children(folder / "credentials")]
        for path in stored:
            text = _read_text(path)
            if text:
                values += _STORED_KEY.findall(text)
    return values


def _broker_password(url: str) -> list[str]:
    """The password in a ``KIMI_MCP_BROKER`` URL (and the URL itself, which carries it)."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(url).password if url else None
    except ValueError:
        return []
    return [url, password] if password else []


def file_secret_values(text: str) -> list[str]:
    """The values in one secret file worth masking: assignments (``KEY=value``, ``key: value``) whose
    name or value looks secret, and long opaque lines and words (key material, tokens, netrc passwords)."""
    values: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "//", ";", "-----")):
            continue
        if match := _ASSIGNMENT.match(line):
            name, value = match.group(1), _unquote(match.group(2))
            if _worth_masking(value, secret_name=bool(_SECRET_NAME.search(name))):
                values.append(value)
            continue
        if len(line) >= 16 and " " not in line:
            values.append(line)  # a line of key material or a bare token
            continue
        words = line.split()
        for before, word in zip(["", *words], words, strict=False):
            if _SECRET_NAME.search(before) and len(word) >= MIN_SECRET_CHARS:
                values.append(word)  # "password X", "token X" (netrc, pgpass-like files)
            elif len(word) >= 8 and _classes(word) >= 3:
                values.append(word)
    return values


def scan_workspace_secrets(workspace: Path, excluded: Iterable[str] = ()) -> tuple[list[str], list[Path]]:
    """Values held in the workspace's secret files (``.env``, keys, credentials; git-ignored ones too),
    and the directories those files are in. Heavy directories are skipped; symlinks are not followed."""
    skip = DEFAULT_EXCLUDED_DIRS | frozenset(excluded)
    values: list[str] = []
    folders: list[Path] = []
    stack = [workspace]
    seen = 0
    while stack and seen < _MAX_SCAN_ENTRIES:
        folder = stack.pop()
        found = False
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in skip:
                            stack.append(Path(entry.path))
                        continue
                    rel = os.path.relpath(entry.path, workspace)
                    if entry.is_file(follow_symlinks=False) and is_secret_path(rel):
                        values += file_secret_values(_read_text(Path(entry.path)))
                        found = True
        except OSError:
            continue
        if found:
            folders.append(folder)
    return values, folders


def secrets_in_folders(workspace: Path, folders: Iterable[Path]) -> list[str]:
    """Values of the secret files directly inside ``folders`` (files created since the scan)."""
    values: list[str] = []
    for folder in folders:
        for path in _children(folder):
            if path.is_file() and not path.is_symlink() and is_secret_path(os.path.relpath(path, workspace)):
                values += file_secret_values(_read_text(path))
    return values


# ---------------------------------------------------------------------------------------------- helpers


def _worth_masking(value: str, *, secret_name: bool) -> bool:
    if len(value) < MIN_SECRET_CHARS or value.lower() in _PLAIN_WORDS:
        return False
    if secret_name:
        return True
    return len(value) >= 8 and (_classes(value) >= 2 or len(value) >= 20)


def _classes(text: str) -> int:
    return sum(
        (
            any(c.islower() for c in text),
            any(c.isupper() for c in text),
            any(c.isdigit() for c in text),
            any(not c.isalnum() for c in text),
        )
    )


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def _children(folder: Path) -> list[Path]:
    try:
        return [folder / name for name in os.listdir(folder)]
    except OSError:
        return []


def _read_text(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ""
    try:
        return os.read(fd, _MAX_SECRET_FILE).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


class WorkspaceSecrets:
    """Finds the workspace's secret values in a background thread (while Kimi starts and works) and hands
    them to ``redactor`` on ``finish()``, with those of secret files created next to them or in the root."""

    def __init__(self, redactor: Redactor, workspace: Path, excluded: Iterable[str] = ()) -> None:
        self.redactor = redactor
        self.workspace = workspace
        self._found: tuple[list[str], list[Path]] = ([], [])
        self._thread = threading.Thread(
            target=self._scan, args=(frozenset(excluded),), name="kimi-secrets", daemon=True
        )
        self._thread.start()

    def _scan(self, excluded: frozenset[str]) -> None:
        self._found = scan_workspace_secrets(self.workspace, excluded)
        self.redactor.add(self._found[0])

    def wait(self, timeout: float = 10.0) -> None:
        """Until the scan is done (before the turn starts, so progress messages are masked too)."""
        self._thread.join(timeout)

    def finish(self, timeout: float = 10.0) -> None:
        self.wait(timeout)
        values, folders = self._found
        self.redactor.add(values)
        self.redactor.add(secrets_in_folders(self.workspace, {self.workspace, *folders}))
