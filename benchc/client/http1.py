"""A minimal HTTP/1.1 client for the measured streaming requests.

Why not aiohttp on the hot path (measured, see benchmarks/client_ingest.py): a real
server writes each SSE event as its own HTTP chunk, and aiohttp runs Python for every
chunk (feed_data, its read buffer, a wakeup of the reading task): one profile saw 18,035
socket reads deliver 197,376 chunks at 15-20 us each. Here the connection's protocol
callback handles a whole socket read at once: one timestamp, one C call that de-chunks
it (benchc.client._chunked), one C call that parses its events (benchc.client._stream). The sending
task sleeps until the response ends. aiohttp stays for everything off the hot path
(/models, /metrics, smoke checks).

Scope: http and https; a keep-alive pool without a limit; chunked, Content-Length and
read-to-close bodies; no compression (Accept-Encoding: identity), no proxies, no
redirects (a 3xx is an http_status error, as any status but 200).

Keep-alive (ReuseRules, below, used by this pool and by the aiohttp path in request.py):
a pooled connection is not reused once the server said it will close it (`Connection:
close`, HTTP/1.0, EOF seen, `Keep-Alive: max` reached, idle past `Keep-Alive: timeout`);
a request on a reused connection that fails before any response byte is sent once more
on a fresh connection (the keep-alive race, as browsers and HTTP libraries handle it);
an origin whose connections the server closes right after each response stops being
pooled.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import select
import socket
import ssl as ssl_mod
import struct
import sys
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from benchc.client._chunked import ChunkedDecoder
from benchc.client._rx import read_stamped
from benchc.client._rx_py import SO_TIMESTAMPNS
from benchc.metrics.record import IDLE_TIMEOUT, STREAM_BROKEN, TIMEOUT

CLOCK = time.perf_counter_ns
log = logging.getLogger(__name__)  # -vv: connections opened, keep-alive retries (no header is logged)
MAX_HEAD = 64 * 1024  # response status line and headers
_FRAMING_HEADERS = re.compile(rb"\n[ \t]*(transfer-encoding|content-length|connection|content-encoding"
                              rb"|keep-alive)[ \t]*:([^\r\n]*)")
EXCERPT = 300  # bytes of a non-200 body kept for the error detail
_SKIP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
KERNEL_STAMPS = SO_TIMESTAMPNS is not None and sys.platform.startswith("linux")
RECV_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB buffer cost 16 us per read


class ProtocolError(Exception):
    """The server's response broke HTTP/1.1 (bad status line, bad chunking, compression)."""


# ------------------------------------------------------------------ keep-alive rules

STOP_POOLING_AFTER = 3  # closes right after a response in a row, no reuse answered: stop pooling
QUICK_CLOSE_NS = 1_000_000_000  # a close within 1 s of a response is a habit, not an idle timeout
KEEP_ALIVE_MARGIN_S = 0.5  # reuse a connection only this long before the server's advertised timeout


