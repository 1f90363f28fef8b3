"""Every figure benchc reports about a load point, declared once (k6's built-in metrics table:
one row per metric, and every output reads the table).

A declaration says what the figure is (name, unit, kind), when in a request's life it is
taken, how a point aggregates it and how shards and repeats merge it, where it sits in a
result point (`path`), and which outputs carry it: the console table, the CSV export (and
with it `Result.to_dataframe()`), the llm-d Benchmark Report and vLLM-JSON exports, the HTML
report's charts, the spec's `slo`, `compare` (and its `--fail-on` gates) and the repeats
summary. The recorder, the exports, the report and the gates read this table; none keeps a
list of its own, and tests/test_catalog.py fails when one names a metric not declared here or
leaves out one declared for it.

It sits in the base (no imports from the pipeline's stages) because the spec's threshold
grammar (spec/thresholds.py) checks an `slo` item's metric before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Kinds. A latency is an HdrHistogram of one value per request (microseconds); a counter is a
# count of the point, shown per second of its window; a gauge is a figure of the point that
# does not add up (a steady span's rate); a ratio is one count over another.
LATENCY = "latency histogram"
COUNTER = "counter"
GAUGE = "gauge"
RATIO = "ratio"

# How a point's figure comes about and how shards and repeats merge it, the same for every
# metric of a kind (metrics/aggregate.Tally adds exactly; results/repeats.py pools runs).
_HDR = ("one HdrHistogram per point (1 us .. 1 h, 3 digits): summary and encoded histogram",
        "histograms added bucket for bucket (exact percentiles of the union)")
_COUNT = ("the count over the point's window (first t0 to last end)",
          "counts added, divided by the merged window; repeats: mean and t interval of the runs")
_SHARE = ("one count over another, of the point", "both counts added, then divided")


@dataclass(frozen=True)
class Metric:
    """One figure of a point. `stats` are the latency statistics an output may name (`p99`);
    a scalar's outputs take its value itself (None in a stats tuple)."""

    name: str  # as `slo`, `--fail-on` and the result's key name it (a latency: without `_us`)
    title: str  # for a person (console, HTML charts)
    unit: str  # of its values in a result: us, tok/s, req/s, inputs/s, fraction
    kind: str
    taken: str  # when in a request's life (or the point's) it is taken
    aggregate: str  # how a point gets it
    merge: str  # how shards and repeats merge it
    path: tuple[str, ...]  # where a point holds it (a latency: its summary block)
    required: bool = False  # every point has it (the result schema requires it)
    console: tuple[str | None, ...] = ()  # the console table's columns (stats, in order)
    console_width: int = 0  # each of its console cells' width (0: its header's and a space)
    console_detail: tuple[str, ...] = ()  # stats shown on a line under the row when the point has it
    csv_group: str = ""  # where its CSV columns go among a row's (results/table.CSV_COLUMNS)
    csv: tuple[str | None, ...] = ()  # the CSV export's (and dataframe's) columns
    br: tuple[str, str] | None = None  # llm-d Benchmark Report: (latency field, units)
    vllm: str | None = None  # vLLM's result name (`e2el`: mean/median/std/p99 in ms)
    chart: bool = False  # the HTML report charts its p50 / p99 against output throughput
    slo: bool = False  # the spec's `slo` may name it
    compared: tuple[str | None, ...] = ()  # what `compare` shows, and `--fail-on` may gate on
    repeats: tuple[str | None, ...] = ()  # what the repeats summary gives an interval of

    @property
    def latency(self) -> bool:
        return self.kind == LATENCY

    @property
    def key(self) -> str:
        """Its key in the point's block: `ttft_us`, `output_tok_s`, `error_rate`."""
        return self.path[-1]

    def value_in(self, point: Mapping[str, Any]) -> Any:
        """What a result point holds at its path (a latency: its summary block); None if absent."""
        value: Any = point
        for key in self.path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    def column(self, stat: str | None) -> str:
        """Its CSV column for `stat`: `ttft_p99_ms` (latencies in milliseconds), `error_rate`."""
        return self.name if stat is None else f"{self.name}_{stat}_ms"

    def keys(self, stats: tuple[str | None, ...]) -> tuple[str, ...]:
        """`ttft.p50`, ... (how compare, gates and repeats name a statistic); `output_tok_s`."""
        return tuple(self.name if s is None else f"{self.name}.{s}" for s in stats)


def _latency(name: str, title: str, taken: str, **outputs: object) -> Metric:
    return Metric(name, title, "us", LATENCY, taken, *_HDR, path=("latency", f"{name}_us"), **outputs)  # type: ignore[arg-type]


def _rate(name: str, title: str, unit: str, taken: str, kind: str = COUNTER, **outputs: object) -> Metric:
    how = _COUNT if kind == COUNTER else (
        "the count over the span where the in-flight count stood at its target",
        "shards' rates added (each over its own span); repeats: mean and t interval")
    return Metric(name, title, unit, kind, taken, *how, path=("throughput", name), **outputs)  # type: ignore[arg-type]


_CORE_STATS = ("mean", "p50", "p99")

