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
- the asyncio transports (https, other systems, BENCHC_NO_EXTENSIONS=1): the connection's
  protocol callback handles a whole socket read at once: one timestamp, one C call.
Everything else is here, once, for both: connecting, writing the request, t0, the pool and
its keep-alive rules, the timeouts, the retry of a reused connection, the exchange's
outcome. The sending task sleeps until the response ends. aiohttp stays for everything off
the hot path (/models, /metrics, smoke checks).

Scope: http and https; a keep-alive pool without a limit; chunked, Content-Length and
read-to-close bodies; no compression (Accept-Encoding: identity), no proxies, no
redirects (a 3xx is an http_status error, as any status but 200).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl as ssl_mod
import struct
import sys
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from benchc.client import _response, _rxloop, _stream
from benchc.client._rx import read_stamped
from benchc.client._rx_py import SO_TIMESTAMPNS
from benchc.metrics.record import IDLE_TIMEOUT, STREAM_BROKEN, TIMEOUT

CLOCK = time.perf_counter_ns
_SKIP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
KERNEL_STAMPS = SO_TIMESTAMPNS is not None and sys.platform.startswith("linux")
RECV_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB buffer cost 16 us per read
RX_LOOP, ASYNCIO = "rx_loop", "asyncio"  # which transport read a response (Exchange.path)


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
    IDLE_TIMEOUT, STREAM_BROKEN or CONNECT (benchc.metrics.record), and `keep_alive` whether
    the connection may carry another request.
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
        self.closed = False
        self.idle_since = 0  # CLOCK() when it was last put back in the pool

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

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.conn = None
            ex.lost(exc)

    def start(self, ex: Exchange, request: bytes) -> None:
        self.exchange = ex
        ex.conn = self
        t = self.transport
        if isinstance(t, RxTransport):
            ex.path = RX_LOOP
            if not t.begin(ex.reader):  # the loop saw it end while it sat idle: as if lost now
                self.exchange, ex.conn = None, None
                self.close()
                ex.lost(None)
                return
        try:
            t.write(request)
        except (OSError, RuntimeError) as e:  # a transport closing under us: as if lost
            self.exchange, ex.conn = None, None
            self.close()
            ex.lost(e)

    def stop_reading(self) -> bool:
        """Before Python ends the exchange itself (a timeout): False when the receive loop had
        already finished it (its outcome is on the way, and stands)."""
        t = self.transport
        return t.take_back() if isinstance(t, RxTransport) else True

    def exchange_over(self, ex: Exchange) -> None:
        self.exchange = None
        if ex.keep_alive and not self.closed:
            self.pool.release(self)
        else:
            self.close()

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
    connector benchc uses elsewhere). Idle connections older than keepalive_s are closed.

    `rx_loop`: "auto" hands plain-http connections to the compiled receive loop where there
    is one (benchc.client._rxloop: Linux, compiled core); "off" (or None) reads them on the
    asyncio loop; a module with RxLoop (benchc.client._rxloop_py, _rxloop_c) picks one, as
    tests do. The loop reads with the reader and parser of its own core (its module's
    ResponseReader and StreamParser); without a loop the selected cores read."""

    def __init__(self, keepalive_s: float = 60.0, ssl_context: ssl_mod.SSLContext | None = None,
                 kernel_stamps: bool = KERNEL_STAMPS, rx_loop: Any = "auto"):
        self.keepalive_s = keepalive_s
        self.kernel_stamps = kernel_stamps  # plain http on Linux: reads carry the kernel's stamp
        # Linux turns receive stamping on for the whole host only after the first socket asks,
        # from a deferred work item, and off again when the last one closes: packets of the
        # first reads would come unstamped. A socket that asks from the start keeps it on.
        self._primer: socket.socket | None = None
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
        self._rx_mod = rx_loop if kernel_stamps else None  # the loop reads stamped sockets only
        self.ResponseReader = self._rx_mod.ResponseReader if self._rx_mod else _response.ResponseReader
        self.StreamParser = self._rx_mod.StreamParser if self._rx_mod else _stream.StreamParser
        self._rx: Any = None  # the loop, started with the first connection it reads
        self._rx_conns: dict[int, RxTransport] = {}  # by token
        self._rx_tokens = 0

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
        """A kept-alive connection to the origin, if one is free."""
        idle = self._idle.get(origin.key)
        now = CLOCK()
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > self.keepalive_s * 1e9:
                conn.close()
                continue
            return conn
        return None

    async def connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        if self.kernel_stamps and not origin.tls:
            return await self._connect_stamped(loop, origin)
        if origin.tls and self._ssl is None:
            self._ssl = ssl_mod.create_default_context()
        _, conn = await loop.create_connection(lambda: Connection(self, origin.key), origin.host,
                                               origin.port, ssl=self._ssl if origin.tls else None)
        self._open.add(conn)
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
            if self._rx_mod is not None:
                conn.transport = RxTransport(loop, sock, conn, self)
            else:
                conn.transport = StampedTransport(loop, sock, conn)
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
        conn.idle_since = CLOCK()
        self._idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: Connection) -> None:
        self._open.discard(conn)

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
        watching the connection (it ended, broke, or carried bytes nobody asked for)."""
        state = self.rx.poll()  # under the slot's lock: the reader's fields are the loop's last
        ex = self.protocol.exchange
        if ex is not None and state != "active" and ex.reader.finished:
            ex.finish(ex.reader.end_ns, ex.reader.error)
        if state == "closed" and not self.closed:
            self._shutdown(None)