def parse_keep_alive(value: bytes | str | None) -> tuple[float | None, int | None]:
    """(timeout_s, max) of a `Keep-Alive: timeout=5, max=100` header (RFC 2068 19.7.1.1);
    None for each part that is absent or not a number."""
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
    """One request's response, read by the connection's callbacks.

    `parser` gets the body of a 200 (a StreamParser); any other status keeps an excerpt
    of its body. `done` (a future) resolves when the response ends, fails, times out or
    the connection goes away; `error` is then None or (kind, detail) with kind one of
    TIMEOUT, IDLE_TIMEOUT, STREAM_BROKEN or CONNECT (benchc.metrics.record).
    """

    __slots__ = ("parser", "done", "status", "error", "end_ns", "last_rx_ns", "got_bytes",
                 "keep_alive", "keep_alive_header", "excerpt", "sent_ns", "early_reads", "_head", "_mode",
                 "_remaining", "_decoder", "conn")

    def __init__(self, parser: Any, done: asyncio.Future):
        self.parser = parser
        self.done = done
        self.status: int | None = None
        self.error: tuple[str, str] | None = None
        self.end_ns = 0
        self.last_rx_ns = 0
        self.got_bytes = False
        self.keep_alive = True
        self.keep_alive_header: bytes | None = None  # `Keep-Alive: timeout=5, max=100`
        self.excerpt = b""
        self.sent_ns = 0  # taken just before the request was handed to the socket
        self.early_reads = 0  # reads stamped before sent_ns (dated sent_ns instead)
        self._head = b""
        self._mode = ""  # "chunked", "length" or "close", once the head is read
        self._remaining = 0
        self._decoder: Any = None
        self.conn: Connection | None = None

    # ---- fed by Connection.data_received

    def feed(self, data: bytes, now: int) -> None:
        if now < self.sent_ns:
            # No answer precedes its request, and sent_ns is read before the write; a kernel
            # stamp (CLOCK_REALTIME moved onto the monotonic clock) that says otherwise is off
            # by a clock step. Dated at sent_ns, and counted.
            now = self.sent_ns
            self.early_reads += 1
        self.got_bytes = True
        self.last_rx_ns = now
        if not self._mode:
            data = self._read_head(data)
            if data is None or self.done.done():
                return
        if self._mode == "chunked":
            payload = self._decoder.feed(data)
            if payload:
                self._deliver(payload, now)
            if self._decoder.done:
                self.keep_alive = self.keep_alive and not self._decoder.excess
                self.finish(now)
            elif self._decoder.error:
                self.keep_alive = False
                self.finish(now, (STREAM_BROKEN, f"bad chunked encoding: {self._decoder.error}"))
        elif self._mode == "length":
            if len(data) > self._remaining:
                self.keep_alive = False  # bytes past the body: the connection is out of step
                data = data[:self._remaining]
            self._remaining -= len(data)
            if data:
                self._deliver(data, now)
            if self._remaining == 0:
                self.finish(now)
        elif data:  # "close": the body ends when the server closes
            self._deliver(data, now)

    def _deliver(self, payload: bytes, now: int) -> None:
        if self.status == 200:
            self.parser.feed(payload, now)
        elif len(self.excerpt) < EXCERPT:
            self.excerpt += payload[:EXCERPT - len(self.excerpt)]

    def _read_head(self, data: bytes) -> bytes | None:
        """Consumes the status line and headers; returns the body bytes that followed them,
        or None while the head is incomplete (or broken: the exchange is then finished)."""
        buf = self._head + data
        end, sep = buf.find(b"\r\n\r\n"), 4
        if end < 0:
            end, sep = buf.find(b"\n\n"), 2
        if end < 0:
            if len(buf) > MAX_HEAD:
                self.keep_alive = False
                self.finish(self.last_rx_ns, (STREAM_BROKEN, "response head too large"))
            self._head = buf
            return None
        head, rest = buf[:end], buf[end + sep:]
        self._head = b""
        try:
            self._parse_head(head)
        except ProtocolError as e:
            self.keep_alive = False
            self.finish(self.last_rx_ns, (STREAM_BROKEN, str(e)))
            return None
        if self.status is not None and 100 <= self.status < 200:  # 100 Continue and friends
            self.status, self._mode = None, ""
            return self._read_head(rest) if rest else None
        if self._mode == "length" and self._remaining == 0:
            self.finish(self.last_rx_ns)
            return None
        return rest

    def _parse_head(self, head: bytes) -> None:
        status_line, _, fields = head.partition(b"\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line: {status_line[:80]!r}")
        self.status = int(parts[1])
        if parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        length, chunked = None, False
        # only the four headers that frame the body matter; one regex pass finds them
        for name, value in _FRAMING_HEADERS.findall(b"\n" + fields.lower()):
            value = value.strip()
            if name == b"transfer-encoding":
                chunked = chunked or b"chunked" in value
            elif name == b"content-length":
                if not value.isdigit():
                    raise ProtocolError(f"bad Content-Length: {value[:40]!r}")
                length = int(value)
            elif name == b"connection":
                if b"close" in value:
                    self.keep_alive = False
                elif b"keep-alive" in value:
                    self.keep_alive = True
            elif name == b"keep-alive":
                self.keep_alive_header = value
            elif name == b"content-encoding" and value not in (b"", b"identity"):
                raise ProtocolError(f"compressed response ({value.decode('latin-1')}) although "
                                    f"identity was asked for")
        if 100 <= self.status < 200:
            return
        if chunked:
            self._mode, self._decoder = "chunked", ChunkedDecoder()
        elif length is not None:
            self._mode, self._remaining = "length", length
        elif self.status in (204, 304):
            self._mode, self._remaining = "length", 0
        else:
            self._mode, self.keep_alive = "close", False

    # ---- endings

    def finish(self, now: int, error: tuple[str, str] | None = None) -> None:
        if self.done.done():
            return
        self.end_ns = now or CLOCK()
        self.error = error
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.exchange_over(self)
        self.done.set_result(None)

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed: the end of a read-to-close body, else a broken one."""
        if self._mode == "close" and exc is None:
            self.finish(CLOCK())
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
        if self.status is None:
            why += " before any response" if not self.got_bytes else " inside the response head"
        else:
            why += " mid-response"
        self.keep_alive = False
        self.finish(CLOCK(), (STREAM_BROKEN, why[:200]))


class Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, pool: Pool, key: tuple):
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False  # set before we close it: a close we did not start is the server's
        self.use = pool.rules.opened(key)

    @property
    def idle_since(self) -> int:
        return self.use.idle_since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

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
        try:
            self.transport.write(request)  # type: ignore[union-attr]
        except (OSError, RuntimeError) as e:  # a transport closing under us: as if lost
            self.exchange, ex.conn = None, None
            if self.use.exchanges:
                self.pool.rules.server_closed(self.key, None)
            self.close()
            ex.lost(e)

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
        (urllib3 checks idle connections the same way)."""
        t = self.transport
        if t is None or t.is_closing():
            return True  # connection_lost is on its way, and counts the close
        sock = getattr(t, "sock", None)  # StampedTransport: the plain socket
        if sock is None:
            return False  # asyncio's own transports (TLS) report an EOF through connection_lost
        try:
            ready = select.poll()
            ready.register(sock.fileno(), select.POLLIN)
            if not ready.poll(0):
                return False
            closed = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # else: stray bytes
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            closed = True  # a reset
        if closed:
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
    keepalive_s or the server's Keep-Alive timeout are closed."""

    def __init__(self, keepalive_s: float = 60.0, ssl_context: ssl_mod.SSLContext | None = None,
                 kernel_stamps: bool = KERNEL_STAMPS, rules: ReuseRules | None = None):
        self.keepalive_s = keepalive_s
        self.rules = rules or ReuseRules(keepalive_s)
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
                if not conn.transport.is_closing():  # type: ignore[union-attr]
                    conn.close()
                continue
            return conn
        return None

    async def connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        if self.kernel_stamps and not origin.tls:
            conn = await self._connect_stamped(loop, origin)
            log.debug("opened a connection to %s:%d (kernel receive stamps)", origin.host, origin.port)
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
            conn.transport = StampedTransport(loop, sock, conn)  # type: ignore[assignment]
            self._open.add(conn)
            return conn
        raise error or OSError(f"no address for {origin.host}")

    def release(self, conn: Connection) -> None:
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
        loop.add_reader(self.fd, self._readable)

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
        self.loop.remove_reader(self.fd)
        if self._out:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        self.loop.call_soon(self.protocol.connection_lost, exc)


