"""HTTP/1.1 chunked transfer decoding, pure Python (the reference twin of csrc/client/_chunked_c.pyx).

`ChunkedDecoder().feed(data)` takes the body bytes of one socket read, in any split,
and returns the payload bytes they carry (all chunks of the read joined: one call and
one bytes object per read, however many chunks the server wrote). `done` turns true
at the terminating zero-size chunk and its trailers; bytes after that are kept in
`excess` (the connection is then not reused). A malformed size line or chunk end sets
`error` and stops decoding. Lines may end in CRLF or a bare LF, as lenient clients
accept.
"""

from __future__ import annotations

SIZE, DATA, DATA_END, TRAILER, DONE, FAILED = range(6)
MAX_LINE = 4096  # a size line (with extensions) or trailer line longer than this is an error


class ChunkedDecoder:
    def __init__(self) -> None:
        self.state = SIZE
        self.remaining = 0  # payload bytes left in the current chunk
        self.line = b""  # a size or trailer line not yet complete
        self.error: str | None = None
        self.excess = b""

    @property
    def done(self) -> bool:
        return self.state == DONE

    def feed(self, data: bytes) -> bytes:
        out = []
        i, n = 0, len(data)
        while i < n:
            st = self.state
            if st == DATA:
                take = min(self.remaining, n - i)
                out.append(data[i:i + take])
                i += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = DATA_END
            elif st in (SIZE, DATA_END, TRAILER):
                j = data.find(b"\n", i)
                if j < 0:
                    self.line += data[i:]
                    i = n
                    if len(self.line) > MAX_LINE:
                        self._fail("chunk line too long")
                    continue
                line = self.line + data[i:j]
                self.line = b""
                i = j + 1
                if len(line) > MAX_LINE:
                    self._fail("chunk line too long")
                    continue
                if line.endswith(b"\r"):
                    line = line[:-1]
                self._line(line)
            elif st == DONE:
                self.excess += data[i:]
                i = n
            else:  # FAILED
                break
        return b"".join(out)

    def _line(self, line: bytes) -> None:
        if self.state == DATA_END:
            if line:
                self._fail(f"chunk not followed by CRLF: {line[:40]!r}")
            else:
                self.state = SIZE
        elif self.state == SIZE:
            size = line.split(b";", 1)[0].strip(b" \t")
            if not size or len(size) > 15 or any(c not in b"0123456789abcdefABCDEF" for c in size):
                self._fail(f"bad chunk size line: {line[:40]!r}")
                return
            self.remaining = int(size, 16)
            self.state = DATA if self.remaining else TRAILER
        elif not line:  # TRAILER: the empty line ends the message
            self.state = DONE

    def _fail(self, why: str) -> None:
        self.state = FAILED
        self.error = why
