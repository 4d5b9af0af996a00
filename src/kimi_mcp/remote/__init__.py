"""Jobs on other machines: kimi-mcp servers queue jobs on a broker (Docket on Redis, ``KIMI_MCP_BROKER``) and
``kimi-mcp worker`` processes run them. Every module here says which side runs it:

- both sides: :mod:`.broker` (the connection, kimi-mcp's keys and payloads), :mod:`.sessions` (Kimi's files
  of a conversation, packed on one machine and placed on another);
- the server: :mod:`.server_executor` (:class:`Remote`, the executor that sends a job to a worker, relays
  its control and brings its result and copy back);
- the worker: :mod:`.worker_service` (the process: queues, heartbeat, reclaiming), :mod:`.worker_job` (the
  Docket task that runs one job), :mod:`.worker_reclaim` (letting unused copies go).

Docket and redis load only with a broker: the server imports this package when ``KIMI_MCP_BROKER`` is set.
"""

from __future__ import annotations

from .server_executor import Remote

__all__ = ["Remote"]
