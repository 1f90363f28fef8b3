"""A minimal HTTP/1.1 client for the measured streaming requests.

Why not aiohttp on the hot path (measured, see benchmarks/client_ingest.py): a real
server writes each SSE event as its own HTTP chunk, and aiohttp runs Python for every
chunk (feed_data, its read buffer, a wakeup of the reading task): one profile saw 18,035
socket reads deliver 197,376 chunks at 15-20 us each.

Two transports read a response, through one ResponseReader (benchc.client._response: the
head, de-chunking, the stream parser):
- the receive loop (benchc.client._rxloop; plain http on Linux with the compiled core): a
  thread of its own, without the GIL, reads every connection handed to it; the asyncio
  loop hears from it once per batch of finished responses;
- the asyncio transports (https, other systems, BENCHC_NO_EXTENSIONS=1, --rx-loop off): the
  connection's protocol callback handles a whole socket read at once: one timestamp, one
  C call.
Everything else is here, once, for both: connecting, writing the request, t0, the pool and
its keep-alive rules, the timeouts, the retry of a reused connection, the exchange's
outcome. The sending task sleeps until the response ends. aiohttp stays for everything off
the hot path (/models, /metrics, smoke checks).

Scope: http and https; a keep-alive pool without a limit; chunked, Content-Length and
read-to-close bodies; no compression (Accept-Encoding: identity), no proxies, no
redirects (a 3xx is an http_status error, as any status but 200).

Keep-alive (ReuseRules, below, used by this pool on both transports and by the aiohttp
path in request.py): a pooled connection is not reused once the server said it will close
it (`Connection: close`, HTTP/1.0, EOF seen, `Keep-Alive: max` reached, idle past
`Keep-Alive: timeout`); a request on a reused connection that fails before any response
byte is sent once more on a fresh connection (the keep-alive race, as browsers and HTTP
libraries handle it); an origin whose connections the server closes right after each
response stops being pooled. The response reader reads the `Connection` and `Keep-Alive`
headers; the rules judge them here.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import logging
import socket
import ssl as ssl_mod
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from benchc.client import _response, _rxloop, _stream
from benchc.client._rx import peek_idle, read_stamped
from benchc.client._rx_py import IDLE_CLOSED, IDLE_QUIET, SO_TIMESTAMPNS
from benchc.metrics.latency import Recorder
from benchc.metrics.record import FIRST_BYTE_TIMEOUT, IDLE_TIMEOUT, TIMEOUT

CLOCK = time.perf_counter_ns
log = logging.getLogger(__name__)  # -vv: connections opened, keep-alive retries (no header is logged)
# set by the client itself (x-request-id: the request's own id, which the simulator's trace joins on)
_SKIP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding",
                 "x-request-id"}
KERNEL_STAMPS = SO_TIMESTAMPNS >= 0 and sys.platform.startswith("linux")
RECV_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB buffer cost 16 us per read
RX_LOOP, ASYNCIO = "rx_loop", "asyncio"  # which transport read a response (Exchange.path)


# ------------------------------------------------------------------ keep-alive rules

STOP_POOLING_AFTER = 3  # closes right after a response in a row, no reuse answered: stop pooling
QUICK_CLOSE_NS = 1_000_000_000  # a close within 1 s of a response is a habit, not an idle timeout
KEEP_ALIVE_MARGIN_S = 0.5  # reuse a connection only this long before the server's advertised timeout


def parse_keep_alive(value: bytes | str | None) -> tuple[float | None, int | None]:
    """(timeout_s, max) of a `Keep-Alive: timeout=5, max=100` header (RFC 2068 19.7.1.1);
    None for each part that is absent or not a number (a timeout of inf, nan or below 0 is
    none: both HTTP paths read it here)."""
    if not value:
        return None, None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    timeout = limit = None
    for part in value.split(","):
        name, _, v = part.strip().partition("=")
        name, v = name.strip().lower(), v.strip().strip('"')
        try:
            if name == "timeout":
                timeout = float(v)
                if not 0 <= timeout < 1e9:  # inf, nan, negative: no duration; ignored, as absent
                    timeout = None
            elif name == "max":
                limit = int(v)
        except ValueError:
            continue
    return timeout, limit


def retry_on_fresh(reused: bool, attempt: int, got_response_bytes: bool, timed_out: bool) -> bool:
    """The keep-alive race: a request on a reused connection that failed before any byte
    of a response (a write error, a reset, an EOF) goes once more, on a fresh connection.
    The server closed that connection after its previous response and never answered this
    request; Chromium resends any method in that case, and so does this client. A timeout
    is not the race (the server may be working on it) and a fresh connection's failure is
    the server's own: both stay errors. Both HTTP paths decide here."""
    return reused and attempt == 0 and not got_response_bytes and not timed_out


