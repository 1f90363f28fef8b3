"""The server's own view of a point's requests from vLLM's Prometheus histograms
(vllm:request_queue_time_seconds, _prefill_time_, _decode_time_, vllm:time_to_first_token_seconds):
their means over the point, beside benchc's TTFT and E2E - TTFT means, so a user sees how
much of TTFT was queueing and prefill, and how much transport and the client.

These are the server's counters over the point's window: any other traffic is in them.
"""

from __future__ import annotations

PHASES = ("queue", "prefill", "decode", "ttft")


def prometheus_timings(before: dict | None, after: dict | None, point: dict) -> dict | None:
    """Per phase, the mean (ms) over the requests the server finished in the point; None when
    the server exposes none of these histograms."""
    if not before or not after:
        return None
    out: dict = {"source": "prometheus"}
    for phase in PHASES:
        s, c = f"{phase}_seconds_sum", f"{phase}_seconds_count"
        if s in before and s in after and c in before and c in after:
            n = after[c] - before[c]
            if n > 0:
                out[f"{phase}_ms_mean"] = round((after[s] - before[s]) / n * 1e3, 3)
                # vLLM observes the phases when a request finishes (TTFT at its first token, so
                # that count may be ahead): the most any phase counted, not the last one read
                out["requests"] = max(out.get("requests", 0), int(n))
    if len(out) == 1:
        return None
    lat = point["latency"]
    ttft, e2e = lat["ttft_us"].get("mean"), lat["e2e_us"].get("mean")
    if ttft is not None:
        out["client_ttft_ms_mean"] = round(ttft / 1e3, 3)
        out["client_e2e_minus_ttft_ms_mean"] = round((e2e - ttft) / 1e3, 3)
    return out
