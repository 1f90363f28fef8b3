"""A coding-agent replay's requests go at their think times' ends as an open loop's go at
their scheduled times (run/open_loop.py, run/alarm.py, http1.exchange's `due`): the session's
wait ends SEND_LEAD_NS ahead, the send takes (or opens) its connection and readies its
request meanwhile, and the step's alarm wakes the write at its time, never before; on aiohttp
the request is prepared meanwhile and its body's write waits for the alarm. What is asserted is
which times were asked for and that no write came before its time, never how late one was."""

import asyncio
import os
import re
import threading
import time

import pytest

from benchc.cli import main
from benchc.client import _rxloop
from benchc.client.request import open_ahead
from benchc.plan.agent_trace import Subagent, read_agent_traces
from benchc.results.document import read
from benchc.run.agent_replay import Answer, replay_session, requests_at_once
from benchc.run.punctual import SEND_LEAD_NS
from tests.conftest import transports
from tests.test_http1 import OK_HEAD, RawServer, chunked, sse
from tests.test_keepalive import Client

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "specs", "agent-traces.yaml")
SAMPLE = os.path.join(REPO, "specs", "traces", "agentx-small")


def _session():
    return next(s for s in read_agent_traces(SAMPLE) if any(isinstance(e, Subagent) for e in s.entries))


def test_a_punctual_replay_waits_to_its_lead_and_hands_the_send_its_due_time():
    session = _session()
    asked: list[int] = []
    given: dict[str, int] = {}

    async def until(due_ns: int) -> bool:
        asked.append(due_ns)
        return True

    async def send(req, body, due_ns, written):
        given[req.path] = due_ns
        return Answer(req.input_tokens, req.output_tokens, 0, send_ns=due_ns + 7, end_ns=due_ns + 9)

    sent = asyncio.run(replay_session(session, lambda req: b"{}", send, 0.001, None, until, SEND_LEAD_NS))
    assert len(sent) == len(session.requests()) == len(given)
    for s in sent:
        due = s.after_ns + s.wait_ns
        assert given[s.path] == due  # the send writes at the think time's end ...
        assert due - SEND_LEAD_NS in asked  # ... its wait ended the lead before it
        assert s.send_ns == due + 7 and s.end_ns == due + 9  # dated by the send's own stamps


def test_a_plain_send_still_waits_to_the_due_time_itself():
    """Without a lead (a test's send, or any caller of its own) the wait is to the due time and
    the send takes the request and its body only."""
    session = _session()
    asked: list[int] = []

    async def until(due_ns: int) -> bool:
        asked.append(due_ns)
        return True

    async def send(req, body):
        return Answer(req.input_tokens, req.output_tokens, 0)

    sent = asyncio.run(replay_session(session, lambda req: b"{}", send, 0.001, None, until))
    assert all(s.after_ns + s.wait_ns in asked for s in sent)