class ConnUse:
    """What the keep-alive rules know of one connection."""

    __slots__ = ("origin", "exchanges", "limit", "idle_limit_ns", "idle_since", "reused")

    def __init__(self, origin: tuple):
        self.origin = origin
        self.exchanges = 0  # responses completed on it
        self.limit: int | None = None  # responses it may carry, from Keep-Alive: max
        self.idle_limit_ns: int | None = None  # from Keep-Alive: timeout, less a margin
        self.idle_since = 0  # CLOCK() at the end of its last response
        self.reused = False  # it is carrying (or carried) a request after its first


class _OriginStats:
    __slots__ = ("quick_closes", "in_a_row", "pooled", "note")

    def __init__(self) -> None:
        self.quick_closes = 0
        self.in_a_row = 0  # quick closes since a reused connection last answered
        self.pooled = True
        self.note: str | None = None


class ReuseRules:
    """When a kept-alive connection may carry another request, per connection and per origin.

    Transport-neutral: a transport calls opened() for a new connection, finished() when a
    response ended on it (True: it may go back to the pool), reusable() before handing an
    idle one out, server_closed() when the server closed one while idle or before answering
    on it, and retry_on_fresh() when a request failed. The own reader's Pool and the aiohttp
    path (client.request.send) both do; so can any other transport.
    """

    def __init__(self, keepalive_s: float = 60.0, stop_pooling_after: int | None = STOP_POOLING_AFTER):
        self.keepalive_ns = int(keepalive_s * 1e9)
        self.stop_pooling_after = stop_pooling_after  # None: always pool (for harnesses)
        self._origins: dict[tuple, _OriginStats] = {}

    def _stats(self, origin: tuple) -> _OriginStats:
        st = self._origins.get(origin)
        if st is None:
            st = self._origins[origin] = _OriginStats()
        return st

    def pooled(self, origin: tuple) -> bool:
        st = self._origins.get(origin)
        return st is None or st.pooled

    def opened(self, origin: tuple) -> ConnUse:
        return ConnUse(origin)

    def finished(self, use: ConnUse, keep_alive: bool, keep_alive_header: bytes | str | None,
                 now: int) -> bool:
        """A response ended on the connection; True when it may carry another request.
        `keep_alive` is False when the server said it closes (Connection: close, HTTP/1.0,
        a read-to-close body) or the connection is out of step."""
        use.exchanges += 1
        use.idle_since = now
        if use.reused:
            self._stats(use.origin).in_a_row = 0
        timeout, limit = parse_keep_alive(keep_alive_header)
        if limit is not None:
            # `max` counts the requests a connection may carry, this one included: cpp-httplib
            # (llama.cpp) sends its constant keep_alive_max_count on every response, Apache the
            # requests left. The least of (requests so far - 1 + max) serves both readings.
            cap = use.exchanges - 1 + limit
            use.limit = cap if use.limit is None else min(use.limit, cap)
        if timeout is not None:
            margin = min(KEEP_ALIVE_MARGIN_S, timeout / 2)
            use.idle_limit_ns = int((timeout - margin) * 1e9)
        if not keep_alive or not self.pooled(use.origin):
            return False
        return use.limit is None or use.exchanges < use.limit

    def reusable(self, use: ConnUse, now: int) -> bool:
        """An idle connection may be handed out (not idle past our or the server's limit)."""
        idle = now - use.idle_since
        if idle > self.keepalive_ns:
            return False
        return use.idle_limit_ns is None or idle < use.idle_limit_ns

    def server_closed(self, origin: tuple, idle_ns: int | None) -> None:
        """The server closed a connection of `origin` after a response: while it was idle
        (`idle_ns` after the response), or under the next request before any answer (None).
        After STOP_POOLING_AFTER such closes soon after a response, with no reused connection
        answering in between, connections to the origin are no longer pooled (llama.cpp's
        server keeps a connection after a plain response and closes it after a stream)."""
        st = self._stats(origin)
        if idle_ns is not None and idle_ns > QUICK_CLOSE_NS:
            return  # an idle timeout, not a habit
        st.quick_closes += 1
        st.in_a_row += 1
        if st.pooled and self.stop_pooling_after is not None and st.in_a_row >= self.stop_pooling_after:
            st.pooled = False
            st.note = (f"the server closed {st.in_a_row} connections in a row right after a response "
                       "without saying so (no Connection: close); each request then opened its own "
                       "connection")

    def report(self) -> dict:
        """For the result: whether connections were pooled, and why not."""
        notes = [st.note for st in self._origins.values() if st.note]
        out: dict = {"pooled": all(st.pooled for st in self._origins.values()),
                     "server_closes": sum(st.quick_closes for st in self._origins.values())}
        if notes:
            out["note"] = notes[0]
        return out


