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
from datetime import datetime, timezone
from importlib import resources
from typing import Any

__all__ = ["REFRESH_S", "render_page"]

REFRESH_S = 3  # how often the live page reloads its figures
PAGE_SIZE = 50  # runs a page
_TOKENS = (("input_tokens", "input"), ("output_tokens", "output"), ("cache_read_tokens", "cache read"),
           ("cache_write_tokens", "cache write"), ("reasoning_tokens", "reasoning"))


def _vendor(name: str) -> str:
    return (resources.files("opencode_gateway.dashboard") / "vendor" / name).read_text()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:,.6f}"


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _filter_line(data: dict[str, Any]) -> str:
    parts = [f"by {data['by']}"]
    if data["since"]:
        parts.append(f"since {data['since']}")
    if data["until"]:
        parts.append(f"until {data['until']}")
    parts += [f"{key} = {value}" for key, value in data["where"]]
    return " · ".join(parts)


def _totals(total: dict[str, Any], missing: int) -> str:
    cards = [("cost", _usd(total["cost"]), "cost of the priced requests"), ("runs", f"{total['runs']:,}", "runs"),
             ("requests", f"{total['requests']:,}", "requests"),
             *((key, f"{total[key]:,}", f"{label} tokens") for key, label in _TOKENS),
             ("unpriced_requests", f"{total['unpriced_requests']:,}", "unpriced requests"),
             ("usage_missing_requests", f"{missing:,}", "requests without usage")]
    values = {**total, "usage_missing_requests": missing}
    return "".join(f'<div class="card"><b data-total="{key}" data-value="{_e(values[key])}">{_e(shown)}</b>'
                   f"<span>{_e(label)}</span></div>" for key, shown, label in cards)


def _requests(count: int) -> str:
    return f"{count:,} request" + ("" if count == 1 else "s")


def _alerts(total: dict[str, Any], missing: int) -> str:
    notes = []
    if total["unpriced_requests"]:
        notes.append(f"{_requests(total['unpriced_requests'])} could not be priced: no price was reported or known "
                     "for the model. That cost is not in the totals above (it is unknown, not $0); set a price "
                     "(`pricing:` in the settings) and the next runs are priced.")
    if missing:
        notes.append(f"{_requests(missing)} ended without usage (a stream that reported none, or a failed call): "
                     "those tokens are not counted.")
    return "".join(f'<p class="alert" role="alert">{_e(note)}</p>' for note in notes)


def _series_table(title: str, days: list[str], series: dict[str, Any], bucket: str) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name in series["names"])
    rows = "".join(f"<tr><td>{_e(day)}</td>" + "".join(f"<td>{values[i]:.6f}</td>" for values in series["cost"])
                   + "</tr>" for i, day in enumerate(days))
    return (f"<details><summary>{_e(title)} as a table</summary><table><tr><th>{bucket} (UTC)</th>{head}</tr>{rows}"
            "</table></details>")


def _plural(word: str) -> str:
    """Top tickets, models, days; a metadata key as it is when it already ends in s."""
    return word if word.endswith("s") else word + "s"


def _groups(data: dict[str, Any]) -> str:
    head = ("<tr><th>{}</th><th>runs</th><th>requests</th>{}<th>cached share</th><th>caching saved</th><th>cost</th>"
            "<th>unpriced</th></tr>").format(_e(data["by"]), "".join(f"<th>{label}</th>" for _, label in _TOKENS))
    rows = []
    for group in data["groups"]:
        name = "(none)" if group["key"] is None else group["key"]
        saved = group["cache_saved"]
        rows.append(f'<tr data-group="{_e(name)}"><td>{_e(name)}</td><td>{group["runs"]:,}</td>'
                    f'<td>{group["requests"]:,}</td>' + "".join(f"<td>{group[key]:,}</td>" for key, _ in _TOKENS)
                    + f'<td>{group["cached_share"]:.1%}</td><td>{"unknown" if saved is None else _usd(saved)}</td>'
                    f'<td data-cost="{group["cost"]!r}">{_usd(group["cost"])}</td><td>{group["unpriced_requests"]:,}</td></tr>')
    return f'<table id="groups">{head}{"".join(rows)}</table>'