@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_benchc_runs_replay_writes_each_request_at_its_time(tmp_path, monkeypatch, http):
    """The shipped spec on the simulator: on the own reader every request still due when its
    send began went with a Due at its think time's end (its connection readied before it) and
    was written at or after it; on aiohttp too (the Due its body's write waits for:
    request.DueBody), aiohttp's own preparing done before.
    The point's client block says the loop thread's priority, as an open loop's does."""
    import benchc.run.agent_replay as agent_replay
    import benchc.run.loadgen as loadgen
    from benchc.client.request import CLOCK

    handed: dict[str, tuple[int, int | None]] = {}  # request id -> (when handed over, its Due's time)
    native, plain = loadgen.send_native, loadgen.send

    returned: dict[str, int] = {}  # request id -> when its send returned on the loop

    async def watched_native(pool, url, headers, body, rec, target, keep_text=False, due=None):
        handed[rec.id] = (CLOCK(), None if due is None else due.at_ns)
        try:
            return await native(pool, url, headers, body, rec, target, keep_text, due)
        finally:
            returned[rec.id] = CLOCK()

    async def watched_plain(session, url, headers, body, rec, target, keep_text=False, due=None):
        handed[rec.id] = (CLOCK(), None if due is None else due.at_ns)
        given = {"due": due} if due is not None else {}
        return await plain(session, url, headers, body, rec, target, keep_text, **given)

    replayed: list = []  # (session, Sent)
    replay = agent_replay.replay_session

    async def watched_replay(session, *args, **kw):
        got = await replay(session, *args, **kw)
        replayed.extend((session.id, x) for x in got)
        return got

    built: dict[tuple[str, str], int] = {}  # (session id, request path) -> when its body was built
    body = agent_replay.AgentFeed.body

    session_ids: dict[int, str] = {}  # session j -> its id

    def watched_body(self, j, req):
        built[(self.sessions[j].id, req.path)] = CLOCK()
        session_ids[j] = self.sessions[j].id
        return body(self, j, req)

    monkeypatch.setattr(agent_replay.AgentFeed, "body", watched_body)
    left: list[tuple[int, int]] = []  # the step's requests in flight at its end (the self-check's, the run's)
    figures = loadgen._figures

    def watched_figures(run, *args):
        left.append((run.check.inflight, run.ctx.inflight))
        return figures(run, *args)

    monkeypatch.setattr(loadgen, "_figures", watched_figures)

    import benchc.run.priority as priority

    raised: list[int] = []
    raise_thread = priority.SendPriority.raise_thread

    def watched_raise(self, tid):
        raised.append(tid)
        raise_thread(self, tid)

    monkeypatch.setattr(priority.SendPriority, "raise_thread", watched_raise)
    monkeypatch.setattr(loadgen, "send_native", watched_native)
    monkeypatch.setattr(loadgen, "send", watched_plain)
    monkeypatch.setattr(agent_replay, "replay_session", watched_replay)
    out = tmp_path / "r.json"
    assert main(["run", SPEC, "--out", str(out), "--quiet", "--force", "--http", http,
                 "--set", "output.requests=true"]) == 0
    (point,) = read(str(out))["points"]
    assert left == [(0, 0)]  # each request counted in flight once, and out once
    assert len(replayed) == len(handed) == len(built) == 149
    dues = sorted(s.after_ns + s.wait_ns for _, s in replayed)
    late = point["agent_replay"]["fidelity"]["think_late_ms"]
    assert 0 <= late["min"] <= late["p50"] <= late["p99"] <= late["max"]
    assert point["client"]["send_priority"] in ("SCHED_RR 1", "nice -10", "unchanged")
    # a connection opened for each request the 2 sessions in flight send at once
    at_once = max(requests_at_once(s) for s in read_agent_traces(SAMPLE))
    assert point["agent_replay"]["connections_opened_ahead"] == 2 * at_once
    given = [at for _, at in handed.values() if at is not None]
    # the receive loop's thread (own reader, where it is built) raised with the loop thread: it
    # tells the loop of the answers' ends, from which the think times run
    assert len(raised) == (1 if http == "native" and _rxloop.MODULE is not None else 0)
    assert threading.get_native_id() not in raised
    # the sample's think times are up to 50 ms: most requests are due well past the lead
    assert given and set(given) <= set(dues)
    assert all(s.send_ns >= s.after_ns + s.wait_ns for _, s in replayed)
    if http == "native":
        # each body built while the request before it on its line was in flight (once that one
        # was written), not after the answer it waits on: all but the sessions' first. Checked in
        # the loop's order (built before the loop saw that answer), not against the answer's end
        # as the receive thread stamps it: on a busy machine the server may answer before the
        # loop runs the build it queued at the write, and that is no fault of the replay
        firsts = {(sid, s.path) for sid, s in replayed if s.path == "$.requests[0]"}
        assert len(firsts) == 6
        seen = {}  # (session id, path) -> when the loop saw its answer
        for rid, at in returned.items():
            j, path = re.fullmatch(r"[0-9a-f]+-s(\d+)(\$.*)", rid).groups()
            seen[(session_ids[int(j)], path)] = at
        ends = {(sid, s.end_ns): s.path for sid, s in replayed}

        def waited_on_seen(sid, s):
            # the loop's stamp of the answer it waited on; a subagent's first request waits on
            # its spawn, a stamp the loop took itself
            before = ends.get((sid, s.after_ns))
            return s.after_ns if before is None else seen[(sid, before)]

        assert all(built[(sid, s.path)] < waited_on_seen(sid, s)
                   for sid, s in replayed if (sid, s.path) not in firsts)