async def exchange(pool: Pool, origin: Origin, request_id: str, body: bytes, parser: Any,
                   total_s: float, idle_s: float, on_sent: Any) -> Exchange:
    """Sends one request and reads its response into `parser` (made by pool.StreamParser).
    Connect failures raise OSError (or asyncio.TimeoutError); every other failure is in the
    returned exchange's `error`. A reused connection that the server had closed before any
    response byte is retried once on a new one (a keep-alive race, not a server failure).
    `on_sent()` is called right after the request is handed to the socket."""
    loop = asyncio.get_running_loop()
    start = CLOCK()
    for attempt in (0, 1):
        conn = pool.idle(origin)
        reused = conn is not None
        if conn is None:
            left = total_s - (CLOCK() - start) / 1e9
            conn = await asyncio.wait_for(pool.connect(origin), max(left, 0.001))
        ex = Exchange(pool.ResponseReader(parser, CLOCK()), loop.create_future())
        conn.start(ex, origin.request(request_id, body))
        on_sent()
        timer = _Deadline(loop, ex, CLOCK(), total_s - (CLOCK() - start) / 1e9, idle_s)
        try:
            await ex.done
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            timer.cancel()
        if ex.error and reused and attempt == 0 and not ex.got_bytes and ex.error[0] == STREAM_BROKEN:
            continue
        return ex
    return ex


class _Deadline:
    """One timer per exchange for both limits: the whole exchange (total_s) and the
    silence between reads (idle_s). It re-arms itself from the last read's time instead
    of being reset on every read, so a read costs no timer work."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ex: Exchange, start_ns: int, total_s: float,
                 idle_s: float):
        self.ex = ex
        self.total_end = start_ns + int(total_s * 1e9)
        self.idle_ns = int(idle_s * 1e9)
        self.loop = loop
        self.handle = self.loop.call_later(self._wait_s(), self._check)

    def _wait_s(self) -> float:
        due = min(self.total_end, self.ex.last_rx_ns + self.idle_ns)
        return max((due - CLOCK()) / 1e9, 0.0)

    def _check(self) -> None:
        ex, now = self.ex, CLOCK()
        if ex.done.done():
            return
        if now >= self.total_end:
            kind, why = TIMEOUT, "total timeout"
        elif now - ex.last_rx_ns >= self.idle_ns:
            kind, why = (IDLE_TIMEOUT if ex.status == 200 else TIMEOUT), "no data within the idle timeout"
        else:
            self.handle = self.loop.call_later(self._wait_s(), self._check)
            return
        conn = ex.conn
        if conn is not None and not conn.stop_reading():
            return  # the receive loop finished it first: its outcome stands
        ex.finish(now, (kind, why))
        if conn is not None:
            conn.abort()

    def cancel(self) -> None:
        self.handle.cancel()