# In this order: the spec's `slo` metrics as the threshold grammar lists them, then the rest;
# the latencies in the order a result point lists them (metrics/aggregate.latency_block).
METRICS: tuple[Metric, ...] = (
    _latency("ttft", "TTFT", "first chunk carrying output text (content or reasoning) minus t0",
             required=True, console=("p50", "p99"), csv_group="latency", csv=("mean", "p50", "p90", "p99"),
             br=("time_to_first_token", "ms"), vllm="ttft", chart=True, slo=True,
             compared=("p50", "p99", "p99.9"), repeats=("mean", "p50", "p90", "p99")),
    _latency("itl", "ITL", "gap between consecutive text-bearing chunks of one request",
             required=True, console=("p50", "p99"), csv_group="latency", csv=_CORE_STATS,
             br=("inter_token_latency", "ms/token"), vllm="itl", slo=True, compared=("p50", "p99"),
             repeats=("mean", "p50", "p90", "p99")),
    _latency("tpot", "TPOT", "(E2E - TTFT) / (output tokens - 1) at the request's end, 2 tokens or more",
             required=True, console=("p50",), csv_group="latency", csv=_CORE_STATS,
             br=("time_per_output_token", "ms/token"), vllm="tpot", chart=True, slo=True,
             compared=("p50", "p99"), repeats=("mean", "p50", "p90", "p99")),
    _latency("e2e", "E2E", "end of stream ([DONE] or connection end) minus t0",
             required=True, console=("mean", "p99"), console_width=9, csv_group="latency", csv=_CORE_STATS,
             br=("request_latency", "ms"), vllm="e2el", slo=True, compared=("p50", "p99"),
             repeats=("mean", "p50", "p90", "p99")),
    Metric("error_rate", "error rate", "fraction", RATIO, "a request's end: failed or completed", *_SHARE,
           path=("error_rate",), required=True, csv_group="error", csv=(None,), slo=True,
           compared=(None,), repeats=(None,)),
    _rate("output_tok_s", "out tok/s", "tok/s", "a completed request's end: its output tokens",
          required=True, console=(None,), csv_group="throughput", csv=(None,), slo=True, compared=(None,),
          repeats=(None,)),
    _rate("total_tok_s", "total tok/s", "tok/s", "a completed request's end: its input and output tokens",
          required=True, csv_group="throughput", csv=(None,), slo=True, compared=(None,), repeats=(None,)),
    _rate("request_s", "req/s", "req/s", "a completed request's end", required=True, console=(None,),
          csv_group="throughput", csv=(None,), slo=True, compared=(None,), repeats=(None,)),
    _rate("goodput_s", "goodput", "req/s", "a completed request's end, when it met every SLO item",
          required=True, csv_group="throughput", csv=(None,), slo=True, repeats=(None,)),
    _rate("steady_output_tok_s", "steady out tok/s", "tok/s",
          "a request completing while the in-flight count stood at its target", kind=GAUGE,
          required=True, csv_group="throughput", csv=(None,)),
    _rate("inputs_s", "inputs/s", "inputs/s", "a completed request's end: the inputs it carried",
          csv_group="inputs", csv=(None,)),
    _rate("input_tok_s", "in tok/s", "tok/s", "a completed request's end: its input tokens",
          csv_group="inputs", csv=(None,)),
    _latency("itl_per_token", "ITL per token",
             "continuous usage: a chunk of k tokens after a gap g counts k gaps of g/k"),
    _latency("ttft_from_schedule", "TTFT from schedule",
             "open loop: first text chunk minus the scheduled start"),
    _latency("e2e_from_schedule", "E2E from schedule", "open loop: end of stream minus the scheduled start"),
    _latency("ttf_reasoning", "first reasoning token",
             "a request that reasoned: its first reasoning chunk minus t0"),
    _latency("ttf_answer", "first answer token",
             "a request that reasoned: its first answer (content) chunk minus t0",
             csv_group="reasoning", csv=("p50", "p99"), compared=("p50", "p99")),
    _latency("itl_answer", "answer ITL", "gap between consecutive answer chunks of a request that reasoned",
             compared=("p50",)),
    _latency("ttf_tool_call", "time to first tool call",
             "a request that called a tool: its first tool-call chunk (name or arguments) minus t0",
             console_detail=("p50", "p99"), csv_group="extra", csv=("p50", "p99"), chart=True, slo=True,
             compared=("p50", "p99")),
    Metric("cached_fraction", "cached", "fraction", RATIO,
           "a completed request's end: the prompt tokens its server said it served from its prefix "
           "cache (usage, llama.cpp's timings), else the point's Prometheus prefix-cache counters",
           *_SHARE, path=("cache", "cached_fraction"), console=(None,), csv_group="extra", csv=(None,),
           slo=True),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
LATENCIES: tuple[Metric, ...] = tuple(m for m in METRICS if m.latency)


def metric(name: str) -> Metric:
    """The declaration of `name` (`ttft`, `output_tok_s`); KeyError names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a declared metric; known: {', '.join(BY_NAME)}") from None


def threshold_kind(m: Metric) -> str:
    """The threshold grammar's kind of value (spec/thresholds.py): latency, ratio or rate."""
    if m.kind == LATENCY:
        return "latency"
    return "ratio" if m.kind == RATIO else "rate"
