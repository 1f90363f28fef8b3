"""The receive loop (benchc.client._rxloop), compiled and its Python twin, against the asyncio
transport it stands in for: the simulator's faults classified exactly alike and every figure
the same on the same streams (one simulator seed, requests in one order), timings against the
simulator's trace; the loop's slot states on real sockets; its own figures for the self-check."""

from __future__ import annotations

import asyncio
import bisect
import json
import select
import socket
import threading
import time

import pytest

from benchc.client import http1
from benchc.client.request import send_native
from benchc.metrics.record import HTTP, IDLE_TIMEOUT, MALFORMED, STREAM_BROKEN, TIMEOUT, RequestRecord
from benchc.plan.model import Target
from benchc.sim.model import make_config
from benchc.sim.server import SimServer
from tests.conftest import rx_loop_of, transports, wait_for
from tests.test_http1 import stamped_pair

MODEL = "MiniMaxAI/MiniMax-M2.5"
TRANSPORTS = {name: rx_loop_of(name) for name in transports()}  # Pool's rx_loop for each
LOOPS = {name: mod for name, mod in TRANSPORTS.items() if name != "asyncio"}
pytestmark = pytest.mark.skipif(not http1.KERNEL_STAMPS,
                                reason="the receive loop reads stamped sockets (Linux)")


def body(max_tokens: int, usage: bool = True) -> bytes:
    b = {"model": MODEL, "messages": [{"role": "user", "content": "one two three"}], "max_tokens": max_tokens,
         "ignore_eos": True, "stream": True}
    if usage:
        b["stream_options"] = {"include_usage": True}
    return json.dumps(b).encode()


async def through_sim(cfg, transport, requests: list[tuple[str, int]], concurrency: int = 1,
                      idle_s: float = 10.0) -> tuple[list[RequestRecord], dict, dict | None]:
    """Sends (id, max_tokens) requests through a Pool on `transport`, `concurrency` at a time in
    list order; returns the records, the simulator's trace by id and the loop's figures."""
    server = SimServer(cfg)
    port = await server.start()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    target = Target(url, None, "chat", MODEL, None, {}, 30.0, idle_s, None)
    pool = http1.Pool(rx_loop=TRANSPORTS[transport])
    figures = http1.RxFigures(pool)
    todo = list(requests)
    recs = []

    async def lane():
        while todo:
            rid, n = todo.pop(0)
            r = RequestRecord(rid, 0, 3, n)
            recs.append(r)
            await send_native(pool, url, {"Content-Type": "application/json"}, body(n), r, target)

    try:
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        rx = figures.take()
        # the simulator retires what its clients left (a timed-out stall) and traces it
        deadline = time.monotonic() + 10
        while (server.engine.running or server.engine.waiting) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        await pool.close()
        await server.stop()
    return recs, {t["id"]: t for t in server.trace}, rx


def figures_of(r: RequestRecord) -> tuple:
    """Every figure a request records, but its times."""
    p = r.parser
    out, tokens = r.outcome, r.tokens
    return (r.id, out.error, out.error_detail, out.status, tokens.text_chunks, tokens.text_bytes,
            tokens.usage_output_tokens, tokens.usage_input_tokens, out.finish_reason,
            tokens.multi_token_chunks, bool(r.times.first_text_ns),
            len(p.gaps_ns), p.chunk_tokens, p.malformed, p.events, bool(p.done_ns))