async def exchange(pool: Pool, origin: Origin, request_id: str, body: bytes, parser: Any,
                   total_s: float, idle_s: float, on_sent: Any) -> Exchange:
    """Sends one request and reads its response into `parser`. Connect failures raise
    OSError (or asyncio.TimeoutError); every other failure is in the returned exchange's
    `error`. A request on a reused connection that failed before any response byte goes
    once more on a fresh connection (retry_on_fresh). `on_sent(sent_ns, reused, connect_ns)`
    is called after each attempt is handed to the socket, with the time taken just before
    the write; `connect_ns` is the time that attempt spent opening its connection (0 on a
    reused one)."""
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
        ex = Exchange(parser, loop.create_future())
        request = origin.request(request_id, body)
        # Stamped just before the write: no answer can arrive before it. Read after the write
        # returns, the stamp came late whenever the send woke the server on this CPU and the
        # kernel switched to it on the way out of the syscall (its answer then carried an
        # earlier kernel stamp than the request's).
        ex.sent_ns = ex.last_rx_ns = sent = CLOCK()
        conn.start(ex, request)
        on_sent(sent, reused, connect_ns)
        timer = _Deadline(loop, ex, sent, total_s - (sent - start) / 1e9, idle_s)
        try:
            await ex.done
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            timer.cancel()
        if ex.error is not None and retry_on_fresh(reused, attempt, ex.got_bytes,
                                                   ex.error[0] in (TIMEOUT, IDLE_TIMEOUT)):
            log.debug("request %s: the kept-alive connection was closed by the server before an answer; "
                      "retrying on a new one", request_id)
            continue
        if ex.error is not None and attempt == 1:
            ex.error = (ex.error[0], (ex.error[1] + " (a retry after a reused connection failed)")[:200])
        return ex
    return ex  # type: ignore[return-value]  # the loop always returns


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
        ex.keep_alive = False
        ex.finish(now, (kind, why))
        if conn is not None:
            conn.abort()

    def cancel(self) -> None:
        self.handle.cancel()
