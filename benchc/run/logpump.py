"""A launched process's output on its way to its log, scrubbed of the run's secrets as it is
written: the log never holds a secret in clear, not even between the server printing it and
benchc stopping the server, and not when benchc is killed by SIGKILL. The supervisor
(run/supervisor.py) runs one pump per output pipe of its child, off benchc's process.

Bytes go on as they came (what is not UTF-8 too), in whole lines (`\\n` or `\\r` ends one):
a secret never spans a line. A line longer than PIECE_BYTES is written in pieces of about
that size, so an endless line holds at most a piece in memory; the end of a piece that could
be the start of a secret (Scrubber.open_end) is kept back until the next piece shows it.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading

from benchc.redact import Scrubber

PIECE_BYTES = 65536  # a line past this is written in pieces of about this size
READ_BYTES = 65536


class LineScrubber:
    """Bytes in, the same bytes scrubbed out, a whole line (or a piece) at a time."""

    def __init__(self, scrubber: Scrubber, piece_bytes: int = PIECE_BYTES):
        self.scrubber, self.piece_bytes = scrubber, piece_bytes
        self._held = b""  # the unfinished line: never more than piece_bytes + one read

    def feed(self, data: bytes) -> bytes:
        """What may be written now that `data` came: its finished lines, scrubbed, or a piece
        of a line past the bound."""
        held = self._held + data
        end = max(held.rfind(b"\n"), held.rfind(b"\r")) + 1
        if end:
            self._held = held[end:]
            out = self._clean(held[:end])
        else:
            self._held, out = held, b""
        if len(self._held) > self.piece_bytes:
            text = self._held.decode("utf-8", "surrogateescape")
            keep = self.scrubber.open_end(text)
            self._held = text[len(text) - keep:].encode("utf-8", "surrogateescape")
            out += self._clean_text(text[:len(text) - keep])
        return out

    def finish(self) -> bytes:
        """The rest, at the end of the output (a last line without its newline)."""
        held, self._held = self._held, b""
        return self._clean(held)

    def _clean(self, data: bytes) -> bytes:
        return self._clean_text(data.decode("utf-8", "surrogateescape")) if data else b""

    def _clean_text(self, text: str) -> bytes:
        return self.scrubber.text(text).encode("utf-8", "surrogateescape")


def pump(src: int, dst: int, scrubber: Scrubber, source_gone: threading.Event,
         lock: threading.Lock | None = None) -> None:
    """Copy `src` (a pipe) to `dst` through a LineScrubber, until the pipe ends, or the process
    writing it has gone (`source_gone`) and what it wrote before it went has been read: a
    process it left behind holding the pipe must not keep its supervisor from exiting.
    `lock` is held around each write to a `dst` other threads write to as well."""
    lines = LineScrubber(scrubber)
    while True:
        ready, _, _ = select.select([src], [], [], 0 if source_gone.is_set() else 0.1)
        if not ready:
            if source_gone.is_set():
                break
            continue
        data = os.read(src, READ_BYTES)
        if not data:
            break
        _write(dst, lines.feed(data), lock)
    _write(dst, lines.finish(), lock)


def _write(dst: int, data: bytes, lock: threading.Lock | None) -> None:
    if not data:
        return
    with lock or contextlib.nullcontext(), contextlib.suppress(OSError):  # a reader that went: nothing to do
        view = memoryview(data)
        while view:
            view = view[os.write(dst, view):]
