"""The spend dashboard as one self-contained HTML page: styles, uPlot (vendored, pinned, MIT) and
the data inline, so the file opens with no network. The tables are HTML from here, readable without
JavaScript; the script draws the charts, pages the runs table, fills a run's requests when it is
opened, and (live, in `serve`) reloads the page's figures every few seconds.

uPlot rather than Chart.js or Vega: 51 KB minified against ~200 KB and ~800 KB, and it draws
thousands of points in a few milliseconds on a canvas (the page must load in under 2 s from a
ledger of 100,000 requests; scripts/bench measures it).
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from ..accounting.times import utc_time

__all__ = ["REFRESH_S", "render_page"]

REFRESH_S = 3  # how often the live page reloads its figures
PAGE_SIZE = 50  # runs a page
_TOKENS = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cache_read_tokens", "cache read"),
    ("cache_write_tokens", "cache write"),
    ("reasoning_tokens", "reasoning"),
)


def _vendor(name: str) -> str:
    return (resources.files("opencode_gateway.dashboard") / "vendor" / name).read_text()


def _asset(name: str) -> str:
    """The page's own styles and script, package files beside vendor/ (assets/)."""
    return (resources.files("opencode_gateway.dashboard") / "assets" / name).read_text()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:,.6f}"


def _filter_line(data: dict[str, Any]) -> str:
    parts = [f"by {data['by']}"]
    if data["since"]:
        parts.append(f"since {data['since']}")
    if data["until"]:
        parts.append(f"until {data['until']}")
    parts += [f"{key} = {value}" for key, value in data["where"]]
    return " · ".join(parts)


def _totals(total: dict[str, Any], missing: int) -> str:
    cards = [
        ("cost", _usd(total["cost"]), "cost of the priced requests"),
        ("runs", f"{total['runs']:,}", "runs"),
        ("requests", f"{total['requests']:,}", "requests"),
        ("refused", f"{total['refused']:,}", "calls refused (budget, turn cap)"),
        *((key, f"{total[key]:,}", f"{label} tokens") for key, label in _TOKENS),
        ("unpriced_requests", f"{total['unpriced_requests']:,}", "unpriced requests"),
        ("usage_missing_requests", f"{missing:,}", "requests without usage"),
    ]
    values = {**total, "usage_missing_requests": missing}
    return "".join(
        f'<div class="card"><b data-total="{key}" data-value="{_e(values[key])}">{_e(shown)}</b>'
        f"<span>{_e(label)}</span></div>"
        for key, shown, label in cards
    )


def _requests(count: int) -> str:
    return f"{count:,} request" + ("" if count == 1 else "s")


def _alerts(total: dict[str, Any], missing: int) -> str:
    notes = []
    if total["unpriced_requests"]:
        notes.append(
            f"{_requests(total['unpriced_requests'])} could not be priced: no price was reported or known "
            "for the model. That cost is not in the totals above (it is unknown, not $0); set a price "
            "(`pricing:` in the settings) and the next runs are priced."
        )
    if missing:
        notes.append(
            f"{_requests(missing)} ended without usage (a stream that reported none, or a failed call): "
            "those tokens are not counted."
        )
    return "".join(f'<p class="alert" role="alert">{_e(note)}</p>' for note in notes)


def _series_table(title: str, days: list[str], series: dict[str, Any], bucket: str) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name in series["names"])
    rows = "".join(
        f"<tr><td>{_e(day)}</td>" + "".join(f"<td>{values[i]:.6f}</td>" for values in series["cost"]) + "</tr>"
        for i, day in enumerate(days)
    )
    return (
        f"<details><summary>{_e(title)} as a table</summary><table><tr><th>{bucket} (UTC)</th>{head}</tr>{rows}"
        "</table></details>"
    )


def _plural(word: str) -> str:
    """Top tickets, models, days; a metadata key as it is when it already ends in s."""
    return word if word.endswith("s") else word + "s"


def _groups(data: dict[str, Any]) -> str:
    head = (
        "<tr><th>{}</th><th>runs</th><th>requests</th><th>refused</th>{}<th>cached share</th><th>caching saved</th>"
        "<th>cost</th><th>unpriced</th></tr>"
    ).format(_e(data["by"]), "".join(f"<th>{label}</th>" for _, label in _TOKENS))
    rows = []
    for group in data["groups"]:
        name = "(none)" if group["key"] is None else group["key"]
        saved = group["cache_saved"]
        rows.append(
            f'<tr data-group="{_e(name)}"><td>{_e(name)}</td><td>{group["runs"]:,}</td>'
            f"<td>{group['requests']:,}</td><td>{group['refused']:,}</td>"
            + "".join(f"<td>{group[key]:,}</td>" for key, _ in _TOKENS)
            + f"<td>{group['cached_share']:.1%}</td><td>{'unknown' if saved is None else _usd(saved)}</td>"
            f'<td data-cost="{group["cost"]!r}">{_usd(group["cost"])}</td>'
            f"<td>{group['unpriced_requests']:,}</td></tr>"
        )
    return f'<table id="groups">{head}{"".join(rows)}</table>'