def _runs(data: dict[str, Any]) -> str:
    runs = data["runs"]
    columns = runs["columns"]
    rows = []
    for position, values in enumerate(runs["rows"]):
        run = dict(zip(columns, values))
        ended = run["ended_at"]
        duration = "running" if ended is None else f"{ended - run['started_at']:.1f} s"
        metadata = ", ".join(f"{key}={value}" for key, value in run["metadata"].items())
        cost = _usd(run["cost"]) + (f" + {run['unpriced_requests']} unpriced" if run["unpriced_requests"] else "")
        rows.append(
            f'<tbody class="run" data-page="{position // PAGE_SIZE}" data-run="{_e(run["run_id"])}"><tr>'
            f'<td>{_e(_when(run["started_at"]))}</td><td>{_e(duration)}</td><td class="t">{_e(run["model"])}</td>'
            f'<td class="t">{_e(metadata)}</td><td>{_e(run["stop_reason"])}</td><td>{run["requests"]:,}</td>'
            f'<td>{_e(cost)}</td>'
            f'</tr><tr class="detail"><td colspan="7"><details data-run="{_e(run["run_id"])}"><summary>its requests'
            '</summary><div class="requests"><noscript>A run\'s requests are shown with JavaScript on (or: report '
            "--by run).</noscript></div></details></td></tr></tbody>")
    pages = max(1, -(-len(runs["rows"]) // PAGE_SIZE))
    shown = "" if len(runs["rows"]) >= runs["count"] else f" (the latest {len(runs['rows']):,} here: report --by run lists all)"
    return (f'<p class="pager"><span id="runs-count" data-count="{runs["count"]}">{runs["count"]:,} runs{_e(shown)}</span> '
            f'<button id="prev" type="button">previous</button> <span id="page">page 1 of {pages}</span> '
            f'<button id="next" type="button">next</button></p><table id="runs"><thead><tr><th>started (UTC)</th>'
            "<th>duration</th><th>model</th><th>metadata</th><th>stop reason</th><th>requests</th><th>cost</th></tr>"
            f'</thead>{"".join(rows)}</table>')


def _sessions(sessions: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr><td>{_e(s["session_id"] or "(none)")}</td><td>{_e(s["model"])}</td>'
        f'<td>{_e(", ".join(f"{k}={v}" for k, v in s["metadata"].items()))}</td><td>{s["requests"]:,}</td>'
        f'<td>{_usd(s["cost"])}</td><td>{_e(_when(s.get("last_request_at")))}</td></tr>' for s in sessions)
    return ('<section><h2>Sessions of this server</h2><table id="sessions"><tr><th>OpenCode session</th><th>model'
            "</th><th>metadata</th><th>requests</th><th>cost so far</th><th>last request (UTC)</th></tr>"
            f"{rows or '<tr><td colspan=6>none yet</td></tr>'}</table></section>")


def render_page(data: dict[str, Any], *, sessions: list[dict[str, Any]] | None = None) -> str:
    """The page. `sessions`: the live server's sessions (then the page reloads its figures every
    REFRESH_S seconds); None for a static file."""
    live = sessions is not None
    bucket = data["bucket"]  # day, or hour when every request shown is of one day
    payload = json.dumps({"days": data["days"], "bucket": bucket, "by_group": data["by_group"], "by_model": data["by_model"],
                          "requests": data["requests"], "page_size": PAGE_SIZE, "live": live,
                          "refresh_s": REFRESH_S}, separators=(",", ":")).replace("<", "\\u003c")  # inert in <script>
    main = (
        f'<header><h1>Spend</h1><p class="filter">{_e(_filter_line(data))}</p><p class="generated">'
        f'{"live, reloaded every " + str(REFRESH_S) + " s · " if live else ""}as of {_e(_when(data["generated_at"]))} UTC'
        f'</p></header><section class="cards">{_totals(data["total"], data["usage_missing_requests"])}</section>'
        f'{_alerts(data["total"], data["usage_missing_requests"])}{"" if sessions is None else _sessions(sessions)}'
        f'<section><h2>Spend per {bucket}, by {_e(data["by"])}</h2><div class="chart" id="chart-group"></div>'
        f'{_series_table(f"spend per {bucket} by " + data["by"], data["days"], data["by_group"], bucket)}</section>'
        f'<section><h2>Spend per {bucket}, by model</h2><div class="chart" id="chart-model"></div>'
        f'{_series_table(f"spend per {bucket} by model", data["days"], data["by_model"], bucket)}</section>'
        f'<section><h2>Top {_e(_plural(data["by"]))} by cost</h2>{_groups(data)}</section>'
        f"<section><h2>Runs</h2>{_runs(data)}</section>"
        f'<script id="data" type="application/json">{payload}</script>'
    )
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>opencode-gateway spend</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_vendor("uPlot.min.css")}'
            f'{_STYLE}</style><script>document.documentElement.className = "js";</script></head><body><main id="main">{main}</main><script>{_vendor("uPlot.iife.min.js")}</script>'
            f"<script>{_SCRIPT}</script></body></html>")


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
main{max-width:1200px;margin:0 auto;padding:16px 24px}
h1{margin:0}h2{font-size:16px;margin:24px 0 8px}.filter,.generated{color:#5b6675;margin:2px 0}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin-top:12px}
.card{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:8px 12px;min-width:110px}
.card b{display:block;font-size:18px}.card span{color:#5b6675;font-size:12px}
.alert{background:#fff4e5;border:1px solid #f0b35b;border-radius:6px;padding:8px 12px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e6e9ee;padding:4px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child,td.t{text-align:left}th{background:#eef1f5}
.chart{background:#fff;border:1px solid #dde2e8;border-radius:6px;min-height:320px}
.js #runs tbody.run{display:none}.js #runs tbody.run.shown{display:table-row-group}
.pager button{margin:0 4px}details .requests table{margin-top:4px;background:#fafbfc}
tr.detail td{border-bottom:2px solid #dde2e8;padding-top:0}tr.detail summary{color:#5b6675;cursor:pointer}
"""

# Stacked bars: uPlot draws series as given, so each series is drawn as the running sum of those
# before it, the tallest first; the legend shows each series' own figure.
_SCRIPT = """
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
  var charts = [];
  var page = 0;

  function stacked(target, series) {
    var el = document.getElementById(target);
    if (!el) return;
    el.textContent = "";
    var hourly = D.bucket === "hour", step = hourly ? 3600 : 86400;
    var xs = D.days.map(function (d) { return Date.parse(hourly ? d + ":00Z" : d + "T00:00:00Z") / 1000; });
    var sums = [], running = xs.map(function () { return 0; });
    series.cost.forEach(function (values) {
      running = running.map(function (v, i) { return v + values[i]; });
      sums.push(running.slice());
    });
    var order = sums.map(function (_, i) { return i; }).reverse();
    var totals = series.cost.map(function (values) { return values.reduce(function (a, b) { return a + b; }, 0); });
    var opts = {
      width: el.clientWidth || 900, height: 300,
      scales: {x: {time: true, auto: false, range: [Math.min.apply(null, xs) - step / 2, Math.max.apply(null, xs) + step / 2]},
               // Spend starts at $0: a range from the smallest bar drew 84% of the spend as a sliver.
               y: {auto: false, range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }}},
      axes: [{incrs: hourly ? [3600, 3 * 3600, 6 * 3600] : [86400, 7 * 86400, 28 * 86400],
               values: function (u, vals) { return vals.map(function (v) { return new Date(v * 1000).toISOString().slice(hourly ? 11 : 5, hourly ? 16 : 10); }); }},
             {size: 80, values: function (u, vals) { return vals.map(function (v) { return "$" + Number(v.toPrecision(3)); }); }}],
      hooks: {draw: [function (u) {  // the drawn scale, for a reader (and the browser tests)
        el.dataset.yMin = u.scales.y.min; el.dataset.yMax = u.scales.y.max;
      }]},
      series: [{}].concat(order.map(function (i) {
        return {label: series.names[i], fill: COLORS[i % COLORS.length], stroke: COLORS[i % COLORS.length],
                paths: uPlot.paths.bars({size: [0.6, 80]}), points: {show: false},
                // Not hovering: the series' total over the chart, so the legend says something before a hover.
                value: function (u, v, s, idx) { return "$" + (idx == null ? totals[i] : series.cost[i][idx]).toFixed(6); }};
      }))
    };
    var chart = new uPlot(opts, [xs].concat(order.map(function (i) { return sums[i]; })), el);
    el.dataset.series = JSON.stringify(series.names);
    el.dataset.bars = xs.length;
    charts.push(chart);
  }

  function cell(text) { var td = document.createElement("td"); td.textContent = text; return td; }

  function fillRequests(details) {
    var box = details.querySelector(".requests");
    if (box.dataset.filled) return;
    var rows = (D.requests.by_run || {})[details.dataset.run] || [];
    var cols = D.requests.columns;
    var table = document.createElement("table");
    var head = document.createElement("tr");
    ["started (UTC)", "purpose", "input", "output", "cache read", "cache write", "reasoning", "cost", "source",
     "status", "first byte"].forEach(function (h) { var th = document.createElement("th"); th.textContent = h; head.appendChild(th); });
    table.appendChild(head);
    rows.forEach(function (values) {
      var r = {}; cols.forEach(function (c, i) { r[c] = values[i]; });
      var tr = document.createElement("tr");
      tr.className = "request";
      [new Date(r.started_at * 1000).toISOString().slice(0, 19).replace("T", " "), r.purpose || "main",
       r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens, r.reasoning_tokens,
       r.cost == null ? "unpriced" : "$" + r.cost.toFixed(6), r.cost_source + (r.usage_missing ? " (no usage)" : ""),
       r.status_code, r.ttfb_s == null ? "—" : (r.ttfb_s * 1000).toFixed(0) + " ms"].forEach(function (v) { tr.appendChild(cell(String(v))); });
      table.appendChild(tr);
    });
    if (!rows.length) { var tr = document.createElement("tr"); tr.appendChild(cell("not on this page's data")); table.appendChild(tr); }
    box.textContent = "";
    box.appendChild(table);
    box.dataset.filled = "1";
  }

  function showPage(n) {
    var rows = document.querySelectorAll("#runs tbody.run");
    var pages = Math.max(1, Math.ceil(rows.length / D.page_size));
    page = Math.max(0, Math.min(n, pages - 1));
    rows.forEach(function (tr) { tr.classList.toggle("shown", Number(tr.dataset.page) === page); });
    var label = document.getElementById("page");
    if (label) label.textContent = "page " + (page + 1) + " of " + pages;
  }

  function wire() {
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    stacked("chart-group", D.by_group);
    stacked("chart-model", D.by_model);
    document.querySelectorAll("#runs details").forEach(function (d) {
      d.addEventListener("toggle", function () { if (d.open) fillRequests(d); });
      if (d.open) fillRequests(d);
    });
    var prev = document.getElementById("prev"), next = document.getElementById("next");
    if (prev) prev.onclick = function () { showPage(page - 1); };
    if (next) next.onclick = function () { showPage(page + 1); };
    showPage(page);
    document.body.dataset.ready = String(Date.now());
  }

  function reload() {
    var open = Array.prototype.map.call(document.querySelectorAll("#runs details[open]"), function (d) { return d.dataset.run; });
    fetch(location.href, {credentials: "same-origin", cache: "no-store"}).then(function (response) {
      if (!response.ok) throw new Error(response.status);
      return response.text();
    }).then(function (text) {
      var doc = new DOMParser().parseFromString(text, "text/html");
      document.getElementById("main").innerHTML = doc.getElementById("main").innerHTML;
      D = JSON.parse(document.getElementById("data").textContent);
      open.forEach(function (id) {
        var d = document.querySelector('#runs details[data-run="' + CSS.escape(id) + '"]');
        if (d) d.open = true;
      });
      wire();
    }).catch(function () {}).then(function () { setTimeout(reload, D.refresh_s * 1000); });
  }

  wire();
  if (D.live) setTimeout(reload, D.refresh_s * 1000);
})();
"""
