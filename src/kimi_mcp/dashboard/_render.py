"""The dashboard's HTML: the page around every view, and the jobs table. Server-rendered; every value that
comes from a job is escaped, its control characters removed, and (by the caller) its secrets masked."""

from __future__ import annotations

import json
import time
from html import escape
from urllib.parse import urlencode

from ..job_text import STATUSES, human_age, human_tokens, printable, short_path
from ..jobs import JobRecord
from ._gate import CSRF_FIELD

VENDOR = {  # the checked-in libraries (static/vendor/, their licences next to them)
    "htmx": "vendor/htmx-2.0.11.min.js",
    "sse": "vendor/htmx-ext-sse-2.2.4.min.js",
    "chart": "vendor/chart-4.6.1.umd.min.js",
    "diff2html": "vendor/diff2html-3.4.56.min.js",
    "diff2html_css": "vendor/diff2html-3.4.56.min.css",
}
HTMX_CONFIG = json.dumps({"allowEval": False, "allowScriptTags": False, "includeIndicatorStyles": False})


def text(value: object) -> str:
    """A job's value as HTML text: printable, escaped."""
    return escape(printable(str(value)))


def page(base: str, title: str, body: str, *, csrf: str, scripts: tuple[str, ...] = ()) -> str:
    """A whole page: ``body`` under the navigation, with htmx (and its SSE extension), the dashboard's
    own script and stylesheet, and the named vendored ``scripts`` / stylesheets."""
    static = f"{base}/static/"
    styles = "".join(
        f'<link rel="stylesheet" href="{static}{VENDOR[name]}">' for name in scripts if name.endswith("_css")
    )
    code = [VENDOR["htmx"], VENDOR["sse"], *(VENDOR[n] for n in scripts if not n.endswith("_css"))]
    tags = "".join(f'<script src="{static}{src}" defer></script>' for src in (*code, "dashboard.js"))
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · kimi-mcp</title>"
        f"<meta name=\"htmx-config\" content='{escape(HTMX_CONFIG)}'>"
        f'<meta name="csrf-token" content="{escape(csrf)}"><link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{static}dashboard.css">{styles}{tags}</head><body>'
        f'<header><a class="brand" href="{base}/">kimi-mcp</a><nav><a href="{base}/">Jobs</a>'
        f'<a href="{base}/usage">Usage</a></nav></header><main>{body}</main></body></html>'
    )


def csrf_input(csrf: str) -> str:
    return f'<input type="hidden" name="{CSRF_FIELD}" value="{escape(csrf)}">'


def notice(said: str | None, failed: bool) -> str:
    """What the last action said (from the redirect after a POST)."""
    if not said:
        return ""
    kind = "error" if failed else "ok"
    return f'<p class="notice {kind}" role="status">{text(said)}</p>'


def jobs_page(base: str, filters: dict[str, str], rows: str, limit: int, workers: str | None = None) -> str:
    """The jobs view: the filters, the table whose rows the event stream replaces as they change, and
    (``workers``: with a broker) the broker's workers, replaced by the same stream."""
    query = urlencode({k: v for k, v in {**filters, "limit": str(limit)}.items() if v})
    options = "".join(
        f'<option value="{s}"{" selected" if filters.get("status") == s else ""}>{s}</option>'
        for s in STATUSES
    )
    form = (
        '<form class="filters" method="get">'
        f'<label>Status <select name="status"><option value="">any</option>{options}</select></label>'
        f'<label>Group <input name="group" value="{escape(filters.get("group", ""))}"></label>'
        f'<label>Workspace <input name="workspace" size="40" value="{escape(filters.get("workspace", ""))}">'
        f'</label><input type="hidden" name="limit" value="{limit}"><button>Filter</button></form>'
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "Job",
            "Status",
            "Tool",
            "Group",
            "Workspace",
            "Model",
            "Worker",
            "Tokens",
            "Cost",
            "Age",
            "Question / summary",
        )
    )
    every = urlencode({k: v for k, v in {**filters, "limit": "1000"}.items() if v})
    more = f'<p class="more">The newest {limit} jobs. <a href="?{escape(every)}">Show 1000</a></p>'
    section = "" if workers is None else f'<section id="workers" sse-swap="workers">{workers}</section>'
    return (
        f'<h1>Jobs</h1>{form}<div hx-ext="sse" sse-connect="{base}/events/jobs?{escape(query)}">'
        f'<table class="jobs"><thead><tr>{head}</tr></thead><tbody id="jobs" sse-swap="jobs">{rows}</tbody>'
        f"</table>{more}{section}</div>"
    )


def job_rows(
    base: str,
    records: list[JobRecord],
    spent: dict[str, tuple[float | None, str | None]] | None = None,
    *,
    home: str,
    now: float | None = None,
) -> str:
    """The table's rows (masked records; ``spent``: a finished job's cost and worker): a waiting job's
    question marked, else its summary."""
    now = time.time() if now is None else now
    if not records:
        return '<tr><td colspan="11" class="empty">No jobs.</td></tr>'
    spent = spent or {}
    return "".join(_row(base, r, spent.get(r.job_id, (None, None)), home, now) for r in records)


def _row(base: str, r: JobRecord, spent: tuple[float | None, str | None], home: str, now: float) -> str:
    waiting = r.status == "waiting" and r.question
    said = (
        f'<span class="asks">? {text((r.question or {}).get("text", ""))}</span>'
        if waiting
        else text(r.summary)
    )
    cells = (
        f'<td><a href="{base}/job/{escape(r.job_id)}">{escape(r.job_id)}</a></td>',
        f'<td><span class="status {escape(r.status)}">{escape(r.status)}</span>'
        f"{' <span class=badge>asks</span>' if waiting else ''}</td>",
        f"<td>{text(r.tool.removeprefix('kimi_'))}</td>",
        f"<td>{text(r.group or '')}</td>",
        f'<td title="{text(r.workspace)}">{text(short_path(r.workspace, home))}</td>',
        f"<td>{text(r.model or '')}</td>",
        f"<td>{text(spent[1] or '')}</td>",
        f'<td class="num">{human_tokens(r.tokens)}</td>',
        f'<td class="num">{"" if spent[0] is None else f"{spent[0]:.4f}"}</td>',
        f'<td class="num">{human_age(now - r.started_at)}</td>',
        f"<td class=summary>{said}</td>",
    )
    return f'<tr data-job="{escape(r.job_id)}" data-status="{escape(r.status)}">{"".join(cells)}</tr>'
