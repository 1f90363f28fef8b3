"""Endless answers, for the memory tests (tests/test_stream_gaps.py) and
benchmarks/endless_streams.py: a server that writes one endless answer on every connection as
fast as the client takes it, and a client process that reads one answer on a chosen HTTP path
and reports how far its peak resident size (VmHWM, /proc) grew while it did.

    python -m tests.endless PATH URL --chunks N | --seconds S

PATH is one of tests.test_keepalive's (native-asyncio, native-rx-py, native-rx-c, aiohttp);
the core is the environment's (BENCHC_NO_EXTENSIONS=1: the twins). The client stops the request
once the parser has read N text chunks or S seconds passed (whichever is given), or when the
request ends on its own (an oversized line does); it prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


# what each kind of endless answer writes after its head: a start, then one block for ever
ANSWERS = {
    # one-token chat chunks, each its own HTTP chunk (vLLM's shape, without usage)
    "tokens": (b"", _chunk(b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":'
                           b'[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n') * 800),
    # one SSE line that never ends
    "line": (_chunk(b"data: "), _chunk(b"x" * 65536)),
}
# what a request to WARMUP_PATH gets instead: 1,600 tokens, then the end (the client's first
# request, so that what any first request costs is not counted)
WARMUP_PATH = "/v1/warmup"
WARMUP = ANSWERS["tokens"][1] * 2 + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class EndlessServer:
    """Loopback server (threads: it writes while the test's own loop waits) answering every
    request with an endless answer of `kind` (ANSWERS) until the client goes away; a request
    to WARMUP_PATH with a short answer that ends."""

    def __init__(self, kind: str):
        self.start, self.block = ANSWERS[kind]
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1/chat/completions"
        self._open: list[socket.socket] = []
        self.ended: list[str] = []  # per endless answer: "client" (it went away) or "stop"
        self._stopping = False

    def __enter__(self) -> EndlessServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        for c in self._open:
            c.close()

    def stop(self) -> None:
        """Ends every answer (a write blocked on a full socket too) and takes no more requests."""
        self._stopping = True
        self.sock.close()
        for c in self._open:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            if buf.split(b" ", 2)[1] == WARMUP_PATH.encode():
                conn.sendall(HEAD + WARMUP)
                return
            conn.sendall(HEAD + self.start)
            while True:
                conn.sendall(self.block)
        except OSError:  # the client closed (or stop()): the answer ends there
            self.ended.append("stop" if self._stopping else "client")
        finally:
            conn.close()


def read_one(path: str, url: str, core: str = "c", chunks: int | None = None,
             seconds: float | None = None) -> dict:
    """One endless answer read in a process of its own on `path` with `core` ("py": the twins)."""
    env = dict(os.environ)
    if core == "py":
        env["BENCHC_NO_EXTENSIONS"] = "1"
    args = [sys.executable, "-m", "tests.endless", path, url]
    args += ["--chunks", str(chunks)] if chunks is not None else ["--seconds", str(seconds)]
    out = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise AssertionError(f"the client failed ({out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


async def _read(c, url: str, chunks: int | None, seconds: float | None):
    """One request on client `c`, cancelled at `chunks` text chunks or after `seconds` (neither:
    read to its end)."""
    from benchc.client.request import send, send_native
    from benchc.metrics.record import RequestRecord
    from tests.test_http1 import target

    rec = RequestRecord("endless", 0, 1, None)
    t, headers = target(timeout_s=600, idle_s=600), {"Content-Type": "application/json"}
    started = time.monotonic()
    task = asyncio.ensure_future(send_native(c.pool, url, headers, b"{}", rec, t) if c.pool is not None
                                 else send(c.session, url, headers, b"{}", rec, t))
    while not task.done():
        p = rec.parser
        if p is not None and (chunks is not None and p.text_chunks >= chunks
                              or seconds is not None and time.monotonic() - started >= seconds):
            task.cancel()
            break
        await asyncio.sleep(0.01)
    try:
        await task
    except asyncio.CancelledError:
        pass
    return rec, time.monotonic() - started


async def _client(path: str, url: str, chunks: int | None, seconds: float | None) -> dict:
    from benchc._core import core_name
    from tests.test_keepalive import Client

    core = core_name()  # it imports every hot module: before the baseline
    c = Client(path)
    # what any first request costs (imports, the loop, buffers): not counted
    await _read(c, url.split("/v1/")[0] + WARMUP_PATH, None, None)
    base = _peak_kib()
    rec, took = await _read(c, url, chunks, seconds)
    grew = _peak_kib() - base
    out = {"path": path, "core": core, "error": rec.outcome.error, "detail": rec.outcome.error_detail,
           "text_chunks": rec.parser.text_chunks, "grew_kib": grew, "seconds": round(took, 3)}
    await c.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("url")
    stop = ap.add_mutually_exclusive_group(required=True)
    stop.add_argument("--chunks", type=int)
    stop.add_argument("--seconds", type=float)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(_client(a.path, a.url, a.chunks, a.seconds))))


if __name__ == "__main__":
    main()
