"""The arithmetic of a load point's figures, in one place.

A Tally is what a point counted -- integers and latency histograms, nothing derived -- so
that tallies of one point add exactly (Tally.add: the shards of a Ray point, the shards
`benchc merge` reads). figures() turns a tally into what a result shows for the point:
the window, the counts, the output tokens with the method that counted them and the
disagreement between methods, every rate (a count over the window: output and total
tok/s, request/s, goodput), the error rate, the latency summaries, Little's law, and the
prefix-cache counters and server timings (metrics/cache.py, metrics/timings.py).
PointRecorder (recorder.py) fills a tally request by request; results/merge.py rebuilds
one from each shard's result point (Tally.from_point).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from benchc import catalog
from benchc.metrics.cache import CacheCounters
from benchc.metrics.latency import Recorder
from benchc.metrics.payload import PayloadCount
from benchc.metrics.prompt_count import PromptCount
from benchc.metrics.record import ERROR_KINDS
from benchc.metrics.sessions import SessionCounters
from benchc.metrics.streams import StreamCounts
from benchc.metrics.timings import ServerTimings

# Latency blocks in the order a result lists them. The first four are in every point;
# the per-token ITL only when chunks carried their token counts (continuous usage); the
# from-schedule pair only in open loop; the reasoning three only where a request reasoned.
REASONING_LATENCIES = ("ttf_reasoning_us", "ttf_answer_us", "itl_answer_us")
# A request without reasoning answers from its first chunk: its time to first answer is its
# TTFT and its answer ITL its ITL. Until a point meets a request that reasons, these two are
# not recorded twice (see split_answers).
ANSWER_OF = {"ttf_answer_us": "ttft_us", "itl_answer_us": "itl_us"}
# Where a request called a tool: its first tool-call chunk (name or arguments) after t0
TOOL_LATENCY = "ttf_tool_call_us"
# every latency block, in the declarations' order (benchc/catalog.py), and those every point has
LATENCIES = tuple(m.key for m in catalog.LATENCIES)
ALWAYS = tuple(m.key for m in catalog.LATENCIES if m.required)

# How a request's output tokens were counted (tokens.output_method); "mixed" when the
# requests of a point were counted in more than one way, "none" when none completed.
USAGE, TOKENIZER, CHUNKS, MIXED, NONE = "usage", "tokenizer", "chunks", "mixed", "none"


def per_second(count: float, window_s: float) -> float:
    """A count over the window, as results round rates (0.0 for an empty window)."""
    return round(count / window_s, 3) if window_s > 0 else 0.0


def ratio(part: int, whole: int) -> float:
    """failed / sent and the like: 0.0 when nothing was sent."""
    return round(part / whole, 6) if whole else 0.0


def relative_difference(measured: int, reference: int) -> float | None:
    """(measured - reference) / reference: the disagreement between two counts of one thing."""
    return round((measured - reference) / reference, 6) if reference else None


def sum_or_none(values: Iterable[float | None], digits: int = 3) -> float | None:
    """The sum of figures of shards that ran side by side; None when any shard lacks it."""
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return round(sum(values), digits)  # type: ignore[arg-type]


def output_method(methods: set[str]) -> str:
    """One method for a point's output tokens from the methods its requests (or shards) used."""
    if not methods:
        return NONE
    return next(iter(methods)) if len(methods) == 1 else MIXED


def little(request_s: float, mean_e2e_us: float | None, mean_inflight: float | None) -> dict:
    """Little's law, L = lambda x W: the in-flight count sampled while the point ran against
    request/s x mean E2E. A ratio far from 1 means the window or the counts are off."""
    product = round(request_s * (mean_e2e_us or 0.0) / 1e6, 3)
    return {"throughput_x_latency": product,
            "mean_inflight_sampled": mean_inflight,
            "ratio": round(mean_inflight / product, 4) if product and mean_inflight is not None else None}


