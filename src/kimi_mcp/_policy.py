"""Transitional re-export: the approval policy lives in ``kimi_mcp.session._policy`` now.

Only runner.py still imports it from here; delete this file once it imports ``ApprovalPolicy`` from
``.session``.
"""

from __future__ import annotations

from .session._policy import ApprovalPolicy, is_inside

__all__ = ["ApprovalPolicy", "is_inside"]
