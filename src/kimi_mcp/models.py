"""Typed results returned by the tools (their ``outputSchema``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .errors import ErrorType, KimiMCPError


class ErrorInfo(BaseModel):
    """Why a call failed and what to do about it."""

    type: ErrorType
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    suggestion: str
    retryable: bool

    @classmethod
    def from_exception(cls, exc: KimiMCPError) -> ErrorInfo:
        return cls(
            type=exc.type,
            message=exc.message,
            details=exc.details,
            suggestion=exc.suggestion,
            retryable=exc.retryable,
        )


class TruncatedItem(BaseModel):
    """Something left out of the result to stay within the size budgets."""

    path: str = Field(description="File (relative to the workspace) or result field that was cut")
    reason: Literal["file_too_large", "total_budget", "result_budget"]
    size_bytes: int = Field(description="Full size on disk (or of the field)")
    returned_chars: int = Field(description="How many characters were returned (0 = none)")


class ToolCallTrace(BaseModel):
    """One tool Kimi ran during the turn, from Kimi's own session log."""

    name: str
    arguments: str = Field(description="Arguments as JSON text, trimmed")
    result: str | None = Field(default=None, description="Result summary, trimmed; null if none was logged")
    is_error: bool = False
    approval: Literal["auto", "approved", "rejected"] = "auto"


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class TaskResult(BaseModel):
    """What Kimi said and every file it created, changed or deleted."""

    success: bool
    output: str = Field(default="", description="Kimi's final answer text")
    files_created: list[str] = Field(default_factory=list, description="Paths relative to the workspace")
    files_modified: list[str] = Field(default_factory=list)
    files_deleted: list[str] = Field(default_factory=list)
    file_contents: dict[str, str] = Field(
        default_factory=dict, description="path -> text for created/modified text files (within budgets)"
    )
    binary_files: list[str] = Field(default_factory=list, description="Created/modified files without text")
    secret_files: list[str] = Field(
        default_factory=list, description="Created/modified files whose contents are withheld (secrets)"
    )
    truncated: list[TruncatedItem] = Field(default_factory=list)
    tool_calls: list[ToolCallTrace] = Field(default_factory=list)
    usage: Usage | None = None
    workspace: str = ""
    dialect: str = ""
    kimi_version: str = ""
    session_id: str | None = None
    duration_s: float = 0.0
    error: ErrorInfo | None = None
