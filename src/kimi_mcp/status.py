"""What kimi-mcp would run with, checked without spending any model quota: the configuration, the Kimi
binary (dialect, version; Node for Kimi Code) and, in a running server, its live sessions and jobs. Used by
``kimi-mcp --check`` (a terminal) and the ``kimi_status`` tool."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic import BaseModel, Field

from .config import Settings, kimi_code_prefix, state_dir, unknown_variables
from .drivers import Driver, check_node, find_binary, make_driver, probe
from .errors import AuthError, KimiMCPError, SettingsError
from .models import ErrorInfo
from .tool_names import ALL_TOOLS, enabled_tools


class StatusReport(BaseModel):
    """Whether kimi-mcp can run Kimi as configured, and what it holds now."""

    success: bool = Field(description="No problem found")
    problems: list[ErrorInfo] = Field(default_factory=list, description="What must be fixed, with how")
    warnings: list[str] = Field(
        default_factory=list,
        description="What looks wrong but does not stop kimi-mcp (e.g. a misspelt variable)",
    )
    kimi_bin: str | None = None
    dialect: str | None = None
    kimi_version: str | None = None
    node_version: str | None = Field(default=None, description="The Node that runs Kimi Code")
    login: str = Field(default="", description="Kimi's model, or how kimi-mcp will log Kimi in")
    models: list[str] = Field(
        default_factory=list, description="The models a call's `model` may name (Kimi's aliases)"
    )
    default_model: str | None = Field(
        default=None, description="The model of calls naming none: KIMI_MCP_MODEL, else Kimi's default"
    )
    workspace_default: str | None = Field(default=None, description="KIMI_MCP_WORKSPACE, if set")
    state_dir: str = ""
    live_sessions: int = Field(default=0, description="Kimi conversations kept alive for kimi_continue")
    standbys: int = Field(default=0, description="Ready Kimis waiting for the next call")
    running_jobs: list[str] = Field(default_factory=list, description="job_ids running in this server")
    daily_tokens_used: int | None = Field(
        default=None,
        description="Tokens of the job store's jobs in the last 24 hours (with KIMI_MCP_DAILY_TOKENS)",
    )
    broker: str | None = Field(
        default=None, description="Where jobs run: the broker's host (KIMI_MCP_BROKER; null: in this server)"
    )
    workers: list[dict] = Field(
        default_factory=list,
        description="The workers heard from lately (name, host, dialect, kimi_version, models, slots, free_slots, "
        "heartbeat), with a broker",
    )


def status_report(
    settings: Settings, problem: KimiMCPError | None = None, *, env: Mapping[str, str]
) -> StatusReport:
    """Check the configuration (``problem``: why it was refused) and the Kimi install, in ``env`` (the
    environment read where kimi-mcp started)."""
    env = dict(env)
    report = StatusReport(
        success=True, state_dir=str(state_dir(settings, env)), workspace_default=settings.workspace
    )
    if problem is not None:
        report.problems.append(ErrorInfo.from_exception(problem))
    elif (tools := _tools_problem(settings)) is not None:
        report.problems.append(ErrorInfo.from_exception(tools))
    report.warnings = unknown_variables(env)
    try:
        report.kimi_bin = find_binary(settings.kimi_bin, env, kimi_code_prefix(env))
        install = probe(report.kimi_bin, env, settings.dialect)
        report.dialect, report.kimi_version = install.dialect, install.version
        report.node_version = check_node(install, env)
        driver = make_driver(install)
        report.login = _login(driver, settings, env, report)
        report.models = sorted(driver.models(env))
        report.default_model = settings.model or driver.default_alias(env)
        if settings.model:
            driver.model_flag(settings.model, env, "KIMI_MCP_MODEL")  # an unknown default is a problem now
    except KimiMCPError as exc:
        report.problems.append(ErrorInfo.from_exception(exc))
    report.success = not report.problems
    return report


def _tools_problem(settings: Settings) -> SettingsError | None:
    """``KIMI_MCP_TOOLS`` naming a tool that does not exist (the server would answer every call with it)."""
    try:
        enabled_tools(settings)
    except ValueError as exc:
        unknown = [name for name in settings.tools or [] if name not in ALL_TOOLS]
        close = [difflib.get_close_matches(name, ALL_TOOLS, n=1) for name in unknown]
        hints = [f"{name} → {match[0]}" for name, match in zip(unknown, close, strict=True) if match]
        return SettingsError(
            str(exc),
            details={"unknown": unknown},
            suggestion="Fix KIMI_MCP_TOOLS" + (f" ({'; '.join(hints)})" if hints else "") + ".",
        )
    return None


def _login(driver: Driver, settings: Settings, env: dict[str, str], report: StatusReport) -> str:
    model = driver.configured_model(env)
    if model:
        return f"logged in: {model}"
    if env.get("MOONSHOT_API_KEY", "").strip():
        return f"not logged in: the first call logs Kimi in to {settings.platform} with MOONSHOT_API_KEY"
    report.problems.append(
        ErrorInfo.from_exception(
            AuthError(
                "Kimi is not logged in (no model configured) and MOONSHOT_API_KEY is not set",
                suggestion="Set MOONSHOT_API_KEY in the server's environment, or run `kimi` once and /login.",
            )
        )
    )
    return "not logged in"


def check_lines(report: StatusReport) -> list[str]:
    """The report for a terminal (``kimi-mcp --check``)."""
    lines = [f"kimi binary: {report.kimi_bin or 'not found'}"]
    if report.dialect:
        lines.append(f"dialect: {report.dialect} {report.kimi_version}")
    if report.node_version:
        lines.append(f"node (Kimi Code): {report.node_version}")
    if report.login:
        lines.append(f"login: {report.login}")
    if report.models:
        lines.append(
            f"models: {', '.join(report.models)} (calls use {report.default_model or 'the default'})"
        )
    lines.append(f"state directory: {report.state_dir}")
    lines += [f"WARNING: {warning}" for warning in report.warnings]
    for problem in report.problems:
        lines += [f"PROBLEM ({problem.type}): {problem.message}", f"  what to do: {problem.suggestion}"]
    lines.append("ok" if report.success else f"{len(report.problems)} problem(s)")
    return lines
