"""Argument types and tool annotations the tools share."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.types import ToolAnnotations
from pydantic import Field

from ..config import MODEL_PATTERN

WorkDir = Annotated[
    str | None,
    Field(description="Workspace directory (default: the client's root, KIMI_MCP_WORKSPACE or cwd)"),
]
WaitS = Annotated[
    float | None,
    Field(
        ge=0,
        description="Seconds to wait for Kimi's turn (default: until it is done, or KIMI_MCP_WAIT_S). If the "
        "turn is still going then, the result has status 'running' and a job_id: the turn goes on, and "
        "kimi_job(job_id) waits for it",
    ),
]
Model = Annotated[
    str | None,
    Field(
        max_length=128,
        pattern=MODEL_PATTERN,
        description="The model Kimi uses for this call: one of Kimi's model aliases or model names (kimi_status "
        "lists them; default: KIMI_MCP_MODEL, else Kimi's default model)",
    ),
]
IsolationArg = Annotated[
    Literal["none", "worktree"] | None,
    Field(
        description="none: Kimi edits your tree. worktree: Kimi works on an isolated copy of your git tree "
        "(uncommitted and untracked files included); the result has the diff, your tree is untouched until "
        "kimi_apply(job_id) (kimi_discard drops it). Default: KIMI_MCP_ISOLATION (none)",
    ),
]
Attempts = Annotated[
    int,
    Field(
        ge=1,
        le=4,
        description="worktree only: run this many independent Kimi attempts at once, each on its own copy; the "
        "result lists them best first (verify passed, then the smaller diff)",
    ),
]
VerifyCommand = Annotated[
    str | None,
    Field(
        max_length=10_000,
        description="worktree only: a shell command run in each copy after Kimi's turn (e.g. 'pytest -q'); "
        "its exit code and output tail rank the attempts (time limit KIMI_MCP_VERIFY_TIMEOUT)",
    ),
]
MaxTokens = Annotated[
    int | None,
    Field(
        ge=1,
        description="Token limit of this job: Kimi's input + output tokens summed over its steps (and attempts); "
        "past it Kimi is stopped and the result is error type 'budget' with the files changed so far. "
        "Default: KIMI_MCP_MAX_TOKENS (unset: no limit)",
    ),
]
ApprovalsArg = Annotated[
    Literal["policy", "ask"] | None,
    Field(
        description="policy: kimi-mcp approves Kimi's commands and edits inside the workspace by its rules. ask: "
        "each of those approvals is asked of you like a question (status 'waiting', question.kind 'approval'; "
        "answer 'approve', 'reject', or feedback text). What the rules forbid is rejected either way. "
        "Default: KIMI_MCP_APPROVALS (policy)",
    ),
]
IN_ONE_MESSAGE = (
    " (no limit of its own: with the prompt it must fit one Kimi message, KIMI_MCP_MAX_MESSAGE_TOKENS = "
    "45,000 tokens, about 180,000 characters of code; larger is refused with bad_input)"
)
"""Said of every text that goes into Kimi's message: the message limit is the one limit that applies."""
Files = Annotated[list[str], Field(description="Files relative to the workspace; their contents go to Kimi")]


def writes(title: str) -> ToolAnnotations:
    """Annotations of a tool that lets Kimi change the workspace."""
    return ToolAnnotations(
        title=title, read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )


def reads(title: str) -> ToolAnnotations:
    """Annotations of a tool whose Kimi cannot write files or run commands."""
    return ToolAnnotations(
        title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True
    )
