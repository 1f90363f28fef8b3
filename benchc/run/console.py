"""What `benchc run` prints on stderr while it runs: messages, a point's progress (a bar that
redraws itself on a terminal, a line every PROGRESS_LINE_S otherwise), one table row per point
and its warnings, and a note when nothing arrived from the server for a while (Silence).
Nothing here goes into the result."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from benchc import catalog, redact
from benchc.catalog import Metric
from benchc.metrics.record import CANCELLED
from benchc.metrics.recorder import PointRecorder
from benchc.plan.model import Step, Workload
from benchc.results.slo import check_unit
from benchc.spec.thresholds import show_value

# what the columns count, printed once under the header: `reqs` and `out tok/s` are read
# wrong otherwise (requests sent? the steady rate?)
LEGEND = ("reqs: requests completed (failed ones under errors); out tok/s: output tokens of completed "
          "requests / the point's whole window (the result's output_tok_s, not steady_output_tok_s); "
          "req/s: completed requests / that window (request_s); latencies in ms")
# the metric columns, as declared (benchc/catalog.py): the point's scalars, then its
# latencies' statistics, each as wide as its header and a space
COLUMNS = tuple((m, stat, header, m.console_width or len(header) + 1)
                for group in (False, True) for m in catalog.METRICS if m.latency == group
                for stat in m.console
                for header in (m.title if stat is None else f"{m.title} {stat}",))
HEADER = (f"{'point':<24} {'reqs':>5} " + " ".join(f"{h:>{w}}" for _, _, h, w in COLUMNS)
          + f" {'errors':>6}")
# the figures shown on a line under the row, where the point has them
DETAILS = tuple(m for m in catalog.METRICS if m.console_detail)
# a scalar's cell by its unit (latencies: milliseconds)
_FORMATS = {"tok/s": "{:.1f}", "req/s": "{:.2f}", "fraction": "{:.1%}"}


def _cell(p: dict, m: Metric, stat: str | None) -> str:
    """A declared metric's console cell: `12.3ms`, `353.1`, `-` where the point has none."""
    value = m.value_in(p)
    if stat is not None:
        value = value.get(stat) if isinstance(value, dict) else None
        return f"{value / 1000:.1f}ms" if value is not None else "-"
    return _FORMATS.get(m.unit, "{}").format(value) if value is not None else "-"


def _check(c: dict) -> str:
    """`tpot: p50 < 20ms: 19.2ms ok` (latencies are held in microseconds)."""
    return f"{c['threshold']}: {show_value(c['value'], check_unit(c))} {'ok' if c['passed'] else 'FAIL'}"


def interrupted_requests(p: dict, ctrl_c_cancels: bool = True) -> int:
    """Requests of the point that Ctrl-C cancelled in flight: counted as cancelled (the
    `cancelled` block's `interrupted`), or by older results as the error kind `cancelled`
    (`ctrl_c_cancels`: where they may be Ctrl-C's, results/failed.py's point_failure)."""
    return int((p.get("cancelled") or {}).get("interrupted", 0)) + _counted_failed(p, ctrl_c_cancels)


def _counted_failed(p: dict, ctrl_c_cancels: bool = True) -> int:
    """Ctrl-C's cancels an older result counted as failed (the error kind `cancelled`); none
    where no Ctrl-C came or the server stopped the point (a dead server's stop cancels what is
    in flight as that error kind: failures)."""
    return int((p["counts"].get("errors") or {}).get(CANCELLED, 0)) if ctrl_c_cancels else 0


def first_error(p: dict, ctrl_c_cancels: bool = True) -> str | None:
    """`2 of 2 requests failed; first error (http_404): The model `foo` does not exist.`: why
    a point's requests failed, which the errors column alone never said (the message is the
    first seen of the first kind other than `cancelled`, which Ctrl-C's cancels are, told by
    cancelled_line; the console scrubs it of the run's secrets)."""
    counts = p["counts"]
    failed = counts["failed"] - _counted_failed(p, ctrl_c_cancels)
    if failed <= 0:
        return None
    examples = {k: v for k, v in (counts.get("error_examples") or {}).items()
                if k != CANCELLED or not ctrl_c_cancels}
    line = f"{failed} of {counts['sent']} requests failed"
    if examples:
        kind, detail = next(iter(examples.items()))
        line += f"; first error ({kind})" + (f": {detail}" if detail else "")
    return line


def cancelled_line(p: dict, ctrl_c_cancels: bool = True) -> str | None:
    """`partial: 3 requests cancelled in flight when the run was interrupted ...`: an
    interrupted point's row says so, and its cancelled requests are not told as failures."""
    n = interrupted_requests(p, ctrl_c_cancels)
    if p.get("complete", True) and not n:
        return None
    line = "partial: the point's load was stopped early"
    if n:
        line += (f"; {n} request{'s' if n != 1 else ''} in flight cancelled when the run was interrupted "
                 "(counted as `cancelled`, not as failed)")
    return line


