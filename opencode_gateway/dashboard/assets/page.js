// The spend dashboard's script (page.py puts it inline, after uPlot).
// Stacked bars: uPlot draws series as given, so each series is drawn as the running sum of those
// before it, the tallest first; the legend shows each series' own figure.
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
    // The y axis is the data's: up to the tallest stack (uPlot was given no data range with auto
    // off, and fell back to $0-$1: three $1.10 tickets in one hour were cut at $1, two not drawn).
    var top = Math.max.apply(null, running.concat([0]));
    var order = sums.map(function (_, i) { return i; }).reverse();
    var totals = series.cost.map(function (values) { return values.reduce(function (a, b) { return a + b; }, 0); });
    var opts = {
      width: el.clientWidth || 900, height: 300,
      scales: {x: {time: true, auto: false, range: [Math.min.apply(null, xs) - step / 2, Math.max.apply(null, xs) + step / 2]},
               // Spend starts at $0: a range from the smallest bar drew 84% of the spend as a sliver.
               y: {auto: false, range: function () { return [0, top > 0 ? top * 1.1 : 1]; }}},
      axes: [{incrs: hourly ? [3600, 3 * 3600, 6 * 3600] : [86400, 7 * 86400, 28 * 86400],
               values: function (u, vals) { return vals.map(function (v) { return new Date(v * 1000).toISOString().slice(hourly ? 11 : 5, hourly ? 16 : 10); }); }},
             {size: 80, values: function (u, vals) { return vals.map(function (v) { return "$" + Number(v.toPrecision(3)); }); }}],
      hooks: {draw: [function (u) {  // the drawn scale, for a reader (and the browser tests)
        el.dataset.yMin = u.scales.y.min; el.dataset.yMax = u.scales.y.max; el.dataset.top = top;
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
