"""The tool calls of a turn as reported to the MCP client: secret-touching calls withheld, masked, then cut."""

from __future__ import annotations

from collections.abc import Callable

from .models import ToolCallTrace
from .secrets import touches_secret, withhold_arguments
from .session import CallRecord, TurnTrace
from .session._wirelog import trim

TRIM = 2_000  # characters of a call's arguments or result reported


def tool_traces(trace: TurnTrace, redact: Callable[[str], str]) -> list[ToolCallTrace]:
    """The calls in the order Kimi made them; ``redact`` is applied before long texts are cut (so no cut
    leaves half a secret)."""
    return [_call_trace(call, redact) for call in trace.calls.values()]


def _call_trace(call: CallRecord, redact: Callable[[str], str]) -> ToolCallTrace:
    arguments, result = call.arguments, call.result
    if touches_secret(arguments):
        arguments = withhold_arguments(arguments)
        result = None if result is None else "[withheld: the call touched a secret file]"
    return ToolCallTrace(
        name=call.name,
        arguments=trim(redact(arguments), TRIM),
        result=None if result is None else trim(redact(result), TRIM),
        is_error=call.is_error,
        approval=call.approval,  # type: ignore[arg-type]
    )
