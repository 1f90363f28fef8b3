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
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
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
_FRAMING_HEADERS = re.compile(rb"\n[ \t]*(transfer-encoding|content-length|connection|content-encoding)"
                              rb"[ \t]*:([^\r\n]*)")
EXCERPT = 300  # bytes of a non-200 body kept for the error detail
_SKIP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
KERNEL_STAMPS = SO_TIMESTAMPNS is not None and sys.platform.startswith("linux")
RECV_SIZE = 64 * 1024  # below malloc's mmap threshold: a 256 KiB buffer cost 16 us per read


class ProtocolError(Exception):
    """The server's response broke HTTP/1.1 (bad status line, bad chunking, compression)."""


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
                 "keep_alive", "excerpt", "_head", "_mode", "_remaining", "_decoder", "conn")

    def __init__(self, parser: Any, done: asyncio.Future):
        self.parser = parser
        self.done = done
        self.status: int | None = None
        self.error: tuple[str, str] | None = None
        self.end_ns = 0
        self.last_rx_ns = 0
        self.got_bytes = False
        self.keep_alive = True
        self.excerpt = b""
        self._head = b""
        self._mode = ""  # "chunked", "length" or "close", once the head is read
        self._remaining = 0
        self._decoder: Any = None
        self.conn: Connection | None = None

    # ---- fed by Connection.data_received

    def feed(self, data: bytes, now: int) -> None:
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
        self.closed = False
        self.idle_since = 0  # CLOCK() when it was last put back in the pool

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
        self.closed = True
        self.pool.forget(self)
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.conn = None
            ex.lost(exc)

    def start(self, ex: Exchange, request: bytes) -> None:
        self.exchange = ex
        ex.conn = self
        try:
            self.transport.write(request)  # type: ignore[union-attr]
        except (OSError, RuntimeError) as e:  # a transport closing under us: as if lost
            self.exchange, ex.conn = None, None
            self.close()
            ex.lost(e)

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
    connector benchc uses elsewhere). Idle connections older than keepalive_s are closed."""

    def __init__(self, keepalive_s: float = 60.0, ssl_context: ssl_mod.SSLContext | None = None,
                 kernel_stamps: bool = KERNEL_STAMPS):
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
    `error`. A reused connection that the server had closed before any response byte is
    retried once on a new one (a keep-alive race, not a server failure). `on_sent()` is
    called right after the request is handed to the socket."""
    loop = asyncio.get_running_loop()
    start = CLOCK()
    for attempt in (0, 1):
        conn = pool.idle(origin)
        reused = conn is not None
        if conn is None:
            left = total_s - (CLOCK() - start) / 1e9
            conn = await asyncio.wait_for(pool.connect(origin), max(left, 0.001))
        ex = Exchange(parser, loop.create_future())
        conn.start(ex, origin.request(request_id, body))
        on_sent()
        ex.last_rx_ns = CLOCK()
        timer = _Deadline(loop, ex, CLOCK(), total_s - (CLOCK() - start) / 1e9, idle_s)
        try:
            await ex.done
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            timer.cancel()
        if ex.error and reused and attempt == 0 and not ex.got_bytes and ex.error[0] == STREAM_BROKEN:
            log.debug("request %s: the kept-alive connection was closed by the server; retrying on a new one",
                      request_id)
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
        ex.keep_alive = False
        ex.finish(now, (kind, why))
        if conn is not None:
            conn.abort()

    def cancel(self) -> None:
        self.handle.cancel()
