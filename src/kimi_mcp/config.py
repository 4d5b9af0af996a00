"""Settings: defaults < config file (TOML) < environment (a ``.env`` file feeds the environment).

The config file is ``$KIMI_MCP_CONFIG`` or ``~/.config/kimi-mcp/config.toml``; its keys are the field
names below (``timeout = 600``). Every field can be set by ``KIMI_MCP_<FIELD>`` in the environment.
The ``.env`` loaded is the first of ``$KIMI_MCP_ENV_FILE``, the one in the kimi-mcp checkout (running from
it) and the one beside the config file (``~/.config/kimi-mcp/.env``); never the user's workspace (whose
secrets must not leak into the server by accident). Existing variables win over it.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from dotenv import load_dotenv
from pydantic import BaseModel, Field, ValidationError, field_validator

from . import _sources
from ._sources import ENV_PREFIX, config_file_path
from ._sources import checkout_env_file as _checkout_env_file  # a name the tests replace
from .errors import SettingsError

MAX_FILE_CHARS = 20_000
"""Default per-file cap on the contents of a changed file returned in a result (``max_file_chars``)."""
MAX_TOTAL_CHARS = 30_000
"""Default cap on all file contents returned in one result (``max_total_chars``)."""

DEFAULT_EXCLUDED_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".jj",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
"""Directory names never walked, wherever they are (the tracker, the secret-file scan, workspace listings);
``exclude_dirs`` adds to them."""

Dialect = Literal["auto", "legacy", "kimi-code"]


class ConfigError(Exception):
    """The configuration is invalid; the message names each offending setting, its value and its source."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
"""A model name: it reaches Kimi's command line, or its login menu as keystrokes, so no control bytes."""