class Origin:
    """Where one URL's requests go, and the fixed part of their request head."""

    def __init__(self, url: str, headers: dict[str, str]):
        u = urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {u.scheme!r}")
        self.tls = u.scheme == "https"
        self.host = u.hostname or "localhost"
        self.port = u.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        if not default_port:
            host_header += f":{self.port}"
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {host_header}"]
        names = set()
        for k, v in headers.items():
            if "\r" in k or "\n" in k or "\r" in str(v) or "\n" in str(v):
                raise ValueError(f"header {k!r} holds a line break")
            if k.lower() not in _SKIP_HEADERS:
                lines.append(f"{k}: {v}")
                names.add(k.lower())
        if u.username is not None and "authorization" not in names:
            cred = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            lines.append("Authorization: Basic " + base64.b64encode(cred).decode())
        lines.append("Accept-Encoding: identity")
        self._head = "\r\n".join(lines).encode("latin-1") + b"\r\n"
        self.key = (self.tls, self.host, self.port)

    def request(self, request_id: str, body: bytes) -> bytes:
        return b"%sx-request-id: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            self._head, request_id.encode("latin-1"), len(body), body)


class Exchange:
    """One request's response. Its bytes are read by a ResponseReader fed by the connection's
    transport: the asyncio protocol callback, or the receive loop's thread (`path` says
    which). `done` (a future) resolves when the response ends, fails, times out or the
    connection goes away; `error` is then None or (kind, detail) with kind one of TIMEOUT,
    FIRST_BYTE_TIMEOUT, IDLE_TIMEOUT, STREAM_BROKEN, OVERSIZED or CONNECT
    (benchc.metrics.record), and `keep_alive` whether
    the response let the connection carry another request (the keep-alive rules decide).
    """

    __slots__ = ("reader", "done", "error", "end_ns", "keep_alive", "conn", "path")

    def __init__(self, reader: Any, done: asyncio.Future):
        self.reader = reader
        self.done = done
        self.error: tuple[str, str] | None = None
        self.end_ns = 0
        self.keep_alive = False
        self.conn: Connection | None = None
        self.path = ASYNCIO

    # what the reader saw (the idle timer reads last_rx_ns while the response comes in)
    @property
    def status(self) -> int | None:
        return self.reader.status

    @property
    def got_bytes(self) -> bool:
        return self.reader.got_bytes

    @property
    def excerpt(self) -> bytes:
        return self.reader.excerpt

    @property
    def last_rx_ns(self) -> int:
        return self.reader.last_rx_ns

    @property
    def sent_ns(self) -> int:
        """Taken just before the request was handed to the socket (t0)."""
        return self.reader.sent_ns

    @property
    def early_reads(self) -> int:
        """Reads stamped before sent_ns (dated sent_ns instead; see ResponseReader)."""
        return self.reader.early_reads

    @property
    def keep_alive_header(self) -> bytes | None:
        """The response's `Keep-Alive: timeout=5, max=100` value, for the keep-alive rules."""
        return self.reader.keep_alive_header

    # ---- fed by Connection.data_arrived (the asyncio transports)

    def feed(self, data: bytes, now: int) -> None:
        r = self.reader
        r.feed(data, now)
        if r.finished:
            self.finish(r.end_ns, r.error)

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed: the end of a read-to-close body, else a broken one."""
        r = self.reader
        r.lost(exc, CLOCK())
        self.finish(r.end_ns, r.error)

    # ---- endings

    def finish(self, now: int, error: tuple[str, str] | None = None) -> None:
        if self.done.done():
            return
        self.end_ns = now or CLOCK()
        self.error = error
        self.keep_alive = error is None and self.reader.keep_alive
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.exchange_over(self)
        self.done.set_result(None)


class Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, pool: Pool, key: tuple):
        self.pool = pool
        self.key = key
        self.transport: Any = None  # asyncio's, a StampedTransport or an RxTransport
        self.exchange: Exchange | None = None
        self.closed = False  # set before we close it: a close we did not start is the server's
        self.use = pool.rules.opened(key)

    @property
    def idle_since(self) -> int:
        return self.use.idle_since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data_arrived(data, CLOCK())  # stamped before anything else runs

    def data_arrived(self, data: bytes, now: int) -> None:
        ex = self.exchange
        if ex is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        ex.feed(data, now)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost tells the exchange

    def connection_lost(self, exc: BaseException | None) -> None:
        by_server = not self.closed
        self.closed = True
        self.pool.forget(self)
        ex, self.exchange = self.exchange, None
        if by_server and self.use.exchanges and (ex is None or not ex.got_bytes):
            # closed while idle in the pool, or under the next request before any answer
            self.pool.rules.server_closed(self.key, None if ex is not None else CLOCK() - self.use.idle_since)
        if ex is not None:
            ex.conn = None
            ex.lost(exc)

    def start(self, ex: Exchange, request: bytes) -> None:
        self.exchange = ex
        ex.conn = self
        self.use.reused = self.use.exchanges > 0
        t = self.transport
        if isinstance(t, RxTransport):
            ex.path = RX_LOOP
            if not t.begin(ex.reader):
                # The loop saw the connection end (or bytes nobody asked for) while it sat idle,
                # and Python had not heard yet: the request is never written. As a write on a
                # closed connection: lost, and raced (retry_on_fresh) when reused.
                self.exchange, ex.conn = None, None
                if self.use.exchanges and t.rx.closed_for == "end":
                    self.pool.rules.server_closed(self.key, CLOCK() - self.use.idle_since)
                self.close()
                ex.lost(None)
                return
        try:
            t.write(request)
        except (OSError, RuntimeError) as e:  # a transport closing under us: as if lost
            self.exchange, ex.conn = None, None
            if self.use.exchanges:
                self.pool.rules.server_closed(self.key, None)
            self.close()
            ex.lost(e)

    def stop_reading(self) -> bool:
        """Before Python ends the exchange itself (a timeout): False when the receive loop had
        already finished it (its outcome is on the way, and stands)."""
        t = self.transport
        return t.take_back() if isinstance(t, RxTransport) else True

    def exchange_over(self, ex: Exchange) -> None:
        self.exchange = None
        keep = self.pool.rules.finished(self.use, ex.keep_alive and not self.closed, ex.keep_alive_header,
                                        CLOCK())
        if keep and not self.closed:
            self.pool.release(self)
        else:
            self.close()

    def dropped(self) -> bool:
        """Whether this idle connection already holds an EOF (or stray bytes) the event loop
        has not read yet: a peek costs one syscall and spares a request the keep-alive race
        (urllib3 checks idle connections the same way). On the receive loop, first whether
        the loop closed it already (it read the end, or bytes nobody asked for) and Python has
        not heard yet; else the same peek (the loop may not have got to it)."""
        t = self.transport
        if t is None or t.is_closing():
            return True  # connection_lost is on its way, and counts the close
        if isinstance(t, RxTransport) and t.rx.poll() == "closed":
            if t.rx.closed_for == "end":  # the loop read the server's close
                self.pool.rules.server_closed(self.key, CLOCK() - self.use.idle_since)
            return True
        sock = getattr(t, "sock", None)  # StampedTransport, RxTransport: the plain socket
        if sock is None:
            return False  # asyncio's own transports (TLS) report an EOF through connection_lost
        held = peek_idle(sock)  # one C call: a poll, and a peek when readable
        if held == IDLE_QUIET:
            return False
        if held == IDLE_CLOSED:  # the server's end, or a reset (else: stray bytes)
            self.pool.rules.server_closed(self.key, CLOCK() - self.use.idle_since)
        return True

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Keep-alive connections per origin, opened on demand, no limit (as the aiohttp
    connector benchc uses elsewhere), reused by `rules` (ReuseRules): idle ones older than
    keepalive_s or the server's Keep-Alive timeout are closed.

    `rx_loop`: "auto" hands plain-http connections to the compiled receive loop where there
    is one (benchc.client._rxloop: Linux, compiled core); "off" (or None) reads them on the
    asyncio loop; a module with RxLoop (benchc.client._rxloop_py, _rxloop_c) picks one, as
    tests do. The loop reads with the reader and parser of its own core (its module's
    ResponseReader and StreamParser); without a loop the selected cores read."""

    def __init__(self, keepalive_s: float = 60.0, ssl_context: ssl_mod.SSLContext | None = None,
                 kernel_stamps: bool = KERNEL_STAMPS, rules: ReuseRules | None = None, rx_loop: Any = "auto"):
        self.keepalive_s = keepalive_s
        self.rules = rules or ReuseRules(keepalive_s)
        self.kernel_stamps = kernel_stamps  # plain http on Linux: reads carry the kernel's stamp
        # Linux turns receive stamping on for the whole host only after the first socket asks,
        # from a deferred work item, and off again when the last one closes: packets of the
        # first reads would come unstamped. A socket that asks from the start keeps it on.
        self._primer: socket.socket | None = None
        self._deadlines: _Deadlines | None = None
        if kernel_stamps:
            self._primer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._primer.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._idle: dict[tuple, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._origins: dict[tuple[str, tuple], Origin] = {}
        self._ssl = ssl_context  # https: the system's trust store unless one is given
        if rx_loop == "auto":
            rx_loop = _rxloop.MODULE
        elif rx_loop == "off":
            rx_loop = None
        self._rx_mod: Any = rx_loop if kernel_stamps else None  # the loop reads stamped sockets only
        self.ResponseReader = self._rx_mod.ResponseReader if self._rx_mod else _response.ResponseReader
        self.StreamParser = self._rx_mod.StreamParser if self._rx_mod else _stream.StreamParser
        self._rx: Any = None  # the loop, started with the first connection it reads
        self._rx_conns: dict[int, RxTransport] = {}  # by token
        self._rx_tokens = 0
        # the event loop's stamped reads (StampedTransport): us from a read's kernel stamp to the
        # read, what a loop-stamped read would have been off by (the receive loop keeps its own)
        self.read_delay = Recorder()

    def take_read_delay(self) -> Recorder:
        """The event loop's stamped reads' delay since the last call (the self-check's)."""
        out, self.read_delay = self.read_delay, Recorder()
        return out

    @property
    def rx_loop(self) -> Any:
        """The receive loop (None until a connection was handed to one)."""
        return self._rx

    def origin(self, url: str, headers: dict[str, str]) -> Origin:
        key = (url, tuple(headers.items()))
        o = self._origins.get(key)
        if o is None:
            o = self._origins[key] = Origin(url, headers)
        return o

    def idle(self, origin: Origin) -> Connection | None:
        """A kept-alive connection to the origin that the rules let us reuse, if one is free."""
        idle = self._idle.get(origin.key)
        now = CLOCK()
        pooled = self.rules.pooled(origin.key)
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if not pooled or not self.rules.reusable(conn.use, now):
                conn.close()
                continue
            if conn.dropped():
                if not conn.transport.is_closing():
                    conn.close()
                continue
            return conn
        return None

    async def open_ahead(self, origin: Origin, n: int) -> int:
        """Open connections to `origin` until `n` are idle in the pool, so that `n` requests
        that go together each find one and none connects in its send's path (a coding-agent
        replay's subagents, spawned together right after an answer); how many it opened (none
        while the rules do not pool the origin). Each is idle from now, as a kept-alive one from
        its last answer: the same rules hand it out or close it. Connect failures raise."""
        if not self.rules.pooled(origin.key):
            return 0
        have = sum(not c.closed for c in self._idle.get(origin.key, ()))
        got = await asyncio.gather(*(self.connect(origin) for _ in range(n - have)), return_exceptions=True)
        now = CLOCK()
        opened = [c for c in got if isinstance(c, Connection)]
        for conn in opened:
            conn.use.idle_since = now
            self.release(conn)
        failed = next((e for e in got if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed
        return len(opened)

    async def connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        if self.kernel_stamps and not origin.tls:
            conn = await self._connect_stamped(loop, origin)
            log.debug("opened a connection to %s:%d (kernel receive stamps%s)", origin.host, origin.port,
                      ", the receive loop reads it" if isinstance(conn.transport, RxTransport) else "")
            return conn
        if origin.tls and self._ssl is None:
            self._ssl = ssl_mod.create_default_context()
        _, conn = await loop.create_connection(lambda: Connection(self, origin.key), origin.host,
                                               origin.port, ssl=self._ssl if origin.tls else None)
        self._open.add(conn)
        log.debug("opened a connection to %s:%d%s", origin.host, origin.port, " (tls)" if origin.tls else "")
        return conn

    async def _connect_stamped(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> Connection:
        error: OSError | None = None
        for family, kind, proto, _, addr in await loop.getaddrinfo(origin.host, origin.port,
                                                                    type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # before connect, or none come
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as e:
                sock.close()
                error = e
                continue
            except BaseException:
                sock.close()
                raise
            conn = Connection(self, origin.key)
            try:
                if self._rx_mod is not None:
                    conn.transport = RxTransport(loop, sock, conn, self)  # may start the loop: descriptors
                else:
                    conn.transport = StampedTransport(loop, sock, conn)
            except BaseException:  # out of descriptors for the loop's own (EMFILE): no socket left open
                sock.close()
                raise
            self._open.add(conn)
            return conn
        raise error or OSError(f"no address for {origin.host}")

    # ---- the receive loop

    def _rx_attach(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                   transport: RxTransport) -> Any:
        if self._rx is None:
            self._rx = self._rx_mod.RxLoop()
            loop.add_reader(self._rx.fileno(), self._rx_finished)
        self._rx_tokens += 1
        self._rx_conns[self._rx_tokens] = transport
        return self._rx.attach(sock, self._rx_tokens)

    def _rx_finished(self) -> None:
        """The loop finished responses or saw connections end: one wakeup for all of them."""
        for token in self._rx.finished():
            t = self._rx_conns.get(token)
            if t is not None:
                t.reported()

    def release(self, conn: Connection) -> None:
        self._idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: Connection) -> None:
        self._open.discard(conn)

    def deadlines(self, loop: asyncio.AbstractEventLoop) -> _Deadlines:
        """The one timer of this pool's exchanges on `loop` (see _Deadlines)."""
        d = self._deadlines
        if d is None or d.loop is not loop:
            d = self._deadlines = _Deadlines(loop)
        return d

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        if self._primer is not None:
            self._primer.close()
            self._primer = None
        if self._open:
            await asyncio.sleep(0)  # let the transports run their connection_lost
        if self._rx is not None:
            asyncio.get_running_loop().remove_reader(self._rx.fileno())
            self._rx.close()


class RxFigures:
    """What the receive loop cost over a span (a load point), for the client self-check: its
    thread's CPU seconds, its lag (us from a read's kernel stamp to the loop's read of it: a
    loop that falls behind shows here, while every stamp stays exact), its reads and bytes.
    Made at the span's start; take() at its end (None when no loop read in the span)."""

    def __init__(self, pool: Pool):
        self.pool = pool
        rx = pool.rx_loop
        self.cpu0 = rx.cpu_s() if rx is not None else 0.0
        if rx is not None:
            rx.take_lag()  # start afresh

    def take(self) -> dict | None:
        rx = self.pool.rx_loop
        if rx is None:
            return None
        lag, reads, nbytes = rx.take_lag()
        return {"cpu_s": rx.cpu_s() - self.cpu0, "lag": lag, "reads": reads, "bytes": nbytes}


class StampedTransport:
    """Plain TCP read with recvmsg, each read stamped with the kernel's receive time of its
    bytes (SO_TIMESTAMPNS). When many streams' bytes arrive together, the loop hands them to
    their connections one after another; a stamp taken in the callback would grow with the
    work done for the reads before it, the kernel's does not. Writes go straight to the
    socket (a request fits its buffer; the rest waits for the socket to be writable).
    The protocol side is Connection's: data_arrived(data, now) and connection_lost(exc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Connection):
        self.loop, self.sock, self.protocol = loop, sock, protocol
        self.fd = sock.fileno()
        self.closed = False
        self._out = bytearray()
        self._watch()

    def _watch(self) -> None:
        self.loop.add_reader(self.fd, self._readable)

    def _unwatch(self) -> None:
        self.loop.remove_reader(self.fd)

    def _readable(self) -> None:
        try:
            data, stamp = read_stamped(self.sock, RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._shutdown(e)
            return
        if not data:
            self._shutdown(None)  # the server closed
            return
        self.protocol.pool.read_delay.record_ns(CLOCK() - stamp)
        self.protocol.data_arrived(data, stamp)

    def write(self, data: bytes) -> None:
        if self.closed:
            raise RuntimeError("write on a closed connection")
        sent = 0
        if not self._out:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self._shutdown(e)
                return
            if sent == len(data):
                return
            self.loop.add_writer(self.fd, self._writable)
        self._out += data[sent:]

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._shutdown(e)
            return
        del self._out[:sent]
        if not self._out:
            self.loop.remove_writer(self.fd)

    def close(self) -> None:
        self._shutdown(None)

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        if not self.closed:  # a reset, not a FIN: the server learns at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._shutdown(None)

    def _shutdown(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._unwatch()
        if self._out:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        self.loop.call_soon(self.protocol.connection_lost, exc)


class RxTransport(StampedTransport):
    """A StampedTransport whose reads the receive loop's thread makes: the asyncio loop only
    writes the request (the rest of it too, should the socket's buffer fill) and hears from
    the receive loop when a response finished or the connection ended (`reported`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Connection,
                 pool: Pool):
        self.pool = pool
        super().__init__(loop, sock, protocol)

    def _watch(self) -> None:
        self.rx = self.pool._rx_attach(self.loop, self.sock, self)

    def _unwatch(self) -> None:
        self.rx.detach()  # before the socket closes: the loop never reads a closed descriptor
        self.pool._rx_conns.pop(self.rx.token, None)

    def begin(self, reader: Any) -> bool:
        return self.rx.begin(reader)

    def take_back(self) -> bool:
        return self.rx.take_back()

    def reported(self) -> None:
        """The loop finished the exchange's response (its reader says how), or stopped
        watching the connection: it ended under a response or while idle, or carried bytes
        nobody asked for. Each goes the way the event-loop transport's callbacks take it, in
        the order the loop saw them: a response that finished, through the exchange's finish
        (the keep-alive rules judge it); an end, through connection_lost (the rules hear of
        the server's close; an exchange it ended finishes as lost there); stray bytes, or a
        response that said close, through the connection's own close."""
        state = self.rx.poll()  # under the slot's lock: the reader's fields are the loop's last
        why = self.rx.closed_for if state == "closed" else None
        if self.closed:
            return
        if why == "lost":
            self._shutdown(None)
            return
        ex = self.protocol.exchange
        if ex is not None and state != "active" and ex.reader.finished:
            ex.finish(ex.reader.end_ns, ex.reader.error)  # then an end, if one came
        if state == "closed" and not self.closed:
            if why == "end":
                self._shutdown(None)  # the server closed it while idle
            else:
                self.protocol.close()  # stray bytes: out of step


async def exchange(pool: Pool, origin: Origin, request_id: str, body: bytes, parser: Any,
                   total_s: float, idle_s: float, on_sent: Any,
                   first_byte_s: float | None = None, due: Due | None = None) -> Exchange:
    """Sends one request and reads its response into `parser` (made by pool.StreamParser).
    Connect failures raise OSError (or asyncio.TimeoutError); every other failure is in the
    returned exchange's `error`. A request on a reused connection that failed before any
    response byte goes once more on a fresh connection (retry_on_fresh), on either transport.
    `on_sent(sent_ns, reused, connect_ns)` is called after each attempt is handed to the
    socket, with the time taken just before the write; `connect_ns` is the time that attempt
    spent opening its connection (0 on a reused one). `first_byte_s`: the longest wait from
    the write to the response's first byte (a FIRST_BYTE_TIMEOUT after it); None: the idle
    limit applies from the write on. `due`: the first attempt's connection is taken (or
    opened) now and its write waits for the due time (an open loop's punctual send);
    its `connect_ns` is then the part of the connect that ran past that time."""
    loop = asyncio.get_running_loop()
    start = CLOCK()
    ex: Exchange | None = None
    for attempt in (0, 1):
        conn = pool.idle(origin) if attempt == 0 else None  # a retry never takes another pooled one
        reused = conn is not None
        connect_ns = 0
        if conn is None:
            left = total_s - (CLOCK() - start) / 1e9
            t = CLOCK()
            conn = await asyncio.wait_for(pool.connect(origin), max(left, 0.001))
            connect_ns = CLOCK() - t
            if due is not None and attempt == 0:
                connect_ns = max(0, t + connect_ns - max(t, due.at_ns))
        request = origin.request(request_id, body)
        if due is not None and attempt == 0:
            await due.wait(due.at_ns)
        # Stamped just before the write: no answer can arrive before it. Read after the write
        # returns, the stamp came late whenever the send woke the server on this CPU and the
        # kernel switched to it on the way out of the syscall (its answer then carried an
        # earlier kernel stamp than the request's). The reader dates a read stamped earlier
        # (a clock step) at this time, and counts it.
        sent = CLOCK()
        ex = Exchange(pool.ResponseReader(parser, sent), loop.create_future())
        conn.start(ex, request)
        on_sent(sent, reused, connect_ns)
        timer = _Deadline(pool.deadlines(loop), ex, sent, total_s - (sent - start) / 1e9, idle_s,
                          first_byte_s)
        try:
            await ex.done
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            timer.cancel()
        if ex.error is not None and retry_on_fresh(reused, attempt, ex.got_bytes, ex.error[0] in _TIMEOUTS):
            log.debug("request %s: the kept-alive connection was closed by the server before an answer; "
                      "retrying on a new one", request_id)
            continue
        if ex.error is not None and attempt == 1:
            ex.error = (ex.error[0], (ex.error[1] + " (a retry after a reused connection failed)")[:200])
        return ex
    return ex  # type: ignore[return-value]  # the loop always returns


@dataclass(frozen=True)
class Due:
    """When a request's write is due (CLOCK), and how to wait for a time (run/alarm.py)."""

    at_ns: int
    wait: Callable[[int], Awaitable[None]]


# never the keep-alive race (retry_on_fresh): the server may be working on the request
_TIMEOUTS = (TIMEOUT, IDLE_TIMEOUT, FIRST_BYTE_TIMEOUT)


def first_byte_detail(first_byte_s: float) -> str:
    """The words of a FIRST_BYTE_TIMEOUT, for both HTTP paths."""
    return f"no response byte within target.first_byte_timeout ({first_byte_s:g}s) after the request was sent"


class _Deadlines:
    """One timer for the deadlines of every exchange on a loop, instead of a TimerHandle made
    and cancelled per exchange (in a coalesced run at C=256 that was a tenth of the event
    loop's work per answer). The deadlines wait in a heap by due time; the loop's one timer
    is armed for the earliest and re-armed only when a new one comes due sooner (with equal
    limits, a new exchange's deadline is never the earliest: no timer work at all). A
    cancelled deadline stays in the heap, flagged, until it comes up or the heap is
    compacted (when flagged ones are the larger part); the timer goes when none is live."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.heap: list[tuple[int, int, _Deadline]] = []
        self.seq = 0  # ties on the due time go in arrival order, never to comparing deadlines
        self.live = 0  # deadlines in the heap not cancelled
        self.handle: asyncio.TimerHandle | None = None
        self.armed_ns = 0  # the due time the handle was armed for

    def push(self, deadline: _Deadline, due_ns: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (due_ns, self.seq, deadline))
        self.live += 1
        if self.handle is None or due_ns < self.armed_ns:
            self._arm(due_ns)

    def cancelled(self) -> None:
        self.live -= 1
        if self.live == 0:  # nothing left to watch: no timer outlives the exchanges
            self.heap.clear()
            if self.handle is not None:
                self.handle.cancel()
                self.handle = None
        elif len(self.heap) > 64 and self.live * 2 < len(self.heap):
            self.heap = [e for e in self.heap if not e[2].cancelled]
            heapq.heapify(self.heap)

    def _arm(self, due_ns: int) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.armed_ns = due_ns
        self.handle = self.loop.call_later(max((due_ns - CLOCK()) / 1e9, 0.0), self._fire)

    def _fire(self) -> None:
        self.handle = None
        heap = self.heap
        # every deadline due by the time the timer was armed for, or by now (the loop's timer
        # may fire a little before its time by this clock: a check that comes early re-arms
        # itself, as one timer per exchange did), taken out before any check runs, so that a
        # check that re-arms waits for the next firing
        until = max(CLOCK(), self.armed_ns)
        due: list[_Deadline] = []
        while heap and heap[0][0] <= until:
            deadline = heapq.heappop(heap)[2]
            if not deadline.cancelled:
                self.live -= 1
                due.append(deadline)
                deadline.queued = False
        for deadline in due:
            deadline.check()
        if self.heap and self.handle is None:  # (a check may have compacted or emptied it)
            self._arm(self.heap[0][0])


class _Deadline:
    """The limits of one exchange: the whole exchange (total_s), the wait for the response's
    first byte (first_byte_s, from the write; None: the idle limit) and the silence between
    reads (idle_s), checked by the loop's _Deadlines. A check re-arms itself from the last
    read's time instead of being reset on every read, so a read costs no timer work."""

    __slots__ = ("ex", "total_end", "idle_ns", "first_byte_s", "first_byte_end", "sweeper", "cancelled",
                 "queued")

    def __init__(self, sweeper: _Deadlines, ex: Exchange, start_ns: int, total_s: float,
                 idle_s: float, first_byte_s: float | None = None):
        self.ex = ex
        self.total_end = start_ns + int(total_s * 1e9)
        self.idle_ns = int(idle_s * 1e9)
        self.first_byte_s = first_byte_s
        self.first_byte_end = start_ns + int((first_byte_s or 0) * 1e9)
        self.sweeper = sweeper
        self.cancelled = False
        # the first check as _due_ns would place it, from the limits alone: the write was
        # microseconds ago, so no clock or reader is read per exchange here (a check that
        # comes before a limit's time re-arms itself from the exchange's own times)
        first_s = min(total_s, idle_s) if first_byte_s is None else min(total_s, idle_s, first_byte_s)
        self.queued = True
        sweeper.push(self, start_ns + int(max(first_s, 0.0) * 1e9))

    def _awaiting_first_byte(self) -> bool:
        return self.first_byte_s is not None and not self.ex.got_bytes

    def _due_ns(self) -> int:
        # the idle deadline too while the first byte is awaited: the byte may come before the
        # first-byte deadline, and the idle limit then runs from it
        due = min(self.total_end, self.ex.last_rx_ns + self.idle_ns)
        if self._awaiting_first_byte():
            due = min(due, self.first_byte_end)
        return due

    def _again(self) -> None:
        self.queued = True
        self.sweeper.push(self, self._due_ns())

    def check(self) -> None:
        ex, now = self.ex, CLOCK()
        if ex.done.done():
            return
        if now >= self.total_end:
            kind, why = TIMEOUT, "total timeout"
        elif self._awaiting_first_byte():
            if now < self.first_byte_end:
                self._again()
                return
            kind, why = FIRST_BYTE_TIMEOUT, first_byte_detail(self.first_byte_s or 0.0)
        elif now - ex.last_rx_ns >= self.idle_ns:
            kind, why = (IDLE_TIMEOUT if ex.status == 200 else TIMEOUT), "no data within the idle timeout"
        else:
            self._again()
            return
        conn = ex.conn
        if conn is not None and not conn.stop_reading():
            return  # the receive loop finished it first: its outcome stands
        ex.finish(now, (kind, why))
        if conn is not None:
            conn.abort()

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self.queued:
                self.sweeper.cancelled()
