"""`benchc report`: plots of one or more results, as PNGs (matplotlib) and/or one self-contained
interactive HTML page (results/html_report.py, drawn in the browser with uPlot: no matplotlib).

- output tok/s against concurrency (or rate);
- latency against output tok/s (the throughput-latency curve operating points are
  picked from): TTFT and TPOT, p50 and p99;
- TTFT and ITL percentile spectra from the HdrHistograms (tail on a log axis);
- several results overlaid, each named by spec name, model and matrix values; where
  several results share a name (repeats), points show their mean with min-max bars, as do
  the runs of a repeated point (load.repeats) within one result;
- capacity searches (load.search): each SLO item's metric against the load of every probe,
  with the threshold and the answer marked (untrusted probes drawn apart, as x);
- sessions: TTFT against the turn index, and the server's cached fraction per turn;
- reasoning models: time to first answer token beside TTFT (p50, dotted), and in the table.

matplotlib is an optional extra for the PNGs: `pip install 'benchc[report]'`.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from benchc import catalog
from benchc.errors import UsageError
from benchc.metrics._hdr import Histogram
from benchc.plan.search import show_load
from benchc.results.api import Point, from_document
from benchc.results.identity import repeat_key, result_label, target_of

SPECTRUM_PERCENTILES = [0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99]


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise UsageError("benchc report needs matplotlib: pip install 'benchc[report]'") from e
    return plt


def series_label(doc: dict, matrix: dict) -> str:
    """spec name / model (target) [matrix values]: the target is the server's address and kind,
    or the simulator's preset, so runs against two servers never read as one."""
    model = doc["target"][0]["model"] if doc.get("target") else "?"
    extra = ",".join(f"{k}={v}" for k, v in matrix.items())
    label = f"{doc['plan']['name']} / {model} ({target_of(doc)})" + (f" [{extra}]" if extra else "")
    return label.replace("$", r"\$")  # text from the result, never matplotlib mathtext


def _x(p: Point) -> tuple[str, float]:
    if p.concurrency:
        return "concurrency", p.concurrency
    if p.users:
        return "users", p.users
    if p.rate_rps is None and p.speedup is not None:  # a trace whose requests come at once
        return "trace speedup", p.speedup
    return "rate (req/s)", p.rate_rps  # type: ignore[return-value]  # an open loop's rate


def load_axis(docs: list[dict]) -> str:
    """The charts' load axis: what the first result's first point varies (concurrency, rate, ...)."""
    first = from_document(docs[0]).points if docs else ()
    return _x(first[0])[0] if first else "concurrency"


def collect(docs: list[dict]) -> dict[str, dict[float, list[Point]]]:
    """label -> x -> points. Results of one plan against one target (results/identity.repeat_key)
    are repeats: their points share a series. Others that would share a label get a #n."""
    out: dict[str, dict[float, list[Point]]] = defaultdict(lambda: defaultdict(list))
    owner: dict[str, tuple[str, str]] = {}
    for d in docs:
        for p in from_document(d).points:
            if p.probe and not p.trusted:
                continue  # an untrusted probe decided nothing; the search figure shows it apart
            label = series_label(d, dict(p.matrix))
            n = 2
            base = label
            while owner.setdefault(label, key := repeat_key(d)) != key:
                label = f"{base} #{n}"
                n += 1
            out[label][_x(p)[1]].append(p)
    return out


def _stat(points: list[Point], get) -> tuple[float, float, float]:
    vals = [v for v in (get(p) for p in points) if v is not None]
    if not vals:
        return float("nan"), 0.0, 0.0
    mean = sum(vals) / len(vals)
    return mean, mean - min(vals), max(vals) - mean


def _line(ax, xs, points_by_x, get, label, **kw):
    stats = [_stat(points_by_x[x], get) for x in xs]
    ys = [s[0] for s in stats]
    if any(len(points_by_x[x]) > 1 for x in xs):
        ax.errorbar(xs, ys, yerr=[[s[1] for s in stats], [s[2] for s in stats]], label=label, capsize=3, **kw)
    else:
        ax.plot(xs, ys, label=label, **kw)


