"""Approval policy: which of Kimi's tool calls a session approves."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..drivers.base import ToolKind


def is_inside(workspace: Path, target: str) -> bool:
    """Whether ``target`` (absolute, or relative to the workspace) resolves inside the workspace.

    Symlinks in existing path components are resolved, so a link pointing out of the workspace counts
    as outside.
    """
    root = os.path.realpath(workspace)
    target = os.path.expanduser(target)  # Kimi's file tools expand ~ themselves
    path = target if os.path.isabs(target) else os.path.join(root, target)
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    workspace: Path
    read_only: bool
    allow_shell: bool = True

    def decide(self, kind: ToolKind | None, targets: list[str]) -> tuple[bool, str]:
        """Return (approve, reason)."""
        if kind is None:
            return False, "unrecognised approval request"
        if kind == "read":
            return True, "read-only tool"
        if self.read_only:
            return False, "read-only task: no file writes or commands"
        if kind == "edit":
            outside = [t for t in targets if not is_inside(self.workspace, t)]
            if not targets:
                return False, "file edit without a path"
            if outside:
                return False, f"writes outside the workspace: {', '.join(outside)}"
            return True, "file edit inside the workspace"
        if kind == "shell":
            return (True, "shell command in the workspace") if self.allow_shell else (False, "shell disabled")
        return True, "tool allowed in write tasks"

    def feedback(self, reason: str) -> str:
        """What the model is told when one of its actions is rejected."""
        if self.read_only:
            return (
                "Rejected by kimi-mcp: this is a read-only task. Do not create, modify or delete files and do not "
                "run commands. Continue with reading and searching only, then give your answer."
            )
        return f"Rejected by kimi-mcp: {reason}. Continue without this action."
