"""The "submitted" value a ``tools/call`` run as an MCP task carries from the tool to the tasks extension.

The tasks extension (:mod:`.tasks`) puts an empty list into the request's state under :data:`SUBMITTED`
(``ctx.set_state(SUBMITTED, [], serializable=False)``: FastMCP's request-scoped state, shared by the
extension's and the tool's context) before the tool runs. A Kimi tool's pipeline, once the call's jobs are
submitted, appends its ``pipeline.Submitted`` and answers at once instead of waiting; ``kimi_wait``, once it
knows its jobs, appends a :class:`Gathering`. The extension then answers the ``tools/call`` with the task.
Defined here, not beside the tools: the extension loads at start-up, the tools at the first call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUBMITTED = "kimi_mcp_submitted"


@dataclass(frozen=True)
class Gathering:
    """A ``kimi_wait`` run as an MCP task: the extension calls ``look`` at each ``tasks/get`` (while the wait
    is not over the task is working, with the standing as its status message) and completes the task with
    ``reply``. Both are called in a worker thread (they may read the job store)."""

    job_ids: list[str]  # the jobs waited for (their events go to the task's client)
    #: (over: enough jobs are ready for ``until``, or ``wait_s`` passed; the standing, "1 of 3 jobs finished")
    look: Callable[[], tuple[bool, str]]
    reply: Callable[[], Any]  # the tool's reply (a FastMCP ``ToolResult``), as the plain call returns it
