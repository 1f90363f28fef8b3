"""`benchc report --html`: one self-contained interactive page of one or more results.

The page holds its data as one JSON block and draws it in the browser with uPlot (vendored,
MIT: results/_vendor/uplot/VENDORED.md says which version and why) and a small script of
benchc's own (results/_report/report.js): hover values, drag to zoom (double-click resets),
series toggled from the legend, tables sorted by a click on a header. Everything is inlined,
so viewing the page needs no network and no matplotlib.

What it shows, each section only where the results have it:
- the points table (report.summary_rows), sortable;
- output tok/s against the load, and TTFT / TPOT p50 and p99 against output tok/s;
- the combinations side by side per load, the Pareto frontiers and the decision per SLO
  (results/sidebyside.py, results/decide.py, over every result given, as `compare` has them);
- TTFT and ITL percentile spectra from the HdrHistograms (repeats pooled exactly);
- each point's time series: the server's /metrics samples beside the client's in flight and
  sends (points[].timeseries; a menu picks the point);
- sessions: TTFT and the server's cached fraction per turn;
- capacity searches: each SLO item's metric at every probe's load, the threshold, the table.

The data is computed here, in Python, from the documents (the spectra from the histograms);
the script only draws it. Text from a result reaches the page as JSON data and is set as
text, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources

from benchc import catalog
from benchc.results import decide
from benchc.results.api import Point, from_document
from benchc.results.compare import decide_section
from benchc.results.identity import result_label
from benchc.results.report import (
    HEADER,
    SEARCH_HEADER,
    _ms,
    _pooled,
    _stat,
    collect,
    load_axis,
    search_metric,
    search_rows,
    series_label,
    summary_rows,
    turn_x,
)
from benchc.results.sidebyside import cells

# the spectra's percentiles: dense enough for a smooth curve on the log axis the page uses
# (x = 1 / (1 - p/100), so p99 sits at 100 and p99.99 at 10,000)
SPECTRUM = [0, 10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96, 97, 98, 99, 99.5, 99.8, 99.9,
            99.95, 99.99, 99.999]
# the latencies charted against output throughput, as declared (benchc/catalog.py); a chart is
# drawn only for those some point has
LATENCIES = tuple(m.name for m in catalog.LATENCIES if m.chart)
SERVER_COLUMNS = ("running", "waiting", "kv_cache_usage", "preemptions")


def _asset(*parts: str) -> str:
    return resources.files("benchc.results").joinpath(*parts).read_text(encoding="utf-8")


def _label(doc: dict, matrix: dict) -> str:
    return series_label(doc, matrix).replace(r"\$", "$")  # report.py escapes $ for matplotlib only


def _collected(docs: list[dict]) -> dict[str, dict[float, list[Point]]]:
    """report.collect's series, named as text (it escapes $ for matplotlib)."""
    return {label.replace(r"\$", "$"): by_x for label, by_x in collect(docs).items()}


def _num(v: float | None, digits: int = 6) -> float | None:
    """A figure with `digits` significant digits (NaN, the report's "no value", as null)."""
    if v is None or v != v:
        return None
    return float(f"{v:.{digits}g}")


def _shared_x(lines: Sequence[tuple[str, Sequence[float], Sequence[float | None]]]) -> dict:
    """Lines of their own x values as uPlot's one x column and a y column per line (null where
    a line has no value at that x; the page joins its values across the gaps). Where one line
    has two values at one x, the first is kept."""
    xs = sorted({x for _, lx, _ in lines for x in lx})
    at = {x: i for i, x in enumerate(xs)}
    series = []
    for label, lx, ly in lines:
        col: list[float | None] = [None] * len(xs)
        for x, y in zip(lx, ly, strict=True):
            if col[at[x]] is None:
                col[at[x]] = y
        series.append({"label": label, "y": col})
    return {"x": xs, "series": series}


