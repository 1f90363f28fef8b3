# cython: language_level=3, boundscheck=False, wraparound=False
"""HTTP/1.1 chunked transfer decoding in C; same API and results as benchc/client/_chunked_py.py.

One call per socket read: the payload of every chunk in the read is copied into one
buffer and returned as one bytes object, so a server that writes each SSE event as its
own chunk costs no Python work per event. The decoding itself is `chunked_feed` over a
C struct (declared in benchc/client/_chunked_c.pxd), without the GIL: the class below and
the response reader of the receive loop (_response_c) run that one implementation.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from benchc.client._bytes cimport hex_value
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcpy, memmove


cdef void chunked_init(ChunkedCore* c) noexcept nogil:
    c.state = CHUNK_SIZE
    c.remaining = 0
    c.line_len = 0
    c.error = 0
    c.bad_len = 0


cdef inline void _fail(ChunkedCore* c, int why, const unsigned char* s, Py_ssize_t n) noexcept nogil:
    c.state = CHUNK_FAILED
    c.error = why
    c.bad_len = n if n < CHUNK_BAD_KEPT else CHUNK_BAD_KEPT
    if c.bad_len:
        memcpy(c.bad, s, c.bad_len)


cdef void _on_line(ChunkedCore* c, const unsigned char* s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k, end
    cdef long long size = 0
    cdef int d
    if n > CHUNK_MAX_LINE:
        _fail(c, CHUNK_TOO_LONG, s, 0)
        return
    if n and s[n - 1] == 13:
        n -= 1
    if c.state == CHUNK_DATA_END:
        if n:
            _fail(c, CHUNK_NO_CRLF, s, n)
        else:
            c.state = CHUNK_SIZE
    elif c.state == CHUNK_SIZE:
        end = 0
        while end < n and s[end] != 59:  # ';' starts extensions
            end += 1
        k = 0
        while k < end and (s[k] == 32 or s[k] == 9):
            k += 1
        while end > k and (s[end - 1] == 32 or s[end - 1] == 9):
            end -= 1
        if end == k or end - k > 15:
            _fail(c, CHUNK_BAD_SIZE, s, n)
            return
        while k < end:
            d = hex_value(s[k])
            if d < 0:
                _fail(c, CHUNK_BAD_SIZE, s, n)
                return
            size = size * 16 + d
            k += 1
        c.remaining = size
        c.state = CHUNK_DATA if size else CHUNK_TRAILER
    elif n == 0:  # TRAILER: the empty line ends the message
        c.state = CHUNK_DONE


cdef inline Py_ssize_t _size_crlf(ChunkedCore* c, const unsigned char* p, Py_ssize_t i,
                                  Py_ssize_t n) noexcept nogil:
    """A size line of hex digits alone and its CRLF at p[i:] (what servers write): read as
    _on_line reads it, and the index after it; 0 for any other line (_on_line reads it)."""
    cdef Py_ssize_t k = i
    cdef long long size = 0
    cdef int d
    while k < n and k - i < 16:
        d = hex_value(p[k])
        if d < 0:
            break
        size = size * 16 + d
        k += 1
    if k == i or k - i > 15 or k + 1 >= n or p[k] != 13 or p[k + 1] != 10:
        return 0
    c.remaining = size
    c.state = CHUNK_DATA if size else CHUNK_TRAILER
    return k + 2


cdef inline bint _keep(ChunkedCore* c, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Adds p[:n] to the line kept across reads; False (and failed) when it grows too long."""
    if c.line_len + n > CHUNK_MAX_LINE:
        _fail(c, CHUNK_TOO_LONG, p, 0)
        return False
    memcpy(c.line + c.line_len, p, n)
    c.line_len += n
    return True


cdef Py_ssize_t chunked_feed(ChunkedCore* c, const unsigned char* p, Py_ssize_t n, unsigned char* out,
                             Py_ssize_t* rest) noexcept nogil:
    """Decodes p[:n] into out (room for n bytes; out may be p itself: the payload only ever
    moves towards the front) and returns the payload's length. rest[0] is where bytes after
    the message's end begin in p (n when none did)."""
    cdef Py_ssize_t i = 0, take, j, m = 0
    cdef const unsigned char* nl
    rest[0] = n
    while i < n:
        if c.state == CHUNK_DATA:
            take = n - i
            if c.remaining < take:
                take = c.remaining
            memmove(out + m, p + i, take)
            m += take
            i += take
            c.remaining -= take
            if c.remaining == 0:
                c.state = CHUNK_DATA_END
        elif c.state == CHUNK_SIZE or c.state == CHUNK_DATA_END or c.state == CHUNK_TRAILER:
            if c.line_len == 0:  # the lines a server writes per chunk, read without a search
                if c.state == CHUNK_DATA_END and i + 1 < n and p[i] == 13 and p[i + 1] == 10:
                    c.state = CHUNK_SIZE  # the payload's CRLF (an empty line: _on_line's)
                    i += 2
                    continue
                if c.state == CHUNK_SIZE:
                    j = _size_crlf(c, p, i, n)
                    if j > 0:
                        i = j
                        continue
            nl = <const unsigned char*>memchr(p + i, 10, n - i)
            j = (nl - p) if nl != NULL else n
            if nl == NULL or c.line_len:  # the line goes on past this read, or began before it
                if not _keep(c, p + i, j - i):
                    break
                if nl == NULL:
                    i = n
                    continue
                _on_line(c, c.line, c.line_len)
                c.line_len = 0
            else:
                _on_line(c, p + i, j - i)
            i = j + 1
        elif c.state == CHUNK_DONE:
            rest[0] = i
            break
        else:
            break
    return m


def error_text(int why, bytes bad):
    """The message of a failed decoding, as the twin words it."""
    if why == CHUNK_TOO_LONG:
        return "chunk line too long"
    if why == CHUNK_NO_CRLF:
        return f"chunk not followed by CRLF: {bad[:40]!r}"
    if why == CHUNK_BAD_SIZE:
        return f"bad chunk size line: {bad[:40]!r}"
    return None


cdef class ChunkedDecoder:
    cdef ChunkedCore core
    cdef public bytes excess

    def __init__(self):
        chunked_init(&self.core)
        self.excess = b""

    @property
    def state(self):
        return self.core.state

    @property
    def remaining(self):
        return self.core.remaining

    @property
    def done(self):
        return self.core.state == CHUNK_DONE

    @property
    def line(self):
        return PyBytes_FromStringAndSize(<char*>self.core.line, self.core.line_len)

    @property
    def error(self):
        return error_text(self.core.error, PyBytes_FromStringAndSize(<char*>self.core.bad, self.core.bad_len))

    def feed(self, bytes data):
        cdef const unsigned char* p = data
        cdef Py_ssize_t n = len(data), m, rest = 0
        cdef unsigned char* out
        if n == 0:
            return b""
        out = <unsigned char*>malloc(n)
        if out == NULL:
            raise MemoryError()
        try:
            m = chunked_feed(&self.core, p, n, out, &rest)
            if rest < n:
                self.excess += data[rest:]
            return PyBytes_FromStringAndSize(<char*>out, m)
        finally:
            free(out)
