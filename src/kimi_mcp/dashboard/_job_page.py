"""A job's page, in the parts its event stream replaces one by one as they change: ``head`` (status,
progress, cancel), ``question`` (the question with its options as buttons), ``screen`` (Kimi's screen as
text) and ``result`` (a finished job's result, and an isolated job's change with Apply / Discard). Every
record given here is masked already (``Source.mask``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from html import escape
from typing import Any

from ..job_text import elapsed, human_tokens, printable
from ..jobs import FINISHED, JobRecord
from ._render import csrf_input, text


@dataclass(frozen=True, slots=True)
class ChangeView:
    """An isolated job's change as the page shows it: the files (path, status, binary, secret), the unified
    diff (secret files' contents withheld, masked), and whether it can still be applied or discarded."""

    files: list[dict[str, Any]]
    diff: str
    applied: list[str]
    gone: bool = False


def parts(
    base: str, record: JobRecord, screen: str | None, change: ChangeView | None, csrf: str, worker: str = ""
) -> dict[str, str]:
    """The page's replaceable parts, by the name of the event that replaces each (``worker``: the broker's
    worker that runs or ran it)."""
    return {
        "head": head(base, record, csrf, worker),
        "question": question(base, record, csrf),
        "screen": screen_text(record, screen),
        "result": result(base, record, change, csrf),
    }


def body(base: str, record: JobRecord, parts_: dict[str, str], said: str) -> str:
    """The whole view; an unfinished job's parts are live (its event stream)."""
    live = record.status not in FINISHED
    stream = f' hx-ext="sse" sse-connect="{base}/events/job/{escape(record.job_id)}"' if live else ""
    swap = {name: f' sse-swap="{name}"' if live else "" for name in parts_}
    return (
        f'<h1>Job <code>{escape(record.job_id)}</code></h1>{said}<div id="job"{stream}>'
        f'<section id="head"{swap["head"]}>{parts_["head"]}</section>'
        f'<section id="question"{swap["question"]}>{parts_["question"]}</section>'
        f'<h2>Screen</h2><pre id="screen" class="screen"{swap["screen"]}>{parts_["screen"]}</pre>'
        f'<section id="result"{swap["result"]}>{parts_["result"]}</section></div>'
    )


def head(base: str, record: JobRecord, csrf: str, worker: str = "") -> str:
    """Status, where and how it runs, its progress; a cancel button while it is unfinished."""
    progress = record.progress or {}
    took = elapsed(record.duration_s or 0.0)
    rows = [
        (
            "Status",
            f'<span class="status {escape(record.status)}" id="status">{escape(record.status)}</span>',
        ),
        ("Tool", text(record.tool)),
        ("Workspace", f"<code>{text(record.workspace)}</code>"),
        ("Model", text(record.model or "default")),
        ("Group", text(record.group or "")),
        ("Tokens", human_tokens(record.tokens) + _cost(record.result)),
        ("Started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at)) + f" ({took})"),
        ("Session", text(record.session_id or "")),
        ("Server", f"pid {text(record.owner.partition(':')[0])}"),
        ("Worker", text(worker)),
    ]
    if progress.get("activity"):
        rows.append(("Activity", text(progress["activity"])))
    if progress.get("files_changed"):
        rows.append(("Changed so far", text(", ".join(progress["files_changed"]))))
    cells = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows if v)
    cancel = ""
    if record.status not in FINISHED:
        cancel = (
            f'<form method="post" action="{base}/job/{escape(record.job_id)}/cancel">{csrf_input(csrf)}'
            '<button class="danger" id="cancel">Cancel</button></form>'
        )
    return f'<dl class="facts">{cells}</dl>{cancel}'


def _cost(result: dict[str, Any] | None) -> str:
    """`` (0.0123 USD)`` where ``KIMI_MCP_PRICES`` priced the finished job, else nothing."""
    cost = ((result or {}).get("usage") or {}).get("cost_usd")
    return f" ({cost:.4f} USD)" if isinstance(cost, int | float) else ""


def question(base: str, record: JobRecord, csrf: str) -> str:
    """The question a waiting job asks: each option a button (checkboxes for a multi-select question), a
    free-text field where Kimi takes another answer."""
    asked = record.question if record.status == "waiting" else None
    if not asked:
        return ""
    approval = asked.get("kind") == "approval"
    options = asked.get("options") or []
    multi = bool(asked.get("multi_select"))
    if multi:
        choices = (
            "".join(
                f'<label><input type="checkbox" name="answer" value="{text(o["label"])}"> {text(o["label"])}</label>'
                for o in options
            )
            + '<button name="pick" value="1">Send</button>'
        )
    else:
        choices = "".join(
            f'<button name="answer" value="{text(o["label"])}" title="{text(o.get("description", ""))}">'
            f"{text(o['label'])}</button>"
            for o in options
        )
    other = ""
    if asked.get("free_text", True):
        other = '<label class="other">Other <input name="other" size="50"></label><button>Send</button>'
    title = "Kimi asks for your approval" if approval else "Kimi asks"
    header = f" <small>{text(asked['header'])}</small>" if asked.get("header") else ""
    return (
        f'<div class="ask"><h2>{title}{header}</h2><p class="question-text">{text(asked.get("text", ""))}</p>'
        f'<form method="post" action="{base}/job/{escape(record.job_id)}/answer">{csrf_input(csrf)}'
        f'<input type="hidden" name="question_id" value="{text(asked.get("id", ""))}">'
        f'<div class="options">{choices}</div>{other}</form></div>'
    )


def screen_text(record: JobRecord, screen: str | None) -> str:
    """Kimi's screen as text (``watch``'s), or why there is none."""
    if record.status in FINISHED:
        return "(the job has ended)"
    if screen is None:
        return "(no screen yet)"
    return escape("\n".join(line.rstrip() for line in printable(screen).split("\n")).rstrip("\n"))


def result(base: str, record: JobRecord, change: ChangeView | None, csrf: str) -> str:
    """A finished job's result: its output, error, notes, messages, rounds and attempts, its files; an
    isolated job's change (files and diff) with Apply / Discard."""
    res = record.result if record.status in FINISHED else None
    if res is None:
        return ""
    out = ["<h2>Result</h2>"]
    if error := res.get("error"):
        out.append(f'<p class="error">{text(error.get("type", ""))}: {text(error.get("message", ""))}</p>')
        if error.get("suggestion"):
            out.append(f'<p class="hint">{text(error["suggestion"])}</p>')
    if res.get("output"):
        out.append(f'<pre class="output">{text(res["output"])}</pre>')
    out.append(_files(res))
    out.append(_listed("Notes", [text(n) for n in res.get("notes") or []]))
    said = [
        f"{text(m.get('at', ''))} ({text(m.get('mode', ''))}): {text(m.get('text', ''))}"
        for m in res.get("messages") or []
    ]
    out.append(_listed("Messages", said))
    out.append(_table("Rounds", res.get("rounds") or [], ("round", "exit_code", "duration_s", "tokens")))
    out.append(
        _table("Attempts", res.get("attempts") or [], ("job_id", "status", "success", "files_changed"))
    )
    if change is not None:
        out.append(change_section(base, record, change, csrf))
    whole = escape(json.dumps(res, ensure_ascii=False, indent=2))
    out.append(f"<details><summary>The whole result (JSON)</summary><pre>{whole}</pre></details>")
    return "".join(out)


def _files(res: dict[str, Any]) -> str:
    rows = [
        (kind, path)
        for kind, key in (
            ("created", "files_created"),
            ("modified", "files_modified"),
            ("deleted", "files_deleted"),
        )
        for path in res.get(key) or []
    ]
    return _listed("Files", [f"{kind}: <code>{text(path)}</code>" for kind, path in rows])


def _listed(title: str, items: list[str]) -> str:
    if not items:
        return ""
    return f"<h3>{title}</h3><ul>{''.join(f'<li>{i}</li>' for i in items)}</ul>"


def _table(title: str, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{c}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{text(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<h3>{title}</h3><table><tr>{head}</tr>{body}</table>"


def change_section(base: str, record: JobRecord, change: ChangeView, csrf: str) -> str:
    """An isolated job's change list, its diff (drawn by diff2html), and Apply / Discard."""
    if change.gone:
        return '<h3>Change</h3><p class="hint">The isolated copy is gone (discarded or pruned).</p>'
    rows = "".join(
        f"<li><code>{text(f['path'])}</code> {text(f['status'])}"
        f"{' (binary: not shown)' if f.get('binary') else ''}"
        f"{' (secret: contents withheld)' if f.get('secret') else ''}"
        f"</li>"
        for f in change.files
    )
    actions = ""
    if change.applied:
        actions = f'<p class="ok">Applied: {text(", ".join(change.applied))}</p>'
    elif change.files:
        to = f"{base}/job/{escape(record.job_id)}"
        actions = (
            f'<form method="post" action="{to}/apply">{csrf_input(csrf)}<button id="apply">Apply</button></form>'
            f'<form method="post" action="{to}/discard">{csrf_input(csrf)}'
            '<button class="danger" id="discard">Discard</button></form>'
        )
    return (
        f'<h3>Change</h3><ul class="changes">{rows or "<li>No change.</li>"}</ul><div class="actions">{actions}</div>'
        f'<pre class="diff-source">{escape(change.diff)}</pre><div class="diff"></div>'
    )
