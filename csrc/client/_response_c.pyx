# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One HTTP/1.1 response, read as its bytes arrive, in C; same API and results as
benchc/client/_response_py.py.

The reading is `response_feed` / `response_lost` over a C struct (benchc/client/_response_c.pxd),
without the GIL: the ResponseReader class below serves benchc.client.http1's asyncio
transports, and the receive loop (_rxloop_c) feeds the struct of such an object from its
own thread. The head, the chunked decoding (_chunked_c's core) and the stream parser
(_stream_c's core) run there without a Python object; failures are codes and the bytes
they name, put into words by the twin's functions when Python asks.
"""

import os

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t
from libc.stdlib cimport free
from libc.string cimport memchr, memcmp, memcpy, memmove

from benchc.client._bytes cimport bytes_reserve
from benchc.client._chunked_c cimport CHUNK_DONE, CHUNK_FAILED, chunked_feed, chunked_init
from benchc.client._stream_c cimport StreamParser, stream_feed

from benchc.client._chunked_c import error_text as _chunk_error_text
from benchc.client._response_py import (
    BAD_CHUNKED,
    BAD_CONTENT_LENGTH,
    BAD_STATUS_LINE,
    COMPRESSED,
    BAD_HEADER_LINE,
    CONFLICTING_LENGTH,
    HEAD_TOO_LARGE,
    TCHAR,
    LOST,
    MAX_HEAD,
    MAX_LENGTH_DIGITS,
    OVERSIZED_STREAM,
    error_detail,
    exc_text,
    lost_detail,
)
from benchc.client._sse_py import oversized_detail
from benchc.metrics.record import OVERSIZED, STREAM_BROKEN


cdef extern from "string.h":
    void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen) nogil

cdef int C_HEAD_TOO_LARGE = HEAD_TOO_LARGE
cdef int C_BAD_STATUS_LINE = BAD_STATUS_LINE
cdef int C_BAD_CONTENT_LENGTH = BAD_CONTENT_LENGTH
cdef int C_COMPRESSED = COMPRESSED
cdef int C_CONFLICTING_LENGTH = CONFLICTING_LENGTH
cdef int C_BAD_HEADER_LINE = BAD_HEADER_LINE
cdef bint IS_TCHAR[256]  # the twin's TCHAR, as a table
for _c in range(256):
    IS_TCHAR[_c] = _c in TCHAR
cdef int C_BAD_CHUNKED = BAD_CHUNKED
cdef int C_LOST = LOST
cdef int C_OVERSIZED_STREAM = OVERSIZED_STREAM
cdef Py_ssize_t C_MAX_HEAD = MAX_HEAD
cdef Py_ssize_t C_MAX_LENGTH_DIGITS = MAX_LENGTH_DIGITS


# ---------------------------------------------------------------- small byte helpers

cdef inline bint _space(unsigned char c) noexcept nogil:
    """ASCII whitespace as bytes.split() and bytes.strip() see it."""
    return c == 32 or c == 9 or c == 10 or c == 13 or c == 11 or c == 12


cdef inline unsigned char _lower(unsigned char c) noexcept nogil:
    return c + 32 if 65 <= c <= 90 else c


cdef bint _contains(const unsigned char* p, Py_ssize_t n, const char* word, Py_ssize_t k) noexcept nogil:
    """`word` (lower case) occurs in p[:n] read in lower case."""
    cdef Py_ssize_t i, j
    for i in range(n - k + 1):
        j = 0
        while j < k and _lower(p[i + j]) == <unsigned char>word[j]:
            j += 1
        if j == k:
            return True
    return False


cdef bint _is(const unsigned char* p, Py_ssize_t n, const char* word, Py_ssize_t k) noexcept nogil:
    """p[:n] read in lower case is `word`."""
    return n == k and _contains(p, n, word, k)


# ---------------------------------------------------------------- the struct's life

cdef void response_init(ResponseCore* r, StreamCore* parser, int64_t sent_ns) noexcept nogil:
    r.parser = parser
    r.status = -1
    r.mode = MODE_HEAD
    r.remaining = 0
    chunked_init(&r.chunked)
    r.got_bytes = False
    r.keep_alive = True
    r.finished = False
    r.end_ns = 0
    r.sent_ns = sent_ns
    r.early_reads = 0
    r.last_rx_ns = sent_ns
    r.has_keep_alive = False
    r.keep_alive_len = 0
    r.has_content_type = False
    r.content_type_len = 0
    r.error = 0
    r.lost_errno = 0
    r.named_len = 0
    r.head.p = NULL
    r.head.n = r.head.cap = 0
    r.excerpt_len = 0
    r.failed = False


cdef void response_free(ResponseCore* r) noexcept nogil:
    free(r.head.p)
    r.head.p = NULL


cdef inline void _finish(ResponseCore* r, int64_t now, int error) noexcept nogil:
    r.finished = True
    r.end_ns = now
    r.error = error


cdef void _fail(ResponseCore* r, int error, const unsigned char* named, Py_ssize_t n) noexcept nogil:
    r.keep_alive = False
    r.named_len = n if n < RESPONSE_KEPT else RESPONSE_KEPT
    if r.named_len > 0:
        memcpy(r.named, named, r.named_len)
    _finish(r, r.last_rx_ns, error)


# ---------------------------------------------------------------- reading

cdef void response_feed(ResponseCore* r, unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """One read's bytes, arrived at `now` (see the twin's feed). A chunked body is decoded in
    place: p[:n] is the caller's to lose."""
    cdef Py_ssize_t m
    if r.finished:
        return
    if now < r.sent_ns:  # no answer precedes its request: a clock step (see the twin)
        now = r.sent_ns
        r.early_reads += 1
    r.got_bytes = True
    r.last_rx_ns = now
    while r.mode == MODE_HEAD and r.head.n == 0 and n > 0:
        # the common read: a whole head, then body bytes (a coalesced answer: all of it). Only
        # the head goes to the head's buffer; the body is read where it lies, not copied first
        m = _whole_head(p, n)
        if m < 0:
            break
        if bytes_reserve(&r.head, m) < 0:
            r.failed = True
            return
        memcpy(r.head.p, p, m)
        r.head.n = m
        p, n = p + m, n - m
        if _read_head(r) < 0:
            if r.finished:
                # as when the whole read sat in the buffer: bytes past an answer that ended
                # at its head put the connection out of step
                r.keep_alive = r.keep_alive and n == 0
                return
            continue  # a 1xx head, read and dropped: the next one may follow in this read
        r.head.n = 0
        _body(r, p, n, now)
        return
    if r.mode == MODE_HEAD:
        if bytes_reserve(&r.head, n) < 0:
            r.failed = True
            return
        memcpy(r.head.p + r.head.n, p, n)
        r.head.n += n
        m = _read_head(r)
        if m < 0:
            return
        # the body bytes that followed the head, still in the head's buffer
        _body(r, r.head.p + m, r.head.n - m, now)
        r.head.n = 0
        return
    _body(r, p, n, now)


cdef void _body(ResponseCore* r, unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    cdef Py_ssize_t m, rest = 0
    if r.mode == MODE_CHUNKED:
        m = chunked_feed(&r.chunked, p, n, p, &rest)  # the payload only moves to the front
        if m:
            _deliver(r, p, m, now)
            if r.finished:
                return
        if r.chunked.state == CHUNK_DONE:
            r.keep_alive = r.keep_alive and rest == n
            _finish(r, now, 0)
        elif r.chunked.state == CHUNK_FAILED:
            r.keep_alive = False
            _finish(r, now, C_BAD_CHUNKED)
    elif r.mode == MODE_LENGTH:
        if n > r.remaining:
            r.keep_alive = False  # bytes past the body: the connection is out of step
            n = r.remaining
        r.remaining -= n
        if n:
            _deliver(r, p, n, now)
            if r.finished:
                return
        if r.remaining == 0:
            _finish(r, now, 0)
    elif n:  # MODE_CLOSE: the body ends when the server closes
        _deliver(r, p, n, now)


cdef void _deliver(ResponseCore* r, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    cdef Py_ssize_t room
    if r.status == 200:
        if r.parser != NULL:
            if stream_feed(r.parser, p, n, now) < 0:
                r.failed = True
            elif r.parser.oversized:  # the parser stopped reading: so does the connection
                r.keep_alive = False
                _finish(r, now, C_OVERSIZED_STREAM)
    elif r.excerpt_len < RESPONSE_EXCERPT:
        room = RESPONSE_EXCERPT - r.excerpt_len
        if n > room:
            n = room
        memcpy(r.excerpt + r.excerpt_len, p, n)
        r.excerpt_len += n


cdef Py_ssize_t _whole_head(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """The length of the head at p (the empty lines _read_head skips before it, the head, its
    blank line) when all of it is in p[:n], else -1."""
    cdef Py_ssize_t k = 0, end, sep = 0
    while k < n and (p[k] == 13 or p[k] == 10):
        k += 1
    end = _blank_line(p + k, n - k, &sep)
    return -1 if end < 0 else k + end + sep


cdef Py_ssize_t _read_head(ResponseCore* r) noexcept nogil:
    """Reads the head at the front of r.head: the offset of the body bytes after it, or -1
    while it is incomplete (or broken: the response is then finished). Skips 1xx heads."""
    cdef Py_ssize_t end, sep, rest, k
    while True:
        k = 0  # empty lines before a status line are skipped (the twin's)
        while k < r.head.n and (r.head.p[k] == 13 or r.head.p[k] == 10):
            k += 1
        if k:
            memmove(r.head.p, r.head.p + k, r.head.n - k)
            r.head.n -= k
        end = _blank_line(r.head.p, r.head.n, &sep)
        if end >= 0 and end + sep > C_MAX_HEAD:  # whole, as when its bytes come in pieces (the twin's)
            _fail(r, C_HEAD_TOO_LARGE, NULL, 0)
            return -1
        if end < 0:
            if r.head.n > C_MAX_HEAD:
                _fail(r, C_HEAD_TOO_LARGE, NULL, 0)
            return -1
        if not _parse_head(r, r.head.p, end):
            r.status = -1  # a head that cannot be read has no status (the twin's _one_head)
            return -1
        rest = end + sep
        if 100 <= r.status < 200:  # 100 Continue and friends
            r.status = -1
            r.mode = MODE_HEAD
            memmove(r.head.p, r.head.p + rest, r.head.n - rest)
            r.head.n -= rest
            if r.head.n == 0:
                return -1
            continue
        if r.mode == MODE_LENGTH and r.remaining == 0:
            r.keep_alive = r.keep_alive and r.head.n == rest  # bytes past the answer: out of step
            _finish(r, r.last_rx_ns, 0)
            return -1
        return rest


cdef Py_ssize_t _blank_line(const unsigned char* p, Py_ssize_t n, Py_ssize_t* sep) noexcept nogil:
    """Where the head's first blank line begins (the twin's _BLANK_LINE: CR? LF CR? LF, the
    earliest), its length in *sep; -1 when there is none yet."""
    cdef const unsigned char* lf
    cdef Py_ssize_t j = 0, end, after
    while True:
        lf = <const unsigned char*>memchr(p + j, 10, n - j)
        if lf == NULL:
            return -1
        j = lf - p
        if j + 1 < n and p[j + 1] == 10:
            after = j + 2
        elif j + 2 < n and p[j + 1] == 13 and p[j + 2] == 10:
            after = j + 3
        else:
            j += 1
            continue
        end = j - 1 if j > 0 and p[j - 1] == 13 else j
        sep[0] = after - end
        return end


cdef bint _parse_head(ResponseCore* r, unsigned char* h, Py_ssize_t n) noexcept nogil:
    """The status line and the headers that frame the body or keep the connection (see the
    twin's _parse_head); False when the head is broken (the response is then finished). The
    head's folded lines are joined in place (h[:n] is the head's own buffer, read once)."""
    cdef Py_ssize_t eol, i, a0, b0, a1, b1, j, va, vb, name_end, k
    cdef int64_t length = -1
    cdef bint chunked = False, transfer_encoding = False
    cdef const unsigned char* nl = <const unsigned char*>memchr(h, 10, n)
    eol = (nl - h) if nl != NULL else n
    # the first two whitespace-separated words of the status line
    i = 0
    while i < eol and _space(h[i]):
        i += 1
    a0 = i
    while i < eol and not _space(h[i]):
        i += 1
    b0 = i
    while i < eol and _space(h[i]):
        i += 1
    a1 = i
    while i < eol and not _space(h[i]):
        i += 1
    b1 = i
    if a1 == b1 or b0 - a0 < 7 or memcmp(h + a0, b"HTTP/1.", 7) != 0 or b1 - a1 != 3 \
            or not (48 <= h[a1] <= 57 and 48 <= h[a1 + 1] <= 57 and 48 <= h[a1 + 2] <= 57):
        _fail(r, C_BAD_STATUS_LINE, h, eol)
        return False
    r.status = (h[a1] - 48) * 100 + (h[a1 + 1] - 48) * 10 + (h[a1 + 2] - 48)
    if b0 - a0 == 8 and memcmp(h + a0, b"HTTP/1.0", 8) == 0:
        r.keep_alive = False
    if not _field_lines_ok(r, h, eol, n):
        return False
    n = _unfold(h, eol, n)
    # every line start (after a LF) of the fields: `[ \t]*NAME:VALUE` up to CR or LF
    j = eol
    while j < n:
        i = j + 1  # just after the LF
        nl = <const unsigned char*>memchr(h + i, 10, n - i) if i < n else NULL
        j = (nl - h) if nl != NULL else n
        while i < j and (h[i] == 32 or h[i] == 9):
            i += 1
        name_end = i
        while name_end < j and h[name_end] != 58 and h[name_end] != 32 and h[name_end] != 9 \
                and h[name_end] != 13:
            name_end += 1
        va = name_end
        if va >= j or h[va] != 58:
            continue
        va += 1
        vb = va
        while vb < j and h[vb] != 13:
            vb += 1
        while va < vb and _space(h[va]):
            va += 1
        while vb > va and _space(h[vb - 1]):
            vb -= 1
        if _is(h + i, name_end - i, b"transfer-encoding", 17):
            chunked = chunked or _contains(h + va, vb - va, b"chunked", 7)
            transfer_encoding = True
        elif _is(h + i, name_end - i, b"content-length", 14):
            if vb == va or vb - va > C_MAX_LENGTH_DIGITS or not _digits(h + va, vb - va):
                _fail_lower(r, C_BAD_CONTENT_LENGTH, h + va, vb - va)
                return False
            if length >= 0:  # a second one (the twin's CONFLICTING_LENGTH)
                _fail_lower(r, C_CONFLICTING_LENGTH, h + va, vb - va)
                return False
            length = 0
            while va < vb:
                length = length * 10 + (h[va] - 48)
                va += 1
        elif _is(h + i, name_end - i, b"connection", 10):
            if _contains(h + va, vb - va, b"close", 5):
                r.keep_alive = False
            elif _contains(h + va, vb - va, b"keep-alive", 10):
                r.keep_alive = True
        elif _is(h + i, name_end - i, b"keep-alive", 10):
            r.has_keep_alive = True  # the last one counts, as in the twin
            r.keep_alive_len = vb - va if vb - va < RESPONSE_KEPT else RESPONSE_KEPT
            for k in range(r.keep_alive_len):
                r.keep_alive_value[k] = _lower(h[va + k])
        elif _is(h + i, name_end - i, b"content-type", 12):
            r.has_content_type = True  # the last one counts, as in the twin
            r.content_type_len = vb - va if vb - va < RESPONSE_KEPT else RESPONSE_KEPT
            for k in range(r.content_type_len):
                r.content_type[k] = _lower(h[va + k])
        elif _is(h + i, name_end - i, b"content-encoding", 16) and vb > va \
                and not _is(h + va, vb - va, b"identity", 8):
            _fail_lower(r, C_COMPRESSED, h + va, vb - va)
            return False
    if transfer_encoding and length >= 0:
        _fail(r, C_CONFLICTING_LENGTH, NULL, 0)
        return False
    if 100 <= r.status < 200:
        return True
    if r.status == 204 or r.status == 304:  # ends at its head, whatever its headers say (the twin's)
        r.mode = MODE_LENGTH
        r.remaining = 0
    elif chunked:
        r.mode = MODE_CHUNKED
        chunked_init(&r.chunked)
    elif length >= 0:
        r.mode = MODE_LENGTH
        r.remaining = length
    else:
        r.mode = MODE_CLOSE
        r.keep_alive = False
    return True


cdef bint _field_lines_ok(ResponseCore* r, const unsigned char* h, Py_ssize_t eol, Py_ssize_t n) noexcept nogil:
    """Every field line is NAME ":" VALUE with NAME a token, or a folded line (SP or HT first, not
    the first line):
    the twin's check (aiohttp's too); False, the response failed, at the first that is not."""
    cdef Py_ssize_t i, j = eol, e, k
    cdef const unsigned char* nl
    while j < n:
        i = j + 1
        nl = <const unsigned char*>memchr(h + i, 10, n - i) if i < n else NULL
        j = (nl - h) if nl != NULL else n
        e = j - 1 if j > i and h[j - 1] == 13 else j  # the line without its CR
        if i < e and (h[i] == 32 or h[i] == 9):
            if i > eol + 1:
                continue  # a folded line continues the one before
            if h[i] == 9 or (i + 1 < e and (h[i + 1] == 32 or h[i + 1] == 9)):  # the twin's
                _fail(r, C_BAD_HEADER_LINE, h + i, e - i)
                return False
            i += 1  # the first line led by one SP: a field all the same (the twin's)
        k = i
        while k < e and h[k] != 58 and IS_TCHAR[h[k]]:
            k += 1
        if k == i or k >= e or h[k] != 58:  # no blank before the colon (the twin's)
            _fail(r, C_BAD_HEADER_LINE, h + i, e - i)
            return False
    return True


cdef Py_ssize_t _unfold(unsigned char* h, Py_ssize_t eol, Py_ssize_t n) noexcept nogil:
    """Joins each folded line of the fields (after the status line's LF at h[eol]) to the line
    before it, its line break and leading blanks read as one SP (the twin's _OBS_FOLD); the
    fields' new end."""
    cdef Py_ssize_t i = eol + 1, w = eol + 1
    if i >= n:  # no fields
        return n
    while i < n:
        if h[i] == 10 and i + 1 < n and (h[i + 1] == 32 or h[i + 1] == 9):
            if w > eol + 1 and h[w - 1] == 13:
                w -= 1  # the CR of the line break
            h[w] = 32
            w += 1
            i += 1
            while i < n and (h[i] == 32 or h[i] == 9):
                i += 1
            continue
        h[w] = h[i]
        w += 1
        i += 1
    return w


cdef inline bint _digits(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if not 48 <= p[i] <= 57:
            return False
    return True


cdef void _fail_lower(ResponseCore* r, int error, const unsigned char* named, Py_ssize_t n) noexcept nogil:
    """As _fail, naming a header value as the twin sees it (lower case)."""
    cdef Py_ssize_t i
    _fail(r, error, named, n)
    for i in range(r.named_len):
        r.named[i] = _lower(r.named[i])


cdef void response_lost(ResponseCore* r, int err, int64_t now) noexcept nogil:
    """The connection ended: `err` 0 when the server closed it, else the read's errno."""
    if r.finished:
        return
    if r.mode == MODE_CLOSE and err == 0:
        _finish(r, now, 0)
        return
    r.keep_alive = False
    if r.status == 200 and r.parser.done_ns:  # the answer had said it ended (see the twin)
        _finish(r, now, 0)
        return
    r.lost_errno = err
    _finish(r, now, C_LOST)


# ---------------------------------------------------------------- the Python face

cdef class ResponseReader:
    """See the twin. `parser` is a compiled StreamParser: its struct is fed from C."""

    def __cinit__(self, StreamParser parser, int64_t sent_ns=0):
        self.parser = parser
        response_init(&self.core, &parser.core, sent_ns)
        self._lost_text = None
        self.scratch.p = NULL
        self.scratch.n = self.scratch.cap = 0

    def __dealloc__(self):
        response_free(&self.core)
        free(self.scratch.p)

    def feed(self, data, int64_t now):
        cdef const unsigned char[::1] view = data
        cdef Py_ssize_t n = view.shape[0]
        if n == 0:
            response_feed(&self.core, NULL, 0, now)
            return
        if bytes_reserve(&self.scratch, n) < 0:
            raise MemoryError()
        memcpy(self.scratch.p, &view[0], n)  # de-chunked in place: not in the caller's bytes
        response_feed(&self.core, self.scratch.p, n, now)
        if self.core.failed:
            raise MemoryError("the response reader ran out of memory")

    def lost(self, exc, int64_t now):
        if self.core.finished:
            return
        if exc is not None:
            self._lost_text = exc_text(exc)
        response_lost(&self.core, 0 if exc is None else -1, now)

    @property
    def status(self):
        return None if self.core.status < 0 else self.core.status

    @property
    def got_bytes(self):
        return self.core.got_bytes

    @property
    def keep_alive(self):
        return self.core.keep_alive

    @property
    def excerpt(self):
        return PyBytes_FromStringAndSize(<char*>self.core.excerpt, self.core.excerpt_len)

    @property
    def finished(self):
        return self.core.finished

    @property
    def end_ns(self):
        return self.core.end_ns

    @property
    def last_rx_ns(self):
        return self.core.last_rx_ns

    @property
    def sent_ns(self):
        return self.core.sent_ns

    @property
    def early_reads(self):
        return self.core.early_reads

    @property
    def keep_alive_header(self):
        if not self.core.has_keep_alive:
            return None
        return PyBytes_FromStringAndSize(<char*>self.core.keep_alive_value, self.core.keep_alive_len)

    @property
    def content_type(self):
        if not self.core.has_content_type:
            return None
        return PyBytes_FromStringAndSize(<char*>self.core.content_type, self.core.content_type_len)

    @property
    def error(self):
        cdef int code = self.core.error
        if code == 0:
            return None
        if code == C_OVERSIZED_STREAM:
            return OVERSIZED, oversized_detail(self.parser.oversized)
        named = PyBytes_FromStringAndSize(<char*>self.core.named, self.core.named_len)
        if code == C_LOST:
            text = self._lost_text
            if self.core.lost_errno > 0:
                text = exc_text(OSError(self.core.lost_errno, os.strerror(self.core.lost_errno)))
            return STREAM_BROKEN, lost_detail(text, self.status, self.core.got_bytes)
        if code == C_BAD_CHUNKED:
            why = _chunk_error_text(self.core.chunked.error,
                                    PyBytes_FromStringAndSize(<char*>self.core.chunked.bad,
                                                              self.core.chunked.bad_len))
            return STREAM_BROKEN, error_detail(code, named, why)
        return STREAM_BROKEN, error_detail(code, named)
