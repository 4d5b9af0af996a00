"""The usage view: the tokens of every job of the store per day (UTC) and per model over the last 30
days, their cost where ``KIMI_MCP_PRICES`` priced them, and the ``KIMI_MCP_DAILY_TOKENS`` line; drawn by
Chart.js from the numbers the page carries (also shown as a table)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from ..job_text import human_tokens
from ..jobs import JobStore
from ._render import text

DAYS = 30


def usage_data(store: JobStore, daily_tokens: int | None, *, now: float | None = None) -> dict[str, Any]:
    """The chart's data: ``days`` (oldest first), ``models`` → tokens per day, ``cost`` per day (None
    where nothing was priced), and ``daily`` (the budget line, or None)."""
    now = time.time() if now is None else now
    today = datetime.fromtimestamp(now, UTC).date()
    days = [(today - timedelta(days=back)).isoformat() for back in range(DAYS - 1, -1, -1)]
    start = datetime.fromisoformat(days[0]).replace(tzinfo=UTC).timestamp()
    index = {day: i for i, day in enumerate(days)}
    models: dict[str, list[int]] = {}
    cost: list[float | None] = [None] * DAYS
    for day, model, tokens, usd in store.usage(start):
        if day not in index:
            continue
        i = index[day]
        models.setdefault(model or "default", [0] * DAYS)[i] += tokens
        if usd is not None:
            cost[i] = round((cost[i] or 0.0) + usd, 6)
    return {"days": days, "models": models, "cost": cost, "daily": daily_tokens}


def usage_view(data: dict[str, Any]) -> str:
    """The chart (its data in a JSON block the page's script reads) and the same numbers as a table."""
    models = data["models"]
    payload = json.dumps(data).replace("<", "\\u003c")  # no "</script>" can end the block
    daily = data["daily"]
    line = (
        f"KIMI_MCP_DAILY_TOKENS: {human_tokens(daily)} per 24 hours"
        if daily
        else "No KIMI_MCP_DAILY_TOKENS set"
    )
    head = "".join(f"<th>{text(m)}</th>" for m in models)
    rows = []
    for i, day in enumerate(data["days"]):
        total = sum(tokens[i] for tokens in models.values())
        if not total and data["cost"][i] is None:
            continue
        cells = "".join(f'<td class="num">{tokens[i]}</td>' for tokens in models.values())
        usd = "" if data["cost"][i] is None else f"{data['cost'][i]:.4f}"
        rows.append(f'<tr><td>{day}</td>{cells}<td class="num">{total}</td><td class="num">{usd}</td></tr>')
    table = (
        f'<table class="usage"><thead><tr><th>Day (UTC)</th>{head}<th>Total</th><th>USD</th></tr></thead>'
        f"<tbody>{''.join(rows) or '<tr><td colspan=3>No tokens spent in 30 days.</td></tr>'}</tbody></table>"
    )
    return (
        f"<h1>Usage</h1><p>Tokens per day and model, last {DAYS} days. {escape(line)}.</p>"
        f'<div class="chart"><canvas id="usage-chart"></canvas></div>'
        f'<script type="application/json" id="usage-data">{payload}</script>{table}'
    )
