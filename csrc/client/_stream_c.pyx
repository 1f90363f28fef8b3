# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One response stream, measured, in C; same API and results as benchc/client/_stream_py.py.

One call per socket read: SSE framing (memchr per line), and for each event a
fast path that reads the few fields benchc needs in place: one pass over the event
skips strings with memchr, counts nesting outside them, and notes where the values of
the keys it reads begin (`delta` and its direct `content` / `reasoning_content` /
`reasoning`, `text`, `finish_reason`, `usage` and its direct token counts). JSON
string escapes are decoded for the byte count (\\n, \\", \\uXXXX with surrogate
pairs). Anything else -- repeated keys, an error or tool_calls key, a logprobs
object, a string it cannot follow, a payload that is not an object, and the objects a
stream carries once at its end (usage's `prompt_tokens_details`, llama.cpp's `timings`)
-- goes to the twin's own `interpret` (json.loads), so both cores give the same results
on every input, from one definition of each field.
"""

import json

from benchc.client._bytes cimport hex_value
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memchr, memcmp

from benchc.metrics._hdr_c cimport Histogram
from benchc.client._stream_py import interpret as _interpret


cdef extern from "string.h":
    void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen) nogil


def _decode_piece(x):
    """A kept text piece: a str, or the raw bytes of a JSON string (escapes decoded here)."""
    if isinstance(x, str):
        return x
    if b"\\" in x:
        return json.loads(b'"' + x + b'"')
    return x.decode("utf-8", "surrogatepass")


cdef inline int64_t _to_us(int64_t ns) nogil:
    cdef int64_t us = (ns + 500) // 1000
    return us if us > 0 else 1


cdef inline Py_ssize_t _find(const unsigned char* p, Py_ssize_t a, Py_ssize_t b, const char* needle,
                             Py_ssize_t n) nogil:
    cdef const unsigned char* hit
    if b - a < n:
        return -1
    hit = <const unsigned char*>memmem(p + a, b - a, needle, n)
    return -1 if hit == NULL else hit - p


cdef inline Py_ssize_t _line_end(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) nogil:
    """The index of the first CR or LF in p[a:n], or -1. memchr for LF (SSE servers end
    lines with LF), then for a CR before it: two vectorised scans instead of a byte loop."""
    cdef const unsigned char* lf = <const unsigned char*>memchr(p + a, 10, n - a)
    cdef Py_ssize_t end = (lf - p) if lf != NULL else n
    cdef const unsigned char* cr = <const unsigned char*>memchr(p + a, 13, end - a)
    if cr != NULL:
        return cr - p
    return end if lf != NULL else -1


cdef inline Py_ssize_t _skip_ws(const unsigned char* p, Py_ssize_t i, Py_ssize_t b) nogil:
    while i < b and (p[i] == 32 or p[i] == 9 or p[i] == 10 or p[i] == 13):
        i += 1
    return i


cdef inline bint _is_null(const unsigned char* p, Py_ssize_t j, Py_ssize_t n) nogil:
    """The JSON value at p[j] is `null`."""
    return j + 4 <= n and memcmp(p + j, b"null", 4) == 0




cdef inline int _hex4(const unsigned char* p) nogil:
    """The value of 4 hex digits (a \\uXXXX escape), or -1."""
    cdef int k, h, v = 0
    for k in range(4):
        h = hex_value(p[k])
        if h < 0:
            return -1
        v = v * 16 + h
    return v


cdef Py_ssize_t _string(const unsigned char* p, Py_ssize_t i, Py_ssize_t b, int64_t* nbytes) nogil:
    """p[i] is just after an opening quote: return the index after the closing quote, and the
    UTF-8 byte length of the decoded string in nbytes; -1 when it cannot be followed."""
    cdef int64_t n = 0
    cdef int cp, lo
    cdef unsigned char c
    while i < b:
        c = p[i]
        if c == 34:  # '"'
            nbytes[0] = n
            return i + 1
        if c < 32:
            return -1  # control characters are invalid inside JSON strings
        if c != 92:  # '\\'
            n += 1
            i += 1
            continue
        if i + 1 >= b:
            return -1
        c = p[i + 1]
        if c == 117:  # \uXXXX
            if i + 6 > b:
                return -1
            cp = _hex4(p + i + 2)
            if cp < 0:
                return -1
            i += 6
            if 0xD800 <= cp <= 0xDBFF:
                # a high surrogate: a pair is one 4-byte character; a lone one, 3 bytes (as
                # Python's surrogatepass counts it)
                if i + 6 <= b and p[i] == 92 and p[i + 1] == 117:
                    lo = _hex4(p + i + 2)
                    if lo < 0:
                        return -1
                    if 0xDC00 <= lo <= 0xDFFF:
                        n += 4
                        i += 6
                        continue
                n += 3
            elif cp < 0x80:
                n += 1
            elif cp < 0x800:
                n += 2
            else:
                n += 3
            continue
        if c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or c == 114 or c == 116:
            n += 1
            i += 2
            continue
        return -1
    return -1


# bytes that may stand outside strings in JSON: whitespace, punctuation, numbers and the
# letters of true/false/null (a cheap screen, not a grammar: see _scan_keys)
cdef bint _JSON_BYTE[256]
for _ch in " \t\r\n,:{}[]-+.0123456789eEtruefalsn":
    _JSON_BYTE[ord(_ch)] = True


cdef struct Keys:
    # where the value of each key benchc reads starts (-1: absent): one pass finds them all
    Py_ssize_t delta, text, finish  # keys of choices[0]
    Py_ssize_t usage  # a top-level key
    Py_ssize_t text_key[3]  # content / reasoning_content / reasoning, keys of that delta
    Py_ssize_t completion, prompt  # keys of that usage object
    # an "error" or "tool_calls" key, a "logprobs" object, a repeated key, a "timings" object or
    # usage's "prompt_tokens_details" object: json.loads
    bint unusual


cdef inline bint _key_is(const unsigned char* k, Py_ssize_t klen, const char* name,
                         Py_ssize_t nlen) noexcept nogil:
    return klen == nlen and memcmp(k, name, nlen) == 0


cdef inline void _first(Py_ssize_t* slot, Py_ssize_t value, Keys* f) noexcept nogil:
    if slot[0] >= 0:
        f.unusual = True  # json.loads keeps the last of repeated keys; leave those to it
    else:
        slot[0] = value


cdef bint _scan_keys(const unsigned char* p, Py_ssize_t n, Keys* f) noexcept nogil:
    """Walks the event once: strings are skipped with memchr, nesting is counted outside
    them, and the keys benchc reads are recorded, where the twin reads them, with the start
    of their value: `choices`, `usage` at the top; `delta`, `text`, `finish_reason` in the
    first element of choices; the text keys in that delta; the token counts in that usage.
    False when a string does not end inside the event, when brackets do not balance, or when
    a byte outside strings is one JSON never has there. That screen is not a grammar: an
    event of valid JSON gives the twin's results; an invalid one that passes the screen
    (say `{"a":tru}`) may be read where json.loads would call it malformed."""
    cdef Py_ssize_t i = 0, e, t, v, klen, val, k
    cdef const unsigned char* q
    cdef const unsigned char* key
    cdef int depth = 0
    # the objects benchc reads: where each one's '{' is, then the depth inside it (-1: not
    # open; once closed, it stays closed)
    cdef Py_ssize_t choice_at = -1, delta_at = -1, usage_at = -1
    cdef int choice_depth = -1, delta_depth = -1, usage_depth = -1
    cdef unsigned char c
    f.delta = f.text = f.finish = f.usage = f.completion = f.prompt = -1
    f.text_key[0] = f.text_key[1] = f.text_key[2] = -1
    f.unusual = False
    while i < n:
        c = p[i]
        if c == 34:
            e = i + 1
            while True:  # the closing quote: one not escaped by an odd run of backslashes
                q = <const unsigned char*>memchr(p + e, 34, n - e)
                if q == NULL:
                    return False
                e = q - p
                t = e - 1
                while p[t] == 92:
                    t -= 1
                if (e - 1 - t) % 2 == 0:
                    break
                e += 1
            v = _skip_ws(p, e + 1, n)
            if v >= n or p[v] != 58:  # a value, not a key
                i = e + 1
                continue
            key, klen = p + i + 1, e - i - 1
            val = _skip_ws(p, v + 1, n)
            if val >= n:
                return False
            if memchr(key, 92, klen) != NULL:
                f.unusual = True  # an escaped key name: json.loads decodes it, we do not
            i = v + 1
            if _key_is(key, klen, b"error", 5) or _key_is(key, klen, b"tool_calls", 10):
                f.unusual = True
            elif _key_is(key, klen, b"logprobs", 8):
                if p[val] == 123:
                    f.unusual = True
            elif depth == 1:
                if _key_is(key, klen, b"choices", 7):
                    if choice_at != -1:
                        f.unusual = True  # repeated
                    choice_at = -2  # choices[0] is not an object: nothing to read there
                    if p[val] == 91:
                        k = _skip_ws(p, val + 1, n)
                        if k < n and p[k] == 123:
                            choice_at = k
                elif _key_is(key, klen, b"usage", 5):
                    _first(&f.usage, val, f)
                    if p[val] == 123:
                        usage_at = val
                elif _key_is(key, klen, b"timings", 7):
                    if p[val] == 123:
                        f.unusual = True  # llama.cpp's per-response timings: the twin reads them
            elif depth == choice_depth:
                if _key_is(key, klen, b"delta", 5):
                    _first(&f.delta, val, f)
                    if p[val] == 123:
                        delta_at = val
                elif _key_is(key, klen, b"text", 4):
                    _first(&f.text, val, f)
                elif _key_is(key, klen, b"finish_reason", 13):
                    _first(&f.finish, val, f)
            elif depth == delta_depth:
                if _key_is(key, klen, b"content", 7):
                    _first(&f.text_key[0], val, f)
                elif _key_is(key, klen, b"reasoning_content", 17):
                    _first(&f.text_key[1], val, f)
                elif _key_is(key, klen, b"reasoning", 9):
                    _first(&f.text_key[2], val, f)
            elif depth == usage_depth:
                if _key_is(key, klen, b"completion_tokens", 17):
                    _first(&f.completion, val, f)
                elif _key_is(key, klen, b"prompt_tokens", 13):
                    _first(&f.prompt, val, f)
                elif _key_is(key, klen, b"prompt_tokens_details", 21):
                    if p[val] == 123:
                        f.unusual = True  # the cached prompt tokens: the twin reads them
        elif c == 123 or c == 91:
            depth += 1
            if i == choice_at:
                choice_depth = depth
            elif i == delta_at:
                delta_depth = depth
            elif i == usage_at:
                usage_depth = depth
            i += 1
        elif c == 125 or c == 93:
            depth -= 1
            if depth < 0:
                return False
            if depth < choice_depth:
                choice_depth = -2  # closed: only choices[0] counts
            if depth < delta_depth:
                delta_depth = -2
            if depth < usage_depth:
                usage_depth = -2
            i += 1
        else:
            if not _JSON_BYTE[c]:
                return False  # not a byte JSON allows outside strings: let json.loads judge
            i += 1
    return depth == 0


cdef inline Py_ssize_t _text_at(const unsigned char* p, Py_ssize_t j, Py_ssize_t n,
                               int64_t* nbytes) noexcept nogil:
    """The text value at p[j]: for a non-empty string, the index of its closing quote (its
    raw bytes are p[j + 1:that]) and its decoded UTF-8 length in nbytes; -1 for null or
    an empty string (no text); -2 when it cannot be read here (json.loads decides)."""
    cdef Py_ssize_t e
    if p[j] == 34:
        e = _string(p, j + 1, n, nbytes)
        if e < 0:
            return -2
        return e - 1 if e - j > 2 else -1
    return -1 if _is_null(p, j, n) else -2


cdef inline int64_t _int_at(const unsigned char* p, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    """The non-negative integer at p[j]; -1 when j < 0 (absent), -2 when unreadable."""
    cdef int64_t v = 0
    cdef Py_ssize_t start = j
    if j < 0:
        return -1
    while j < n and 48 <= p[j] <= 57:
        v = v * 10 + (p[j] - 48)
        j += 1
    if j == start or j - start > 15 or (j < n and (p[j] == 46 or p[j] == 101 or p[j] == 69)):
        return -2
    return v


cdef class StreamParser:
    cdef bytes _buf
    cdef list _data
    cdef bint _has_data, _skip_lf
    # the common event is one `data:` line then a blank line, often in one read: it is
    # read in place (offsets into the current buffer) without a bytes object of its own
    cdef Py_ssize_t _pa, _pb
    cdef readonly int64_t first_text_ns, last_text_ns, done_ns, text_chunks, text_bytes
    cdef readonly int64_t usage_completion, usage_prompt, usage_cached, malformed, multi_token_chunks, events
    cdef readonly object finish_reason, malformed_example, error_event, server_timings
    cdef int64_t _prev_usage
    cdef list _texts  # None, or the output's pieces: str, or raw JSON string bytes to decode
    # The shape of this stream's plain text chunk: the bytes before its text value (with the
    # opening quote) and from its closing quote on. A server repeats them for every token of
    # a request (id, model, created...): an event that starts and ends with exactly these
    # bytes has the same keys in the same places, so only its text needs reading.
    cdef bytes _shape_head, _shape_tail
    cdef int64_t* _gaps
    cdef int64_t* _tokens
    cdef Py_ssize_t _n_gaps, _n_tokens, _cap

    def __cinit__(self, bint keep_text=False):
        self._texts = [] if keep_text else None
        self._shape_head = self._shape_tail = None
        self._buf = b""
        self._data = []
        self._has_data = False
        self._skip_lf = False
        self._pa = self._pb = -1
        self.first_text_ns = self.last_text_ns = self.done_ns = 0
        self.text_chunks = self.text_bytes = self.malformed = self.multi_token_chunks = self.events = 0
        self.usage_completion = self.usage_prompt = self.usage_cached = -1
        self.finish_reason = self.malformed_example = self.error_event = self.server_timings = None
        self._prev_usage = 0
        self._cap = 64
        self._gaps = <int64_t*>malloc(self._cap * sizeof(int64_t))
        self._tokens = <int64_t*>malloc(self._cap * sizeof(int64_t))
        if self._gaps == NULL or self._tokens == NULL:
            raise MemoryError()
        self._n_gaps = self._n_tokens = 0

    def __dealloc__(self):
        free(self._gaps)
        free(self._tokens)

    def text(self):
        """The whole output (kept only with keep_text=True; decoded here, off the hot path)."""
        if self._texts is None:
            raise ValueError("this parser was not asked to keep the text")
        return "".join(_decode_piece(x) for x in self._texts)

    @property
    def gaps_ns(self):
        return [self._gaps[i] for i in range(self._n_gaps)]

    @property
    def chunk_tokens(self):
        return [self._tokens[i] for i in range(self._n_tokens)]

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._cap * 2
        cdef int64_t* g = <int64_t*>realloc(self._gaps, cap * sizeof(int64_t))
        if g == NULL:
            raise MemoryError()
        self._gaps = g
        g = <int64_t*>realloc(self._tokens, cap * sizeof(int64_t))
        if g == NULL:
            raise MemoryError()
        self._tokens = g
        self._cap = cap
        return 0

    # ---------------------------------------------------------------- SSE framing (as _sse_py)

    def feed(self, data, int64_t now_ns):
        cdef bytes buf = self._buf + bytes(data) if self._buf else bytes(data)
        cdef const unsigned char* p = buf
        cdef Py_ssize_t n = len(buf), start = 0, i
        cdef unsigned char c
        if self._skip_lf and n > 0 and p[0] == 10:
            start = 1
        self._skip_lf = False
        while start < n:
            i = _line_end(p, start, n)
            if i < 0:
                break
            self._line(p, start, i, now_ns)
            if p[i] == 13:
                if i + 1 < n:
                    if p[i + 1] == 10:
                        i += 1
                else:
                    self._skip_lf = True
            start = i + 1
        self._materialise(p)
        self._buf = buf[start:]

    def close(self, int64_t now_ns):
        cdef bytes rest = self._buf
        cdef const unsigned char* p = rest
        if len(rest):
            self._line(p, 0, len(rest), now_ns)
            self._buf = b""
        self._line(p, 0, 0, now_ns)
        self._materialise(p)

    cdef inline void _materialise(self, const unsigned char* p):
        """A data line whose event is not complete yet outlives this buffer: copy it."""
        if self._pa >= 0:
            self._data.append(p[self._pa:self._pb])
            self._pa = self._pb = -1

    cdef int _line(self, const unsigned char* p, Py_ssize_t a, Py_ssize_t b, int64_t now) except -1:
        cdef Py_ssize_t colon
        cdef bytes payload
        if a == b:
            if self._has_data:
                self._has_data = False
                if self._pa >= 0 and not self._data:
                    a, b = self._pa, self._pb
                    self._pa = self._pb = -1
                    self._event(p + a, b - a, now)
                    return 0
                self._materialise(p)
                payload = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                self._data = []
                self._event(<const unsigned char*>payload, len(payload), now)
            return 0
        if p[a] == 58:
            return 0
        if b - a >= 5 and memcmp(p + a, b"data:", 5) == 0:
            colon = a + 4  # the common line, without a search
        else:
            colon = _find(p, a, b, ":", 1)
        if colon < 0:
            colon = b
        if colon - a != 4 or memcmp(p + a, b"data", 4) != 0:
            return 0
        a = colon + 1 if colon < b else b
        if a < b and p[a] == 32:
            a += 1
        if self._has_data:
            self._materialise(p)  # a second data line: the event is joined as bytes
            self._data.append(p[a:b])
        else:
            self._pa, self._pb = a, b
        self._has_data = True
        return 0

    # ---------------------------------------------------------------- events

    cdef int _event(self, const unsigned char* p, Py_ssize_t n, int64_t now) except -1:
        self.events += 1
        if n == 6 and memcmp(p, b"[DONE]", 6) == 0:
            if not self.done_ns:
                self.done_ns = now
            return 0
        if not self._fast(p, n, now):
            self._slow(p[:n], now)
        return 0

    cdef bint _fast(self, const unsigned char* p, Py_ssize_t n, int64_t now) except -1:
        """The known shapes, read in place; False sends the event to json.loads."""
        cdef Keys f
        cdef Py_ssize_t j, e
        cdef int k
        cdef int64_t text_len = -1, nbytes = 0, ct = -1, pt = -1
        cdef Py_ssize_t ts = -1, te = -1  # the text's raw JSON string, without its quotes
        cdef bint has_text = False
        cdef object finish = None
        if n < 2 or p[0] != 123 or p[n - 1] != 125:
            return False
        if self._shape_head is not None and self._same_shape(p, n, now):
            return True
        if not _scan_keys(p, n, &f) or f.unusual:
            return False
        if f.delta >= 0:
            if p[f.delta] != 123:
                return False
            for k in range(3):  # the first text key holding a non-empty string, as the twin
                if f.text_key[k] >= 0:
                    te = _text_at(p, f.text_key[k], n, &text_len)
                    if te == -2:
                        return False
                    if te >= 0:
                        ts = f.text_key[k] + 1
                        break
        elif f.text >= 0:
            te = _text_at(p, f.text, n, &text_len)
            if te == -2:
                return False
            ts = f.text + 1
        has_text = te >= 0
        j = f.finish
        if j >= 0:
            if p[j] == 34:
                e = _string(p, j + 1, n, &nbytes)
                if e < 0 or e - j - 2 != nbytes:
                    return False  # escapes in a finish_reason: let json decode it
                if e - j > 2:
                    finish = p[j + 1:e - 1].decode("utf-8")
            elif not _is_null(p, j, n):
                return False
        if f.usage >= 0:
            if p[f.usage] == 123:
                ct = _int_at(p, f.completion, n)
                pt = _int_at(p, f.prompt, n)
                if ct == -2 or pt == -2:
                    return False
            elif not _is_null(p, f.usage, n):
                return False
        self._commit(finish, None if ct < 0 else ct, None if pt < 0 else pt, text_len if has_text else 0,
                     p[ts:te] if has_text and self._texts is not None else None, now)
        if has_text and finish is None and ct < 0 and pt < 0:  # a plain text chunk: its shape
            self._shape_head, self._shape_tail = p[:ts], p[te:n]
        return True

    cdef int _commit(self, object finish, object completion, object prompt, int64_t text_bytes,
                     object text, int64_t now) except -1:
        """One event's fields into the stream's state, in the twin's order (`apply`): None is
        absent, text_bytes 0 is no text, text is what to keep (or None)."""
        cdef int64_t tokens = -1
        if finish is not None:
            self.finish_reason = finish
        if completion is not None:
            if text_bytes:
                tokens = completion - self._prev_usage
                if tokens > 1:
                    self.multi_token_chunks += 1
            self._prev_usage = completion
            self.usage_completion = completion
        if prompt is not None:
            self.usage_prompt = prompt
        if text_bytes:
            if self._texts is not None:
                self._texts.append(text)
            self._text(text_bytes, tokens, now)
        return 0

    cdef bint _same_shape(self, const unsigned char* p, Py_ssize_t n, int64_t now) except -1:
        """The event is this stream's text chunk shape with another text: read that text."""
        cdef Py_ssize_t a = len(self._shape_head), z = len(self._shape_tail), e
        cdef int64_t nbytes = 0
        if n < a + z or memcmp(p, <const char*>self._shape_head, a) != 0 \
                or memcmp(p + n - z, <const char*>self._shape_tail, z) != 0:
            return False
        e = _string(p, a, n, &nbytes)  # must close exactly where the tail begins
        if e != n - z + 1 or e - 1 == a:
            return False  # another string layout, or an empty text: the full path decides
        if self._texts is not None:
            self._texts.append(p[a:e - 1])
        self._text(nbytes, -1, now)
        return True

    cdef int _text(self, int64_t nbytes, int64_t tokens, int64_t now) except -1:
        self.text_bytes += nbytes
        if self.first_text_ns:
            if self._n_gaps >= self._cap - 1:
                self._grow()
            self._gaps[self._n_gaps] = now - self.last_text_ns
            self._n_gaps += 1
        else:
            self.first_text_ns = now
        self.last_text_ns = now
        self.text_chunks += 1
        if self._n_tokens >= self._cap - 1:
            self._grow()
        self._tokens[self._n_tokens] = tokens
        self._n_tokens += 1
        return 0

    cdef int _slow(self, bytes payload, int64_t now) except -1:
        """Anything the fast path does not read: the twin's own interpretation of the event."""
        fields = _interpret(payload)
        if fields is None:
            self.malformed += 1
            if self.malformed_example is None:
                self.malformed_example = bytes(payload[:200])
            return 0
        text_bytes, finish, completion, prompt, error, text, cached, timings = fields
        if error is not None:
            self.error_event = error
        if cached is not None:
            self.usage_cached = cached
        if timings is not None:
            self.server_timings = timings
        self._commit(finish, completion, prompt, text_bytes, text, now)
        return 0

    # ---------------------------------------------------------------- recording

    def record_gaps(self, Histogram itl, Histogram itl_token=None):
        """Record the chunk gaps (us) into `itl`, and per token into `itl_token` where a chunk's
        token count is known: a chunk of k tokens after gap g is k tokens of g/k."""
        cdef Py_ssize_t i
        cdef int64_t k
        for i in range(self._n_gaps):
            itl.record(_to_us(self._gaps[i]), 1)
        if itl_token is not None:
            for i in range(self._n_gaps):
                k = self._tokens[i + 1]
                if k > 0:
                    itl_token.record(_to_us(self._gaps[i] // k), k)
