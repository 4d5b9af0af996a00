"""A job as data: everything an executor needs to run it, as plain JSON-able values.

The tool layer checks the call's arguments, finds the workspace, reads the context files and builds Kimi's
prompt; what is left to do is described by a :class:`JobSpec`: the Kimi turn (prompt, workspace, mode,
conversation, model, isolation, limits) and the tool's finishing step, looked up by the tool's name
(:mod:`kimi_mcp.finish`), with what that step needs from the call (``sent``: the files the caller sent, the
"before" of their diffs). An executor (``kimi_mcp.executors``) runs it here or elsewhere; the job store
keeps it in the job's row (masked like the arguments)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .task import TaskRequest

IsolationMode = Literal["none", "worktree"]
ApprovalsMode = Literal["policy", "ask"]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job's work: its Kimi turn and the tool whose finishing step makes the result."""

    tool: str  # the tool that made it (kimi_code_task, kimi_refactor, kimi_continue, ...): its finisher
    prompt: str  # Kimi's message, as built by the tool
    workspace: str  # the caller's workspace (absolute)
    read_only: bool
    arguments: dict[str, Any] = field(default_factory=dict)  # the tool's checked arguments
    session_id: str | None = None  # a follow-up in this Kimi conversation
    model: str | None = None  # None: KIMI_MCP_MODEL, else Kimi's own default
    isolation: IsolationMode = "none"  # "worktree": Kimi works on an isolated copy of the tree
    verify_command: str | None = None  # run where Kimi worked (the copy, or the workspace) after its turn
    fix_rounds: int = 0  # more turns for Kimi while verify_command fails (see ``runner._fix``)
    copy: str | None = None  # a follow-up continues in this isolated copy (its worktree.id)
    max_tokens: int | None = None  # the call's token limit (None: none); all its attempts share it
    approvals: ApprovalsMode = "policy"  # "ask": Kimi's approvals go to the caller
    sent: dict[str, str] = field(default_factory=dict)  # relative path → text the caller sent, to diff

    @property
    def isolated(self) -> bool:
        return self.isolation == "worktree"

    def request(self) -> TaskRequest:
        """The Kimi turn this spec asks for, in the caller's workspace."""
        return TaskRequest(
            prompt=self.prompt, workspace=Path(self.workspace), read_only=self.read_only,
            session_id=self.session_id, model=self.model, verify_command=self.verify_command,
            fix_rounds=self.fix_rounds,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """The spec ``to_dict`` gave (keys this version does not know are ignored: a newer server's)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