def _detail_lines(p: dict, ms) -> list[str]:
    """Under a point's row: when its answers started (reasoning models), the figures declared
    for a line of their own (time to first tool call), and its turns (sessions): TTFT p50 and
    the server's cached fraction per turn."""
    out = []
    r, lat = p.get("reasoning"), p["latency"]
    if r:
        first = lat["ttf_answer_us"]
        out.append(f"reasoning {r['reasoning_tokens']:,} + answer {r['answer_tokens']:,} tokens "
                   f"({r['method']}); first answer token p50 {ms(first, 'p50')} p99 {ms(first, 'p99')}; "
                   f"answer ITL p50 {ms(lat['itl_answer_us'], 'p50')}")
    for m in DETAILS:  # a figure only some points have: a line where the point has it
        block = m.value_in(p)
        if block and block.get("count"):
            stats = " ".join(f"{stat} {ms(block, stat)}" for stat in m.console_detail)
            out.append(f"{m.title} {stats} ({block['count']:,} requests)")
    s = p.get("sessions")
    if s:
        turns = ", ".join(f"{b['turn']}: {ms(b['latency']['ttft_us'], 'p50')}"
                          + (f" ({b['cache']['cached_fraction']:.0%} cached)"
                             if b["cache"]["cached_fraction"] is not None else "") for b in s["by_turn"])
        out.append(f"sessions {s['completed']}/{s['started']} completed ({s['cut']} cut, "
                   f"{s['failed']} failed); TTFT p50 by turn {turns}")
    return out


def _rate_and_server_lines(p: dict, ms) -> list[str]:
    """Under a point's row: its total token rate (input and output tokens over the window), and
    the server's own timings of its requests where the server gave them (llama.cpp's per-request
    `timings`: p50; vLLM's phase histograms on /metrics: means) beside the client's TTFT."""
    tput, tok = p["throughput"], p["tokens"]
    out = [f"total {tput['total_tok_s']:,.1f} tok/s ({tok['input']:,} input + {tok['output']:,} output "
           "tokens)"]
    t = p.get("server_timings")
    if t and t.get("requests"):
        out.append(f"server timings ({t['requests']} requests, llama.cpp timings): prompt p50 "
                   f"{ms(t['server_prompt_us'], 'p50')}, decode p50 {ms(t['server_decode_us'], 'p50')}; "
                   f"client TTFT p50 {ms(t['ttft_us'], 'p50')}, of it beyond the server's prompt p50 "
                   f"{ms(t['ttft_minus_server_prompt_us'], 'p50')}")
    v = p.get("server_timings_prometheus")
    if v:
        phases = ", ".join(f"{name} {v[f'{name}_ms_mean']:.1f}ms"
                           for name in ("queue", "prefill", "decode", "ttft") if f"{name}_ms_mean" in v)
        client = (f"; client TTFT {v['client_ttft_ms_mean']:.1f}ms, E2E - TTFT "
                  f"{v['client_e2e_minus_ttft_ms_mean']:.1f}ms" if "client_ttft_ms_mean" in v else "")
        out.append(f"server phases (/metrics, means over {v.get('requests', 0)} requests): {phases}{client}")
    return out


PROGRESS_LINE_S = 10.0  # off a terminal: a point's progress line this often
REDRAW_S = 0.1  # on a terminal: the bar is redrawn at most this often
BAR_WIDTH = 20