def figures(docs: list[dict]) -> dict[str, object]:
    plt = _plt()
    data = collect(docs)
    xname = load_axis(docs)
    figs = {}

    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    for label, by_x in data.items():
        xs = sorted(by_x)
        _line(ax, xs, by_x, lambda p: p.output_tok_s, label, marker="o")
    ax.set_xscale("log", base=2)
    all_x = sorted({x for by_x in data.values() for x in by_x})
    ax.set_xticks(all_x, [f"{x:g}" for x in all_x])
    ax.minorticks_off()
    ax.set_xlabel(xname)
    ax.set_ylabel("output throughput (tok/s)")
    ax.set_title("Output throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    figs["throughput"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    for ax, metric, title in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for i, (label, by_x) in enumerate(data.items()):
            xs = sorted(by_x)
            tput = [_stat(by_x[x], lambda p: p.output_tok_s)[0] for x in xs]
            color = f"C{i}"
            for stat, style in (("p50", "-"), ("p99", "--")):
                vals = [_stat(by_x[x], lambda p, m=metric, s=stat: _ms(p, m, s))[0] for x in xs]
                ax.plot(tput, vals, style, marker="o", color=color, label=f"{label} {stat}")
            if metric == "ttft" and any(_ms(p, "ttf_answer", "p50") is not None for x in xs for p in by_x[x]):
                # a reasoning model: when the answer started, beside the first token of any kind
                vals = [_stat(by_x[x], lambda p: _ms(p, "ttf_answer", "p50"))[0] for x in xs]
                ax.plot(tput, vals, ":", marker="^", color=color, label=f"{label} first answer p50")
        ax.set_xlabel("output throughput (tok/s)")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} p50 (solid) / p99 (dashed) vs throughput"
                     + (" (dotted: first answer token)" if metric == "ttft" else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    figs["latency_vs_throughput"] = fig

    for metric, title in (("ttft", "TTFT"), ("itl", "ITL")):
        fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
        for i, (label, by_x) in enumerate(data.items()):
            for j, x in enumerate(sorted(by_x)):
                h = _pooled(by_x[x], metric)  # every run at x, not the first one's alone
                if h is None:
                    continue
                xs = [1 / (1 - p / 100) for p in SPECTRUM_PERCENTILES]
                ys = [h.value_at_percentile(p) / 1000 for p in SPECTRUM_PERCENTILES]
                ax.plot(xs, ys, marker=".", color=f"C{i}", alpha=0.35 + 0.65 * (j + 1) / len(by_x),
                        label=f"{label} {xname[:4]}={x:g}")
        if not ax.lines:  # no point has this latency (embeddings: no TTFT, no ITL)
            plt.close(fig)
            continue
        ax.set_xscale("log")
        ticks = [0, 90, 99, 99.9, 99.99]
        ax.set_xticks([1 / (1 - p / 100) for p in ticks], [f"p{p:g}" for p in ticks])
        ax.set_xlabel("percentile (tail to the right)")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} percentile spectrum (from the HdrHistograms)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        figs[f"{metric}_spectrum"] = fig
    turns = turns_figure(plt, docs)
    if turns is not None:
        figs["ttft_by_turn"] = turns
    search = search_figure(plt, docs)
    if search is not None:
        figs["search"] = search
    return figs


def turn_x(name: str) -> int:
    """A turn bucket's place on the x axis: "3" at 3, ">=10" at 10."""
    return int(name.lstrip(">="))


def turns_figure(plt: Any, docs: list[dict]) -> Any:
    """Sessions: TTFT (p50 solid, p99 dashed) and the server's cached fraction against the turn
    index, one line per point: where the prefix cache holds the history, TTFT stays flat as
    the history grows."""
    lines = [(series_label(d, dict(p.matrix)), p) for d in docs for p in from_document(d).points if p.turns]
    if not lines:
        return None
    fig, (ax, cx) = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    names: dict[int, str] = {}
    for i, (label, p) in enumerate(lines):
        by_turn = p.turns
        xs = [turn_x(b["turn"]) for b in by_turn]
        names.update({turn_x(b["turn"]): b["turn"] for b in by_turn})
        color = f"C{i % 10}"
        for stat, style in (("p50", "-"), ("p99", "--")):
            ys = [(b["latency"]["ttft_us"].get(stat) or float("nan")) / 1000 for b in by_turn]
            ax.plot(xs, ys, style, marker="o", color=color, label=f"{label} {p.id} {stat}")
        fr = [b["cache"]["cached_fraction"] for b in by_turn]
        cx.plot(xs, [float("nan") if f is None else f for f in fr], marker="o", color=color,
                label=f"{label} {p.id}")
    ticks = sorted(names)
    for a in (ax, cx):
        a.set_xticks(ticks, [names[t] for t in ticks])
        a.set_xlabel("turn")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT by turn: p50 (solid) / p99 (dashed)")
    cx.set_ylabel("cached fraction of the prompt (server)")
    cx.set_ylim(0, 1)
    cx.set_title("Prefix cache by turn")
    return fig


