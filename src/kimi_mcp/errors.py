"""The error model shared by every tool: one exception type per failure class.

Each error carries what a caller (often another agent) needs to decide what to do next: a stable
``type``, a human message, ``details``, a concrete ``suggestion`` and whether retrying can help.
Messages never contain secrets: callers pass already-redacted text.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

ErrorType = Literal[
    "install",
    "auth",
    "api",
    "session",
    "timeout",
    "cancelled",
    "filesystem",
    "bad_input",
    "config",
    "budget",
    "broker",
]


class KimiMCPError(Exception):
    """Base class. Subclasses fix ``type``, a default ``suggestion`` and ``retryable``."""

    type: ClassVar[ErrorType] = "session"
    default_suggestion: ClassVar[str] = "Check the server log (stderr) for details and try again."
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        suggestion: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.suggestion = suggestion or self.default_suggestion
        self.retryable = self.default_retryable if retryable is None else retryable


class InstallError(KimiMCPError):
    type = "install"
    default_suggestion = (
        "Run `kimi-mcp install-kimi` (Kimi Code and Node 22 where kimi-mcp finds them), or install Kimi Code CLI "
        "(npm i -g @moonshot-ai/kimi-code, Node >= 22.19) or the legacy kimi-cli (uv tool install --python 3.13 "
        "kimi-cli==1.51.0), then put `kimi` on PATH or set KIMI_MCP_KIMI_BIN."
    )


class AuthError(KimiMCPError):
    type = "auth"
    default_suggestion = (
        "Set MOONSHOT_API_KEY in the server's environment (or its .env) so kimi-mcp can log in, "
        "or run `kimi` once by hand and log in with /login."
    )


class ApiError(KimiMCPError):
    """The model provider failed (rate limit, server error, network)."""

    type = "api"
    default_suggestion = "The model provider failed transiently; wait a little and retry the call."
    default_retryable = True


class SessionError(KimiMCPError):
    type = "session"


class StartupFault(SessionError):
    """Kimi looked ready but was not (Kimi Code printing "LLM not set" although it showed its model): the message
    never reached the model, so the runner starts a fresh Kimi and sends it once more before reporting this."""

    default_suggestion = (
        "Retry the call (a fresh Kimi was tried once already); if it keeps happening, run `kimi` by hand in the "
        "workspace to see whether its model is set."
    )
    default_retryable = True


class TaskTimeout(KimiMCPError):
    type = "timeout"
    default_suggestion = (
        "Split the task into smaller steps or raise KIMI_MCP_TIMEOUT. Files Kimi already changed are "
        "listed in this result."
    )
    default_retryable = True


class TaskCancelled(KimiMCPError):
    type = "cancelled"
    default_suggestion = "The call was cancelled by the client; files already changed are listed."


class BudgetError(KimiMCPError):
    """A token limit (``max_tokens``, ``KIMI_MCP_DAILY_TOKENS``) was crossed: Kimi was stopped."""

    type = "budget"
    default_suggestion = "Continue with kimi_continue and a larger max_tokens if more work is worth it."


class BrokerError(KimiMCPError):
    """The job broker (``KIMI_MCP_BROKER``: Redis, through Docket) cannot be reached or refused us."""

    type = "broker"
    default_suggestion = (
        "Check that the Redis named by KIMI_MCP_BROKER runs and is reachable from this machine (host, port, "
        "password, TLS for rediss://), e.g. `redis-cli -u URL ping`; kimi_job still answers from the job store."
    )
    default_retryable = True


class WorkspaceError(KimiMCPError):
    type = "filesystem"
    default_suggestion = "Pass an existing directory as work_dir and paths relative to it."


class BadInput(KimiMCPError):
    type = "bad_input"
    default_suggestion = "Fix the arguments of the call (see the tool's input schema)."


class SettingsError(KimiMCPError):
    """The server's own configuration is invalid: it started anyway, and every Kimi call says why."""

    type = "config"
    default_suggestion = (
        "Fix the named setting where it came from (the MCP client's env for the server, or the config file), "
        "then restart the server; `kimi-mcp --check` in a terminal shows every problem."
    )