class Progress:
    """One point's progress: requests done (of its ceiling), output tokens/s, errors so far,
    requests in flight, time left (by its duration, or by its request ceiling at the rate so
    far). `live`: a bar on one line, redrawn as requests end and as time passes; else a line
    every PROGRESS_LINE_S (a log, a pipe, CI). `clock` (seconds) is time.monotonic but for tests."""

    def __init__(self, step: Step, out: TextIO, live: bool, clock: Callable[[], float] = time.monotonic):
        self.step, self.out, self.live, self.clock = step, out, live, clock
        self.start = clock()
        self._drawn = float("-inf")  # when the bar was last drawn
        self._line = self.start  # when the last line was written (the first comes an interval in)

    def ended(self, rec: PointRecorder, inflight: int) -> None:
        """A request ended (called by the load generator for each)."""
        if self.live and self.clock() - self._drawn >= REDRAW_S:
            self._draw(rec, inflight)

    def tick(self, rec: PointRecorder, inflight: int) -> None:
        """Time passed (called about once a second while the point runs)."""
        now = self.clock()
        if self.live:
            self._draw(rec, inflight)
        elif now - self._line >= PROGRESS_LINE_S:
            self._line = now
            self.out.write(self.text(rec, inflight, now) + "\n")
            self.out.flush()

    def _draw(self, rec: PointRecorder, inflight: int) -> None:
        now = self._drawn = self.clock()
        self.out.write(f"\r\033[K{self.text(rec, inflight, now)}")
        self.out.flush()

    def text(self, rec: PointRecorder, inflight: int, now: float) -> str:
        t, step = rec.tally, self.step
        elapsed = max(now - self.start, 0.0)
        tok_s = t.tokens.output / t.window_s if t.window_s > 0 else 0.0
        # t.sent: requests ended (recorded), whatever their outcome
        parts = [f"{t.sent}/{step.requests} done" if step.requests else f"{t.sent} done",
                 f"{inflight} in flight", f"{tok_s:,.0f} tok/s", f"{t.failed} errors"]
        fraction, left = _left(step, t.sent, elapsed)
        if step.duration_s and elapsed >= step.duration_s:
            parts.append(_past_duration(step, elapsed))  # not "0s left", line after line
        elif left is not None:
            parts.append(f"{left:.0f}s left")
        head = f"{step.id}: "
        if self.live and fraction is not None:
            full = int(fraction * BAR_WIDTH)
            head += f"[{'#' * full}{'.' * (BAR_WIDTH - full)}] {fraction:4.0%} "
        return head + ", ".join(parts)


def _past_duration(step: Step, elapsed_s: float) -> str:
    """What a point past its duration is doing: no new sends, and its in-flight requests
    finishing (as long as they take) or cancelled at load.graceful_stop's cap."""
    assert step.duration_s is not None
    over = elapsed_s - step.duration_s
    if step.graceful_stop_s is None:
        return (f"duration reached {over:.0f}s ago: no new sends, the in-flight finishing "
                "(load.graceful_stop caps it)")
    return (f"duration reached: no new sends, the in-flight cancelled in "
            f"{max(step.graceful_stop_s - over, 0.0):.0f}s (graceful_stop {step.graceful_stop_s:g}s)")


def duration_line(p: dict) -> str | None:
    """`duration 45s: in-flight requests finished, the window ran 93.1s`: which end a point with a
    duration used (params.graceful_stop_s), and what it cost or cut."""
    params = p["params"]
    duration = params.get("duration_s")
    if not duration or "graceful_stop_s" not in params:
        return None
    window = p["window"]["duration_s"]
    grace = params["graceful_stop_s"]
    if grace is None:
        if window <= duration + 1.0:
            return None
        return (f"duration {duration:g}s: no new sends past it, and the requests in flight finished: the "
                f"window ran {window:.1f}s (load.graceful_stop: 0s cancels them at the duration instead)")
    cut = p["counts"].get("cancelled", 0) - int((p.get("cancelled") or {}).get("interrupted", 0))  # the cap's
    return (f"duration {duration:g}s with graceful_stop {grace:g}s: requests still in flight then were "
            f"cancelled ({cut} cancelled, counted apart from errors); the window ran {window:.1f}s")


def _left(step: Step, done: int, elapsed_s: float) -> tuple[float | None, float | None]:
    """(fraction done, seconds left) of a point: by its duration, by its request ceiling at
    the rate so far, the nearer of the two; (None, None) where neither says (an endless trace)."""
    fractions, lefts = [], []
    if step.duration_s:
        fractions.append(min(elapsed_s / step.duration_s, 1.0))
        lefts.append(max(step.duration_s - elapsed_s, 0.0))
    if step.requests:
        fractions.append(min(done / step.requests, 1.0))
        if done:
            lefts.append((step.requests - done) * elapsed_s / done)
    return (max(fractions) if fractions else None), (min(lefts) if lefts else None)


