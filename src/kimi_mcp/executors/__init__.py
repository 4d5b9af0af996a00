"""Executors: where a job's work runs. The job manager hands each job's :class:`~kimi_mcp.jobs.JobSpec`
to its executor, from the job's own thread, and records what comes back.

- :class:`Executor` (``_base``): the family's few methods.
- :class:`Local` (``_local``): runs the spec in this process (the server's runner, its Kimi processes),
  the default.
- :class:`Remote` (``_remote``): sends it to a ``kimi-mcp worker`` through the broker (``KIMI_MCP_BROKER``).
"""

from __future__ import annotations

from ._base import Executor, RunTask
from ._local import Local, Runtime
from ._remote import Remote

__all__ = ["Executor", "Local", "Remote", "RunTask", "Runtime"]
