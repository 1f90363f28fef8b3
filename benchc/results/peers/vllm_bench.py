"""vLLM's `vllm bench serve --save-result` JSON (and `--save-detailed`'s per-request lists).

The format is vLLM's `benchmarks/serve.py` (`benchmark()`'s result dict and `main_async`'s run
settings; read here as vLLM 0.32 writes it): no version field, so a file is recognised by its
keys. Its definitions, from that source:
- TTFT: first streamed chunk with text minus the request's start on vLLM's event loop
  (`time.perf_counter()` before the aiohttp post), as benchc's but on that clock;
- ITL: every gap between consecutive text chunks, all requests' gaps in one list (per chunk,
  as benchc's);
- TPOT: per request (latency - TTFT) / (output tokens - 1) over requests of 2 or more tokens,
  as benchc's; output tokens are the server's usage where it streamed one, else vLLM's
  tokenizer's count of the text;
- E2EL: the request's latency (start to the stream's end), benchc's E2E;
- percentiles: numpy's linear interpolation over the values (`np.percentile`), only those
  `--metric-percentiles` asked for (99 by default); median is numpy's;
- std: numpy's population standard deviation (ddof 0);
- duration: first request's start to the last one's end of the whole benchmark (benchc's window);
- `latencies` (kept without `--save-detailed`) holds every request's E2EL in seconds, failed ones 0.
"""

from __future__ import annotations

import re
from typing import Any

from benchc.results.peers._build import Fields, Figures, PeerPoint, document, ms_to_us, s_to_us

TOOL = "vllm bench serve"
FORMAT = "vllm bench serve --save-result JSON"
EXPECTED = "a vLLM `bench serve --save-result` JSON (duration, completed, request_throughput, mean_*_ms)"
_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}  # vLLM's name -> benchc's
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")

DEFINITIONS = {
    "ttft": "first text chunk minus the request's start, on vLLM's event loop (time.perf_counter) "
            "rather than benchc's kernel receive stamps",
    "itl": "every gap between text chunks, all requests pooled (per chunk, as benchc's)",
    "tpot": "per request (E2EL - TTFT) / (output tokens - 1), requests of 2 or more tokens (as benchc's)",
    "e2e": "vLLM's E2EL: start to the end of the stream",
    "percentiles": "numpy linear interpolation over the values (benchc's: HdrHistogram, 3 digits); "
                   "only --metric-percentiles (99 by default) and the median",
    "stdev": "numpy population standard deviation (ddof 0)",
    "output_tok_s": "output tokens of completed requests / the benchmark's duration (as benchc's)",
}


def recognise(doc: Any) -> bool:
    return isinstance(doc, dict) and {"duration", "completed", "request_throughput"} <= doc.keys() and (
        any(k.startswith("mean_") and k.endswith("_ms") for k in doc) or "total_output_tokens" in doc)


def _detailed(f: Fields, completed_mask: list[bool]) -> dict[str, list[float]]:
    """`--save-detailed`'s per-request lists as benchc's values (microseconds): TTFT, ITL (every
    chunk gap), TPOT of requests of 2 or more tokens, E2E; successful requests only."""
    ttfts, itls, lens = (f.array([k], required=False) for k in ("ttfts", "itls", "output_lens"))
    lat = f.array(["latencies"], required=False)
    out: dict[str, list[float]] = {}
    n = len(completed_mask)
    for name, arr in (("ttfts", ttfts), ("itls", itls), ("output_lens", lens), ("latencies", lat)):
        if arr is not None and len(arr) != n:
            raise f.fail([name], f"{len(arr)} entries where `errors` has {n} requests")
    ok = [i for i in range(n) if completed_mask[i]]
    if lat is not None:
        out["e2e"] = [s_to_us(f.number(["latencies", i])) or 0.0 for i in ok]
    if ttfts is not None:
        out["ttft"] = [s_to_us(f.number(["ttfts", i])) or 0.0 for i in ok]
    if itls is not None:
        out["itl"] = [s_to_us(f.number(["itls", i, j])) or 0.0
                      for i in ok for j in range(len(f.array(["itls", i]) or []))]
    if lat is not None and ttfts is not None and lens is not None:
        out["tpot"] = []
        for k, i in enumerate(ok):
            tokens = f.integer(["output_lens", i]) or 0
            if tokens > 1:
                out["tpot"].append((out["e2e"][k] - out["ttft"][k]) / (tokens - 1))
    return out