@pytest.mark.parametrize("path", [*(f"native-{t}" for t in transports()), "aiohttp"])
def test_connections_opened_ahead_carry_requests_that_go_together(path):
    """http1.Pool.open_ahead (the own reader, on each transport) and request.open_ahead
    (aiohttp's connector): n connections opened, so that n requests sent at once each find
    one and none connects in its send; on the own reader a second call finds them idle."""
    async def answer(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a"])))
        await writer.drain()

    async def go():
        async with RawServer(answer) as srv:
            c = Client(path)
            try:
                if c.pool is not None:
                    origin = c.pool.origin(srv.url, {"Content-Type": "application/json"})
                    opened = await c.pool.open_ahead(origin, 3), await c.pool.open_ahead(origin, 3)
                else:
                    opened = await open_ahead(c.session, srv.url, 3), 0
                rs = await asyncio.gather(*(c.request(srv.url) for _ in range(3)))
                return opened, rs, srv.connections
            finally:
                await c.close()

    opened, rs, connections = asyncio.run(go())
    assert opened == (3, 0) and connections == 3
    assert all(r.outcome.error is None and r.output_tokens == 1 for r in rs)
    # each found its connection open: none connected in its send
    assert [(r.times.connect_ns, r.outcome.reused_connection) for r in rs] == [(0, True)] * 3


def test_the_most_requests_a_session_sends_at_once_is_its_most_subagents_at_once():
    sessions = list(read_agent_traces(SAMPLE))
    spans = [[(e.t_s, e.end_s) for e in s.entries if isinstance(e, Subagent)] for s in sessions]
    assert [requests_at_once(s) for s in sessions] == [
        max([1] + [sum(a <= t < b for a, b in sp) for t, _ in sp]) for sp in spans]
    assert max(requests_at_once(s) for s in sessions) >= 2  # the sample spawns subagents together


def test_bodies_are_built_ahead_of_a_join_and_of_the_sessions_start():
    """A parent's request after a join is built while its subagents run (not after the last
    one's end, where a short think time could not cover the build), and a session starts once
    its first request is built: neither build is between what a request waits on and its send."""
    session = _session()
    events: list[tuple[str, str]] = []
    built_at: dict[str, int] = {}

    def prepare(req):
        events.append(("built", req.path))
        built_at[req.path] = time.perf_counter_ns()
        return b"{}"

    async def send(req, body):
        await asyncio.sleep(0.001)  # in flight: the subagents' requests overlap the parent's build
        events.append(("answered", req.path))
        return Answer(req.input_tokens, req.output_tokens, 0)

    sent = asyncio.run(replay_session(session, prepare, send, 0.0, None))
    joins = [s for s in sent if not s.agent and s.after_ns in {x.end_ns for x in sent if x.agent}]
    assert joins  # the session has a parent request after its subagents
    for s in joins:
        built = events.index(("built", s.path))
        subs = {x.path for x in sent if x.agent and x.end_ns <= s.after_ns}
        last = max(events.index(("answered", p)) for p in subs)
        assert built < last and built_at[s.path] < s.after_ns
    first = next(s for s in sent if s.path == session.requests()[0].path)
    assert built_at[first.path] < first.after_ns  # its wait runs from after its build
    # every other request is built after what it waits on ended
    others = [s for s in sent if s not in joins and s is not first]
    assert all(built_at[s.path] >= s.after_ns for s in others)


def test_a_thread_raised_with_the_loop_thread_runs_as_it_does_and_is_put_back():
    """SendPriority.raise_thread: another thread (the receive loop's) takes the policy the loop
    thread was raised to, where the process is permitted (else nothing changes), and restore()
    puts it back as it was."""
    from benchc.run.priority import UNCHANGED, SendPriority, _state

    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def other():
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(30)

    t = threading.Thread(target=other)
    t.start()
    try:
        ready.wait(30)
        before = _state(tid[0])
        p = SendPriority()
        how = p.raise_()
        p.raise_thread(tid[0])
        raised = _state(tid[0])
        mine = _state(threading.get_native_id())
        p.restore()
        assert _state(tid[0]) == before
    finally:
        done.set()
        t.join()
    assert before is not None and raised is not None and mine is not None
    if how == UNCHANGED:
        assert raised == before
    else:
        assert raised[:2] == mine[:2] or raised[2] == mine[2]  # its policy, or its nice


def test_the_connections_workers_opened_ahead_are_added_up():
    from benchc.run.agent_replay import ReplayParts

    parts = [ReplayParts(2, 0.001, None, {}, 3), ReplayParts(2, 0.001, None, {}, 4)]
    assert ReplayParts.merged(parts).report()["connections_opened_ahead"] == 7


def test_a_punctual_sends_next_bodies_are_built_once_it_is_written():
    """A punctual send says when its request is written (`written`): the bodies that go next on
    its line (the parent's next request, or the first of each subagent it spawns; a subagent's
    next) are built then, while it is in flight, not after its answer; each is built once."""
    session = _session()
    built: dict[str, int] = {}

    def prepare(req):
        assert req.path not in built  # once
        built[req.path] = time.perf_counter_ns()
        return b"{}"

    async def until(due_ns: int) -> bool:
        return True

    async def send(req, body, due_ns, written):
        written()  # the request is on the wire
        await asyncio.sleep(0.001)
        return Answer(req.input_tokens, req.output_tokens, 0)

    sent = asyncio.run(replay_session(session, prepare, send, 0.0, None, until, SEND_LEAD_NS))
    assert len(sent) == len(session.requests()) == len(built)
    first = session.requests()[0].path
    # every request but the session's first was built before what it waited on ended
    assert all(built[s.path] < s.after_ns for s in sent if s.path != first)


def test_aiohttps_due_body_is_written_at_its_time_with_a_plain_bodys_bytes():
    """request.DueBody: aiohttp prepares a request with a Due at once (its connection, its
    headers) but its write waits for the Due's time, never before; the server reads what
    `data=body` sends, byte for byte (head and Content-Length included, the request id aside)."""
    from benchc.client.http1 import Due
    from benchc.client.request import CLOCK, send
    from benchc.metrics.record import RequestRecord
    from tests.test_http1 import target

    read_at: list[int] = []

    async def answer(n, reader, writer):
        read_at.append(CLOCK())
        writer.write(OK_HEAD + chunked(sse(["a"])))
        await writer.drain()

    async def wait_to(at_ns: int) -> None:
        while (left := at_ns - CLOCK()) > 0:
            await asyncio.sleep(left / 1e9)

    async def go():
        async with RawServer(answer) as srv:
            c = Client("aiohttp")
            try:
                headers = {"Content-Type": "application/json"}
                plain = RequestRecord("req-plain", 0, 1, None)
                await send(c.session, srv.url, headers, b'{"x": 1}', plain, target())
                due = CLOCK() + 30_000_000  # 30 ms from now
                timed = RequestRecord("req-timed", 0, 1, None)
                await send(c.session, srv.url, headers, b'{"x": 1}', timed, target(), due=Due(due, wait_to))
                return srv.requests, plain, timed, due
            finally:
                await c.close()

    requests, plain, timed, due = asyncio.run(go())
    assert [r.outcome.error for r in (plain, timed)] == [None, None]
    assert timed.times.t0_ns >= due and read_at[1] >= due  # written at its time, not before
    (head0, body0), (head1, body1) = requests
    assert body1 == body0 == b'{"x": 1}'
    assert head1.replace(b"req-timed", b"req-plain") == head0


def test_a_steps_ended_requests_recorded_in_passes_are_each_recorded_once(tmp_path, monkeypatch):
    """With punctual writes a turn's ended requests are recorded in passes of RECORD_PASS_NS at
    most, the rest after the writes due meanwhile (PunctualWrites.in_passes): at a pass of
    -1 ns each pass records one, and every request is still recorded once, its figures whole."""
    import benchc.run.loadgen as loadgen
    import benchc.run.punctual as punctual

    monkeypatch.setattr(punctual, "RECORD_PASS_NS", -1)  # every pass over at its first end
    recorded: list[str] = []
    record = loadgen.StepRun._record

    def watched(self, r):
        recorded.append(r.id)
        record(self, r)

    monkeypatch.setattr(loadgen.StepRun, "_record", watched)
    out = tmp_path / "r.json"
    assert main(["run", SPEC, "--out", str(out), "--quiet", "--force"]) == 0
    (point,) = read(str(out))["points"]
    assert len(recorded) == len(set(recorded)) == point["counts"]["completed"] == 149
    assert point["latency"]["e2e_us"]["count"] == 149


def test_a_pass_over_its_time_leaves_the_rest_of_its_ends_for_the_next_after_the_writes(monkeypatch):
    """StepRun._record_ended with punctual writes, a pass of -1 ns (PunctualWrites.in_passes):
    each pass records one end and hands the rest on (soon_after_writes), in order, none twice; a step
    without punctual writes records its whole batch in one pass."""
    from types import SimpleNamespace

    import benchc.run.loadgen as loadgen
    import benchc.run.punctual as punctual

    monkeypatch.setattr(punctual, "RECORD_PASS_NS", -1)  # every pass over at its first end
    recorded: list[int] = []
    later: list = []
    writes = SimpleNamespace(soon_after_writes=later.append, yielding=True)
    writes.in_passes = lambda *a: punctual.PunctualWrites.in_passes(writes, *a)
    run = SimpleNamespace(_ended_batch=[1, 2, 3], _record=recorded.append, ctx=SimpleNamespace(progress=None),
                          punctual=writes)
    run._record_ended = lambda: loadgen.StepRun._record_ended(run)
    run._record_ended()
    assert recorded == [1] and run._ended_batch == [2, 3] and len(later) == 1
    run._ended_batch.append(4)  # ended meanwhile: after the rest
    later.pop()()
    later.pop()()
    later.pop()()
    assert recorded == [1, 2, 3, 4] and run._ended_batch == [] and later == []
    run.punctual, run._ended_batch = None, [5, 6, 7]
    run._record_ended()
    assert recorded == [1, 2, 3, 4, 5, 6, 7] and later == []