def test_faults_are_classified_alike_on_every_transport():
    """One simulator seed, the requests one at a time in one order: the same fault hits the same
    request on every transport, and every figure it recorded is the same."""
    cfg = make_config("minimax-m2.5-tp4", step_table=[(1, 1.0)], seed=5,
                      faults=["http_500:0.08", "http_503:0.08", "reset:0.12", "malformed:0.12",
                              "no_done:0.12", "stall:0.08:400ms"])
    requests = [(f"r{i}", 6 + i % 5) for i in range(30)]  # seed 5: every fault kind among them
    got = {}
    for transport in TRANSPORTS:
        recs, trace, _ = asyncio.run(through_sim(cfg, transport, requests, idle_s=0.2))
        got[transport] = [figures_of(r) for r in recs]
        paths = {r.outcome.path for r in recs}
        assert paths == {http1.ASYNCIO if transport == "asyncio" else http1.RX_LOOP}
        # an HTTP-status fault answers before a stream exists: no trace record
        faults = {rid: trace[rid]["fault"] if rid in trace else "http_5xx" for rid, _ in requests}
    for transport, figures in got.items():
        assert figures == got["asyncio"], transport
    # and the kinds are the ones each fault asks for
    by_id = {f[0]: f for f in got["asyncio"]}
    seen = set()
    for rid, fault in faults.items():
        error, detail = by_id[rid][1], by_id[rid][2]
        seen.add(fault)
        if fault == "http_5xx":
            assert error == HTTP and detail[:4] in ("500:", "503:")
        elif fault == "reset":
            assert error == STREAM_BROKEN and "mid-response" in detail
        elif fault == "malformed":
            assert error == MALFORMED
        elif fault == "stall":
            assert error == IDLE_TIMEOUT
        else:  # no fault, or no [DONE] (the finish_reason ends the stream): a complete request
            assert error is None and by_id[rid][15] == (fault != "no_done")
    assert seen == {"http_5xx", "reset", "malformed", "no_done", "stall", None}
    assert {f[2][:3] for f in got["asyncio"] if f[1] == HTTP} == {"500", "503"}


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_chunk_stamps_match_the_simulators_writes(transport):
    """Concurrent streams: every text chunk's stamp against the simulator's write of it, and the
    loop's own figures (one lag per read, its thread's CPU)."""
    cfg = make_config("minimax-m2.5-tp4", step_table=[(1, 2.0)], seed=3)
    requests = [(f"s{i}", 16) for i in range(16)]
    recs, trace, rx = asyncio.run(through_sim(cfg, transport, requests, concurrency=8))
    # Every write the simulator stamped, all in the thread that writes them one after another: a
    # stream's stamp is taken just before its write, and the write's send happens before the
    # next stamp (aiohttp sends before it yields), so the next stamp after a write bounds it.
    acts = sorted({t for tr in trace.values() for t, _ in tr["chunks"]})
    slack_ns = 500_000
    for r in recs:
        assert r.ok, r.outcome.error_detail
        writes = [t for t, _ in trace[r.id]["chunks"]]
        stamps = [r.times.first_text_ns]
        for g in r.parser.gaps_ns:
            stamps.append(stamps[-1] + g)
        assert len(stamps) == len(writes) == 16
        for i, (stamp, write) in enumerate(zip(stamps, writes, strict=True)):
            # The client stamps with the kernel's receive time, which on loopback is taken inside
            # the simulator's send. So a chunk's stamp lies between its write's stamp and the
            # simulator's next act, give or take moving the kernel's CLOCK_REALTIME stamp onto the
            # monotonic clock (two clock reads, microseconds apart; up to ~0.1 ms seen with every
            # core busy, so half a millisecond, as tests/test_reasoning.py allows). A read that
            # took several writes (a client late to read) carries the stamp of the last one read:
            # its chunks share it, and the bound is the one after the last of them. The last
            # chunk goes out with the stream's tail, and its read may also take the body's end,
            # which the handler writes later without a stamp: no bound above it. Nothing here
            # depends on how fast the machine is: a busy one widens the simulator's own window.
            assert stamp > write - slack_ns, (r.id, i)
            last = i
            while last + 1 < len(stamps) and stamps[last + 1] == stamp:
                last += 1
            k = bisect.bisect_right(acts, writes[last])
            if last < len(stamps) - 1 and k < len(acts):
                assert stamp < acts[k] + slack_ns, (r.id, i, stamp - write, acts[k] - write)
    if transport == "asyncio":
        assert rx is None
    else:
        assert rx["reads"] > 0 and rx["lag"].total_count == rx["reads"] and rx["bytes"] > 0
        assert rx["cpu_s"] > 0


# ------------------------------------------------------------- the slot's states, on sockets

def _pair(rcvbuf: int | None = None):
    """(the client's end, non-blocking with receive stamps, the server's end)."""
    s, c = stamped_pair(rcvbuf)
    c.setblocking(False)
    return c, s


def _wait_tokens(loop, n: int = 1) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + 10
    while len(out) < n and time.monotonic() < deadline:
        select.select([loop.fileno()], [], [], 1)
        out += loop.finished()
    return out