def _load_charts(docs: list[dict]) -> tuple[str, dict, dict]:
    """(the load's name, output tok/s against load, {metric: p50/p99 against output tok/s})."""
    data = _collected(docs)
    xname = load_axis(docs)
    lines = []
    lat: dict[str, list] = {m: [] for m in LATENCIES}
    for label, by_x in data.items():
        xs = sorted(by_x)
        tput = [_num(_stat(by_x[x], lambda p: p.output_tok_s)[0]) for x in xs]
        lines.append((label, xs, tput))
        for m in LATENCIES:
            for stat in ("p50", "p99"):
                pairs = [(t, _num(_stat(by_x[x], lambda p, m=m, s=stat: _ms(p, m, s))[0]))
                         for x, t in zip(xs, tput, strict=True) if t is not None]
                lat[m].append((f"{label} {stat}", [t for t, _ in pairs], [v for _, v in pairs]))
    # a latency no point has (embeddings: no TPOT) gets no chart
    return xname, _shared_x(lines), {m: _shared_x(v) for m, v in lat.items()
                                     if any(y is not None for _, _, ys in v for y in ys)}


# curves per chart (a spectrum per point) and time series (one per point) the page holds at
# most: past a hundred or so neither can be read, and with every point's time series a page of
# 10,000 points was 211 MB. Beyond it, points are chosen evenly across the load (the first and
# the last kept) and the page says how many it left out; the result holds them all
MAX_CURVES = 128


def _evenly(n: int, k: int = MAX_CURVES) -> list[int]:
    """Indices of at most k of n items, evenly spread, the first and the last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _left_out_note(kept: int, total: int, what: str) -> str | None:
    if kept == total:
        return None
    return (f"{what} of {kept} of {total:,} points, evenly across the load (the first and the last "
            "included): a page of every one could not be read; the result holds them all")


def _spectra(docs: list[dict], xname: str) -> tuple[dict, str | None]:
    """The spectra, and what the page says of the points left out (None: none were)."""
    out = {}
    xs = [1 / (1 - p / 100) for p in SPECTRUM]
    note = None
    for metric in ("ttft", "itl"):
        found = [(label, x, by_x[x]) for label, by_x in _collected(docs).items() for x in sorted(by_x)]
        pooled = [(label, x, h) for label, x, points in found if (h := _pooled(points, metric)) is not None]
        shown = [pooled[i] for i in _evenly(len(pooled))]
        series = [{"label": f"{label} {xname[:4]}={x:g}",
                   "y": [_num(h.value_at_percentile(p) / 1000) for p in SPECTRUM]} for label, x, h in shown]
        if series:
            out[metric] = {"x": [_num(x) for x in xs], "series": series}
            note = note or _left_out_note(len(shown), len(pooled), "spectra")
    return out, note


def _page_value(v: float | None) -> float | int | None:
    """A time series value as the page needs it: 4 significant digits (what the hover shows)."""
    if v is None or isinstance(v, int):
        return v
    return int(v) if v.is_integer() else float(f"{v:.4g}")


def _columns(t: list[float], cols: dict[str, list]) -> dict:
    """One side's samples as the page takes them: times to the millisecond, values to 4 digits;
    the script puts both sides on one x (report.js, align)."""
    return {"t": [round(x, 3) for x in t], "cols": {k: [_page_value(v) for v in c] for k, c in cols.items()}}


HIT_RATE = "server prefix cache hit rate"  # on the right axis with KV-cache usage (report.js)


def _interval_rates(hits: list, queries: list) -> list[float | None]:
    """Per sample, the prefix cache's hit rate since the sample before it (the first: since
    the point's start): tokens found / tokens looked up; None where nothing was looked up."""
    out: list[float | None] = []
    ph, pq = 0, 0
    for h, q in zip(hits, queries, strict=True):
        if h is None or q is None:
            out.append(None)
            continue
        out.append((h - ph) / (q - pq) if q > pq else None)
        ph, pq = h, q
    return out


