"""Where kimi-mcp's settings come from: the config file and the ``.env`` file, found and read with the standard
library alone, so the fast connect (``_connect``) can read them before anything heavy loads.

``config`` finds both files here too, and loads the ``.env`` with python-dotenv; :func:`read_env_file` reads
it as python-dotenv does (``export``, quotes and their escapes, ``#`` comments, ``${NAME}`` and
``${NAME:-default}`` from the environment or the file's earlier lines) without touching the environment.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_PREFIX = "KIMI_MCP_"

_BINDING = re.compile(
    r"""[^\S\n]*(?:export[^\S\n]+)?(?:'(?P<quoted_key>[^']+)'|(?P<key>[^=\#\s]+))[^\S\n]*=(?P<space>[^\S\n]*)
    (?:'(?P<single>(?:\\.|[^'\\])*)'|"(?P<double>(?:\\.|[^"\\])*)"|(?P<bare>(?!['"])[^\n]*))""",
    re.VERBOSE | re.DOTALL,
)
_LINE_END = re.compile(r"[^\S\n]*(?:#[^\n]*)?\n?")  # after a value: a comment at most
_VARIABLE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


def config_file_path(environ: Mapping[str, str] = os.environ) -> Path:
    """``KIMI_MCP_CONFIG``, else ``$XDG_CONFIG_HOME/kimi-mcp/config.toml`` (``~/.config`` by default)."""
    explicit = environ.get(f"{ENV_PREFIX}CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kimi-mcp" / "config.toml"


def checkout_env_file() -> Path | None:
    """The ``.env`` of the kimi-mcp checkout this runs from, when there is one."""
    root = Path(__file__).resolve().parents[2]
    candidate = root / ".env"
    return candidate if (root / "pyproject.toml").is_file() and candidate.is_file() else None


def env_file_path(environ: Mapping[str, str], checkout: Path | None) -> Path | None:
    """``KIMI_MCP_ENV_FILE`` (as given), else ``checkout`` (the checkout's ``.env``), else the ``.env`` beside
    the config file; None when there is none."""
    explicit = environ.get(f"{ENV_PREFIX}ENV_FILE")
    if explicit:
        return Path(explicit).expanduser()
    beside_config = config_file_path(environ).parent / ".env"
    return checkout or (beside_config if beside_config.is_file() else None)


def read_env_file(text: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a ``.env`` file's ``text`` sets, as python-dotenv reads them."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    values: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _BINDING.match(text, position)
        end = text.find("\n", match.end() if match else position)
        position = len(text) if end < 0 else end + 1
        if match is None or not _LINE_END.fullmatch(text, match.end(), position):
            continue  # python-dotenv skips a line it cannot read
        values[match["quoted_key"] or match["key"]] = _interpolate(_value(match), {**values, **environ})
    return values


def _value(match: re.Match[str]) -> str:
    if match["single"] is not None:
        return re.sub(r"\\[\\']", lambda m: m[0][1], match["single"])
    if match["double"] is not None:
        return re.sub(r"\\[\\'\"abfnrtv]", lambda m: codecs.decode(m[0], "unicode-escape"), match["double"])
    if match["space"] and match["bare"].startswith("#"):
        return ""  # `KEY= # comment`
    return re.sub(r"\s+#.*", "", match["bare"]).rstrip()


def _interpolate(value: str, known: Mapping[str, str]) -> str:
    return _VARIABLE.sub(lambda m: known.get(m["name"], m["default"] or ""), value)


def settings_environment(environ: Mapping[str, str] = os.environ) -> tuple[dict[str, str], bytes]:
    """The environment the server's settings will see (``environ`` over its ``.env`` file's variables), and
    the ``.env`` file's bytes (``b""`` when there is none or it cannot be read)."""
    path = env_file_path(environ, checkout_env_file())
    try:
        raw = path.read_bytes() if path is not None else b""
    except OSError:
        raw = b""
    values = read_env_file(raw.decode("utf-8", errors="replace"), environ) if raw else {}
    return {**values, **environ}, raw