def search_metric(text: str) -> tuple[float, str]:
    """A search SLO item's (`ttft: p99 < 2s`) scale from its recorded value to the charts' unit
    (latencies are recorded in us, charted in ms), and the axis's name."""
    metric = text.split(":", 1)[0]
    declared = catalog.BY_NAME.get(metric)
    latency = declared is not None and declared.latency
    return (1000.0, f"{metric} (ms)") if latency else (1.0, metric)


def search_figure(plt: Any, docs: list[dict]) -> Any:
    """Per search and SLO item: the metric at every probe's load, the threshold, the answer."""
    panels = [(d, s, i) for d in docs for s in from_document(d).searches for i in range(len(s.slo))]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.6 * len(panels)), squeeze=False,
                             layout="constrained")
    for ax, (d, s, i) in zip(axes[:, 0], panels, strict=True):
        text = s.slo[i]
        scale, unit = search_metric(text)
        for trusted, marker in ((True, "o"), (False, "x")):
            pts = sorted((p.load, v / scale) for p in s.probes
                         if (not p.untrusted) == trusted and (v := p.values[i]) is not None)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, ls="-" if trusted else "",
                        color="C0" if trusted else "C3",
                        label="probes" if trusted else "untrusted probes (decided nothing)")
        binding = ", binding" if text in s.binding else ""
        ax.axhline(s.thresholds[i] / scale, ls="--", color="C1", label=f"threshold ({text}{binding})")
        if s.answer is not None:
            ax.axvline(s.answer, color="C2", label=f"answer {s.answer:g} ({s.status})")
        ax.set_xlabel("concurrency" if s.over == "concurrency" else "rate (req/s)")
        ax.set_ylabel(unit)
        ax.set_title(f"{series_label(d, dict(s.matrix))}: capacity search, {s.status}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def search_rows(docs: list[dict]) -> list[list[str]]:
    rows = []
    for d in docs:
        for s in from_document(d).searches:
            lo, hi = (show_load(s.over, b) for b in s.bracket)
            rows.append([series_label(d, dict(s.matrix)), "; ".join(s.slo), show_load(s.over, s.answer),
                         "-" if s.goodput_s is None else f"{s.goodput_s:g}", f"[{lo}, {hi}]",
                         "; ".join(s.binding) or "-", s.status, str(len(s.probes))])
    return rows


SEARCH_HEADER = ["result", "SLO", "answer", "goodput req/s", "bracket", "binding", "status", "probes"]


def _pooled(points: list[Point], metric: str) -> Histogram | None:
    """The runs' histograms of `metric` added exactly (repeats of one point), or None."""
    encoded = [lat.hdr for p in points if (lat := p.latency.get(metric)) is not None]
    hists = [Histogram.decode(e) for e in encoded if e]
    if not hists:
        return None
    for other in hists[1:]:
        hists[0].merge(other)
    return hists[0]


def _ms(p: Point, metric: str, stat: str) -> float | None:
    """A latency's percentile (`stat`: p50, p99) in ms; None where the point has none."""
    lat = p.latency.get(metric)
    v = lat.percentiles.get(float(stat[1:])) if lat is not None else None
    return v / 1000 if v is not None else None


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _sources(docs: list[dict], sources: list[str] | None) -> list[str | None]:
    return list(sources) if sources is not None else [None] * len(docs)


def summary_rows(docs: list[dict], sources: list[str] | None = None) -> list[list[str]]:
    """One row per point, the result named by its file and target."""
    rows = []
    for d, source in zip(docs, _sources(docs, sources), strict=True):
        for p in from_document(d).points:
            def f(v, fmt="{:.1f}"):
                return "-" if v is None else fmt.format(v)
            extra = ",".join(f"{k}={v}" for k, v in p.matrix.items())
            rows.append([result_label(d, source) + (f" [{extra}]" if extra else ""), p.id, str(p.completed),
                         f(p.output_tok_s), f(_ms(p, "ttft", "p50")),
                         f(_ms(p, "ttft", "p99")), f(_ms(p, "ttf_answer", "p50")), f(_ms(p, "itl", "p50")),
                         f(_ms(p, "itl", "p99")), f(_ms(p, "e2e", "p99")),
                         str(p.failed), "yes" if p.client_limited else ""])
    return rows


HEADER = ["result", "point", "requests", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "first answer p50 ms",
          "ITL p50 ms", "ITL p99 ms", "E2E p99 ms", "errors", "client-limited"]