def _timeseries(docs: list[dict], sources: list[str | None]) -> list[dict]:
    """Per point with a time series: its name, and the server's and the client's columns, each
    on its own times (the page's script joins them: sending them joined would double the page
    with the nulls of one side's times on the other's)."""
    out = []
    for d, source in zip(docs, sources, strict=True):
        for p in d["points"]:
            ts = p.get("timeseries")
            if not ts:
                continue
            server, client = ts.get("server") or {}, ts.get("client") or {}
            sides = []
            if server.get("available") and server.get("t_s"):
                cols = {f"server {c.replace('_', ' ')}": server[c] for c in SERVER_COLUMNS if c in server}
                if "prefix_cache_hit_tokens" in server and "prefix_cache_query_tokens" in server:
                    cols[HIT_RATE] = _interval_rates(server["prefix_cache_hit_tokens"],
                                                     server["prefix_cache_query_tokens"])
                sides.append(_columns(server["t_s"], cols))
            if client.get("t_s"):
                cols = {"client in flight": client["in_flight"], "client sends / interval": client["sends"]}
                if "scheduled" in client:
                    cols["client scheduled / interval"] = client["scheduled"]
                sides.append(_columns(client["t_s"], cols))
            if sides:
                out.append({"name": f"{result_label(d, source)}: {p['id']}", "interval_s": ts["interval_s"],
                            "kind": server.get("kind"), "sides": sides})
    return out


def _bounded_timeseries(docs: list[dict], sources: list[str | None]) -> tuple[list[dict], str | None]:
    """At most MAX_CURVES points' time series, evenly chosen, and what the page says of the
    rest (None: none were left out). Chosen before their columns are built."""
    with_ts = [(d, s, i) for d, s in zip(docs, sources, strict=True)
               for i, p in enumerate(d["points"]) if p.get("timeseries")]
    chosen = [with_ts[i] for i in _evenly(len(with_ts))]
    if len(chosen) == len(with_ts):
        return _timeseries(docs, sources), None
    keep: dict[int, set[int]] = {}
    for d, _, i in chosen:
        keep.setdefault(id(d), set()).add(i)
    slim = [{**d, "points": [p for i, p in enumerate(d["points"]) if i in keep.get(id(d), set())]}
            for d in docs]
    return _timeseries(slim, sources), _left_out_note(len(chosen), len(with_ts), "time series")


def _sessions(docs: list[dict]) -> dict | None:
    lines_ttft, lines_cache = [], []
    for d in docs:
        for p in from_document(d).points:
            by_turn = p.turns
            if not by_turn:
                continue
            label = f"{_label(d, dict(p.matrix))} {p.id}"
            xs = [turn_x(b["turn"]) for b in by_turn]
            for stat in ("p50", "p99"):
                ys = [_num((b["latency"]["ttft_us"].get(stat) or float("nan")) / 1000) for b in by_turn]
                lines_ttft.append((f"{label} {stat}", xs, ys))
            lines_cache.append((label, xs, [b["cache"]["cached_fraction"] for b in by_turn]))
    if not lines_ttft:
        return None
    return {"ttft": _shared_x(lines_ttft), "cached": _shared_x(lines_cache)}


def _searches(docs: list[dict]) -> list[dict]:
    out = []
    for d in docs:
        for s in from_document(d).searches:
            for i, text in enumerate(s.slo):
                scale, unit = search_metric(text)
                probes = sorted((p.load, v / scale, not p.untrusted) for p in s.probes
                                if (v := p.values[i]) is not None)
                xs = sorted({x for x, _, _ in probes})
                threshold = s.thresholds[i] / scale
                chart = _shared_x([("probes", [x for x, _, ok in probes if ok],
                                    [_num(y) for _, y, ok in probes if ok]),
                                   ("untrusted probes", [x for x, _, ok in probes if not ok],
                                    [_num(y) for _, y, ok in probes if not ok]),
                                   (f"threshold ({text})", xs, [threshold] * len(xs))])
                chart["name"] = f"{_label(d, dict(s.matrix))}: {text}, {s.status}"
                chart["over"] = s.over
                chart["answer"] = s.answer
                chart["unit"] = unit
                out.append(chart)
    return out


