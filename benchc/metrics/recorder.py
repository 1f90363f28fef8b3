"""Aggregation of one load point: latency histograms, counters, throughput.

Memory is constant in the number of requests (histograms and counters); the
per-request records are kept only when the spec asks for them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from benchc.metrics.latency import Recorder
from benchc.metrics.record import ERROR_KINDS, RequestRecord


@dataclass
class PointRecorder:
    """Everything a load point measured, fed one finished request at a time."""

    target_inflight: int
    keep_requests: bool = False
    open_loop: bool = False
    keep_text: bool = False
    ttft: Recorder = field(default_factory=Recorder)
    itl: Recorder = field(default_factory=Recorder)
    itl_token: Recorder = field(default_factory=Recorder)
    tpot: Recorder = field(default_factory=Recorder)
    e2e: Recorder = field(default_factory=Recorder)
    ttft_sched: Recorder = field(default_factory=Recorder)
    e2e_sched: Recorder = field(default_factory=Recorder)
    errors: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)  # requests by the transport that read them
    error_examples: dict = field(default_factory=dict)
    sent: int = 0
    completed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usage_tokens: int = 0
    usage_requests: int = 0
    chunk_tokens_of_usage_requests: int = 0
    chunk_only_requests: int = 0
    multi_token_chunks: int = 0
    osl_mismatch: int = 0
    osl_expected: int = 0
    first_t0: int | None = None
    last_end: int | None = None
    requests: list[dict] = field(default_factory=list)
    e2e_sum_us: float = 0.0
    slo_met: int = 0
    kept: list = field(default_factory=list)  # (parser, usage tokens) of completed requests
    tokenizer_counts: dict | None = None

    def add(self, r: RequestRecord, slo_checks: list | None = None) -> None:
        self.sent += 1
        if r.path is not None:
            self.paths[r.path] += 1
        if self.first_t0 is None or r.t0_ns < self.first_t0:
            self.first_t0 = r.t0_ns
        if r.end_ns and (self.last_end is None or r.end_ns > self.last_end):
            self.last_end = r.end_ns
        if self.keep_requests:
            self.requests.append(r.to_json())
        if not r.ok:
            self.errors[r.error] += 1
            self.error_examples.setdefault(r.error, r.error_detail)
            return
        self.completed += 1
        ttft_ns = r.first_text_ns - r.t0_ns
        e2e_ns = r.end_ns - r.t0_ns
        self.ttft.record_ns(ttft_ns)
        self.e2e.record_ns(e2e_ns)
        self.e2e_sum_us += e2e_ns / 1e3
        # One call per request: the parser records its chunk gaps, and per token where the
        # chunk's token count is known (continuous usage), straight into the histograms.
        r.parser.record_gaps(self.itl.hist, self.itl_token.hist)
        out = r.output_tokens
        tpot_ns = None
        if out >= 2:
            tpot_ns = (e2e_ns - ttft_ns) / (out - 1)
            self.tpot.record_ns(int(tpot_ns))
        if r.scheduled_ns is not None:
            self.ttft_sched.record_ns(r.first_text_ns - r.scheduled_ns)
            self.e2e_sched.record_ns(r.end_ns - r.scheduled_ns)
        self.input_tokens += r.usage_input_tokens if r.usage_input_tokens is not None else r.input_tokens
        self.output_tokens += out
        if r.usage_output_tokens is not None:
            self.usage_requests += 1
            self.usage_tokens += r.usage_output_tokens
            self.chunk_tokens_of_usage_requests += r.text_chunks
        else:
            self.chunk_only_requests += 1
        self.multi_token_chunks += r.multi_token_chunks
        if self.keep_text:
            self.kept.append((r.parser, r.usage_output_tokens, r.text_chunks))
        if r.expected_output_tokens is not None:
            self.osl_expected += 1
            if out != r.expected_output_tokens:
                self.osl_mismatch += 1
        if slo_checks is not None:
            values = {"ttft": ttft_ns / 1e3, "e2e": e2e_ns / 1e3,
                      "tpot": tpot_ns / 1e3 if tpot_ns is not None else None,
                      "itl": _max_gap_us(r) if any(t.metric == "itl" for t in slo_checks) else None}
            if all(values.get(t.metric) is None or t.holds(values[t.metric]) for t in slo_checks):
                self.slo_met += 1

    def count_with(self, tokenizer) -> None:
        """Count each kept output once, on its joined text (after the point, off the timed path).

        Summing per-chunk counts would overcount by 1-4% where tokens straddle chunks.
        Where the server sent no usage, these counts replace the chunk counts."""
        total = usage_total = usage_counted = 0
        for parser, usage, chunks in self.kept:
            n = tokenizer.count(parser.text())
            total += n
            if usage is not None:
                usage_total += usage
                usage_counted += n
            else:
                self.output_tokens += n - chunks
        self.tokenizer_counts = {"output": total, "requests": len(self.kept)}
        if usage_total:
            self.tokenizer_counts["usage"] = usage_total
            diff = (usage_counted - usage_total) / usage_total
            self.tokenizer_counts["relative_difference"] = round(diff, 6)
        self.kept = []

    def summary(self, steady: dict | None = None) -> dict:
        window_s = ((self.last_end - self.first_t0) / 1e9) if self.first_t0 and self.last_end else 0.0
        failed = sum(self.errors.values())
        per_s = (lambda x: round(x / window_s, 3)) if window_s > 0 else (lambda x: 0.0)
        unusaged = "tokenizer" if self.tokenizer_counts is not None else "chunks"
        method = ("usage" if self.usage_requests and not self.chunk_only_requests
                  else unusaged if self.chunk_only_requests and not self.usage_requests
                  else "mixed" if self.completed else "none")
        tokens = {
            "input": self.input_tokens, "output": self.output_tokens, "output_method": method,
            "multi_token_chunks": self.multi_token_chunks,
        }
        if self.usage_requests:
            # Disagreement between the server's count and the count of text-bearing chunks.
            diff = self.chunk_tokens_of_usage_requests - self.usage_tokens
            tokens["chunks_vs_usage"] = {"usage": self.usage_tokens,
                                         "chunks": self.chunk_tokens_of_usage_requests,
                                         "relative_difference": round(diff / self.usage_tokens, 6)
                                         if self.usage_tokens else None}
        if self.tokenizer_counts is not None:
            tokens["tokenizer"] = self.tokenizer_counts
        tokens["osl"] = {"requests_checked": self.osl_expected, "mismatched": self.osl_mismatch}
        latency = {"ttft_us": self.ttft.summary(), "itl_us": self.itl.summary(),
                   "tpot_us": self.tpot.summary(), "e2e_us": self.e2e.summary()}
        if self.itl_token.hist.total_count:
            latency["itl_per_token_us"] = self.itl_token.summary()
        if self.open_loop:
            latency["ttft_from_schedule_us"] = self.ttft_sched.summary()
            latency["e2e_from_schedule_us"] = self.e2e_sched.summary()
        mean_e2e_s = (self.e2e_sum_us / self.completed / 1e6) if self.completed else 0.0
        request_s = per_s(self.completed)
        return {
            "window": {"start_ns": self.first_t0, "end_ns": self.last_end, "duration_s": round(window_s, 6)},
            "counts": {"sent": self.sent, "completed": self.completed, "failed": failed,
                       "errors": {k: self.errors.get(k, 0) for k in ERROR_KINDS if self.errors.get(k)},
                       "error_examples": dict(self.error_examples)},
            "tokens": tokens,
            "throughput": {
                "output_tok_s": per_s(self.output_tokens),
                "total_tok_s": per_s(self.output_tokens + self.input_tokens),
                "request_s": request_s,
                "goodput_s": per_s(self.slo_met),
                "steady_output_tok_s": (steady or {}).get("output_tok_s"),
            },
            "latency": latency,
            "little": {"throughput_x_latency": round(request_s * mean_e2e_s, 3)},
            "error_rate": round(failed / self.sent, 6) if self.sent else 0.0,
        }


def _max_gap_us(r: RequestRecord) -> float | None:
    gaps = r.parser.gaps_ns
    return max(gaps) / 1e3 if gaps else None
