"""The one list of kimi-mcp's tools (name → the module of :mod:`kimi_mcp.tools` that defines the function of
that name, in the order clients see them) and which of them a configuration enables. Plain data, so
``kimi-mcp --check`` reads it without loading the tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Settings

TOOLS: dict[str, str] = {
    "kimi_code_task": "write",
    "kimi_prompt": "write",
    "kimi_refactor": "write",
    "kimi_debug": "write",
    "kimi_analyze_code": "read",
    "kimi_verify": "read",
    "kimi_consult": "read",
    "kimi_review": "review",
    "kimi_continue": "jobs",
    "kimi_job": "jobs",
    "kimi_jobs": "jobs",
    "kimi_wait": "wait",
    "kimi_steer": "control",
    "kimi_apply": "worktrees",
    "kimi_discard": "worktrees",
    "kimi_status": "status",
}
ALL_TOOLS = tuple(TOOLS)


def enabled_tools(settings: Settings) -> list[str]:
    """The tools ``settings.tools`` allows (all when unset); ``ValueError`` for unknown names."""
    enabled = set(settings.tools) if settings.tools else set(ALL_TOOLS)
    unknown = enabled - set(ALL_TOOLS)
    if unknown:
        raise ValueError(
            f"KIMI_MCP_TOOLS names unknown tools {sorted(unknown)}; valid: {', '.join(ALL_TOOLS)}"
        )
    return [name for name in ALL_TOOLS if name in enabled]