@dataclass
class TokenizerCount:
    """The client tokenizer's count of the kept outputs (counted after the point)."""

    output: int = 0  # tokens of every counted output
    requests: int = 0
    usage: int = 0  # the server's usage.completion_tokens, summed over counted requests that had it
    usage_counted: int = 0  # the tokenizer's count of those same requests' outputs

    def add(self, other: TokenizerCount) -> None:
        self.output += other.output
        self.requests += other.requests
        self.usage += other.usage
        self.usage_counted += other.usage_counted

    def block(self) -> dict:
        out: dict = {"output": self.output, "requests": self.requests}
        if self.usage:
            out.update(usage=self.usage, usage_counted=self.usage_counted,
                       relative_difference=relative_difference(self.usage_counted, self.usage))
        return out


@dataclass
class ReasoningCount:
    """How a point's completed requests split their output between reasoning and answer."""

    requests: int = 0  # completed requests that reasoned
    reasoning_tokens: int = 0  # of every completed request
    answer_tokens: int = 0
    without_answer: int = 0  # reasoned, and ran out of tokens before any answer
    methods: set[str] = field(default_factory=set)  # USAGE (completion_tokens_details) or CHUNKS, TOKENIZER

    def add_request(self, reasoned: bool, reasoning: int, output: int, answered: bool, method: str) -> None:
        self.requests += reasoned
        self.reasoning_tokens += reasoning
        self.answer_tokens += max(0, output - reasoning)
        self.without_answer += reasoned and not answered
        if reasoned:
            self.methods.add(method)

    def add(self, other: ReasoningCount) -> None:
        for name in ("requests", "reasoning_tokens", "answer_tokens", "without_answer"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.methods |= other.methods

    def block(self) -> dict | None:
        """The point's `reasoning` block; None when no request reasoned."""
        if not self.requests:
            return None
        return {"requests": self.requests, "reasoning_tokens": self.reasoning_tokens,
                "answer_tokens": self.answer_tokens, "method": output_method(self.methods),
                "requests_without_answer": self.without_answer}

    @classmethod
    def from_block(cls, b: dict | None) -> ReasoningCount:
        if not b:
            return cls()
        return cls(b["requests"], b["reasoning_tokens"], b["answer_tokens"], b["requests_without_answer"],
                   set() if b["method"] == NONE else {b["method"]})


@dataclass
class CancelCount:
    """Requests benchc closed itself (load.cancel, load.graceful_stop's cap, Ctrl-C's past the
    grace): not errors, and their partial figures apart from the completed requests' (what they
    read before the close)."""

    requests: int = 0
    output_tokens: int = 0  # read before the close
    with_first_token: int = 0  # of them, those whose first token came before the close
    ttft: Recorder = field(default_factory=Recorder)  # theirs
    interrupted: int = 0  # of them, those a Ctrl-C cancelled (the console tells them apart)

    def add_request(self, output_tokens: int, ttft_ns: int | None, interrupted: bool = False) -> None:
        self.requests += 1
        self.interrupted += interrupted
        self.output_tokens += output_tokens
        if ttft_ns is not None:
            self.with_first_token += 1
            self.ttft.record_ns(ttft_ns)

    def add(self, other: CancelCount) -> None:
        self.requests += other.requests
        self.output_tokens += other.output_tokens
        self.with_first_token += other.with_first_token
        self.ttft.merge(other.ttft)
        self.interrupted += other.interrupted

    def block(self) -> dict | None:
        """The point's `cancelled` block; None when no request was cancelled."""
        if not self.requests:
            return None
        out = {"requests": self.requests, "output_tokens": self.output_tokens,
               "with_first_token": self.with_first_token, "ttft_us": self.ttft.summary()}
        if self.interrupted:  # only where a Ctrl-C cancelled some: older results keep their bytes
            out["interrupted"] = self.interrupted
        return out

    @classmethod
    def from_block(cls, b: dict | None) -> CancelCount:
        if not b:
            return cls()
        return cls(b["requests"], b["output_tokens"], b["with_first_token"],
                   Recorder.from_summary(b["ttft_us"]), b.get("interrupted", 0))


@dataclass
class TemplateCount:
    """Input tokens as the server renders the chat (the model's chat template) beside benchc's
    count of the messages' content: the template's overhead, and how the rendered count
    agrees with the server's usage.prompt_tokens."""

    requests: int = 0
    input: int = 0  # the rendered messages' tokens
    content: int = 0  # benchc's count of the same requests' content
    usage_requests: int = 0  # of those, the requests whose server reported prompt_tokens ...
    usage: int = 0  # ... what it reported ...
    usage_counted: int = 0  # ... and the rendered count of the same requests

    def add_request(self, rendered: int, content: int, usage: int | None) -> None:
        self.requests += 1
        self.input += rendered
        self.content += content
        if usage is not None:
            self.usage_requests += 1
            self.usage += usage
            self.usage_counted += rendered

    def add(self, other: TemplateCount) -> None:
        for name in ("requests", "input", "content", "usage_requests", "usage", "usage_counted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def block(self) -> dict:
        out: dict = {"requests": self.requests, "input_tokens": self.input, "content_tokens": self.content,
                     "overhead_tokens": self.input - self.content,
                     "overhead_per_request": round((self.input - self.content) / self.requests, 3)
                     if self.requests else None}
        if self.usage_requests:
            out["usage"] = {"requests": self.usage_requests, "prompt_tokens": self.usage,
                            "counted": self.usage_counted,
                            "relative_difference": relative_difference(self.usage_counted, self.usage)}
        return out

    @classmethod
    def from_block(cls, b: dict) -> TemplateCount:
        u = b.get("usage") or {}
        return cls(b["requests"], b["input_tokens"], b["content_tokens"], u.get("requests", 0),
                   u.get("prompt_tokens", 0), u.get("counted", 0))


@dataclass(slots=True)
class TokenCounts:
    """A point's tokens (its `tokens` block and the inputs of counts.inputs): the completed
    requests' input and output tokens, how the outputs were counted, and the output lengths
    checked. Part of the Tally (which groups its counts by concern), added exactly."""

    input: int = 0
    output: int = 0
    inputs: int = 0  # inputs the completed requests carried (an embeddings batch; one prompt otherwise)
    multi_token_chunks: int = 0
    methods: set[str] = field(default_factory=set)  # how outputs were counted: USAGE, TOKENIZER, CHUNKS
    usage: int = 0  # server usage of the requests whose stream carried it ...
    usage_chunks: int = 0  # ... and the text-bearing chunks of those same requests
    osl_checked: int = 0  # requests whose output length the request pinned down ...
    osl_mismatched: int = 0  # ... and those that came back with another length
    tokenizer: TokenizerCount | None = None
    template: TemplateCount | None = None  # with a chat template: the input as the server renders it
    prompt: PromptCount = field(default_factory=PromptCount)  # the server's prompt tokens against benchc's

    def add(self, other: TokenCounts) -> None:
        """Another tally's tokens of the same point: counts summed, methods united."""
        for name in ("input", "output", "inputs", "multi_token_chunks", "usage", "usage_chunks",
                     "osl_checked", "osl_mismatched"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.methods |= other.methods
        self.prompt.merge(other.prompt)
        if other.tokenizer is not None:
            if self.tokenizer is None:
                self.tokenizer = TokenizerCount()
            self.tokenizer.add(other.tokenizer)
        if other.template is not None:
            if self.template is None:
                self.template = TemplateCount()
            self.template.add(other.template)

    def block(self) -> dict:
        """The point's `tokens` block."""
        out: dict = {"input": self.input, "output": self.output, "output_method": output_method(self.methods),
                     "multi_token_chunks": self.multi_token_chunks}
        if USAGE in self.methods:
            # the server's count against the count of text-bearing chunks, for the same requests
            diff = relative_difference(self.usage_chunks, self.usage)
            out["chunks_vs_usage"] = {"usage": self.usage, "chunks": self.usage_chunks,
                                      "relative_difference": diff}
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer.block()
        if self.template is not None:
            out["chat_template"] = self.template.block()
        if (prompt := self.prompt.block()) is not None:
            out["prompt_counted"] = prompt
        out["osl"] = {"requests_checked": self.osl_checked, "mismatched": self.osl_mismatched}
        return out

    @classmethod
    def from_block(cls, tok: dict, inputs: int, derived: list[str]) -> TokenCounts:
        """The counts a point's `tokens` block was made from (`inputs`: its counts.inputs)."""
        t = cls(input=tok["input"], output=tok["output"], inputs=inputs,
                multi_token_chunks=tok.get("multi_token_chunks", 0))
        if tok["output_method"] != NONE:
            t.methods.add(tok["output_method"])
        if "chunks_vs_usage" in tok:
            t.methods.add(USAGE)
            t.usage, t.usage_chunks = tok["chunks_vs_usage"]["usage"], tok["chunks_vs_usage"]["chunks"]
        osl = tok.get("osl", {})
        t.osl_checked, t.osl_mismatched = osl.get("requests_checked", 0), osl.get("mismatched", 0)
        if "tokenizer" in tok:
            t.tokenizer = _tokenizer_count(tok["tokenizer"], derived)
        if "chat_template" in tok:
            t.template = TemplateCount.from_block(tok["chat_template"])
        t.prompt = PromptCount.from_block(tok.get("prompt_counted"))
        return t


@dataclass
class Tally:
    """Everything a point counted: integers and histograms only."""

    start_ns: int | None = None  # earliest request start (t0)
    end_ns: int | None = None  # latest request end
    sent: int = 0
    completed: int = 0
    retries: int = 0  # requests sent again after the keep-alive race (not errors)
    errors: Counter = field(default_factory=Counter)  # failed requests by kind (record.ERROR_KINDS)
    error_examples: dict = field(default_factory=dict)  # kind -> the first detail seen
    slo_met: int = 0  # completed requests that met every SLO of the spec (all, without SLOs)
    # per SLO item a single request meets or misses (a latency: recorder.REQUEST_METRICS), by
    # its text: the completed requests that met that item, whatever the others said
    slo_met_by_item: Counter = field(default_factory=Counter)
    tokens: TokenCounts = field(default_factory=TokenCounts)  # inputs, outputs, how counted
    reasoning: ReasoningCount = field(default_factory=ReasoningCount)  # reasoning models: the split
    cancelled: CancelCount = field(default_factory=CancelCount)  # benchc's cancels (in sent, not errors)
    # the ANSWER_OF recorders hold every completed request's values; until then they are
    # implicitly its TTFT and ITL (no request reasoned)
    answers_split: bool = False
    latency: dict[str, Recorder] = field(default_factory=dict)  # LATENCIES name -> recorder
    cache: CacheCounters = field(default_factory=CacheCounters)  # prefix caching, by spec and server
    server_timings: ServerTimings = field(default_factory=ServerTimings)  # the server's own, per request
    sessions: SessionCounters = field(default_factory=SessionCounters)  # multi-turn: by turn, by session
    payload: PayloadCount = field(default_factory=PayloadCount)  # images and tools: bytes, server's tokens
    stream: StreamCounts = field(default_factory=StreamCounts)  # tool calls, unknown events
    derived: list[str] = field(default_factory=list)  # figures of old results derived, not counted

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    @property
    def window_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9 if self.start_ns and self.end_ns else 0.0

    def recorder(self, name: str) -> Recorder:
        """The latency recorder `name` (one of LATENCIES), made on first use."""
        r = self.latency.get(name)
        if r is None:
            r = self.latency[name] = Recorder()
        return r

    def add(self, other: Tally) -> None:
        """Add another tally of the same point: counts summed, histograms merged bucket for
        bucket, the window united (earliest start to latest end)."""
        starts = [t for t in (self.start_ns, other.start_ns) if t]
        ends = [t for t in (self.end_ns, other.end_ns) if t]
        self.start_ns, self.end_ns = (min(starts) if starts else None), (max(ends) if ends else None)
        for name in ("sent", "completed", "retries", "slo_met"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        self.slo_met_by_item.update(other.slo_met_by_item)  # an item one shard counted 0 stays
        for kind, example in other.error_examples.items():
            self.error_examples.setdefault(kind, example)
        self.tokens.add(other.tokens)
        if other.answers_split:
            split_answers(self)
        for name, rec in other.latency.items():
            if name not in ANSWER_OF or other.answers_split:
                self.recorder(name).merge(rec)
        if self.answers_split and not other.answers_split:  # the other's answers are its TTFT and ITL
            for answer, base in ANSWER_OF.items():
                if base in other.latency:
                    self.recorder(answer).merge(other.latency[base])
        self.cache.merge(other.cache)
        self.server_timings.merge(other.server_timings)
        self.sessions.merge(other.sessions)
        self.payload.merge(other.payload)
        self.stream.merge(other.stream)
        self.reasoning.add(other.reasoning)
        self.cancelled.add(other.cancelled)
        self.derived += [d for d in other.derived if d not in self.derived]

    @classmethod
    def total(cls, tallies: Iterable[Tally]) -> Tally:
        out = cls()
        for t in tallies:
            out.add(t)
        return out

    @classmethod
    def from_point(cls, point: dict) -> Tally:
        """The tally a result point was made from. Results written before a count was kept
        give it derived from their figures, and `derived` says which."""
        t = cls()
        w, c, tok = point["window"], point["counts"], point["tokens"]
        t.start_ns, t.end_ns = w.get("start_ns"), w.get("end_ns")
        t.sent, t.completed = c["sent"], c["completed"]
        t.retries = c.get("retries", 0)  # results before the keep-alive retry was counted: none
        t.errors = Counter(c["errors"])
        t.error_examples = dict(c.get("error_examples", {}))
        if "slo_met" in c:
            t.slo_met = c["slo_met"]
        else:
            t.slo_met = round(point["throughput"]["goodput_s"] * w["duration_s"])
            t.derived.append("counts.slo_met: goodput_s x window duration (a result that did not count it)")
        # results before goodput was counted per SLO item have none: they decide per SLO set only
        per_item = point.get("goodput_per_slo") or {}
        t.slo_met_by_item = Counter({k: v["slo_met"] for k, v in per_item.items()})
        # results before batches: one prompt per request
        t.tokens = TokenCounts.from_block(tok, c.get("inputs", t.completed), t.derived)
        t.latency = {name: Recorder.from_summary(block) for name, block in point["latency"].items()}
        t.answers_split = "ttf_answer_us" in t.latency
        if "cache" in point:  # results before benchc counted prefix caching have none
            t.cache = CacheCounters.from_block(point["cache"])
        t.server_timings = ServerTimings.from_block(point.get("server_timings"))
        t.sessions = SessionCounters.from_block(point.get("sessions"))
        t.payload = PayloadCount.from_block(point.get("payload"))
        t.reasoning = ReasoningCount.from_block(point.get("reasoning"))
        t.stream = StreamCounts.from_block(point.get("stream"))
        t.cancelled = CancelCount.from_block(point.get("cancelled"))
        return t


def _tokenizer_count(block: dict, derived: list[str]) -> TokenizerCount:
    n = TokenizerCount(block["output"], block["requests"], block.get("usage", 0),
                       block.get("usage_counted", 0))
    if n.usage and "usage_counted" not in block:
        # exact while usage x 5e-7 (the rounding of relative_difference) stays under half a token
        n.usage_counted = round(n.usage * (1 + (block.get("relative_difference") or 0.0)))
        derived.append("tokens.tokenizer.usage_counted: usage x (1 + relative_difference) "
                       "(a result that did not count it)")
    return n


def error_counts(errors: Counter) -> dict[str, int]:
    """Failed requests by kind: the known kinds in their fixed order, then any other."""
    out = {k: errors[k] for k in ERROR_KINDS if errors.get(k)}
    out.update({k: v for k, v in sorted(errors.items()) if k not in out and v})
    return out


def split_answers(t: Tally) -> None:
    """From now on the tally records the time to first answer and answer ITL of every request:
    what it recorded before (requests without reasoning) is its TTFT and ITL, copied in once."""
    if t.answers_split:
        return
    t.answers_split = True
    for answer, base in ANSWER_OF.items():
        t.recorder(answer).merge(t.recorder(base))


def latency_block(t: Tally) -> dict:
    out = {}
    for name in LATENCIES:
        rec = t.latency.get(name)
        if name in ALWAYS:
            out[name] = (rec or Recorder()).summary()
        elif name in REASONING_LATENCIES:
            if t.reasoning.requests and t.answers_split and rec is not None:  # else TTFT and ITL again
                out[name] = rec.summary()
        elif rec is not None and (name != "itl_per_token_us" or rec.hist.total_count or rec.out_of_range):
            out[name] = rec.summary()
    return out


def figures(t: Tally, steady_output_tok_s: float | None = None, mean_inflight: float | None = None) -> dict:
    """A point's figures from its tally: window, counts, tokens, throughput, latency, Little's
    law and error rate (the keys of a result point they fill)."""
    w = t.window_s
    latency = latency_block(t)
    request_s = per_second(t.completed, w)
    counts: dict[str, Any] = {"sent": t.sent, "completed": t.completed, "failed": t.failed,
                              "retries": t.retries, "errors": error_counts(t.errors),
                              "error_examples": dict(t.error_examples), "slo_met": t.slo_met}
    if t.cancelled.requests:
        counts["cancelled"] = t.cancelled.requests  # benchc's cancels: in sent, neither completed nor failed
    tok = t.tokens
    out = {
        "window": {"start_ns": t.start_ns, "end_ns": t.end_ns, "duration_s": round(w, 6)},
        "counts": {**counts, "inputs": tok.inputs},
        "tokens": tok.block(),
        "throughput": {"output_tok_s": per_second(tok.output, w),
                       "total_tok_s": per_second(tok.output + tok.input, w),
                       "input_tok_s": per_second(tok.input, w),
                       "request_s": request_s,
                       "inputs_s": per_second(tok.inputs, w),
                       "goodput_s": per_second(t.slo_met, w),
                       "steady_output_tok_s": steady_output_tok_s},
        "latency": latency,
        "little": little(request_s, latency["e2e_us"].get("mean"), mean_inflight),
        "error_rate": ratio(t.failed, t.sent),
        "cache": t.cache.block(),
    }
    if t.slo_met_by_item:
        out["goodput_per_slo"] = {text: {"slo_met": n, "goodput_s": per_second(n, w)}
                                  for text, n in t.slo_met_by_item.items()}
    # the optional blocks: each counter says None where its point has nothing to show
    optional: dict[str, Any] = {"server_timings": t.server_timings, "sessions": t.sessions,
                                "reasoning": t.reasoning, "payload": t.payload, "stream": t.stream,
                                "cancelled": t.cancelled}
    for key, counter in optional.items():
        block = counter.block()
        if block is not None:
            out[key] = block
    if t.derived:
        out["derived"] = list(t.derived)
    return out


def merge_client_checks(checks: list[dict], who: list[dict] | None = None) -> dict:
    """The client self-checks of shards that ran side by side: limited when any one was.
    `who`: each shard's {"worker": index, "host": name} (Ray), kept beside its check,
    named in its reasons and listed under `limited_workers` when it was saturated, so the
    worker that set the pace can be found."""
    worst = _worst_effects(checks)
    if who is None:
        return {"client_limited": any(c["client_limited"] for c in checks),
                "reasons": [r for c in checks for r in c.get("reasons", [])],
                **worst, "shards": checks}
    pairs = list(zip(who, checks, strict=True))
    return {"client_limited": any(c["client_limited"] for c in checks),
            "reasons": [f"{_named(w)}: {r}" for w, c in pairs for r in c.get("reasons", [])],
            "limited_workers": [{**w, "reasons": c.get("reasons", [])}
                                for w, c in pairs if c["client_limited"]],
            **worst, "shards": [{**w, **c} for w, c in pairs]}


def _worst_effects(checks: list[dict]) -> dict:
    """The self-check's effects (run/effects.py) of shards that ran side by side: per effect,
    the shard's where it moved most (each shard's own stays in `shards`)."""
    out: dict = {}
    for check in checks:
        for name, e in check.get("effects", {}).items():
            have = out.get(name)
            if have is None or (e["moved"], e["value"]) > (have["moved"], have["value"]):
                out[name] = e
    return {"effects": out} if out else {}


def _named(who: dict) -> str:
    return f"worker {who['worker']} on {who['host']}"