class Settings(BaseModel):
    kimi_bin: str | None = Field(default=None, description="Path to the kimi binary (else `kimi` on PATH)")
    dialect: Dialect = Field(default="auto", description="auto | legacy (kimi-cli 1.50) | kimi-code (2.x)")
    timeout: float = Field(default=300.0, gt=0, description="Seconds per tool call")
    startup_timeout: float = Field(default=60.0, gt=0, description="Seconds for Kimi to become ready")
    workspace: str | None = Field(
        default=None, description="Default workspace when no work_dir/root is given"
    )
    allow_home_workspace: bool = Field(
        default=False, description="Allow the user's home directory itself as a workspace (never / or above)"
    )
    state_dir: str | None = Field(
        default=None,
        description="kimi-mcp's own files (default $XDG_STATE_HOME/kimi-mcp or ~/.local/state/kimi-mcp)",
    )
    http_token: str | None = Field(
        default=None,
        description="Bearer token the HTTP transport requires (needed for a non-loopback --host)",
        repr=False,
    )
    max_file_chars: int = Field(default=MAX_FILE_CHARS, ge=0, description="Per-file content cap in a result")
    max_total_chars: int = Field(
        default=MAX_TOTAL_CHARS, ge=0, description="Cap on all file contents in a result"
    )
    max_result_chars: int = Field(
        default=40_000,
        ge=0,
        description="Cap on a whole result's JSON (0 = no cap); Claude Code saves larger ones",
    )
    max_context_bytes: int = Field(default=200_000, gt=0, description="Cap per context file sent to Kimi")
    max_message_tokens: int = Field(
        default=45_000,
        gt=0,
        description="Largest message for Kimi, in tokens as Kimi estimates them (larger ones are compacted "
        "or dropped by Kimi itself, so they are refused)",
    )
    allow_shell: bool = Field(default=True, description="Approve Kimi's shell commands in write tasks")
    exclude_dirs: list[str] = Field(default_factory=list, description="Extra directory names to skip")
    tracker_watch: bool = Field(
        default=True,
        description="Watch the workspace with inotify (Linux) so a change list re-examines only the directories "
        "where something happened; false = always walk the whole tree (same result, slower on big trees)",
    )
    tracker_fork: bool = Field(
        default=True,
        description="Let the whole-tree walk fork a helper for half of a large tree (>= 20k files, 2+ CPUs)",
    )
    tracker_spill: bool = Field(
        default=True,
        description="Keep a snapshot's per-file records in an anonymous temporary file (mapped, not resident) "
        "instead of in memory",
    )
    max_concurrent: int = Field(default=2, ge=1, description="Kimi processes running at once")
    standby: Literal["off", "after-call", "startup"] = Field(
        default="after-call",
        description=(
            "Keep a ready Kimi for the next call in the same workspace and mode: after-call (after each "
            "successful call), startup (also one for the default workspace when the server starts), off"
        ),
    )
    standby_idle: float = Field(default=300.0, gt=0, description="Seconds an unused standby Kimi is kept")
    max_standbys: int = Field(
        default=1,
        ge=0,
        description="Standby Kimis kept at once, for the workspaces used last (the oldest exits first; 0: none)",
    )
    wait_s: float | None = Field(
        default=None,
        ge=0,
        description="Default seconds a tool call waits for its turn before returning status 'running' and a "
        "job_id (the turn goes on; kimi_job waits for it); unset = wait for the turn to finish",
    )
    session_idle: float = Field(
        default=900.0,
        gt=0,
        description="Seconds a Kimi session stays alive after its last turn for kimi_continue (afterwards it "
        "is resumed from Kimi's own session store)",
    )
    max_live_sessions: int = Field(
        default=3,
        ge=0,
        description="Kimi sessions kept alive for kimi_continue (least recently used closed first)",
    )
    job_ttl_days: float = Field(
        default=7.0,
        gt=0,
        description="Days finished jobs are kept in the job store (and the isolated copies of worktree jobs)",
    )
    isolation: Literal["none", "worktree"] = Field(
        default="none",
        description="Default of the write tools' isolation: none (Kimi edits your tree) or worktree (Kimi works "
        "on an isolated copy of it; review the diff, then kimi_apply or kimi_discard)",
    )
    verify_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a verify_command may run after each round (not counted in the call's timeout)",
    )
    log_level: str = Field(default="INFO")
    log_file: str | None = Field(default=None, description="Also log to this file")
    transcript_dir: str | None = Field(default=None, description="Save each session's terminal transcript")
    platform: Literal["moonshot.ai", "moonshot.cn"] = Field(default="moonshot.ai")
    model: str | None = Field(
        default=None,
        max_length=128,
        pattern=MODEL_PATTERN,
        description="The model for calls that name none (Kimi's -m: one of its model aliases or model names), "
        "and the one the automated login picks; unset: Kimi's default model",
    )
    thinking: bool = Field(default=False, description="Answer the setup's thinking question with 'on'")
    questions: Literal["ask", "dismiss"] = Field(
        default="ask",
        description="Kimi's questions (its AskUserQuestion panel): ask (the caller answers: an elicitation form, "
        "or the job waits with status 'waiting') or dismiss (pressed away, as with no one there)",
    )
    question_timeout: float = Field(
        default=600.0, gt=0, description="Seconds a question waits for its answer before it is dismissed"
    )
    approvals: Literal["policy", "ask"] = Field(
        default="policy",
        description="Default of the write tools' approvals: policy (kimi-mcp approves what its rules allow) or "
        "ask (every such approval is asked of the caller like a question)",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Default token limit of a job (input + output, all its steps); unset: none",
    )
    daily_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens all jobs of this job store may spend in any 24 hours; a call past it is refused, a "
        "running job that crosses it is stopped; unset: no budget",
    )
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="USD per million input/output tokens per model alias, as 'alias=in/out,alias=in/out': "
        "results then carry usage.cost_usd",
    )
    tools: list[str] | None = Field(default=None, description="Allow-list of tool names to register")
    broker: str | None = Field(
        default=None,
        description="Run jobs on kimi-mcp workers through Docket on this Redis (redis://[:password@]host:port/db, "
        "rediss://, unix:///path.sock); a broker off loopback needs a password. Unset: jobs run in this server",
        repr=False,
    )
    bundle_max_mb: float = Field(
        default=200.0, gt=0, description="Largest git bundle (the tree sent to a worker) in MB"
    )
    job_retries: int = Field(
        default=2, ge=0, description="Times a job whose worker died runs again on another worker (a broker)"
    )
    otel_content: bool = Field(
        default=False,
        description="With OpenTelemetry on (OTEL_EXPORTER_OTLP_ENDPOINT ...): also record the task text and "
        "Kimi's answer in the job's span (gen_ai.input.messages / gen_ai.output.messages), masked",
    )

    model_config = {"extra": "forbid"}

    @field_validator("broker")
    @classmethod
    def _check_broker(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        problem = broker_problem(value.strip())
        if problem:
            raise ValueError(problem)
        return value.strip()

    @field_validator("prices", mode="before")
    @classmethod
    def _parse_prices(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        prices: dict[str, tuple[float, float]] = {}
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            alias, sep, pair = part.partition("=")
            given, slash, taken = pair.partition("/")
            try:
                if not (sep and slash and alias.strip()):
                    raise ValueError
                price = (float(given), float(taken))
                if min(price) < 0 or not all(math.isfinite(p) for p in price):
                    raise ValueError
                prices[alias.strip()] = price
            except ValueError:
                raise ValueError(
                    f"{part!r} is not 'alias=input/output' (USD per million tokens, not negative)"
                ) from None
        return prices

    @field_validator("exclude_dirs", "tools", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


#: ``KIMI_MCP_*`` variables that are not settings: where the settings come from
SOURCE_VARIABLES = (
    "CONFIG",
    "ENV_FILE",
    "FAST_CONNECT",
)  # FAST_CONNECT: read by _connect, before any setting


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def broker_problem(url: str) -> str | None:
    """Why ``url`` cannot be kimi-mcp's broker, or None. Docket pickles its messages: whoever can write to
    the Redis can run code on every worker and on the server, so a broker that is neither on loopback nor a
    unix socket must have a password. The password is never part of the message."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "not a URL (redis://[:password@]host:port/db, rediss://..., unix:///path/redis.sock)"
    if parts.scheme not in ("redis", "rediss", "unix"):
        return f"the scheme must be redis://, rediss:// or unix://, not {parts.scheme or 'none'}://"
    if parts.scheme == "unix":
        return None if parts.path else "unix:// needs the socket's path (unix:///path/redis.sock)"
    if not host:
        return "no host (redis://[:password@]host:port/db)"
    if host not in LOOPBACK_HOSTS and not parts.password:
        return (
            f"a broker on {host} (not loopback) must have a password (redis://:PASSWORD@{host}:...): whoever can "
            "write to it can run code on every worker and on this server"
        )
    return None


def unknown_variables(environ: Any = None) -> list[str]:
    """One warning per ``KIMI_MCP_*`` variable of ``environ`` that kimi-mcp does not read (a typo would be
    ignored silently), with the closest known name."""
    environ = os.environ if environ is None else environ
    known = [name.upper() for name in Settings.model_fields] + list(SOURCE_VARIABLES)
    warnings = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name.removeprefix(ENV_PREFIX) not in known:
            close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), known, n=1, cutoff=0.6)
            hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
            warnings.append(f"{name} is not a kimi-mcp setting and is ignored{hint}")
    return warnings


def env_file_path(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """The ``.env`` kimi-mcp reads: ``KIMI_MCP_ENV_FILE`` (used as given: missing, it is a configuration
    problem), else the kimi-mcp checkout's ``.env`` (when running from one), else ``.env`` beside the config
    file (``~/.config/kimi-mcp/.env``: an install without a checkout); None when there is none."""
    return _sources.env_file_path(environ, _checkout_env_file())


def load_env_file(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """Load the ``.env`` file (:func:`env_file_path`) into the process environment without overriding what
    is set; the path loaded, or None (a missing ``KIMI_MCP_ENV_FILE`` is reported by :func:`load_settings`)."""
    path = env_file_path(environ)
    if path is None or not path.is_file():
        return None
    load_dotenv(path, override=False)
    return path


def load_settings(environ: dict[str, str] | os._Environ[str] | None = None) -> Settings:
    """Build the settings from defaults, the config file and the environment (in that order)."""
    environ = os.environ if environ is None else environ
    values, path = _raw_values(environ)
    problems: list[str] = []
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        problems = [_problem(err, environ, path) for err in exc.errors()]
    env_file = environ.get(f"{ENV_PREFIX}ENV_FILE")
    if env_file and not Path(env_file).expanduser().is_file():
        problems.append(f"{ENV_PREFIX}ENV_FILE={env_file!r} (from the environment): no such file")
    if problems:
        raise ConfigError("invalid kimi-mcp configuration: " + "; ".join(problems), problems)
    return settings


def _raw_values(environ: Any) -> tuple[dict[str, Any], Path]:
    """The config file's values overlaid with the environment's (unvalidated), and the file's path."""
    values: dict[str, Any] = {}
    path = config_file_path(environ)
    if path.is_file():
        try:
            values.update(tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    elif environ.get(f"{ENV_PREFIX}CONFIG"):
        raise ConfigError(f"KIMI_MCP_CONFIG points to {path}, which does not exist")
    for name in Settings.model_fields:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = raw
    return values, path


def _problem(err: Any, environ: Any, path: Path) -> str:
    """One invalid setting: its variable, its value and where the value came from."""
    field = ".".join(str(p) for p in err["loc"])
    variable = ENV_PREFIX + field.upper()
    raw = environ.get(ENV_PREFIX + str(err["loc"][0]).upper()) if err["loc"] else None
    if raw:
        return f"{variable}={raw!r} (from the environment): {err['msg']}"
    value = err.get("input")
    return f"{field} = {value!r} (from {path}; or {variable} in the environment): {err['msg']}"


def configured(environ: Any = None) -> tuple[Settings, SettingsError | None]:
    """The settings, or, when the configuration is invalid, every valid value with defaults for the rest and
    the problem (the server still starts, so the problem reaches the user through every call instead of a
    bare "connection closed")."""
    environ = os.environ if environ is None else environ
    try:
        return load_settings(environ), None
    except ConfigError as exc:
        problem = SettingsError(str(exc), details={"problems": exc.problems})
    try:
        values, _path = _raw_values(environ)
    except ConfigError:  # the file itself is unreadable: the environment alone
        values = {
            n: environ[ENV_PREFIX + n.upper()]
            for n in Settings.model_fields
            if environ.get(ENV_PREFIX + n.upper())
        }
    try:
        Settings.model_validate(values)
    except ValidationError as exc:
        for bad in {str(err["loc"][0]) for err in exc.errors() if err["loc"]}:
            values.pop(bad, None)
    try:
        return Settings.model_validate(values), problem
    except ValidationError:  # e.g. an unknown key in the file
        return Settings(), problem


def read_environment() -> dict[str, str]:
    """The process environment, read once where kimi-mcp starts (the server, ``--check``, ``prune``,
    ``install-kimi``: after :func:`load_env_file`) and passed down from there: what Kimi, its probes and git
    run with, and where kimi-mcp's directories and the configured keys to mask are found. Nothing below an
    entry point reads ``os.environ``."""
    return dict(os.environ)


def _home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def state_dir(settings: Settings, environ: Mapping[str, str]) -> Path:
    """Where kimi-mcp keeps its own files: ``state_dir``, else ``$XDG_STATE_HOME/kimi-mcp``, else
    ``~/.local/state/kimi-mcp`` (``~``: the ``HOME`` of ``environ``; not created here)."""
    if settings.state_dir:
        return Path(settings.state_dir).expanduser()
    base = environ.get("XDG_STATE_HOME") or os.path.join(_home(environ), ".local", "state")
    return Path(base) / "kimi-mcp"


def data_dir(environ: Mapping[str, str]) -> Path:
    """Where kimi-mcp keeps what it installs: ``$XDG_DATA_HOME/kimi-mcp``, else ``~/.local/share/kimi-mcp``
    (``~``: the ``HOME`` of ``environ``)."""
    base = environ.get("XDG_DATA_HOME") or os.path.join(_home(environ), ".local", "share")
    return Path(base) / "kimi-mcp"


def kimi_code_prefix(environ: Mapping[str, str]) -> Path:
    """kimi-mcp's own Kimi Code (``kimi-mcp install-kimi``: Kimi Code and its Node, an npm prefix), which the
    server finds there without any PATH change."""
    return data_dir(environ) / "kimi-code"
