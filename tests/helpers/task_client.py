"""fastmcp.Client with MCP tasks (the ``fastmcp-tasks`` client extension) for the tests that ask for them.

Importing ``fastmcp_tasks`` makes *every* ``fastmcp.Client`` of the process ask for tasks; the suite's other
tests expect plain calls (``wait_s``, progress), so the automatic registration is undone here and a test opts
in per client: ``Client(target, extensions=[tasks_extension()])``, then ``call_tool_task`` for a handle or
``call_tool`` (which polls the task to its end)."""

from __future__ import annotations

from typing import Any

import fastmcp_tasks  # noqa: F401 - registers its client extension for every Client: undone below
from fastmcp.client import extension_hooks
from fastmcp_tasks import ToolTask, call_tool_task
from fastmcp_tasks.client import _build_tasks_client_extension

if _build_tasks_client_extension in extension_hooks._internal_client_extension_factories:
    extension_hooks._internal_client_extension_factories.remove(_build_tasks_client_extension)

__all__ = ["ToolTask", "call_tool_task", "tasks_extension"]


def tasks_extension() -> Any:
    """The client half of the tasks extension, for one ``Client(extensions=[...])``."""
    return _build_tasks_client_extension(None)
