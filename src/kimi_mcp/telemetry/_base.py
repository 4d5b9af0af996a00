"""The no-op bases of what the telemetry hands out (a job's span, a question's wait): what runs when
OpenTelemetry is off, and what ``_otel`` extends when it is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..models import TaskResult

T = TypeVar("T")


class JobTrace:
    """One job's span; this base is the no-op used when OpenTelemetry is off."""

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(...)`` in this thread with the job's span current."""
        return fn(*args, **kwargs)

    def finish(self, result: TaskResult, mask: Callable[[Any], Any] = lambda value: value) -> None:
        """End the span with what ``result`` says (masked by the job's redactor, then ``mask``)."""


class Waiting:
    """A question or approval asked of the caller, until it is answered or gone (no-op base)."""

    def end(self, outcome: str) -> None:
        """It was ``outcome`` (answered, withdrawn)."""
