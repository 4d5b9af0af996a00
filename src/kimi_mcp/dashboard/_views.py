"""The dashboard's endpoints: the jobs table, a job's page, the usage chart, their event streams, and the
POSTs of the buttons (each checked for the page's CSRF token, then done by ``_actions``, then redirected
back to the job's page saying what happened)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import urlencode

import anyio
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from .. import worktree
from ..adapter.isolation import copy_of
from ..errors import KimiMCPError
from ..jobs import FINISHED, JobRecord
from . import _actions, _events, _job_page, _render, _usage, _workers
from ._gate import CSRF_FIELD, CSRF_HEADER, csrf_ok
from ._source import Source

DEFAULT_ROWS = 200
MAX_ROWS = 1000
FILTERS = ("status", "group", "workspace")
ACTIONS = {"cancel": _actions.cancel, "apply": _actions.apply, "discard": _actions.discard}
CSRF_REFUSED = (
    "kimi-mcp dashboard: refused: a POST needs the page's CSRF token (reload the page and try again)."
)


def base_of(request: Request) -> str:
    """The dashboard's own prefix: "" on its own, "/dashboard" inside the HTTP transport."""
    return str(request.scope.get("root_path", "")).rstrip("/")


class Views:
    """The endpoints, over one ``source`` and this process's CSRF token."""

    def __init__(self, source: Source, csrf: str) -> None:
        self.source = source
        self.csrf = csrf

    # -- reading ---------------------------------------------------------------------------------------
    def masked(self, record: JobRecord) -> JobRecord:
        """``record`` with every text a job recorded masked (its workspace path is shown as it is)."""
        mask = self.source.mask
        return dataclasses.replace(
            record, summary=mask(record.summary), question=mask(record.question), progress=mask(record.progress),
            result=mask(record.result), arguments=mask(record.arguments),
        )  # fmt: skip

    def rows(self, base: str, filters: dict[str, str], limit: int) -> str:
        query = {k: filters.get(k) or None for k in FILTERS}
        if query["workspace"]:  # as `kimi-mcp jobs --workspace` takes it
            query["workspace"] = str(Path(query["workspace"]).expanduser().resolve())
        records = self.source.listing(limit=limit, **query)
        spent = self.source.cost_and_worker(records)
        home = str(Path.home())
        return _render.job_rows(base, [self.masked(r) for r in records], spent, home=home)

    def jobs_look(self, base: str, filters: dict[str, str], limit: int) -> tuple[dict[str, str], bool]:
        """The jobs page's parts now (run in a worker thread: the broker's workers are read on the loop)."""
        parts = {"jobs": self.rows(base, filters, limit)}
        if self.source.workers is not None:
            parts["workers"] = _workers.workers_view(anyio.from_thread.run(self.source.workers.read))
        return parts, False

    def look(self, base: str, job_id: str) -> tuple[dict[str, str], bool]:
        """A job's page parts now, and whether the job has finished (they will not change any more)."""
        try:
            record = self.masked(self.source.record(job_id))
        except KimiMCPError:
            return {}, True
        seen = self.source.store.screen(record.job_id)
        screen = self.source.mask(seen[1]) if seen and seen[1] else None
        change = self.change(record)
        parts = _job_page.parts(base, record, screen, change, self.csrf, self.worker(record))
        return parts, record.status in FINISHED

    def worker(self, record: JobRecord) -> str:
        """The broker's worker that ran the job (from its result), or that a running job was sent to one."""
        if record.result is not None:
            return str(record.result.get("worker") or "")
        spec = self.source.store.spec(record.job_id) or {}
        return "a worker of the broker (KIMI_MCP_BROKER)" if spec.get("executor") == "remote" else ""

    def change(self, record: JobRecord) -> _job_page.ChangeView | None:
        """A finished isolated job's change (diffed in its copy, masked), or None for any other job."""
        copy_id = copy_of(record.result) if record.status in FINISHED else None
        if copy_id is None:
            return None
        try:
            iso = worktree.load(self.source.state_dir, copy_id)
            diffed = worktree.diff(iso)
        except KimiMCPError:
            return _job_page.ChangeView([], "", [], gone=True)
        files = [f.to_dict() for f in diffed.files]
        return _job_page.ChangeView(files, self.source.mask(diffed.text), list(iso.applied))

    # -- endpoints -------------------------------------------------------------------------------------
    async def jobs(self, request: Request) -> Response:
        filters, limit = _filters(request)
        base = base_of(request)
        rows = await anyio.to_thread.run_sync(self.rows, base, filters, limit)
        workers = None
        if self.source.workers is not None:
            workers = _workers.workers_view(await self.source.workers.read())
        body = _render.jobs_page(base, filters, rows, limit, workers)
        return HTMLResponse(_render.page(base, "Jobs", body, csrf=self.csrf))

    async def jobs_events(self, request: Request) -> Response:
        filters, limit = _filters(request)
        base = base_of(request)
        return _events.stream(lambda: self.jobs_look(base, filters, limit))

    async def job(self, request: Request) -> Response:
        base = base_of(request)
        job_id = request.path_params["job_id"]
        parts, _final = await anyio.to_thread.run_sync(self.look, base, job_id)
        if not parts:
            body = f"<h1>No job {_render.text(job_id)}</h1><p>It is not in the job store (or was pruned).</p>"
            return HTMLResponse(_render.page(base, "No such job", body, csrf=self.csrf), 404)
        record = self.masked(await anyio.to_thread.run_sync(self.source.record, job_id))
        said = _render.notice(
            self.source.mask(request.query_params.get("said")), bool(request.query_params.get("failed"))
        )
        body = _job_page.body(base, record, parts, said)
        return HTMLResponse(
            _render.page(base, record.job_id, body, csrf=self.csrf, scripts=("diff2html", "diff2html_css"))
        )

    async def job_events(self, request: Request) -> Response:
        base = base_of(request)
        job_id = request.path_params["job_id"]
        return _events.stream(lambda: self.look(base, job_id), _events.JOB_POLL_S)

    async def usage(self, request: Request) -> Response:
        base = base_of(request)
        daily = self.source.settings.daily_tokens
        data = await anyio.to_thread.run_sync(lambda: _usage.usage_data(self.source.store, daily))
        return HTMLResponse(
            _render.page(base, "Usage", _usage.usage_view(data), csrf=self.csrf, scripts=("chart",))
        )

    async def act(self, request: Request) -> Response:
        """A button's POST: refused (403) without this page's CSRF token; else done, and back to the job."""
        form = await request.form(max_files=0)
        if not csrf_ok(str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""), self.csrf):
            return PlainTextResponse(CSRF_REFUSED, 403)
        job_id, action = request.path_params["job_id"], request.path_params["action"]
        if action != "answer" and action not in ACTIONS:
            return PlainTextResponse(f"kimi-mcp dashboard: no action {action!r}", 404)
        try:
            if action == "answer":
                given = _given(form)
                question_id = str(form.get("question_id") or "") or None
                said = await anyio.to_thread.run_sync(
                    _actions.answer, self.source, job_id, given, question_id
                )
            else:
                said = await anyio.to_thread.run_sync(ACTIONS[action], self.source, job_id)
            failed = False
        except KimiMCPError as exc:
            said, failed = exc.message + (f" {exc.suggestion}" if exc.suggestion else ""), True
        query = urlencode({"said": said, **({"failed": "1"} if failed else {})})
        return RedirectResponse(f"{base_of(request)}/job/{job_id}?{query}", 303)


def _filters(request: Request) -> tuple[dict[str, str], int]:
    params = request.query_params
    filters = {k: params.get(k, "").strip() for k in FILTERS}
    if filters["status"] not in _render.STATUSES:
        filters["status"] = ""
    try:
        limit = min(MAX_ROWS, max(1, int(params.get("limit", DEFAULT_ROWS))))
    except ValueError:
        limit = DEFAULT_ROWS
    return filters, limit


def _given(form: FormData) -> str | list[str]:
    """The answer a question's form carries: the free text if any, else the option(s) picked."""
    other = str(form.get("other") or "").strip()
    if other:
        return other
    picks = [str(p) for p in form.getlist("answer") if str(p).strip()]
    if form.get("pick"):  # a multi-select question's checkboxes
        return picks
    return picks[0] if picks else ""
