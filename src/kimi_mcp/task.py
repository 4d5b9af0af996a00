"""What a tool call hands the runner (``TaskRequest``) and what the runner keeps current for the call's job
while it runs (``RunWatch``): plain data, so the tools and jobs need not load the runner (Kimi, pexpect,
the tracker) before the first call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TaskRequest:
    prompt: str
    workspace: Path
    read_only: bool = False
    #: a follow-up in this Kimi conversation (typed into its live Kimi, or resumed from Kimi's store)
    session_id: str | None = None
    #: the model for this call (one of Kimi's aliases or model names; None: KIMI_MCP_MODEL, else Kimi's own)
    model: str | None = None
    #: Kimi works on an isolated copy (a worktree job): no standby is started for its one-off workspace
    isolated: bool = False
    #: a shell command run in the workspace after Kimi's turn (its verdict is the result's ``verify``)
    verify_command: str | None = None
    #: how many more turns Kimi gets to make a failing ``verify_command`` pass (its output sent as the turn)
    fix_rounds: int = 0


@dataclass
class RunWatch:
    """What a call's job reads while the call runs; the runner keeps it current."""

    queued: bool = True  # waiting for a slot or for another writer in the same workspace
    starting: bool = False  # Kimi starts (or the ready Kimi taken finishes starting): its turn comes next
    session_id: str | None = None
    #: the files created, modified or deleted so far (relative paths), while the turn runs
    changed_so_far: Callable[[], list[str]] = lambda: []
