"""Executors: where a job's work runs. The job manager hands each job's :class:`~kimi_mcp.jobs.JobSpec`
to its executor, from the job's own thread, and records what comes back.

- :class:`Executor` (``_base``): the family's few methods.
- :class:`Local` (``_local``): runs the spec in this process (the server's runner, its Kimi processes),
  the default.

Beside them, :class:`kimi_mcp.remote.Remote` sends it to a ``kimi-mcp worker`` through the broker
(``KIMI_MCP_BROKER``): the remote package holds both sides of that.
"""

from __future__ import annotations

from ._base import Executor, RunTask
from ._local import Local, Runtime

__all__ = ["Executor", "Local", "RunTask", "Runtime"]