BODY = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
OK = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _script(mod) -> list:
    """What the slot does through a life of exchanges and ends, as seen from Python."""
    seen = []
    loop = mod.RxLoop()
    try:
        c, s = _pair()
        conn = loop.attach(c, 7)
        seen.append(conn.poll())
        reader = mod.ResponseReader(mod.StreamParser(), 0)
        seen.append(conn.begin(reader))
        seen.append(conn.begin(reader))  # already active
        s.sendall(OK)
        seen.append(_wait_tokens(loop))
        seen.append((conn.poll(), reader.finished, reader.status, reader.error, reader.keep_alive))
        # a second exchange, taken back unfinished (a timeout)
        reader = mod.ResponseReader(mod.StreamParser(), 0)
        seen.append(conn.begin(reader))
        s.sendall(OK[:20])
        deadline = time.monotonic() + 10
        while not reader.got_bytes and time.monotonic() < deadline:  # the loop read them
            time.sleep(0.001)
        seen.append((conn.take_back(), conn.poll(), reader.finished, conn.closed_for))
        seen.append(conn.begin(reader))  # closed: no more exchanges
        conn.detach()
        c.close()
        s.close()
        # bytes nobody asked for, then the server's end, while idle
        for junk in (b"HTTP/1.1 200 OK\r\n", b""):
            c, s = _pair()
            conn = loop.attach(c, 8)
            if junk:
                s.sendall(junk)
            else:
                s.close()
            seen.append(_wait_tokens(loop))
            seen.append((conn.poll(), conn.begin(mod.ResponseReader(mod.StreamParser(), 0)), conn.closed_for))
            conn.detach()
            c.close()
            s.close()
        # the server's end under a response: the reader says how it broke
        c, s = _pair()
        conn = loop.attach(c, 9)
        reader = mod.ResponseReader(mod.StreamParser(), 0)
        conn.begin(reader)
        s.sendall(OK[:50])
        s.close()
        seen.append(_wait_tokens(loop))
        seen.append((conn.poll(), reader.finished, reader.error, reader.got_bytes))
        seen.append(conn.detach())
        seen.append(conn.closed_for)  # kept once Python let the slot go
        c.close()
        # a response that says the connection closes: the loop stops reading it
        c, s = _pair()
        conn = loop.attach(c, 10)
        reader = mod.ResponseReader(mod.StreamParser(), 0)
        conn.begin(reader)
        s.sendall(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        seen.append(_wait_tokens(loop))
        seen.append((conn.poll(), reader.finished, reader.error, reader.keep_alive, conn.closed_for))
        conn.detach()
        c.close()
        s.close()
        lag, reads, nbytes = loop.take_lag()
        seen.append((lag.total_count == reads, reads > 0, nbytes == 2 * len(OK) + 20 + 17 + 50 + 19))
    finally:
        loop.close()
    return seen


def test_slot_states_alike_on_both_loops():
    results = {name: _script(mod) for name, mod in LOOPS.items()}
    expected = results["rx-py"]
    assert expected[:5] == ["idle", True, False, [7], ("idle", True, 200, None, True)]
    assert expected[5:8] == [True, (True, "closed", False, None), False]  # Python took it back
    assert expected[8:12] == [[8], ("closed", False, "stray"), [8], ("closed", False, "end")]
    assert expected[12][0] == 9 and expected[13][:2] == ("closed", True)
    assert expected[13][2] == (STREAM_BROKEN, "the server closed the connection mid-response")
    assert expected[14:16] == [False, "lost"]
    assert expected[16:] == [[10], ("closed", True, None, False, "response"), (True, True, True)]
    for name, seen in results.items():
        assert seen == expected, name


# ------------------------------------------------------------- a flood does not hold the loop

class Flood:
    """The server's end of a pair, writing an endless stream of one-token chat events (the
    endless `tokens` answer of tests/endless.py) as fast as the client takes it, from a thread,
    until the client goes away or stop() ends it."""

    def __init__(self, sock):
        from tests.endless import ANSWERS, HEAD

        self.sock = sock
        self.stopped = threading.Event()
        self.ended_by: str | None = None  # "client" (a write failed: it went away) or "stop"
        self._head, self._block = HEAD + ANSWERS["tokens"][0], ANSWERS["tokens"][1] * 64
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        try:
            self.sock.sendall(self._head)
            while not self.stopped.is_set():
                self.sock.sendall(self._block)
            self.ended_by = "stop"
        except OSError:
            self.ended_by = "stop" if self.stopped.is_set() else "client"

    def stop(self) -> None:
        """Ends the flood (a write blocked on a full socket too): the loop then reads the socket
        empty, whatever it did before."""
        self.stopped.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join()
        self.sock.close()


def _in_thread(call) -> tuple[threading.Event, list]:
    """Runs `call` in a thread of its own: (set when it returned, [its result])."""
    done, out = threading.Event(), []

    def run():
        out.append(call())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, out


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_flooding_stream_leaves_the_loop_to_others(name):
    """A server that keeps one connection's socket full (an endless stream, written as fast as
    the loop reads it): the loop reads it in runs of a bounded length, so that while the flood
    goes on another connection's response is read and finished, and Python takes the flooding
    exchange back (a timeout) at once. The compiled loop read an edge until a read came short,
    under the slot's lock: against a flood the other slots went unread, and Python's take_back
    (on the event loop's thread) waited until the flood paused (0.88 s seen)."""
    mod = LOOPS[name]
    loop = mod.RxLoop()
    c, s = _pair(rcvbuf=2 * 1024 * 1024)  # room for a flood, however slowly the loop reads
    c2, s2 = _pair()
    flood = None
    conns = []
    try:
        conns.append(loop.attach(c, 1))
        flooded = mod.ResponseReader(mod.StreamParser(), 0)
        assert conns[0].begin(flooded)
        flood = Flood(s)
        # the flood is on once a whole run found the socket full (and from here on, runs count)
        wait_for(lambda: loop.take_longest_run() >= mod.MAX_RUN_BYTES, "a run the flood filled")
        conns.append(loop.attach(c2, 2))
        reader = mod.ResponseReader(mod.StreamParser(), 0)
        assert conns[1].begin(reader)
        s2.sendall(OK)
        got: list[int] = []
        wait_for(lambda: got.extend(loop.finished()) or 2 in got, "the other response, during the flood")
        assert reader.finished and reader.status == 200 and reader.error is None
        # Python takes the flooding exchange back (from a thread: the loop may hold the slot)
        done, out = _in_thread(conns[0].take_back)
        wait_for(done.is_set, "take_back, during the flood")
        assert out == [True] and flood.ended_by is None and not flooded.finished  # still flooding
        assert conns[0].poll() == "closed" and 1 not in got
        assert 0 < loop.take_longest_run() <= mod.MAX_RUN_BYTES
    finally:
        if flood is not None:
            flood.stop()  # first: a loop held by the flood is free again
        for conn in conns:
            conn.detach()
        for sock in (c, c2, s2):
            sock.close()
        loop.close()


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_timeout_ends_a_flooding_stream_while_it_floods(transport):
    """The symptom, through the client on every transport: a request whose server streams
    endless events as fast as they are read gets its timeout while the flood goes on (the
    server then sees the client go away). On the compiled loop, the timer's take_back waited
    for the flood to pause (a 3 s timeout ended at 3.87 s; an 8 s one at 17 s on a loaded
    machine); a flood that never paused held the event loop for good, so a watchdog stops the
    flood after a minute and the test then fails on how it ended."""
    from tests.endless import EndlessServer
    from tests.test_http1 import target

    async def one(url: str) -> RequestRecord:
        pool = http1.Pool(rx_loop=TRANSPORTS[transport])
        rec = RequestRecord("flooded", 0, 1, None)
        try:
            await send_native(pool, url, {"Content-Type": "application/json"}, b"{}", rec,
                              target(timeout_s=0.5, idle_s=60))
        finally:
            await pool.close()
        return rec

    with EndlessServer("tokens") as srv:
        watchdog = threading.Timer(60, srv.stop)
        watchdog.start()
        try:
            rec = asyncio.run(one(srv.url))
            wait_for(lambda: srv.ended, "the server to see the answer end")
        finally:
            watchdog.cancel()
    assert rec.outcome.error == TIMEOUT and rec.parser.text_chunks > 0, \
        (rec.outcome.error, rec.outcome.error_detail)
    assert srv.ended == ["client"]
