"""The "submitted" value a ``tools/call`` run as an MCP task carries from the pipeline to the tasks extension.

The tasks extension (:mod:`.tasks`) puts an empty list into the request's state under :data:`SUBMITTED`
(``ctx.set_state(SUBMITTED, [], serializable=False)``: FastMCP's request-scoped state, shared by the
extension's and the tool's context) before the tool runs; the pipeline, once the call's jobs are submitted,
appends its ``pipeline.Submitted`` and answers at once instead of waiting, and the extension answers the
``tools/call`` with the task. A constant of its own: the extension loads at start-up, the pipeline at the
first call.
"""

from __future__ import annotations

SUBMITTED = "kimi_mcp_submitted"
