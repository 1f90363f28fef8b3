"""One load point's recording: each finished request goes into the point's Tally.

Memory is constant in the number of requests (histograms and counters); the
per-request records, and the outputs for the tokenizer, are kept only when asked for.
The figures are computed from the tally by aggregate.figures, the one place that does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchc import catalog
from benchc.metrics.aggregate import (
    CHUNKS,
    TOKENIZER,
    TOOL_LATENCY,
    USAGE,
    Tally,
    TemplateCount,
    TokenizerCount,
    figures,
    split_answers,
)
from benchc.metrics.latency import Recorder
from benchc.metrics.record import CANCELLED, RequestRecord


@dataclass
class PointRecorder:
    """Everything a load point measured, fed one finished request at a time."""

    target_inflight: int
    keep_requests: bool = False
    open_loop: bool = False
    keep_text: bool = False
    tally: Tally = field(default_factory=Tally)
    requests: list[dict] = field(default_factory=list)  # per-request records (keep_requests)
    # per completed request (keep_text): (parser, usage tokens, text chunks, reasoning to count)
    kept: list = field(default_factory=list)
    # session turns to count with the chat template after the point: (messages, content tokens, usage)
    templated: list = field(default_factory=list)
    slo_items_named: bool = False  # the tally's per-SLO-item counts have every item's key
    # the SLO items a request is held to, each with its value's place in _request_values (made
    # once, with the names: no lookup by metric name per request)
    slo_plan: list = field(default_factory=list)

    def __post_init__(self) -> None:
        t = self.tally
        # made up front, so that the parser can record into them and an empty point shows them
        self.ttft, self.itl, self.tpot, self.e2e = (t.recorder(n) for n in ("ttft_us", "itl_us", "tpot_us",
                                                                              "e2e_us"))
        self.itl_token = t.recorder("itl_per_token_us")
        # reasoning models' (made when a request first reasons: see aggregate.split_answers)
        self.reasoning: tuple[Recorder, Recorder, Recorder] | None = None
        if self.open_loop:
            self.ttft_sched = t.recorder("ttft_from_schedule_us")
            self.e2e_sched = t.recorder("e2e_from_schedule_us")

    def add(self, r: RequestRecord, slo_checks: list | None = None) -> None:
        """One finished request into the point's tally, by concern: its send, its failure or
        its latencies, its tokens, its turn and server timings, its reasoning and length."""
        t = self.tally
        if slo_checks and not self.slo_items_named:
            self._name_slo_items(slo_checks)
        self._count_sent(t, r)
        outcome, place = r.outcome, r.place
        if outcome.error is not None:
            self._count_failed(t, r)
            return
        e2e_ns = self._count_completed(t, r)
        at = r.times
        if at.first_text_ns is None:
            # A non-streamed answer (embeddings): its latency is its E2E; it has no first token,
            # no chunk gaps and no output, so TTFT, ITL and TPOT stay empty for it
            if slo_checks is not None:
                _count_slo(t, r, self.slo_plan, None, e2e_ns, None)
            return
        reasoned = at.first_reasoning_ns is not None or bool(r.tokens.usage_reasoning_tokens)  # r.reasoned
        ttft_ns = self._record_stream(t, r, reasoned)
        out = self._count_tokens(t, r, reasoned)
        tpot_ns = None
        if out >= 2:
            tpot_ns = (e2e_ns - ttft_ns) / (out - 1)
            self.tpot.record_ns(int(tpot_ns))
        if place is not None and place.turn is not None:
            t.sessions.add_turn(r, ttft_ns, e2e_ns)
        if outcome.server_timings is not None:
            t.server_timings.add(outcome.server_timings, ttft_ns, e2e_ns)
        if slo_checks is not None:
            _count_slo(t, r, self.slo_plan, ttft_ns, e2e_ns, tpot_ns)

    def _name_slo_items(self, slo_checks: list) -> None:
        """Each SLO item a request can meet, counted from 0 (so a point shows every item), and
        where its value sits among a request's (_VALUE_AT)."""
        for c in slo_checks:
            if c.metric in REQUEST_METRICS:
                self.tally.slo_met_by_item.setdefault(c.text, 0)
                self.slo_plan.append((c, _VALUE_AT[c.metric]))
        self.slo_items_named = True

    def _count_sent(self, t: Tally, r: RequestRecord) -> None:
        """Every request, whatever its end: sent, retried, the window, its record, its payload."""
        at, payload = r.times, r.payload
        t.sent += 1
        t.retries += r.outcome.retried
        if t.start_ns is None or at.t0_ns < t.start_ns:
            t.start_ns = at.t0_ns
        end_ns = at.end_ns
        if end_ns and (t.end_ns is None or end_ns > t.end_ns):
            t.end_ns = end_ns
        if self.keep_requests:
            self.requests.append(r.to_json())
        if payload.images or payload.tools:  # what PayloadCount counts (a call saved on every other request)
            t.payload.add_request(payload.request_bytes, payload.images, payload.tools, r.ok,
                                  r.tokens.usage_input_tokens)
        t.stream.add(r)

    @staticmethod
    def _count_failed(t: Tally, r: RequestRecord) -> None:
        """A request that did not complete: an error by kind, or a cancel of benchc's own
        (load.cancel, graceful_stop's cap, Ctrl-C: counted apart, not an error)."""
        outcome, at = r.outcome, r.times
        error = outcome.error
        assert error is not None
        if outcome.cancel_planned and error == CANCELLED:
            t.cancelled.add_request(r.output_tokens,
                                    at.first_text_ns - at.t0_ns if at.first_text_ns else None,
                                    outcome.interrupted)
            return
        t.errors[error] += 1
        t.error_examples.setdefault(error, outcome.error_detail)
        if r.place is not None and r.place.turn is not None:
            t.sessions.add_turn(r, None, None)

    def _count_completed(self, t: Tally, r: RequestRecord) -> int:
        """A completed request's E2E (from its send, and its schedule), its inputs and their
        tokens, its prompt's caching; its E2E in ns."""
        at = r.times
        end_ns = at.end_ns
        assert end_ns is not None  # what makes a request ok (a stream's also has a first text)
        t.completed += 1
        tok = t.tokens
        tok.inputs += r.payload.inputs
        e2e_ns = end_ns - at.t0_ns
        self.e2e.record_ns(e2e_ns)
        if at.scheduled_ns is not None:
            self.e2e_sched.record_ns(end_ns - at.scheduled_ns)
        usage_input = r.tokens.usage_input_tokens
        tok.input += usage_input if usage_input is not None else r.input_tokens
        t.cache.add(r)
        return e2e_ns

    def _record_stream(self, t: Tally, r: RequestRecord, reasoned: bool) -> int:
        """A streamed answer's latencies (TTFT, the chunk gaps, reasoning's, the first tool
        call, from the schedule); its TTFT in ns."""
        at = r.times
        first_text_ns, t0_ns = at.first_text_ns, at.t0_ns
        assert first_text_ns is not None
        if reasoned and self.reasoning is None:  # the point's first request that reasoned
            split_answers(t)  # before this request's TTFT and ITL are recorded
            self.reasoning = (t.recorder("ttf_reasoning_us"), t.recorder("ttf_answer_us"),
                              t.recorder("itl_answer_us"))
        ttft_ns = first_text_ns - t0_ns
        self.ttft.record_ns(ttft_ns)
        # One call per request: the parser records its chunk gaps, and per token where the
        # chunk's token count is known (continuous usage), straight into the histograms.
        r.parser.record_gaps(self.itl.hist, self.itl_token.hist)
        if self.reasoning is not None:  # else these are its TTFT and ITL (no request reasoned yet)
            ttf_reasoning, ttf_answer, itl_answer = self.reasoning
            if at.first_answer_ns is not None:
                ttf_answer.record_ns(at.first_answer_ns - t0_ns)
            if at.first_reasoning_ns is not None:
                ttf_reasoning.record_ns(at.first_reasoning_ns - t0_ns)
            r.parser.record_answer_gaps(itl_answer.hist)
        if at.first_tool_ns is not None:
            t.recorder(TOOL_LATENCY).record_ns(at.first_tool_ns - t0_ns)
        if at.scheduled_ns is not None:
            self.ttft_sched.record_ns(first_text_ns - at.scheduled_ns)
        return ttft_ns

    def _count_tokens(self, t: Tally, r: RequestRecord, reasoned: bool) -> int:
        """Its output tokens and how they were counted, its input as a chat template renders
        it, the reasoning split, and the output length asked for against the one that came;
        the output tokens."""
        got = r.tokens  # the request's counts (tok: the point's)
        usage_output, usage_input = got.usage_output_tokens, got.usage_input_tokens
        out = usage_output if usage_output is not None else got.text_chunks  # r.output_tokens
        tok = t.tokens
        tok.output += out
        if usage_output is not None:
            tok.methods.add(USAGE)
            tok.usage += usage_output
            tok.usage_chunks += got.text_chunks
        else:
            tok.methods.add(CHUNKS)  # until the tokenizer counts it (count_with)
        tok.multi_token_chunks += got.multi_token_chunks
        payload = r.payload
        if usage_input is not None:  # the server's prompt count beside what was sent
            tok.prompt.add_request(r.input_tokens, usage_input, payload.tools, payload.images)
        if got.template_input_tokens is not None:
            if tok.template is None:
                tok.template = TemplateCount()
            tok.template.add_request(got.template_input_tokens, r.input_tokens, usage_input)
        elif r.place is not None and r.place.messages is not None:
            # a session's turn: its history is counted after the point
            self.templated.append((r.place.messages, r.input_tokens, usage_input))
        # the reasoning split: the server's count, else the tokenizer's (after the point), else chunks
        recount = self.keep_text and reasoned and got.usage_reasoning_tokens is None
        if not recount:
            # a tool call answers too: a request that reasoned, then called a tool, did not run
            # out of tokens before answering
            at = r.times
            answered = at.first_answer_ns is not None or at.first_tool_ns is not None
            t.reasoning.add_request(reasoned, r.reasoning_tokens, out, answered,
                                    USAGE if got.usage_reasoning_tokens is not None else CHUNKS)
        # an answer that ended in a tool call stopped where the model called it: the length the
        # request pinned down (ignore_eos, min_tokens) does not hold it (vLLM ends it there too)
        expected = r.expected_output_tokens if r.outcome.finish_reason != "tool_calls" else None
        if self.keep_text:
            self.kept.append((r.parser, usage_output, got.text_chunks, recount, expected))
        # The output length asked for (min_tokens, ignore_eos) against the server's count. Counted
        # per chunk (no usage), fewer chunks than asked says nothing (a chunk may carry several
        # tokens): the tokenizer checks those after the point (count_with), else nobody can.
        if expected is not None and (usage_output is not None or out > expected):
            tok.osl_checked += 1
            tok.osl_mismatched += out != expected
        return out

    def add_session(self, info: dict) -> None:
        """A session that is over: its outcome and duration (run/sessions.run_session)."""
        self.tally.sessions.add_session(info)

    def count_with(self, tokenizer: Any) -> None:
        """Count each kept output once, on its joined text (after the point, off the timed path).

        Summing per-chunk counts would overcount by 1-4% where tokens straddle chunks.
        Where the server sent no usage, these counts replace the chunk counts."""
        t = self.tally
        tok = t.tokens
        n = TokenizerCount(requests=len(self.kept))
        for parser, usage, chunks, recount, expected in self.kept:
            count = tokenizer.count(parser.text())
            n.output += count
            if usage is not None:
                n.usage += usage
                n.usage_counted += count
            else:
                tok.output += count - chunks
                if expected is not None and chunks <= expected:  # left to this count by add()
                    tok.osl_checked += 1
                    tok.osl_mismatched += count != expected
            if recount:  # reasoning the server did not count: the tokenizer's count of its text
                t.reasoning.add_request(True, tokenizer.count(parser.reasoning_text()),
                                        usage if usage is not None else count,
                                        parser.first_answer_ns > 0 or parser.first_tool_ns > 0, TOKENIZER)
        if CHUNKS in tok.methods and self.kept:
            tok.methods.discard(CHUNKS)
            tok.methods.add(TOKENIZER)
        tok.tokenizer = n
        self.kept = []

    def count_template(self, template: Any, tools: list | None = None) -> None:
        """The kept session turns' inputs as the server renders them (after the point: a long
        history's rendering and tokenizing stays off the measured window), with the tool
        definitions every turn offered (`tools`, chat form), if any."""
        tok = self.tally.tokens
        if self.templated and tok.template is None:
            tok.template = TemplateCount()
        for messages, content, usage in self.templated:
            tok.template.add_request(template.count(messages, tools), content, usage)  # type: ignore[union-attr]
        self.templated = []

    def summary(self, steady: dict | None = None, mean_inflight: float | None = None) -> dict:
        """The point's figures (aggregate.figures of its tally)."""
        return figures(self.tally, (steady or {}).get("output_tok_s"), mean_inflight)


