// benchc report: draws the page's data (the JSON block benchc-data, made by
// benchc/results/html_report.py) with uPlot. Text from the results is set as text, never as markup.
// window.benchcReport says how many charts the page has and how many were drawn (a test reads it).
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("benchc-data").textContent);
  var app = document.getElementById("app");
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];
  var state = { charts: 0, drawn: 0, errors: [] };
  window.benchcReport = state;

  function el(tag, parent, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }

  function section(title, note) {
    var s = el("section", app);
    el("h2", s, title);
    if (note) el("p", s, note, "note");
    return s;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "--";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return String(+v.toPrecision(4));
  }

  // ------------------------------------------------------------------ tables, sortable

  function cellValue(text) {
    var n = parseFloat(text);
    return isNaN(n) || !/^[-+]?[0-9.]/.test(text) ? null : n;
  }

  function table(parent, header, rows) {
    var t = el("table", parent, null, "sortable");
    var tr = el("tr", el("thead", t));
    var body = el("tbody", t);
    var order = { col: -1, dir: 1 };
    header.forEach(function (h, i) {
      var th = el("th", tr, h);
      th.title = "sort by " + h;
      th.addEventListener("click", function () {
        order.dir = order.col === i ? -order.dir : 1;
        order.col = i;
        Array.prototype.forEach.call(tr.children, function (c) { c.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", order.dir > 0 ? "asc" : "desc");
        fill(rows.slice().sort(function (a, b) {
          var x = cellValue(a[i]), y = cellValue(b[i]);
          var c = (x !== null && y !== null) ? x - y
            : (x !== null ? 1 : (y !== null ? -1 : String(a[i]).localeCompare(String(b[i]))));
          return c * order.dir;
        }));
      });
    });
    function fill(rs) {
      body.textContent = "";
      rs.forEach(function (r) {
        var row = el("tr", body);
        r.forEach(function (c) { el("td", row, c); });
      });
    }
    fill(rows);
    return t;
  }

  // ------------------------------------------------------------------ charts

  function width() {
    return Math.max(480, Math.min(1100, (app.clientWidth || 900) - 20));
  }

  // chart(parent, title, data {x, series: [{label, y}]}, o {xlabel, ylabel, logx, xvalues,
  //   scatter: [labels drawn as markers only], right: {labels, label, range}})
  function chart(parent, title, data, o) {
    o = o || {};
    var box = el("div", parent, null, "chart");
    var right = o.right || null;
    var series = [{ label: o.xlabel || "x", value: function (u, v) { return o.xvalue ? o.xvalue(v) : fmt(v); } }];
    data.series.forEach(function (s, i) {
      var onRight = right && right.labels.indexOf(s.label) >= 0;
      var markersOnly = o.scatter && o.scatter.indexOf(s.label) >= 0;
      var def = { label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
                  scale: onRight ? "right" : "y", value: function (u, v) { return fmt(v); },
                  points: { show: true, size: markersOnly ? 7 : 4 } };
      if (markersOnly) def.paths = function () { return null; };
      series.push(def);
    });
    var axes = [{ label: o.xlabel || "", values: o.xvalues || undefined,
                  // whole numbers on the x axis (turns, concurrency): no tick at 2.5
                  incrs: o.ints ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] : undefined },
                { label: o.ylabel || "", size: 60 }];
    var scales = { x: { time: false, distr: o.logx ? 3 : 1 }, y: {} };
    if (right) {
      scales.right = right.range ? { range: right.range } : {};
      axes.push({ scale: "right", side: 1, label: right.label, grid: { show: false }, size: 60 });
    }
    var opts = {
      title: title, width: width(), height: 320, series: series, axes: axes, scales: scales,
      cursor: { drag: { x: true, y: false } },  // drag to zoom the x axis; double-click resets
      legend: { live: true },
      hooks: { draw: [function (u) {
        if (!u.root.hasAttribute("data-drawn")) { u.root.setAttribute("data-drawn", "1"); state.drawn += 1; }
      }] }
    };
    var cols = [data.x].concat(data.series.map(function (s) { return s.y; }));
    state.charts += 1;
    try {
      return new uPlot(opts, cols, box);
    } catch (e) {
      state.errors.push(title + ": " + e);
      el("p", box, "this chart could not be drawn: " + e, "note");
      return null;
    }
  }

  // sides [{t: [...], cols: {label: [...]}}] on one x: the union of their times, null where a
  // side has no sample (the chart joins its line across)
  function align(sides) {
    var xs = [];
    sides.forEach(function (sd) { xs = xs.concat(sd.t); });
    xs = xs.filter(function (v, i, a) { return a.indexOf(v) === i; }).sort(function (a, b) { return a - b; });
    var at = {};
    xs.forEach(function (x, i) { at[x] = i; });
    var series = [];
    sides.forEach(function (sd) {
      Object.keys(sd.cols).forEach(function (label) {
        var y = xs.map(function () { return null; });
        sd.cols[label].forEach(function (v, i) { if (y[at[sd.t[i]]] === null) y[at[sd.t[i]]] = v; });
        series.push({ label: label, y: y });
      });
    });
    return { x: xs, series: series };
  }

  // ------------------------------------------------------------------ sections

  el("p", app, D.results.join("; "), "sources");
  el("p", app, "Hover a chart for its values; drag across it to zoom (double-click to reset); "
    + "click a legend entry to hide or show its line; click a table header to sort.", "note");

  var s = section("Points");
  table(s, D.table.header, D.table.rows);

  if (D.throughput.x.length) {
    s = section("Throughput and latency");
    chart(s, "Output throughput", D.throughput, { xlabel: D.load, ylabel: "output tok/s", logx: true });
    var names = JSON.parse(document.getElementById("benchc-titles").textContent);
    Object.keys(D.latency).forEach(function (m) {
      chart(s, names[m] + " p50 / p99 against output throughput", D.latency[m],
            { xlabel: "output tok/s", ylabel: names[m] + " (ms)" });
    });
  }

  if (D.side_by_side.length) {
    s = section("Combinations side by side", "One table per load: every combination of every result "
                + "measured at it, with its per-GPU figures.");
    D.side_by_side.forEach(function (t) {
      el("h3", s, "load " + t.load);
      table(s, t.header, t.rows);
    });
  }

  if (D.pareto.length || D.decision.length) {
    s = section("Pareto frontier and decision",
                "Per-user speed is 1 / TPOT p50 (output tok/s one request sees); a point is on the "
                + "frontier when no other is at least as good on both axes and better on one.");
    var axisNames = { output_tok_s_per_gpu: "output tok/s per GPU", goodput_s_per_gpu: "goodput (req/s) per GPU" };
    D.pareto.forEach(function (p) {
      var labels = p.series.map(function (x) { return x.label; }).filter(function (l) { return l !== "frontier"; });
      chart(s, "Per-user speed against " + axisNames[p.axis], p,
            { xlabel: "output tok/s per user", ylabel: axisNames[p.axis], scatter: labels });
      el("p", s, "on the frontier: " + (p.frontier.join("; ") || "none"), "note");
    });
    D.decision.forEach(function (lines) { el("pre", s, lines.join("\n"), "decision"); });
    if (D.left_out.length) el("p", s, "left out: " + D.left_out.join("; "), "note");
  }

  var spectra = Object.keys(D.spectra);
  if (spectra.length) {
    s = section("Percentile spectra", "From the HdrHistograms (repeats pooled); the tail to the right.");
    if (D.left_out_of_page && D.left_out_of_page.spectra) el("p", s, D.left_out_of_page.spectra, "note");
    var ticks = [1, 2, 10, 100, 1000, 10000, 100000];
    var pname = function (v) { return v === null ? "--" : "p" + (+(100 * (1 - 1 / v)).toPrecision(6)); };
    spectra.forEach(function (m) {
      chart(s, m.toUpperCase() + " percentile spectrum", D.spectra[m], {
        xlabel: "percentile", ylabel: m.toUpperCase() + " (ms)", logx: true, xvalue: pname,
        xvalues: function (u, vals) { return vals.map(function (v) { return ticks.indexOf(v) >= 0 ? pname(v) : ""; }); }
      });
    });
  }

  if (D.timeseries.length) {
    s = section("Time series",
                "The server's /metrics samples beside the client's requests in flight and sends per interval, "
                + "in seconds from the point's first send.");
    if (D.left_out_of_page && D.left_out_of_page.timeseries) el("p", s, D.left_out_of_page.timeseries, "note");
    var pick = el("select", s);
    pick.setAttribute("aria-label", "point");
    D.timeseries.forEach(function (t, i) { el("option", pick, t.name).value = String(i); });
    var holder = el("div", s);
    var current = null;
    var showPoint = function (i) {
      var t = D.timeseries[i];
      if (current) { current.destroy(); state.charts -= 1; state.drawn -= 1; }
      holder.textContent = "";
      current = chart(holder, t.name + " (every " + t.interval_s + " s" + (t.kind ? ", " + t.kind : "") + ")",
                      align(t.sides), {
        xlabel: "s", ylabel: "requests",
        right: { labels: ["server kv cache usage", "server prefix cache hit rate"],
                 label: "KV-cache usage, prefix-cache hit rate", range: [0, 1] }
      });
    };
    pick.addEventListener("change", function () { showPoint(+pick.value); });
    showPoint(0);
  }

  if (D.sessions) {
    s = section("Sessions per turn");
    chart(s, "TTFT by turn", D.sessions.ttft, { xlabel: "turn", ylabel: "TTFT (ms)", ints: true });
    chart(s, "Prefix cache by turn", D.sessions.cached,
          { xlabel: "turn", ylabel: "cached fraction of the prompt (server)", ints: true });
  }

  if (D.searches.length) {
    s = section("Capacity searches");
    D.searches.forEach(function (c) {
      chart(s, c.name + (c.answer !== null ? " (answer " + c.answer + ")" : ""), c,
            { xlabel: c.over === "concurrency" ? "concurrency" : "rate (req/s)", ylabel: c.unit,
              scatter: ["untrusted probes"], ints: c.over === "concurrency" });
    });
    table(s, D.search_table.header, D.search_table.rows);
  }
})();