def to_document(doc: dict, source: str) -> dict:
    f = Fields(doc, source, TOOL)
    completed = f.integer(["completed"]) or 0  # required: never None here
    failed = f.integer(["failed"], required=False)
    rate = f.get(["request_rate"], required=False)
    if rate is not None and rate != "inf":
        rate = f.number(["request_rate"])
    cap = f.integer(["max_concurrency"], required=False)
    burst = f.number(["burstiness"], required=False)
    if rate is None or rate == "inf":
        # all requests at once, at most max_concurrency in flight: benchc's closed loop at that concurrency
        point = PeerPoint(id=f"c={cap}" if cap else "rate=inf", concurrency=cap)
    else:
        point = PeerPoint(id=f"rate={rate:g}/s", rate_rps=rate,
                          arrival="poisson" if burst in (None, 1.0) else "gamma")
    point.duration_s = f.number(["duration"])
    point.completed, point.failed = completed, failed
    point.input_tokens = f.integer(["total_input_tokens"], required=False)
    point.output_tokens = f.integer(["total_output_tokens"], required=False)
    point.request_s = f.number(["request_throughput"])
    point.output_tok_s = f.number(["output_throughput"], required=False)
    point.total_tok_s = f.number(["total_token_throughput"], required=False)
    point.goodput_s = f.number(["request_goodput"], required=False)  # null without --goodput
    point.native = {k: doc.get(k) for k in ("date", "backend", "label", "model_id", "tokenizer_id",
                                            "num_prompts", "request_rate", "burstiness", "max_concurrency")}

    errors = f.array(["errors"], required=False)
    lat = f.array(["latencies"], required=False)
    n = len(errors) if errors is not None else (len(lat) if lat is not None else None)
    if errors is not None:
        # vLLM's error text is "" for a request that succeeded
        mask = [not e for e in errors]
    elif lat is not None and failed is not None and len(lat) == completed + failed:
        mask = [(f.number(["latencies", i]) or 0.0) > 0 for i in range(len(lat))]  # a failed one's is 0
    else:
        mask = []
    values = _detailed(f, mask) if n and mask else {}

    for vname, name in _METRICS.items():
        mean = f.number([f"mean_{vname}_ms"], required=False)
        if mean is None:
            continue
        fig = Figures(mean=ms_to_us(mean), stdev=ms_to_us(f.number([f"std_{vname}_ms"], required=False)))
        median = f.number([f"median_{vname}_ms"], required=False)
        if median is not None:
            fig.percentiles[50] = median * 1000
        for key in doc:
            m = _PCT.match(key)
            if m and m.group(2) == vname:
                fig.percentiles[float(m.group(1))] = (f.number([key]) or 0.0) * 1000
        if name in ("ttft", "e2e"):
            fig.count = completed
        if name in values:
            fig.values = values[name]
            fig.count = len(values[name])
        point.latency[name] = fig
    if "e2e" not in point.latency and "e2e" in values:
        point.latency["e2e"] = Figures(values=values["e2e"])
    histograms = ("from every request's value the file holds: " + ", ".join(sorted(values))
                  + " (the tool's own percentiles kept as it wrote them)") if values else \
        "none: the tool wrote summaries and percentiles only"
    unmapped = ["time series (vLLM keeps max_output_tokens_per_s and max_concurrent_requests only)"]
    if not values.get("ttft"):
        unmapped.append("per-request TTFT and ITL (need --save-detailed)")
    model = doc.get("model_id") if isinstance(doc.get("model_id"), str) else None
    return document(TOOL, None, FORMAT, [point], model=model, definitions=DEFINITIONS, histograms=histograms,
                    unmapped=unmapped,
                    name=str(doc.get("label") or "") or TOOL,
                    notes=["vLLM's JSON carries no version; read as vLLM 0.32 writes it"])