# The SLO metrics one request has a value for; the others (throughputs, error_rate) are a
# point's figures, checked on the point (results/slo.py), never held against a request.
REQUEST_METRICS = tuple(m.name for m in catalog.METRICS if m.slo and m.latency)


# Where each per-request SLO metric's value sits in the tuple _count_slo makes per request;
# tests/test_catalog.py checks that every declared per-request metric has one.
_VALUE_AT = {"ttft": 0, "e2e": 1, "tpot": 2, "itl": 3, "ttf_tool_call": 4}


def _count_slo(t: Tally, r: RequestRecord, plan: list, ttft_ns: int | None, e2e_ns: int,
               tpot_ns: float | None) -> None:
    """Count one completed request into the goodput of the SLO set (it met every item) and of
    each item it met (a metric it has no value for is not held against it: tpot of a one-token
    output, itl of a one-chunk stream, ttft of an answer that was not streamed, ttf_tool_call of
    an answer that called no tool). `plan`: the items a request is held to, with their value's
    place (PointRecorder._name_slo_items)."""
    if not plan:  # no SLO a request is held to: every completed request meets the set
        t.slo_met += 1
        return
    tool = r.times.first_tool_ns
    values = (ttft_ns / 1e3 if ttft_ns is not None else None, e2e_ns / 1e3,
              tpot_ns / 1e3 if tpot_ns is not None else None,
              _max_gap_us(r) if any(i == 3 for _, i in plan) else None,
              (tool - r.times.t0_ns) / 1e3 if tool is not None else None)
    met_all = True
    for c, i in plan:
        v = values[i]
        if v is None or c.holds(v):
            t.slo_met_by_item[c.text] += 1
        else:
            met_all = False
    t.slo_met += met_all


def _max_gap_us(r: RequestRecord) -> float | None:
    p = r.parser  # its largest gap of all (it keeps only the first ones as a list)
    return p.max_gap_ns / 1e3 if p.text_chunks > 1 else None