def _pareto(docs: list[dict], sources: list[str | None], gpu_hour: float | None
            ) -> tuple[list[dict], list[list[str]], list[str], list[dict]]:
    """(a chart per frontier axis, the decision's lines, what was left out, the combinations side
    by side per load) over every result given, as `compare` and `report` print them
    (results/compare.py decide_section: results/decide.py, results/sidebyside.py)."""
    section = decide_section(docs, [s or "" for s in sources], gpu_hour=gpu_hour)
    tables = []
    for t in section["side_by_side"]:
        header, body = cells(t)
        tables.append({"load": t["load"], "header": header, "rows": body})
    block = section.get("frontier")
    if block is None:
        return [], [], [], tables
    charts = []
    for axis in decide.AXES:
        on = set(block.get(axis, []))
        every = [c for c in block["points"] if c.get(axis) is not None]
        if not every:
            continue
        # one line per combination (of each result): its points as markers; the frontier joined
        by_combo: dict[str, list[tuple[float, float]]] = {}
        front = []
        for c in every:
            head = f"{c['result']}: " if c.get("result") else ""
            combo = head + (",".join(f"{k}={v}" for k, v in c["matrix"].items()) or "points")
            by_combo.setdefault(combo, []).append((c["output_tok_s_per_user"], c[axis]))
            if (head + c["point"]) in on:
                front.append((c["output_tok_s_per_user"], c[axis], f"{combo} {c['load']}"))
        lines = [(k, [x for x, _ in sorted(v)], [y for _, y in sorted(v)]) for k, v in by_combo.items()]
        front.sort()
        lines.append(("frontier", [x for x, _, _ in front], [y for _, y, _ in front]))
        chart = _shared_x(lines)
        chart["axis"] = axis
        chart["frontier"] = [n for _, _, n in front]
        charts.append(chart)
    answers = [decide.describe(a) for a in section["decision"]]
    left = [f"{e.get('result', '') + ': ' if e.get('result') else ''}{e['point']}: {e['reason']}"
            for e in block.get("left_out", [])]
    return charts, answers, left, tables


def report_data(docs: list[dict], sources: list[str] | None = None, gpu_hour: float | None = None) -> dict:
    """Everything the page draws, as JSON-ready data. `gpu_hour`: the price of a GPU-hour for
    the cost figures (None: each result's own spec's)."""
    srcs: list[str | None] = list(sources) if sources is not None else [None] * len(docs)
    xname, throughput, latency = _load_charts(docs)
    pareto, decision, left_out, side_by_side = _pareto(docs, srcs, gpu_hour)
    spectra, spectra_note = _spectra(docs, xname)
    timeseries, timeseries_note = _bounded_timeseries(docs, srcs)
    out = {
        "results": [f"{result_label(d, s)} ({d['plan']['name']}, {d['created']})"
                    for d, s in zip(docs, srcs, strict=True)],
        "load": xname,
        "table": {"header": HEADER, "rows": summary_rows(docs, sources)},
        "throughput": throughput,
        "latency": latency,
        "pareto": pareto, "decision": decision, "left_out": left_out, "side_by_side": side_by_side,
        "spectra": spectra,
        "timeseries": timeseries,
        "sessions": _sessions(docs),
        "searches": _searches(docs),
        "search_table": {"header": SEARCH_HEADER, "rows": search_rows(docs)},
    }
    # only where points were left out (a page of few points keeps its data as it was)
    notes = {k: v for k, v in (("spectra", spectra_note), ("timeseries", timeseries_note)) if v}
    if notes:
        out["left_out_of_page"] = notes
    return out


def _titles() -> str:
    """The charted latencies' titles for the page's script (the declarations' own)."""
    return json.dumps({name: catalog.metric(name).title for name in LATENCIES}, separators=(",", ":"))


def page(docs: list[dict], sources: list[str] | None = None, gpu_hour: float | None = None) -> str:
    """The whole page: data, uPlot, benchc's script and style, inlined."""
    data = json.dumps(report_data(docs, sources, gpu_hour), separators=(",", ":"), allow_nan=False)
    # inside <script> only "</" could end the block early; \u003c is the same character to JSON
    data = data.replace("<", "\\u003c")
    uplot_js = _asset("_vendor", "uplot", "uPlot.iife.min.js")
    uplot_css = _asset("_vendor", "uplot", "uPlot.min.css")
    license_ = _asset("_vendor", "uplot", "LICENSE").replace("*/", "* /")  # inside a comment
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>benchc report</title><style>{uplot_css}\n{_asset('_report', 'report.css')}</style>"
            f"</head><body><h1>benchc report</h1><div id='app'></div>"
            f"<script id='benchc-data' type='application/json'>{data}</script>"
            f"<script id='benchc-titles' type='application/json'>{_titles()}</script>"
            f"<script>/*! uPlot 1.6.32, https://github.com/leeoniya/uPlot\n{license_}*/\n"
            f"{uplot_js}</script><script>{_asset('_report', 'report.js')}</script></body></html>\n")