class Silence:
    """How long nothing arrived from the server while requests were in flight: `activity` is
    a count that grows with every stream event read and every request ended (StepRun.activity);
    a note is due each HEARTBEAT_S of it unchanged, never while it moves (a reasoning model
    whose requests take 15 s but stream all along is not silent)."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.every_s, self.clock = every_s, clock
        self._seen = 0  # a step's activity starts at 0: silent from the start, until it moves
        self._since = clock()
        self._notes = 0  # notes said in this silence

    def note_due(self, activity: int, inflight: int) -> float | None:
        """The seconds of silence when a note is due now, else None."""
        now = self.clock()
        if activity != self._seen or not inflight:
            self._seen, self._since, self._notes = activity, now, 0
            return None
        quiet = now - self._since
        if quiet >= (self._notes + 1) * self.every_s:
            self._notes += 1
            return quiet
        return None


def words_line(w: Workload) -> str | None:
    """Said before a combination's points when benchc has no tokenizer: its lengths are words
    (input_tokens: 512 sends 512 words), and how to make them tokens."""
    if w.input_tokens.get("method") != "words":
        return None
    return ("lengths are in words, not tokens: without a tokenizer benchc counts a prompt's words "
            f"(these prompts: {w.input_tokens.get('mean')} words on average), and each point says what the "
            "server counted; give target.tokenizer (the model's tokenizer.json, or its .gguf file) for "
            "lengths in the model's tokens (docs/spec.md)")


def server_count_line(p: dict, words_sent: float | None) -> str | None:
    """`input: 512 words sent per request; 538 prompt tokens per completed request as counted`:
    a point of word-counted prompts, beside the input tokens it recorded (the server's
    usage.prompt_tokens where the server reported it)."""
    completed = p["counts"]["completed"]
    if words_sent is None or not completed:
        return None
    per = p["tokens"]["input"] / completed
    return (f"input: {words_sent:g} words sent per request (no tokenizer); {per:,.1f} input tokens per "
            "completed request as the point recorded them (the server's usage.prompt_tokens where it "
            "reported it)")


class Console:
    def __init__(self, quiet: bool, live: bool):
        self.quiet = quiet
        self.live = live and not quiet and sys.stderr.isatty()  # a progress line that rewrites itself
        self.rows = 0
        # the words each request of the combination sent, when benchc counts words (no
        # tokenizer): the runner sets it per combination, each row's NOTE puts the count beside it
        self.words_sent: float | None = None

    def say(self, text: str) -> None:
        """A line to the terminal, with every secret value of the run replaced (a warning may
        quote a URL, a server's answer or its command line)."""
        if not self.quiet:
            if self.live:
                sys.stderr.write("\r\033[K")  # over the progress line, which the next request redraws
            print(redact.active().text(text), file=sys.stderr, flush=True)

    def progress(self, step: Step) -> Progress | None:
        """The point's progress on stderr (None with --quiet)."""
        return None if self.quiet else Progress(step, sys.stderr, self.live)

    def point(self, p: dict, ctrl_c_cancels: bool = True) -> None:
        """The point's table row, then a warning per doubt its trust checks raised.
        `ctrl_c_cancels`: whether its error kind `cancelled` may be a Ctrl-C's (False where the
        run was not interrupted or the server stopped the point)."""
        if self.quiet:
            return
        if self.live:
            sys.stderr.write("\r\033[K")
        if self.rows == 0:
            print(HEADER, file=sys.stderr)
            print(LEGEND, file=sys.stderr)
        self.rows += 1

        def ms(block: dict, key: str) -> str:
            v = block.get(key)
            return f"{v / 1000:.1f}ms" if v is not None else "-"

        mark = " !client-limited" if p["client"]["client_limited"] else ""
        if p.get("slo") and not p["slo"]["passed"]:
            mark += " !slo"
        if p.get("cache", {}).get("above_declared"):
            mark += " !cache"
        if p.get("complete") is False:
            mark += " !partial"  # stopped early (Ctrl-C, a dead server): cancelled_line says more
        if p["params"].get("probe") is not None and p.get("slo"):
            # a search's probe: what decides it, the SLO metric against its threshold
            mark += "  " + "; ".join(_check(c) for c in p["slo"]["checks"])
        cells = " ".join(f"{_cell(p, m, stat):>{w}}" for m, stat, _, w in COLUMNS)
        print(f"{p['id']:<24} {p['counts']['completed']:>5} {cells} {p['counts']['failed']:>6}{mark}",
              file=sys.stderr, flush=True)
        for line in _detail_lines(p, ms) + _rate_and_server_lines(p, ms):
            self.say(f"  {p['id']}: {line}")
        failed = first_error(p, ctrl_c_cancels)
        if failed:
            self.say(f"ERROR: {p['id']}: {failed}")
        if partial := cancelled_line(p, ctrl_c_cancels):
            self.say(f"NOTE: {p['id']}: {partial}")
        if ended := duration_line(p):
            self.say(f"NOTE: {p['id']}: {ended}")
        if counted := server_count_line(p, self.words_sent):
            self.say(f"NOTE: {p['id']}: {counted}")
        for d in p["trust"]["doubts"]:
            self.say(f"WARNING: {p['id']}: {d['message']}")
        # findings that do not make the figures doubtful: the server's queue at the cap, a
        # server that closes every connection, a client late to no effect (client.cap_queueing,
        # client.connections, client.self_check_note)
        for note in (p["client"].get("cap_queueing", {}).get("note"),
                     p["client"].get("connections", {}).get("note"), p["client"].get("self_check_note")):
            if note:
                self.say(f"NOTE: {p['id']}: {note}")
