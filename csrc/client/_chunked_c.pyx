# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""HTTP/1.1 chunked transfer decoding in C; same API and results as benchc/client/_chunked_py.py.

One call per socket read: the payload of every chunk in the read is copied into one
buffer and returned as one bytes object, so a server that writes each SSE event as its
own chunk costs no Python work per event.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from benchc.client._bytes cimport hex_value
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcpy

cdef enum:
    SIZE = 0
    DATA = 1
    DATA_END = 2
    TRAILER = 3
    DONE = 4
    FAILED = 5
    MAX_LINE = 4096  # as the twin's MAX_LINE




cdef class ChunkedDecoder:
    cdef public int state
    cdef public long long remaining
    cdef unsigned char _line[MAX_LINE + 1]
    cdef Py_ssize_t _line_len
    cdef public object error
    cdef public bytes excess

    def __init__(self):
        self.state = SIZE
        self.remaining = 0
        self._line_len = 0
        self.error = None
        self.excess = b""

    @property
    def done(self):
        return self.state == DONE

    @property
    def line(self):
        return PyBytes_FromStringAndSize(<char*>self._line, self._line_len)

    def feed(self, bytes data):
        cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = len(data), i = 0, take, j, k
        cdef const unsigned char* nl
        cdef unsigned char* out
        cdef Py_ssize_t m = 0
        if n == 0:
            return b""
        out = <unsigned char*>malloc(n)
        if out == NULL:
            raise MemoryError()
        try:
            while i < n:
                if self.state == DATA:
                    take = n - i
                    if self.remaining < take:
                        take = self.remaining
                    memcpy(out + m, p + i, take)
                    m += take
                    i += take
                    self.remaining -= take
                    if self.remaining == 0:
                        self.state = DATA_END
                elif self.state == SIZE or self.state == DATA_END or self.state == TRAILER:
                    nl = <const unsigned char*>memchr(p + i, 10, n - i)
                    if nl == NULL:
                        take = n - i
                        if self._line_len + take > MAX_LINE:
                            self._fail("chunk line too long")
                            break
                        memcpy(self._line + self._line_len, p + i, take)
                        self._line_len += take
                        i = n
                        continue
                    j = nl - p
                    if self._line_len:  # the line began in an earlier read
                        take = j - i
                        if self._line_len + take > MAX_LINE:
                            self._fail("chunk line too long")
                            break
                        memcpy(self._line + self._line_len, p + i, take)
                        self._line_len += take
                        self._on_line(self._line, self._line_len)
                        self._line_len = 0
                    else:
                        self._on_line(p + i, j - i)
                    i = j + 1
                elif self.state == DONE:
                    self.excess += data[i:]
                    i = n
                else:
                    break
            return PyBytes_FromStringAndSize(<char*>out, m)
        finally:
            free(out)

    cdef int _on_line(self, const unsigned char* s, Py_ssize_t n) except -1:
        cdef Py_ssize_t k, end
        cdef long long size = 0
        cdef int d
        if n and s[n - 1] == 13:
            n -= 1
        if self.state == DATA_END:
            if n:
                self._fail(f"chunk not followed by CRLF: {PyBytes_FromStringAndSize(<char*>s, n)[:40]!r}")
            else:
                self.state = SIZE
        elif self.state == SIZE:
            end = 0
            while end < n and s[end] != 59:  # ';' starts extensions
                end += 1
            k = 0
            while k < end and (s[k] == 32 or s[k] == 9):
                k += 1
            while end > k and (s[end - 1] == 32 or s[end - 1] == 9):
                end -= 1
            if end == k or end - k > 15:
                return self._bad_size(s, n)
            while k < end:
                d = hex_value(s[k])
                if d < 0:
                    return self._bad_size(s, n)
                size = size * 16 + d
                k += 1
            self.remaining = size
            self.state = DATA if size else TRAILER
        elif n == 0:  # TRAILER: the empty line ends the message
            self.state = DONE
        return 0

    cdef int _bad_size(self, const unsigned char* s, Py_ssize_t n) except -1:
        self._fail(f"bad chunk size line: {PyBytes_FromStringAndSize(<char*>s, n)[:40]!r}")
        return 0

    cdef void _fail(self, str why):
        self.state = FAILED
        self.error = why
