"""``kimi_status``: whether kimi-mcp can run Kimi as configured (configuration, binary, dialect, Node) and
what it holds now (live sessions, standbys, running jobs). Runs no model turn."""

from __future__ import annotations

import functools
import time

import anyio
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from fastmcp.tools.base import ToolResult

from ..adapter.budget import result_json
from ..adapter.pipeline import Backend, current_backend
from ..jobs import DAY_S
from ..models import ErrorInfo
from ..remote import broker
from ..scope import DAILY_WARNING, daily_warning
from ..status import StatusReport, status_report
from ._params import reads


@tool(
    description=(
        "Check kimi-mcp without running Kimi (spends no quota): configuration problems (which setting, its "
        "value, where it came from), the Kimi binary, dialect and version, the Node version for Kimi Code, "
        "and the live conversations, standbys and running jobs of this server."
    ),
    annotations=reads("Kimi: status"),
    output_schema=StatusReport.model_json_schema(),
)
async def kimi_status(backend: Backend = Depends(current_backend)) -> ToolResult:  # noqa: B008
    report = await anyio.to_thread.run_sync(
        functools.partial(status_report, backend.settings, backend.problem, env=backend.env)
    )
    report.standbys, report.live_sessions = backend.runner.held()
    report.running_jobs = [job.job_id for job in backend.jobs.running_here()]
    daily = backend.settings.daily_tokens
    if daily is not None:
        try:
            used = await anyio.to_thread.run_sync(backend.jobs.store.tokens_since, time.time() - DAY_S)
        except Exception:  # the store's own problem is reported by the calls that need it
            used = 0
        report.daily_tokens_used = used
        if used >= DAILY_WARNING * daily:
            report.warnings.append(daily_warning(used, daily))
    if backend.settings.broker:
        await _workers(report, backend.settings.broker)
    payload = report.model_dump(mode="json")
    return ToolResult(content=result_json(payload), structured_content=payload)


async def _workers(report: StatusReport, url: str) -> None:
    """The broker's workers into ``report`` (an unreachable broker is a problem, said with what to check)."""
    report.broker = broker.broker_host(url)
    try:
        with anyio.fail_after(5):
            async with broker.open_docket(url) as docket, docket.redis() as redis:
                report.workers = await broker.live_workers(redis)
    except Exception as exc:
        report.problems.append(ErrorInfo.from_exception(broker.unreachable(report.broker, exc)))
        report.success = False
        return
    if not report.workers:
        report.warnings.append(
            f"no kimi-mcp worker is listening on the broker {report.broker}: jobs will wait"
        )