def _runs(data: dict[str, Any]) -> str:
    runs = data["runs"]
    columns = runs["columns"]
    rows = []
    for position, values in enumerate(runs["rows"]):
        run = dict(zip(columns, values, strict=True))
        ended = run["ended_at"]
        duration = "running" if ended is None else f"{ended - run['started_at']:.1f} s"
        metadata = ", ".join(f"{key}={value}" for key, value in run["metadata"].items())
        cost = _usd(run["cost"]) + (f" + {run['unpriced_requests']} unpriced" if run["unpriced_requests"] else "")
        requests = f"{run['requests']:,}" + (f" ({run['refused']:,} refused)" if run["refused"] else "")
        rows.append(
            f'<tbody class="run" data-page="{position // PAGE_SIZE}" data-run="{_e(run["run_id"])}"><tr>'
            f'<td>{_e(utc_time(run["started_at"]))}</td><td>{_e(duration)}</td><td class="t">{_e(run["model"])}</td>'
            f'<td class="t">{_e(metadata)}</td><td>{_e(run["stop_reason"])}</td><td>{requests}</td>'
            f"<td>{_e(cost)}</td>"
            f'</tr><tr class="detail"><td colspan="7"><details data-run="{_e(run["run_id"])}"><summary>its requests'
            '</summary><div class="requests"><noscript>A run\'s requests are shown with JavaScript on (or: report '
            "--by run).</noscript></div></details></td></tr></tbody>"
        )
    pages = max(1, -(-len(runs["rows"]) // PAGE_SIZE))
    shown = (
        ""
        if len(runs["rows"]) >= runs["count"]
        else f" (the latest {len(runs['rows']):,} here: report --by run lists all)"
    )
    return (
        f'<p class="pager"><span id="runs-count" data-count="{runs["count"]}">{runs["count"]:,} '
        f"runs{_e(shown)}</span> "
        f'<button id="prev" type="button">previous</button> <span id="page">page 1 of {pages}</span> '
        f'<button id="next" type="button">next</button></p><table id="runs"><thead><tr><th>started (UTC)</th>'
        "<th>duration</th><th>model</th><th>metadata</th><th>stop reason</th><th>requests</th><th>cost</th></tr>"
        f"</thead>{''.join(rows)}</table>"
    )


def _sessions(sessions: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_e(s['session_id'] or '(none)')}</td><td>{_e(s['model'])}</td>"
        f"<td>{_e(', '.join(f'{k}={v}' for k, v in s['metadata'].items()))}</td><td>{s['requests']:,}</td>"
        f"<td>{_usd(s['cost'])}</td><td>{_e(utc_time(s.get('last_request_at')))}</td></tr>"
        for s in sessions
    )
    return (
        '<section><h2>Sessions of this server</h2><table id="sessions"><tr><th>OpenCode session</th><th>model'
        "</th><th>metadata</th><th>requests</th><th>cost so far</th><th>last request (UTC)</th></tr>"
        f"{rows or '<tr><td colspan=6>none yet</td></tr>'}</table></section>"
    )


def render_page(data: dict[str, Any], *, sessions: list[dict[str, Any]] | None = None) -> str:
    """The page. `sessions`: the live server's sessions (then the page reloads its figures every
    REFRESH_S seconds); None for a static file."""
    live = sessions is not None
    bucket = data["bucket"]  # day, or hour when every request shown is of one day
    payload = json.dumps(
        {
            "days": data["days"],
            "bucket": bucket,
            "by_group": data["by_group"],
            "by_model": data["by_model"],
            "requests": data["requests"],
            "page_size": PAGE_SIZE,
            "live": live,
            "refresh_s": REFRESH_S,
        },
        separators=(",", ":"),
    ).replace("<", "\\u003c")  # inert in <script>
    main = (
        f'<header><h1>Spend</h1><p class="filter">{_e(_filter_line(data))}</p><p class="generated">'
        f"{'live, reloaded every ' + str(REFRESH_S) + ' s · ' if live else ''}"
        f"as of {_e(utc_time(data['generated_at']))} UTC"
        f'</p></header><section class="cards">{_totals(data["total"], data["usage_missing_requests"])}</section>'
        f"{_alerts(data['total'], data['usage_missing_requests'])}{'' if sessions is None else _sessions(sessions)}"
        f'<section><h2>Spend per {bucket}, by {_e(data["by"])}</h2><div class="chart" id="chart-group"></div>'
        f"{_series_table(f'spend per {bucket} by ' + data['by'], data['days'], data['by_group'], bucket)}</section>"
        f'<section><h2>Spend per {bucket}, by model</h2><div class="chart" id="chart-model"></div>'
        f"{_series_table(f'spend per {bucket} by model', data['days'], data['by_model'], bucket)}</section>"
        f"<section><h2>Top {_e(_plural(data['by']))} by cost</h2>{_groups(data)}</section>"
        f"<section><h2>Runs</h2>{_runs(data)}</section>"
        f'<script id="data" type="application/json">{payload}</script>'
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>opencode-gateway spend</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_vendor("uPlot.min.css")}'
        f'{_asset("page.css")}</style><script>document.documentElement.className = "js";</script></head>'
        f'<body><main id="main">{main}</main><script>{_vendor("uPlot.iife.min.js")}</script>'
        f"<script>{_asset('page.js')}</script></body></html>"
    )
