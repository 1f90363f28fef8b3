# cython: language_level=3, boundscheck=False, wraparound=False
"""Server-sent events framing in C; same API and results as benchc/_sse_py.py.

One call per socket read: the loop over bytes runs without Python objects
except where a complete payload is handed back.
"""

from libc.string cimport memchr


cdef class SSEDecoder:
    cdef bytes _buf
    cdef list _data
    cdef bint _has_data
    cdef bint _skip_lf

    def __init__(self):
        self._buf = b""
        self._data = []
        self._has_data = False
        self._skip_lf = False

    @property
    def buffered(self):
        return len(self._buf)

    def feed(self, chunk):
        cdef bytes buf = self._buf + bytes(chunk) if self._buf else bytes(chunk)
        cdef const unsigned char* p = buf
        cdef Py_ssize_t n = len(buf)
        cdef Py_ssize_t start = 0
        cdef Py_ssize_t i
        cdef unsigned char c
        cdef list events = []
        if self._skip_lf and n > 0 and p[0] == 10:
            start = 1
        self._skip_lf = False
        i = start
        while i < n:
            c = p[i]
            if c == 10 or c == 13:
                self._line(p, start, i, events)
                if c == 13:
                    if i + 1 < n:
                        if p[i + 1] == 10:
                            i += 1
                    else:
                        self._skip_lf = True
                start = i + 1
            i += 1
        self._buf = buf[start:]
        return events

    def close(self):
        cdef list events = []
        cdef bytes rest = self._buf
        cdef const unsigned char* p = rest
        if len(rest):
            self._line(p, 0, len(rest), events)
            self._buf = b""
        self._line(p, 0, 0, events)
        return events

    cdef inline void _line(self, const unsigned char* p, Py_ssize_t a, Py_ssize_t b, list events):
        cdef Py_ssize_t colon
        cdef const unsigned char* hit
        if a == b:
            if self._has_data:
                events.append(b"\n".join(self._data))
                self._data = []
                self._has_data = False
            return
        if p[a] == 58:  # ':' comment
            return
        hit = <const unsigned char*>memchr(p + a, 58, b - a)
        colon = (hit - p) if hit != NULL else b
        # field name must be exactly "data"
        if colon - a != 4 or p[a] != 100 or p[a + 1] != 97 or p[a + 2] != 116 or p[a + 3] != 97:
            return
        a = colon + 1 if colon < b else b
        if a < b and p[a] == 32:
            a += 1
        self._data.append(p[a:b])
        self._has_data = True
