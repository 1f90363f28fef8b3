# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One response stream, measured, in C; same API and results as benchc/client/_stream_py.py.

One call per socket read: SSE framing (one scan for each line's end), and for each event a
fast path that reads the few fields benchc needs in place: one pass over the event
skips strings 16 bytes a step (benchc_quote), counts nesting outside them, and notes where the values of
the keys it reads begin (`delta` and its direct `content` / `reasoning_content` /
`reasoning`, `text`, `finish_reason`, `usage` and its direct token counts, and its
`completion_tokens_details.reasoning_tokens`). JSON
string escapes are decoded for the byte count (\\n, \\", \\uXXXX with surrogate
pairs). Anything else -- repeated keys, an error or tool_calls key, a logprobs
object, a string it cannot follow, a payload that is not an object, and the objects a
stream carries once at its end (usage's `prompt_tokens_details`, llama.cpp's `timings`)
-- goes to the twin's own `interpret` (json.loads), so both cores give the same results
on every input, from one definition of each field.

The parser is a C struct (StreamCore, benchc/client/_stream_c.pxd) and functions over it
that run without the GIL: `stream_feed` and `stream_close`. The StreamParser class below
wraps one; the receive loop (_rxloop_c) feeds the struct of such an object from its own
thread. Only an event the fast path cannot read takes the GIL, for `interpret`.

Body mode (`StreamParser(body=True)`, a non-streamed JSON answer): `stream_feed` skims the
body into its skeleton (`_body_feed`, the twin's benchc/client/_body_py.BodySkim, byte for byte)
without the GIL; `close` hands the skeleton to the twin's `_body_py.interpret`, once.
"""

import json

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from benchc.client._bytes cimport Bytes, bytes_put, bytes_set, hex_value
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memchr, memcmp, memcpy

from benchc.metrics._hdr_c cimport Histogram
from benchc.client._sse_py import EVENT_TOO_LARGE, LINE_TOO_LONG, MAX_SSE_BYTES
from benchc.client._stream_py import ANSWER as _ANSWER, REASONING as _REASONING, TOOL as _TOOL
from benchc.client._stream_py import MAX_CALL_INDEX as _MAX_CALL_INDEX
from benchc.client._stream_py import GAPS_KEPT, TIMINGS_INT, TIMINGS_MS
from benchc.metrics.latency import DIGITS, HIGHEST_US, LOWEST_US
from benchc.client._stream_py import interpret as _interpret
from benchc.client._body_py import DEEPEST_KEPT, MAX_KEPT_BODY
from benchc.client._body_py import interpret as _interpret_body
from benchc.client._sse_py import BODY_TOO_LARGE, MAX_KEPT_TEXT_BYTES, TEXT_TOO_LARGE


cdef extern from "string.h":
    void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen) nogil

# the bounds of _sse_py: a longer line, or an event with more data, stops the stream
# what a text is (the twin's constants)
cdef int ANSWER = _ANSWER, REASONING = _REASONING, TOOL = _TOOL
cdef int MAX_CALL_INDEX = _MAX_CALL_INDEX  # a kept piece's tag holds it in a byte (_piece)
cdef Py_ssize_t C_GAPS_KEPT = GAPS_KEPT
cdef enum:  # StreamCore.spill: the twin's _ITL, _ITL_TOKEN, _ITL_ANSWER
    SPILL_ITL = 0
    SPILL_TOKEN = 1
    SPILL_ANSWER = 2
cdef Py_ssize_t C_MAX_SSE = MAX_SSE_BYTES
cdef const unsigned char* UTF8_BOM = b"\xef\xbb\xbf"  # the twin's BOM: dropped once, first in a stream
cdef int C_LINE_TOO_LONG = LINE_TOO_LONG
cdef int C_EVENT_TOO_LARGE = EVENT_TOO_LARGE
cdef int C_BODY_TOO_LARGE = BODY_TOO_LARGE
cdef int C_TEXT_TOO_LARGE = TEXT_TOO_LARGE
cdef int64_t C_MAX_KEPT_TEXT = MAX_KEPT_TEXT_BYTES
cdef Py_ssize_t C_MAX_KEPT_BODY = MAX_KEPT_BODY
cdef int C_DEEPEST = DEEPEST_KEPT
cdef enum:  # how a string of a body is read (the twin's _KEEP, _EMPTY, _DROP)
    STR_KEEP = 1
    STR_EMPTY = 2
    STR_DROP = 3


cdef inline int64_t _to_us(int64_t ns) noexcept nogil:
    cdef int64_t us = (ns + 500) // 1000
    return us if us > 0 else 1


cdef inline Py_ssize_t _find(const unsigned char* p, Py_ssize_t a, Py_ssize_t b, const char* needle,
                             Py_ssize_t n) noexcept nogil:
    cdef const unsigned char* hit
    if b - a < n:
        return -1
    hit = <const unsigned char*>memmem(p + a, b - a, needle, n)
    return -1 if hit == NULL else hit - p


cdef extern from *:
    """
    /* The first CR or LF in p[a:n] (-1: none), in one pass: SSE2 (every x86-64 has it) tests 16
       bytes for both at once; elsewhere a memchr for LF, then one for a CR before it. */
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline Py_ssize_t benchc_eol(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) {
        const __m128i lf = _mm_set1_epi8(10), cr = _mm_set1_epi8(13);
        Py_ssize_t i = a;
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i*)(p + i));
            int m = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, lf), _mm_cmpeq_epi8(v, cr)));
            if (m) return i + __builtin_ctz((unsigned)m);
        }
        for (; i < n; i++)
            if (p[i] == 10 || p[i] == 13) return i;
        return -1;
    }
    #else
    static inline Py_ssize_t benchc_eol(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) {
        const unsigned char* lf = (const unsigned char*)memchr(p + a, 10, n - a);
        Py_ssize_t end = lf ? lf - p : n;
        const unsigned char* cr = (const unsigned char*)memchr(p + a, 13, end - a);
        if (cr) return cr - p;
        return lf ? end : -1;
    }
    #endif

    /* The first '"' in p[a:n] (-1: none). Most JSON strings are short (keys, ids): a 16-byte
       test reaches them without a call; long ones (a text repeated at a response's end) go
       on 16 bytes a step. */
    static inline Py_ssize_t benchc_quote(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) {
    #if defined(__SSE2__)
        const __m128i q = _mm_set1_epi8(34);
        Py_ssize_t i = a;
        for (; i + 16 <= n; i += 16) {
            int m = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)(p + i)), q));
            if (m) return i + __builtin_ctz((unsigned)m);
        }
        for (; i < n; i++)
            if (p[i] == 34) return i;
        return -1;
    #else
        const unsigned char* hit = a < n ? (const unsigned char*)memchr(p + a, 34, n - a) : NULL;
        return hit ? hit - p : -1;
    #endif
    }

    /* The index of the first byte >= 0x80 in p[i:n], or n: ASCII runs 16 bytes a step. */
    static inline Py_ssize_t benchc_ascii_run(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) {
    #if defined(__SSE2__)
        for (; i + 16 <= n; i += 16) {
            int m = _mm_movemask_epi8(_mm_loadu_si128((const __m128i*)(p + i)));
            if (m) return i + __builtin_ctz((unsigned)m);
        }
    #endif
        for (; i < n; i++)
            if (p[i] >= 0x80) return i;
        return n;
    }
    """
    Py_ssize_t benchc_eol(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) nogil
    Py_ssize_t benchc_quote(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) nogil
    Py_ssize_t benchc_ascii_run(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) nogil


cdef inline Py_ssize_t _line_end(const unsigned char* p, Py_ssize_t a, Py_ssize_t n) noexcept nogil:
    """The index of the first CR or LF in p[a:n], or -1 (one scan for both: benchc_eol). An
    SSE event's blank line is the most common line of all: its end is the first byte."""
    if a < n and (p[a] == 10 or p[a] == 13):
        return a
    return benchc_eol(p, a, n)


cdef inline Py_ssize_t _skip_ws(const unsigned char* p, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    while i < b and (p[i] == 32 or p[i] == 9 or p[i] == 10 or p[i] == 13):
        i += 1
    return i


cdef inline bint _is_null(const unsigned char* p, Py_ssize_t j, Py_ssize_t n) noexcept nogil:
    """The JSON value at p[j] is `null`."""
    return j + 4 <= n and memcmp(p + j, b"null", 4) == 0




cdef inline int _hex4(const unsigned char* p) noexcept nogil:
    """The value of 4 hex digits (a \\uXXXX escape), or -1."""
    cdef int k, h, v = 0
    for k in range(4):
        h = hex_value(p[k])
        if h < 0:
            return -1
        v = v * 16 + h
    return v


cdef inline bint _cont(unsigned char c) noexcept nogil:
    return 0x80 <= c <= 0xBF


cdef Py_ssize_t _utf8_at(const unsigned char* p, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """The length of the UTF-8 sequence at p[i] (a byte >= 0x80) as json.loads decodes bytes
    (UTF-8 with surrogatepass: encoded surrogates are accepted), or -1 when it is invalid
    there: json.loads then refuses the whole event, so the fast path must not read it."""
    cdef unsigned char c = p[i]
    if 0xC2 <= c <= 0xDF:
        return 2 if i + 1 < b and _cont(p[i + 1]) else -1
    if 0xE0 <= c <= 0xEF:
        if i + 2 >= b or not _cont(p[i + 2]):
            return -1
        if c == 0xE0:
            return 3 if 0xA0 <= p[i + 1] <= 0xBF else -1
        return 3 if _cont(p[i + 1]) else -1
    if 0xF0 <= c <= 0xF4:
        if i + 3 >= b or not _cont(p[i + 2]) or not _cont(p[i + 3]):
            return -1
        if c == 0xF0:
            return 4 if 0x90 <= p[i + 1] <= 0xBF else -1
        if c == 0xF4:
            return 4 if 0x80 <= p[i + 1] <= 0x8F else -1
        return 4 if _cont(p[i + 1]) else -1
    return -1


cdef bint _utf8_ok(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """The whole event decodes as json.loads decodes bytes (see _utf8_at)."""
    cdef Py_ssize_t i = 0, k
    while i < n:
        i = benchc_ascii_run(p, i, n)  # 16 bytes a step: the Responses API's events are long
        if i == n:
            break
        k = _utf8_at(p, i, n)
        if k < 0:
            return False
        i += k
    return True


cdef Py_ssize_t _string(const unsigned char* p, Py_ssize_t i, Py_ssize_t b, int64_t* nbytes) noexcept nogil:
    """p[i] is just after an opening quote: return the index after the closing quote, and the
    UTF-8 byte length of the decoded string in nbytes; -1 when it cannot be followed."""
    cdef int64_t n = 0
    cdef int cp, lo
    cdef unsigned char c, hi = 0  # the OR of the string's raw bytes: UTF-8 is checked when >= 0x80
    cdef Py_ssize_t start = i
    while i < b:
        c = p[i]
        if c == 34:  # '"'
            if hi >= 0x80 and not _utf8_ok(p + start, i - start):
                return -1  # bytes json.loads would not decode: it calls the event malformed
            nbytes[0] = n
            return i + 1
        if c < 32:
            return -1  # control characters are invalid inside JSON strings
        if c != 92:  # '\\'
            hi |= c
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
    Py_ssize_t details  # usage's completion_tokens_details
    Py_ssize_t reasoning  # its reasoning_tokens
    # the Responses and Messages APIs' events: a top-level `type` and `delta` (a string in
    # Responses, an object in Messages), and that delta object's `type` and text keys (text,
    # thinking, partial_json); `choices`: whether a top-level choices key is there at all
    Py_ssize_t type, top_delta, delta_type
    Py_ssize_t delta_field[3]
    # the objects the events a response sends once carry at the top (read by _once), and in
    # the Responses API's `response` its members read (id, usage, incomplete_details, output)
    # and the members read of its usage (output_tokens, input_tokens and their details)
    Py_ssize_t response, item, message, block
    Py_ssize_t rmember[4]
    Py_ssize_t rusage[4]
    bint choices
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
    """Walks the event once: strings are skipped (benchc_quote), nesting is counted outside
    them, and the keys benchc reads are recorded, where the twin reads them, with the start
    of their value: `choices`, `usage` at the top; `delta`, `text`, `finish_reason` in the
    first element of choices; the text keys in that delta; the token counts in that usage, and
    the reasoning tokens of its completion_tokens_details.
    False when a string does not end inside the event, when brackets do not balance or nest
    deeper than 64, or when
    a byte outside strings is one JSON never has there. That screen is not a grammar: an
    event of valid JSON gives the twin's results; an invalid one that passes the screen
    (say `{"a":tru}`) may be read where json.loads would call it malformed."""
    cdef Py_ssize_t i = 0, e, t, v, klen, val, k
    cdef const unsigned char* key
    cdef int depth = 0
    # the objects benchc reads: where each one's '{' is, then the depth inside it (-1: not
    # open; once closed, it stays closed)
    cdef Py_ssize_t choice_at = -1, delta_at = -1, usage_at = -1, details_at = -1, tdelta_at = -1
    cdef int choice_depth = -1, delta_depth = -1, usage_depth = -1, details_depth = -1, tdelta_depth = -1
    cdef Py_ssize_t response_at = -1, rusage_at = -1
    cdef int response_depth = -1, rusage_depth = -1
    cdef unsigned char c
    f.delta = f.text = f.finish = f.usage = f.completion = f.prompt = f.details = f.reasoning = -1
    f.text_key[0] = f.text_key[1] = f.text_key[2] = -1
    f.type = f.top_delta = f.delta_type = -1
    f.response = f.item = f.message = f.block = -1
    f.rmember[0] = f.rmember[1] = f.rmember[2] = f.rmember[3] = -1
    f.rusage[0] = f.rusage[1] = f.rusage[2] = f.rusage[3] = -1
    f.delta_field[0] = f.delta_field[1] = f.delta_field[2] = -1
    f.unusual = f.choices = False
    while i < n:
        c = p[i]
        if c == 34:
            e = i + 1
            while True:  # the closing quote: one not escaped by an odd run of backslashes
                e = benchc_quote(p, e, n)
                if e < 0:
                    return False
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
                    f.choices = True
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
                elif _key_is(key, klen, b"type", 4):
                    _first(&f.type, val, f)
                elif _key_is(key, klen, b"delta", 5):
                    _first(&f.top_delta, val, f)
                    if p[val] == 123:
                        tdelta_at = val
                elif _key_is(key, klen, b"response", 8):
                    _first(&f.response, val, f)
                    if p[val] == 123:
                        response_at = val
                elif _key_is(key, klen, b"item", 4):
                    _first(&f.item, val, f)
                elif _key_is(key, klen, b"message", 7):
                    _first(&f.message, val, f)
                elif _key_is(key, klen, b"content_block", 13):
                    _first(&f.block, val, f)
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
                elif _key_is(key, klen, b"completion_tokens_details", 25):
                    # read here: a server may send it with every chunk's usage
                    _first(&f.details, val, f)
                    if p[val] == 123:
                        details_at = val
            elif depth == details_depth:
                if _key_is(key, klen, b"reasoning_tokens", 16):
                    _first(&f.reasoning, val, f)
            elif depth == response_depth:
                if _key_is(key, klen, b"id", 2):
                    _first(&f.rmember[0], val, f)
                elif _key_is(key, klen, b"usage", 5):
                    _first(&f.rmember[1], val, f)
                    if p[val] == 123:
                        rusage_at = val
                elif _key_is(key, klen, b"incomplete_details", 18):
                    _first(&f.rmember[2], val, f)
                elif _key_is(key, klen, b"output", 6):
                    _first(&f.rmember[3], val, f)
            elif depth == rusage_depth:
                if _key_is(key, klen, b"output_tokens", 13):
                    _first(&f.rusage[0], val, f)
                elif _key_is(key, klen, b"input_tokens", 12):
                    _first(&f.rusage[1], val, f)
                elif _key_is(key, klen, b"input_tokens_details", 20):
                    _first(&f.rusage[2], val, f)
                elif _key_is(key, klen, b"output_tokens_details", 21):
                    _first(&f.rusage[3], val, f)
            elif depth == tdelta_depth:
                if _key_is(key, klen, b"type", 4):
                    _first(&f.delta_type, val, f)
                elif _key_is(key, klen, b"text", 4):
                    _first(&f.delta_field[0], val, f)
                elif _key_is(key, klen, b"thinking", 8):
                    _first(&f.delta_field[1], val, f)
                elif _key_is(key, klen, b"partial_json", 12):
                    _first(&f.delta_field[2], val, f)
        elif c == 123 or c == 91:
            depth += 1
            if depth > 64:
                return False  # deeper than LLM servers nest: json.loads judges (and may refuse)
            if i == choice_at:
                choice_depth = depth
            elif i == delta_at:
                delta_depth = depth
            elif i == usage_at:
                usage_depth = depth
            elif i == details_at:
                details_depth = depth
            elif i == tdelta_at:
                tdelta_depth = depth
            elif i == response_at:
                response_depth = depth
            elif i == rusage_at:
                rusage_depth = depth
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
            if depth < details_depth:
                details_depth = -2
            if depth < tdelta_depth:
                tdelta_depth = -2
            if depth < response_depth:
                response_depth = -2
            if depth < rusage_depth:
                rusage_depth = -2
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
    """The non-negative integer at p[j] up to MAX_COUNT; -1 when j < 0 (absent), -2 when
    unreadable or larger (the twin decides)."""
    cdef int64_t v = 0
    cdef Py_ssize_t start = j
    if j < 0:
        return -1
    while j < n and 48 <= p[j] <= 57:
        v = v * 10 + (p[j] - 48)
        j += 1
    if j == start or j - start > 15 or (j < n and (p[j] == 46 or p[j] == 101 or p[j] == 69)):
        return -2
    if v > (<int64_t>1 << 32):
        return -2  # past the twin's MAX_COUNT (_body_py): the twin takes it as not reported
    return v


# ---------------------------------------------------------------- buffers

cdef inline bytes _bytes_of(Bytes* b):
    return PyBytes_FromStringAndSize(<char*>b.p, b.n) if b.n else b""


# ---------------------------------------------------------------- the struct's life

cdef int stream_init(StreamCore* s, bint keep_text, bint body=False) noexcept nogil:
    """A fresh parser in *s (whose memory holds anything); -1 when memory ran out. `body`: it
    reads one JSON body (see the module)."""
    s.line.p = s.data.p = s.finish.p = s.error_event.p = s.shape_head.p = s.shape_tail.p = NULL
    s.texts.p = s.response_id.p = NULL
    s.response_id.n = s.response_id.cap = 0
    s.has_response_id = False
    s.line.n = s.data.n = s.finish.n = s.error_event.n = s.shape_head.n = s.shape_tail.n = s.texts.n = 0
    s.line.cap = s.data.cap = s.finish.cap = s.error_event.cap = s.shape_head.cap = s.shape_tail.cap = 0
    s.texts.cap = 0
    s.data_lines = 0
    s.has_data = s.skip_lf = False
    s.pa = s.pb = -1
    s.first_text_ns = s.last_text_ns = s.done_ns = s.text_chunks = s.text_bytes = 0
    s.malformed = s.multi_token_chunks = s.events = s.prev_usage = 0
    s.usage_completion = s.usage_prompt = s.usage_cached = s.usage_reasoning = -1
    s.first_reasoning_ns = s.first_answer_ns = s.reasoning_chunks = 0
    s.first_tool_ns = s.tool_chunks = s.unknown_events = 0
    s.shape_kind = s.shape_call = 0
    s.counter_at = s.counter_len = s.call_at = s.call_len = 0
    s.has_timings = False
    s.has_finish = s.has_error_event = s.has_shape = False
    s.ended = False
    s.example_len = 0
    s.oversized = 0
    s.first_len = 0
    s.bom = 0
    s.keep_text = keep_text
    s.body = body
    s.body_done = s.body_escape = s.body_object3 = s.body_key3 = s.body_read = False
    s.body_depth = s.body_string = 0
    s.results = -1
    s.piece_ends = NULL
    s.n_pieces = s.pieces_cap = 0
    s.cap = 256  # an answer's chunks, kept (one growth, x4, for up to 1k)
    s.n_gaps = s.n_tokens = 0
    s.max_gap_ns = 0
    s.last_kind = ANSWER
    s.spill[0] = s.spill[1] = s.spill[2] = NULL
    s.gaps = <int64_t*>malloc(s.cap * sizeof(int64_t))
    s.tokens = <int64_t*>malloc(s.cap * sizeof(int64_t))
    s.kinds = <unsigned char*>malloc(s.cap)
    if s.gaps == NULL or s.tokens == NULL or s.kinds == NULL:
        return -1
    return 0


cdef void stream_free(StreamCore* s) noexcept nogil:
    cdef int i
    if s.spill[0] != NULL or s.spill[1] != NULL or s.spill[2] != NULL:
        with gil:
            for i in range(3):
                Py_XDECREF(s.spill[i])
                s.spill[i] = NULL
    free(s.line.p)
    free(s.data.p)
    free(s.finish.p)
    free(s.error_event.p)
    free(s.shape_head.p)
    free(s.shape_tail.p)
    free(s.texts.p)
    free(s.response_id.p)
    free(s.piece_ends)
    free(s.gaps)
    free(s.tokens)
    free(s.kinds)
    s.kinds = NULL
    s.line.p = s.data.p = s.finish.p = s.error_event.p = s.shape_head.p = s.shape_tail.p = NULL
    s.texts.p = s.response_id.p = NULL
    s.piece_ends = s.gaps = s.tokens = NULL


# ---------------------------------------------------------------- SSE framing (as _sse_py)

cdef int stream_feed(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """One read's bytes, all stamped `now`: frames their events and reads each; -1 when
    memory ran out (or the twin's interpret raised). A line or event past the bounds stops
    the stream (s.oversized; 0 is returned): later reads are ignored."""
    cdef Py_ssize_t k
    cdef int held, m = 0  # m: bytes of this read that go on with a BOM (the twin's SSEDecoder.feed)
    if s.oversized:
        return 0
    if s.first_len < FIRST_KEPT:
        k = min(n, FIRST_KEPT - s.first_len)
        memcpy(s.first + s.first_len, p, k)
        s.first_len += k
    if s.body:
        return _body_feed(s, p, n, now)
    if s.bom < 0:
        return _sse_feed(s, p, n, now)
    held = s.bom
    while held + m < 3 and m < n and p[m] == UTF8_BOM[held + m]:
        m += 1
    if held + m == 3:  # a whole BOM: dropped
        s.bom = -1
        return _sse_feed(s, p + m, n - m, now)
    if m == n:  # still a BOM's beginning: held back
        s.bom = held + m
        return 0
    s.bom = -1  # no BOM: what was held back is the stream's start
    if held and _sse_feed(s, UTF8_BOM, held, now) < 0:
        return -1
    return 0 if s.oversized else _sse_feed(s, p, n, now)


cdef int _sse_feed(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """stream_feed's SSE framing, past the stream's first bytes."""
    cdef Py_ssize_t start = 0, i
    if s.skip_lf and n > 0 and p[0] == 10:
        start = 1  # the CR that ended the last read had its LF here
    s.skip_lf = False
    if s.line.n:  # a line begun in an earlier read: completed here, then read from its buffer
        i = _line_end(p, start, n)
        if s.line.n + ((i if i >= 0 else n) - start) > C_MAX_SSE:
            _stop(s, C_LINE_TOO_LONG)
            return 0
        if i < 0:
            return bytes_put(&s.line, p + start, n - start)
        if bytes_put(&s.line, p + start, i - start) < 0 or _line(s, s.line.p, 0, s.line.n, now) < 0:
            return -1
        if s.oversized:
            return 0
        if _materialise(s, s.line.p) < 0:
            return -1
        if s.oversized:
            return 0
        s.line.n = 0
        start = _after_eol(s, p, i, n)
    while start < n:
        i = _line_end(p, start, n)
        if i < 0:
            break
        if i - start > C_MAX_SSE:
            _stop(s, C_LINE_TOO_LONG)
            return 0
        if _line(s, p, start, i, now) < 0:
            return -1
        if s.oversized:
            return 0
        start = _after_eol(s, p, i, n)
    if n - start > C_MAX_SSE:  # a line not ended yet, already too long
        _stop(s, C_LINE_TOO_LONG)
        return 0
    if _materialise(s, p) < 0:
        return -1
    if s.oversized:
        return 0
    return bytes_put(&s.line, p + start, n - start)


cdef int _body_feed(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """A body's bytes into its skeleton (s.data), as the twin's BodySkim.feed; -1 when memory
    ran out."""
    cdef Py_ssize_t i = 0, j
    cdef unsigned char c
    cdef const unsigned char* q
    if s.body_done:
        return 0
    while i < n:
        if s.body_string:
            if s.body_escape:  # the byte after a backslash is never the string's end
                s.body_escape = False
                if s.body_string == STR_KEEP and bytes_put(&s.data, p + i, 1) < 0:
                    return -1
                i += 1
                continue
            j = i
            while j < n and p[j] != 34 and p[j] != 92:
                j += 1
            if s.body_string == STR_KEEP and bytes_put(&s.data, p + i, (j + 1 if j < n else n) - i) < 0:
                return -1
            if j == n:
                break
            i = j + 1
            if p[j] == 92:
                s.body_escape = True
            else:
                if s.body_string == STR_EMPTY and bytes_put(&s.data, b'"', 1) < 0:
                    return -1
                s.body_string = 0
            continue
        if s.body_depth > C_DEEPEST:
            j = i
            while j < n and p[j] != 34 and p[j] != 91 and p[j] != 93 and p[j] != 123 and p[j] != 125:
                j += 1
            if j == n:
                break
            i = j + 1
            c = p[j]
            if c == 34:
                s.body_string = STR_DROP
            elif c == 91 or c == 123:
                s.body_depth += 1
            else:
                s.body_depth -= 1
                if s.body_depth == C_DEEPEST and bytes_put(&s.data, p + j, 1) < 0:
                    return -1
            continue
        j = i
        while j < n and p[j] != 34 and p[j] != 91 and p[j] != 93 and p[j] != 123 and p[j] != 125 \
                and p[j] != 44 and p[j] != 58:
            j += 1
        if j == n:
            if bytes_put(&s.data, p + i, n - i) < 0:
                return -1
            break
        if bytes_put(&s.data, p + i, j + 1 - i) < 0:
            return -1
        i = j + 1
        c = p[j]
        if c == 34:
            s.body_string = STR_EMPTY if s.body_depth == C_DEEPEST and not s.body_key3 else STR_KEEP
        elif c == 91 or c == 123:
            s.body_depth += 1
            if s.body_depth == C_DEEPEST:
                s.body_object3 = s.body_key3 = c == 123
        elif c == 93 or c == 125:
            if s.body_depth > 0:
                s.body_depth -= 1
                if s.body_depth == 0:
                    s.body_done = True
                    s.done_ns = now
                    break
        elif s.body_depth == C_DEEPEST:
            s.body_key3 = s.body_object3 if c == 44 else False
    if s.data.n > C_MAX_KEPT_BODY:
        _stop(s, C_BODY_TOO_LARGE)
    return 0


cdef void _stop(StreamCore* s, int why) noexcept nogil:
    """A bound was passed: the stream is no longer read, and what it held is given back."""
    s.oversized = why
    s.has_data = False
    s.pa = -1
    s.data_lines = 0
    free(s.line.p)
    free(s.data.p)
    s.line.p = s.data.p = NULL
    s.line.n = s.line.cap = s.data.n = s.data.cap = 0


cdef int stream_close(StreamCore* s, int64_t now) noexcept nogil:
    """End of stream: an unterminated last line and event still count (see _sse_py.close)."""
    cdef int held = s.bom
    s.bom = -1
    if held > 0 and not s.oversized and not s.body and _sse_feed(s, UTF8_BOM, held, now) < 0:
        return -1  # a BOM's beginning, and the stream ended: it was the stream's start
    if s.oversized:
        return 0
    if s.line.n and _line(s, s.line.p, 0, s.line.n, now) < 0:
        return -1
    if s.oversized:
        return 0
    if _line(s, s.line.p, 0, 0, now) < 0 or _materialise(s, s.line.p) < 0:
        return -1
    s.line.n = 0
    return 0


cdef inline Py_ssize_t _after_eol(StreamCore* s, const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """Where the next line starts after the CR or LF at p[i] (CRLF is one line end)."""
    if p[i] == 13:
        if i + 1 < n:
            if p[i + 1] == 10:
                i += 1
        else:
            s.skip_lf = True
    return i + 1


cdef int _data_line(StreamCore* s, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Appends one data line to the event's data; past the bound, stops the stream (0)."""
    if s.data.n + (1 if s.data_lines else 0) + n > C_MAX_SSE:
        _stop(s, C_EVENT_TOO_LARGE)
        return 0
    if s.data_lines and bytes_put(&s.data, <const unsigned char*>b"\n", 1) < 0:
        return -1
    s.data_lines += 1
    return bytes_put(&s.data, p, n)


cdef inline int _materialise(StreamCore* s, const unsigned char* p) noexcept nogil:
    """A data line whose event is not complete yet outlives this buffer: copy it."""
    cdef Py_ssize_t a = s.pa
    if a >= 0:
        s.pa = -1
        return _data_line(s, p + a, s.pb - a)
    return 0


cdef int _line(StreamCore* s, const unsigned char* p, Py_ssize_t a, Py_ssize_t b, int64_t now) noexcept nogil:
    cdef Py_ssize_t colon
    cdef int r
    if a == b:
        if s.has_data:
            s.has_data = False
            if s.pa >= 0 and not s.data_lines:
                a, b = s.pa, s.pb
                s.pa = -1
                return _event(s, p + a, b - a, now)
            if _materialise(s, p) < 0:
                return -1
            if s.oversized:
                return 0
            r = _event(s, s.data.p, s.data.n, now)
            s.data.n = 0
            s.data_lines = 0
            return r
        return 0
    if p[a] == 58:
        return 0
    if b - a >= 6 and memcmp(p + a, b"event:", 6) == 0:
        return 0  # an event's name (the Responses and Messages APIs send one): its data says the type
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
    if s.has_data:
        if _materialise(s, p) < 0 or _data_line(s, p + a, b - a) < 0:  # a second data line
            return -1
        if s.oversized:
            return 0
    else:
        s.pa, s.pb = a, b
    s.has_data = True
    return 0


# ---------------------------------------------------------------- events

cdef int _event(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    cdef int r
    s.events += 1
    if s.ended:
        return 0  # one completion per response: what follows its end is not its answer (the twin's _event)
    if n == 6 and memcmp(p, b"[DONE]", 6) == 0:
        if not s.done_ns:
            s.done_ns = now
        return 0
    r = _fast(s, p, n, now)
    if r == 0:
        return _slow(s, p, n, now)
    return 0 if r > 0 else -1


cdef inline bint _ascii(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 128:
            return False
    return True


cdef int _fast(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """The known shapes, read in place: 1 when read, 0 to send the event to json.loads,
    -1 when memory ran out."""
    cdef Keys f
    cdef Py_ssize_t j, e
    cdef int k
    cdef int64_t text_len = -1, nbytes = 0, ct = -1, pt = -1, rt = -1
    cdef Py_ssize_t ts = -1, te = -1  # the text's raw JSON string, without its quotes
    cdef Py_ssize_t fa = -1, fb = -1  # the finish_reason's bytes
    cdef bint has_text = False
    cdef int kind = 0
    if n < 2 or p[0] != 123 or p[n - 1] != 125:
        return 0
    if s.has_shape:
        k = _same_shape(s, p, n, now)  # its head and tail were checked when the shape was taken
        if k != 0:
            return k
    if not _utf8_ok(p, n) or not _scan_keys(p, n, &f) or f.unusual:
        return 0  # bytes json.loads would not decode (it calls the event malformed), or an odd shape
    if f.type >= 0 or f.top_delta >= 0:
        return _fast_typed(s, p, n, &f, now)
    if f.delta >= 0:
        if p[f.delta] != 123:
            return 0
        for k in range(3):  # the first text key holding a non-empty string, as the twin
            if f.text_key[k] >= 0:
                te = _text_at(p, f.text_key[k], n, &text_len)
                if te == -2:
                    return 0
                if te >= 0:
                    ts = f.text_key[k] + 1
                    kind = REASONING if k > 0 else ANSWER  # reasoning_content or reasoning
                    break
    elif f.text >= 0:
        te = _text_at(p, f.text, n, &text_len)
        if te == -2:
            return 0
        ts = f.text + 1
    has_text = te >= 0
    j = f.finish
    if j >= 0:
        if p[j] == 34:
            e = _string(p, j + 1, n, &nbytes)
            if e < 0 or e - j - 2 != nbytes or not _ascii(p + j + 1, nbytes):
                return 0  # escapes (or bytes beyond ASCII) in a finish_reason: json decodes it
            if e - j > 2:
                fa, fb = j + 1, e - 1
        elif not _is_null(p, j, n):
            return 0
    if f.usage >= 0:
        if p[f.usage] == 123:
            ct = _int_at(p, f.completion, n)
            pt = _int_at(p, f.prompt, n)
            if ct == -2 or pt == -2:
                return 0
            if f.details >= 0:
                if p[f.details] == 123:
                    rt = _int_at(p, f.reasoning, n)
                    if rt == -2:
                        return 0  # null, negative, a float...: json decides
                elif not _is_null(p, f.details, n):
                    return 0
        elif not _is_null(p, f.usage, n):
            return 0
    if _commit(s, fa >= 0, p + (fa if fa >= 0 else 0), fb - fa, ct >= 0, ct, pt >= 0, pt, rt,
               text_len if has_text else 0, p + (ts if has_text else 0), te - ts, False, kind, 0, now) < 0:
        return -1
    if has_text and fa < 0 and ct < 0 and pt < 0 and rt < 0:  # a plain text chunk: its shape
        return _take_shape(s, p, n, ts, te, kind, 0)
    return 1


cdef int _take_shape(StreamCore* s, const unsigned char* p, Py_ssize_t n, Py_ssize_t ts, Py_ssize_t te,
                     int kind, int call) noexcept nogil:
    """A plain text chunk (text and nothing else read) becomes the stream's shape: 1, or -1
    when memory ran out. A tool piece's call index (`call`) goes with it; where the tail holds
    it, its digits are marked for _same_shape to compare whole."""
    cdef Py_ssize_t k, e
    if bytes_set(&s.shape_head, p, ts) < 0 or bytes_set(&s.shape_tail, p + te, n - te) < 0:
        return -1
    s.has_shape = True
    s.shape_kind = kind
    s.shape_call = call
    s.counter_len = s.call_len = 0
    if kind == TOOL:
        k = _find(p, te, n, b'"output_index":', 15)
        if k >= 0:
            k += 15
        else:
            k = _find(p, te, n, b'"index":', 8)
            if k >= 0:
                k += 8
        if k >= 0:
            while k < n and (p[k] == 32 or p[k] == 9 or p[k] == 10 or p[k] == 13):
                k += 1  # JSON's whitespace after the colon
            e = k
            while e < n and _is_digit(p[e]):
                e += 1
            s.call_at, s.call_len = k - te, e - k
    return 1


cdef inline bint _str_is(const unsigned char* p, Py_ssize_t j, Py_ssize_t n, const char* name,
                         Py_ssize_t nlen) noexcept nogil:
    """The JSON value at p[j] is the string `name` written without escapes."""
    return j + nlen + 2 <= n and p[j] == 34 and p[j + nlen + 1] == 34 and memcmp(p + j + 1, name, nlen) == 0


cdef inline bint _response_is(const unsigned char* p, Py_ssize_t j, Py_ssize_t n, const char* name,
                              Py_ssize_t nlen) noexcept nogil:
    """The JSON string at p[j] (known to start with "response.") is "response." + `name`,
    written without escapes."""
    return j + nlen + 11 <= n and p[j + nlen + 10] == 34 and memcmp(p + j + 10, name, nlen) == 0


cdef bint _quiet(const unsigned char* p, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """The event's type (its value at p[j]) is one that carries nothing benchc reads (the
    twin's _RESPONSES_QUIET and _MESSAGES_QUIET): among them the Responses API's `.done`
    events, which repeat what the deltas carried."""
    if j < 0 or p[j] != 34:
        return False
    if j + 11 <= n and memcmp(p + j + 1, b"response.", 9) == 0:
        return (_response_is(p, j, n, b"created", 7) or _response_is(p, j, n, b"in_progress", 11)
                or _response_is(p, j, n, b"queued", 6)
                or _response_is(p, j, n, b"output_item.done", 16)
                or _response_is(p, j, n, b"content_part.added", 18)
                or _response_is(p, j, n, b"content_part.done", 17)
                or _response_is(p, j, n, b"output_text.done", 16)
                or _response_is(p, j, n, b"output_text.annotation.added", 28)
                or _response_is(p, j, n, b"refusal.done", 12)
                or _response_is(p, j, n, b"reasoning_text.done", 19)
                or _response_is(p, j, n, b"reasoning_part.added", 20)
                or _response_is(p, j, n, b"reasoning_part.done", 19)
                or _response_is(p, j, n, b"reasoning_summary_part.added", 28)
                or _response_is(p, j, n, b"reasoning_summary_part.done", 27)
                or _response_is(p, j, n, b"reasoning_summary_text.done", 27)
                or _response_is(p, j, n, b"function_call_arguments.done", 28))
    return (_str_is(p, j, n, b"ping", 4) or _str_is(p, j, n, b"content_block_stop", 18)
            or _str_is(p, j, n, b"message_stop", 12))


cdef int _typed_kind(const unsigned char* p, Py_ssize_t n, Keys* f) noexcept nogil:
    """Which hot event of the Responses or Messages API this is: the kind of its text (the
    twin's ANSWER, REASONING, TOOL) and, in f.top_delta, where that text's value is; -1 for
    any other event (the twin reads it)."""
    cdef Py_ssize_t j = f.type
    if j < 0 or f.top_delta < 0:
        return -1
    if p[f.top_delta] == 34:  # Responses: the delta is the text
        if _str_is(p, j, n, b"response.output_text.delta", 26):
            return ANSWER
        if _str_is(p, j, n, b"response.reasoning_text.delta", 29) or \
                _str_is(p, j, n, b"response.reasoning_summary_text.delta", 37):
            return REASONING
        if _str_is(p, j, n, b"response.function_call_arguments.delta", 38):
            return TOOL
        return -1
    if p[f.top_delta] != 123 or not _str_is(p, j, n, b"content_block_delta", 19) or f.delta_type < 0:
        return -1
    j = f.delta_type  # Messages: the delta's type says which of its keys is the text
    if _str_is(p, j, n, b"text_delta", 10):
        f.top_delta = f.delta_field[0]
        return ANSWER
    if _str_is(p, j, n, b"thinking_delta", 14):
        f.top_delta = f.delta_field[1]
        return REASONING
    if _str_is(p, j, n, b"input_json_delta", 16):
        f.top_delta = f.delta_field[2]
        return TOOL
    return -1


# ------------------------------------------------ the events a response sends once, read in place
# The Responses and Messages APIs' events that come once a response (its usage, its end) or
# once an output item (a tool call's name) carry objects nested a few levels down. The twin
# reads them with json.loads; these functions walk the event to the few values it reads and
# give the same fields, or say "the twin decides" (0) for anything outside the common shapes
# (a repeated key, an escaped string where a name is compared, a count that is not a plain
# non-negative integer, ...). The event already passed _scan_keys: its strings end, its
# brackets balance, and no key holds an escape.

cdef Py_ssize_t _string_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """p[i] is just after an opening quote: the index after the closing quote, or -1."""
    cdef Py_ssize_t t
    while True:
        i = benchc_quote(p, i, n)
        if i < 0:
            return -1
        t = i - 1
        while p[t] == 92:
            t -= 1
        if (i - 1 - t) % 2 == 0:
            return i + 1
        i += 1


# what a byte does to _skip_value's walk: 0 nothing, 1 opens a string, 2 opens a container,
# 3 closes one
cdef unsigned char _NEST[256]
_NEST[34] = 1
_NEST[123] = _NEST[91] = 2
_NEST[125] = _NEST[93] = 3


cdef Py_ssize_t _skip_value(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """The index just past the JSON value that starts at p[i], or -1."""
    cdef int depth = 0
    cdef unsigned char c
    if p[i] == 34:
        return _string_end(p, i + 1, n)
    if p[i] != 123 and p[i] != 91:  # a number, true, false or null: to the next delimiter
        while i < n and p[i] != 44 and p[i] != 125 and p[i] != 93 and p[i] != 32 and p[i] != 9 \
                and p[i] != 10 and p[i] != 13:
            i += 1
        return i
    while i < n:
        c = _NEST[p[i]]
        if c == 0:
            i += 1
        elif c == 1:
            i = _string_end(p, i + 1, n)
            if i < 0:
                return -1
        elif c == 2:
            depth += 1
            i += 1
        else:
            depth -= 1
            i += 1
            if depth == 0:
                return i
    return -1


cdef Py_ssize_t _member(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, const char* key,
                        Py_ssize_t klen) noexcept nogil:
    """p[i] is an object's '{': where the value of its member `key` starts; -1 when it has
    none; -2 when the key is there twice (json.loads keeps the last: the twin decides) or the
    object cannot be walked."""
    cdef Py_ssize_t end
    return _member_end(p, i, n, key, klen, &end)


cdef Py_ssize_t _member_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, const char* key,
                            Py_ssize_t klen, Py_ssize_t* end) noexcept nogil:
    """_member, and the index just past the object in end (-1 when it cannot be walked)."""
    cdef Py_ssize_t found = -1, e, v
    end[0] = -1
    i = _skip_ws(p, i + 1, n)
    if i < n and p[i] == 125:
        end[0] = i + 1
        return -1
    while i < n:
        if p[i] != 34:
            return -2
        e = _string_end(p, i + 1, n)
        if e < 0:
            return -2
        v = _skip_ws(p, e, n)
        if v >= n or p[v] != 58:
            return -2
        v = _skip_ws(p, v + 1, n)
        if v >= n:
            return -2
        if e - i - 2 == klen and memcmp(p + i + 1, key, klen) == 0:
            if found >= 0:
                return -2
            found = v
        e = _skip_value(p, v, n)
        if e < 0:
            return -2
        i = _skip_ws(p, e, n)
        if i >= n:
            return -2
        if p[i] == 125:
            end[0] = i + 1
            return found
        if p[i] != 44:
            return -2
        i = _skip_ws(p, i + 1, n)
    return -2


cdef bint _members(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, const char** keys,
                   const Py_ssize_t* klens, Py_ssize_t* out, int count) noexcept nogil:
    """_member for `count` keys in one walk of the object at p[i]: where each one's value
    starts in out (-1: absent); False when a key is there twice or the object cannot be
    walked (the twin decides)."""
    cdef Py_ssize_t e, v, klen
    cdef int k
    for k in range(count):
        out[k] = -1
    i = _skip_ws(p, i + 1, n)
    if i < n and p[i] == 125:
        return True
    while i < n:
        if p[i] != 34:
            return False
        e = _string_end(p, i + 1, n)
        if e < 0:
            return False
        v = _skip_ws(p, e, n)
        if v >= n or p[v] != 58:
            return False
        v = _skip_ws(p, v + 1, n)
        if v >= n:
            return False
        klen = e - i - 2
        for k in range(count):
            if klen == klens[k] and memcmp(p + i + 1, keys[k], klen) == 0:
                if out[k] >= 0:
                    return False
                out[k] = v
                break
        e = _skip_value(p, v, n)
        if e < 0:
            return False
        i = _skip_ws(p, e, n)
        if i >= n:
            return False
        if p[i] == 125:
            return True
        if p[i] != 44:
            return False
        i = _skip_ws(p, i + 1, n)
    return False


cdef inline int _plain_is(const unsigned char* p, Py_ssize_t j, Py_ssize_t n, const char* name,
                          Py_ssize_t nlen) noexcept nogil:
    """The value at p[j] (j >= 0): 1 when it is the string `name`, 0 when it is another value
    (a string without escapes, or not a string), -1 when it is a string with an escape (it
    may decode to `name`: the twin decides)."""
    cdef Py_ssize_t e
    if p[j] != 34:
        return 0
    e = _string_end(p, j + 1, n)
    if e < 0 or memchr(p + j + 1, 92, e - j - 2) != NULL:
        return -1
    return 1 if e - j - 2 == nlen and memcmp(p + j + 1, name, nlen) == 0 else 0


cdef inline bint _count_at(const unsigned char* p, Py_ssize_t obj, Py_ssize_t n, const char* key,
                           Py_ssize_t klen, int64_t* out) noexcept nogil:
    """The object at p[obj]'s member `key` as a token count in out (-1: absent); False when
    it is there but not a plain non-negative integer (the twin decides: null, a float, ...)."""
    cdef Py_ssize_t j = _member(p, obj, n, key, klen)
    if j == -2:
        return False
    out[0] = _int_at(p, j, n)
    return out[0] != -2


cdef inline Py_ssize_t _object_at(const unsigned char* p, Py_ssize_t obj, Py_ssize_t n, const char* key,
                                  Py_ssize_t klen) noexcept nogil:
    """The object at p[obj]'s member `key` when it is an object (its '{'); -1 when it is
    absent or another value; -2: the twin decides."""
    cdef Py_ssize_t j = _member(p, obj, n, key, klen)
    if j < 0:
        return j
    return j if p[j] == 123 else -1


cdef int _tool_name(StreamCore* s, const unsigned char* p, Py_ssize_t n, Py_ssize_t o,
                    const char* kind, Py_ssize_t kind_len, const char* call_key, Py_ssize_t call_key_len,
                    int64_t now) noexcept nogil:
    """response.output_item.added / content_block_start: when its `key` object (item,
    content_block) is a tool call (its type `kind`: function_call, tool_use), the call's name
    is a tool-call chunk (the twin's _responses / _messages); `o`: where that object's value
    starts (-1: absent). 1, 0 (the twin decides), -1."""
    cdef Py_ssize_t t, j, te
    cdef int64_t text_len = 0
    cdef int r, k
    if o < 0 or p[o] != 123:
        return 1  # no such object: nothing
    t = _member(p, o, n, b"type", 4)
    if t == -2:
        return 0
    if t < 0:
        return 1
    r = _plain_is(p, t, n, kind, kind_len)
    if r < 0:
        return 0
    if r == 0:
        return 1  # a message, a text block...: nothing
    j = _member(p, o, n, b"name", 4)
    if j == -2:
        return 0
    if j < 0:
        return 1
    te = _text_at(p, j, n, &text_len)
    if te == -2:
        return 0
    if te == -1:
        return 1  # null or empty: no text
    k = _call_at(p, n, call_key, call_key_len)
    if k < 0:
        return 0
    if _commit(s, False, p, 0, False, 0, False, 0, -1, text_len, p + j + 1, te - j - 1, False, TOOL, k, now) < 0:
        return -1
    return 1


cdef int _call_at(const unsigned char* p, Py_ssize_t n, const char* key, Py_ssize_t klen) noexcept nogil:
    """The event's call index (its top-level `key`: output_index, index), as the twin's
    call_index; 0 when absent; -1 when the twin decides (null, negative, a float, twice...)."""
    cdef Py_ssize_t j = _member(p, 0, n, key, klen)
    cdef int64_t v
    if j == -1:
        return 0
    if j < 0:
        return -1
    v = _int_at(p, j, n)
    if v < 0:
        return -1
    return <int>(v if v < MAX_CALL_INDEX else MAX_CALL_INDEX)


cdef const char* _MESSAGES_USAGE_KEYS[4]
_MESSAGES_USAGE_KEYS[:] = [b"output_tokens", b"input_tokens", b"cache_read_input_tokens",
                           b"cache_creation_input_tokens"]
cdef Py_ssize_t _MESSAGES_USAGE_LENS[4]
_MESSAGES_USAGE_LENS[:] = [13, 12, 23, 27]


cdef int _messages_usage(StreamCore* s, const unsigned char* p, Py_ssize_t n, Py_ssize_t u,
                         int64_t* completion, int64_t* prompt) noexcept nogil:
    """The Messages API's usage object at p[u] (the twin's _messages_usage): output tokens in
    completion, input + cache read + cache creation in prompt (-1: absent), the cache read
    into the stream's cached tokens. 1, or 0: the twin decides."""
    cdef Py_ssize_t at[4]
    cdef int64_t v[4]
    cdef int k
    if not _members(p, u, n, _MESSAGES_USAGE_KEYS, _MESSAGES_USAGE_LENS, at, 4):
        return 0
    for k in range(4):
        v[k] = _int_at(p, at[k], n)
        if v[k] == -2:
            return 0  # null, a float, a negative count...: the twin decides
    completion[0] = v[0]
    prompt[0] = -1
    if v[1] >= 0:
        prompt[0] = v[1] + (v[2] if v[2] > 0 else 0) + (v[3] if v[3] > 0 else 0)
    if v[2] >= 0:
        s.usage_cached = v[2]
    return 1


cdef int _message_start(StreamCore* s, const unsigned char* p, Py_ssize_t n, Py_ssize_t m,
                        int64_t now) noexcept nogil:
    """message_start: the message's usage (`m`: where the message starts), its output tokens
    not yet any (the twin's)."""
    cdef Py_ssize_t u
    cdef int64_t completion = -1, prompt = -1
    if m < 0 or p[m] != 123:
        return 1
    u = _object_at(p, m, n, b"usage", 5)
    if u == -2:
        return 0
    if u >= 0 and not _messages_usage(s, p, n, u, &completion, &prompt):
        return 0
    if _commit(s, False, p, 0, False, 0, prompt >= 0, prompt, -1, 0, p, 0, False, ANSWER, 0, now) < 0:
        return -1
    return 1


# Messages' stop reasons in chat's words (the twin's _MESSAGES_STOPS)
cdef int _message_stop(const unsigned char* p, Py_ssize_t j, Py_ssize_t e, const char** word,
                       Py_ssize_t* wlen) noexcept nogil:
    cdef Py_ssize_t k = e - j - 2  # the string's length (it holds no escape)
    word[0], wlen[0] = <const char*>(p + j + 1), k
    if k == 8 and memcmp(p + j + 1, b"end_turn", 8) == 0 or k == 13 and memcmp(p + j + 1, b"stop_sequence", 13) == 0:
        word[0], wlen[0] = b"stop", 4
    elif k == 10 and memcmp(p + j + 1, b"max_tokens", 10) == 0:
        word[0], wlen[0] = b"length", 6
    elif k == 8 and memcmp(p + j + 1, b"tool_use", 8) == 0:
        word[0], wlen[0] = b"tool_calls", 10
    elif k > 100 or not _ascii(p + j + 1, k):
        return 0  # the twin cuts it at 100 characters
    return 1


cdef int _message_delta(StreamCore* s, const unsigned char* p, Py_ssize_t n, Py_ssize_t delta,
                        Py_ssize_t usage, int64_t now) noexcept nogil:
    """message_delta: the stop reason (in chat's words) and the usage (`delta`, `usage`: where
    they start, -1: absent)."""
    cdef Py_ssize_t d = delta if delta >= 0 and p[delta] == 123 else -1, j = -1, e = 0
    cdef int64_t completion = -1, prompt = -1
    cdef const char* word = NULL
    cdef Py_ssize_t wlen = 0
    if d >= 0:
        j = _member(p, d, n, b"stop_reason", 11)
        if j == -2:
            return 0
        if j >= 0 and p[j] == 34:
            e = _string_end(p, j + 1, n)
            if e < 0 or memchr(p + j + 1, 92, e - j - 2) != NULL:
                return 0
            if e - j == 2:
                j = -1  # empty: no stop reason
            elif not _message_stop(p, j, e, &word, &wlen):
                return 0
        else:
            j = -1  # null or not a string: none
    if usage >= 0 and p[usage] == 123 and not _messages_usage(s, p, n, usage, &completion, &prompt):
        return 0
    if _commit(s, j >= 0, <const unsigned char*>word if j >= 0 else p, wlen, completion >= 0, completion,
               prompt >= 0, prompt, -1, 0, p, 0, False, ANSWER, 0, now) < 0:
        return -1
    return 1


cdef int _responses_end(StreamCore* s, const unsigned char* p, Py_ssize_t n, Keys* f, bint incomplete,
                        int64_t now) noexcept nogil:
    """response.completed / .incomplete (the twin's _responses_end): the response's id, its
    usage, and the finish in chat's words: length (cut at max_output_tokens, which vLLM says
    inside response.completed), tool_calls when its output holds a function_call, else stop.
    _scan_keys found the response's members read, and its usage's (f.rmember, f.rusage)."""
    cdef Py_ssize_t r = f.response, j, d, w, e, o, k
    cdef Py_ssize_t* at = f.rmember
    cdef Py_ssize_t* us = f.rusage
    cdef int64_t completion = -1, prompt = -1, cached = -1, rtokens = -1
    cdef const char* finish = b"stop"
    cdef Py_ssize_t flen = 4
    cdef bint called = False
    cdef int is_call
    _end(s, now)  # whatever it holds (the twin's _responses_end)
    if r < 0 or p[r] != 123:
        return 1
    j = at[0]  # the id: what a later request names as its previous_response_id
    if j >= 0 and p[j] == 34:
        e = _string_end(p, j + 1, n)
        if e < 0 or memchr(p + j + 1, 92, e - j - 2) != NULL:
            return 0
        if e - j > 2:
            if bytes_set(&s.response_id, p + j + 1, e - j - 2) < 0:
                return -1
            s.has_response_id = True
    if at[1] >= 0 and p[at[1]] == 123:  # the usage
        completion, prompt = _int_at(p, us[0], n), _int_at(p, us[1], n)
        if completion == -2 or prompt == -2:
            return 0
        d = us[2]
        if d >= 0 and p[d] == 123 and not _count_at(p, d, n, b"cached_tokens", 13, &cached):
            return 0
        d = us[3]
        if d >= 0 and p[d] == 123 and not _count_at(p, d, n, b"reasoning_tokens", 16, &rtokens):
            return 0
    w = at[2] if at[2] >= 0 and p[at[2]] == 123 else -1
    j = _member(p, w, n, b"reason", 6) if w >= 0 else -1
    if j == -2:
        return 0
    if j >= 0 and _is_null(p, j, n):
        j = -1  # "reason": null is no reason
    if j >= 0:  # a reason: the response was cut
        is_call = _plain_is(p, j, n, b"max_output_tokens", 17)
        if is_call < 0 or p[j] != 34:
            return 0  # an escaped or non-string reason: the twin writes it
        if is_call == 0:
            e = _string_end(p, j + 1, n)
            if e - j - 2 > 100 or not _ascii(p + j + 1, e - j - 2):
                return 0
            finish, flen = <const char*>(p + j + 1), e - j - 2
        else:
            finish, flen = b"length", 6
    elif incomplete:
        finish, flen = b"length", 6
    else:
        o = at[3]
        if o >= 0 and p[o] == 91:  # any item a function_call: the answer called a tool
            k = _skip_ws(p, o + 1, n)
            while k < n and p[k] != 93:
                if p[k] == 123:
                    j = _member_end(p, k, n, b"type", 4, &e)
                    if j == -2:
                        return 0
                    if j >= 0:
                        is_call = _plain_is(p, j, n, b"function_call", 13)
                        if is_call < 0:
                            return 0
                        called = called or is_call == 1
                else:
                    e = _skip_value(p, k, n)
                if e < 0:
                    return 0
                k = _skip_ws(p, e, n)
                if k < n and p[k] == 44:
                    k = _skip_ws(p, k + 1, n)
            if called:
                finish, flen = b"tool_calls", 10
    if cached >= 0:
        s.usage_cached = cached
    if _commit(s, True, <const unsigned char*>finish, flen, completion >= 0, completion, prompt >= 0, prompt,
               rtokens, 0, p, 0, False, ANSWER, 0, now) < 0:
        return -1
    return 1


cdef inline void _end(StreamCore* s, int64_t now) noexcept nogil:
    """The response's end event (the twin's `ends`): its arrival ends E2E, and no later event is read."""
    s.ended = True
    if not s.done_ns:
        s.done_ns = now


cdef int _once(StreamCore* s, const unsigned char* p, Py_ssize_t n, Keys* f, int64_t now) noexcept nogil:
    """The events that come once a response or once an output item and carry something: read
    in place (1; -1 when memory ran out; 0: the twin decides); -2 for any other event."""
    cdef Py_ssize_t j = f.type
    if j < 0 or p[j] != 34:
        return -2
    if j + 11 <= n and memcmp(p + j + 1, b"response.", 9) == 0:
        if f.usage >= 0:
            return 0  # a top-level usage beside a Responses event: the twin says what it is
        if _response_is(p, j, n, b"completed", 9):
            return _responses_end(s, p, n, f, False, now)
        if _response_is(p, j, n, b"incomplete", 10):
            return _responses_end(s, p, n, f, True, now)
        if _response_is(p, j, n, b"output_item.added", 17):
            return _tool_name(s, p, n, f.item, b"function_call", 13, b"output_index", 12, now)
        return -2
    if _str_is(p, j, n, b"message_delta", 13):
        return _message_delta(s, p, n, f.top_delta, f.usage, now)
    if f.usage >= 0:
        return 0
    if _str_is(p, j, n, b"message_start", 13):
        return _message_start(s, p, n, f.message, now)
    if _str_is(p, j, n, b"content_block_start", 19):
        return _tool_name(s, p, n, f.block, b"tool_use", 8, b"index", 5, now)
    return -2


cdef int _fast_typed(StreamCore* s, const unsigned char* p, Py_ssize_t n, Keys* f, int64_t now) noexcept nogil:
    """The Responses and Messages APIs' events, read in place (as _fast: 1, 0, -1): the text
    deltas, the events that carry nothing benchc reads, and those a response sends once
    (_once); errors, unknown types and odd shapes go to the twin."""
    cdef int kind
    cdef int64_t text_len = -1
    cdef Py_ssize_t te
    cdef int r, call
    if f.choices:
        return 0  # a chat chunk that also names a type: the twin decides
    r = _once(s, p, n, f, now)
    if r != -2:
        return r
    if f.usage >= 0:
        return 0  # usage on a delta: the twin decides
    if _quiet(p, n, f.type):
        if _str_is(p, f.type, n, b"message_stop", 12):
            _end(s, now)
        return 1  # an event that carries nothing benchc reads (the twin's *_QUIET): read as nothing
    kind = _typed_kind(p, n, f)
    if kind < 0 or f.top_delta < 0:
        return 0
    te = _text_at(p, f.top_delta, n, &text_len)
    if te < 0:
        return 0  # empty, null or not a string: rare; the twin says what it is
    call = 0
    if kind == TOOL:  # Responses' output_index, Messages' index: which call the piece is of
        call = _call_at(p, n, b"output_index", 12) \
            if _str_is(p, f.type, n, b"response.function_call_arguments.delta", 38) else _call_at(p, n, b"index", 5)
        if call < 0:
            return 0
    if _commit(s, False, p, 0, False, 0, False, 0, -1, text_len, p + f.top_delta + 1, te - f.top_delta - 1,
               False, kind, call, now) < 0:
        return -1
    return _take_shape(s, p, n, f.top_delta + 1, te, kind, call)


cdef int _commit(StreamCore* s, bint has_finish, const unsigned char* finish, Py_ssize_t finish_len,
                 bint has_completion, int64_t completion, bint has_prompt, int64_t prompt,
                 int64_t reasoning_tokens, int64_t text_bytes, const unsigned char* text,
                 Py_ssize_t text_len, bint text_utf8, int kind, int call, int64_t now) noexcept nogil:
    """One event's fields into the stream's state, in the twin's order (`apply`): text_bytes 0
    is no text; text (raw JSON string bytes, or UTF-8 when text_utf8) is kept with keep_text;
    kind: what the text is (ANSWER, REASONING, TOOL); call: a tool piece's call index (-1:
    the caller kept the text, piece by call); reasoning_tokens -1 is absent."""
    cdef int64_t tokens = -1
    if has_finish:
        if bytes_set(&s.finish, finish, finish_len) < 0:
            return -1
        s.has_finish = True
    if has_completion:
        if text_bytes:
            tokens = completion - s.prev_usage
            if tokens > 1:
                s.multi_token_chunks += 1
        s.prev_usage = completion
        s.usage_completion = completion
    if has_prompt:
        s.usage_prompt = prompt
    if reasoning_tokens >= 0:
        s.usage_reasoning = reasoning_tokens
    if text_bytes:
        if s.keep_text and call >= 0 and _piece(s, text, text_len, text_utf8, kind, call) < 0:
            return -1
        return _text(s, text_bytes, tokens, kind, now)
    return 0


cdef int _piece(StreamCore* s, const unsigned char* text, Py_ssize_t n, bint utf8, int kind,
                int call) noexcept nogil:
    """Keep one text piece, its tag end * 2048 + call * 8 + kind * 2 + utf8 (call: a tool
    piece's call index, at most MAX_CALL_INDEX). A piece of the kind, call and form of the one
    before extends it: an
    index per piece cost 8 bytes per 1-byte piece, 128 MB for the 16 MiB the text may hold.
    The joined bytes read as the pieces did (a JSON string's content joined to another is one
    string's), except a high surrogate's escape at the end, which json would pair with a low
    one after it (the twin keeps them apart): that piece is not extended."""
    cdef Py_ssize_t cap
    cdef int64_t* q
    cdef int64_t low = call * 8 + kind * 2 + (1 if utf8 else 0), last
    if s.n_pieces:
        last = s.piece_ends[s.n_pieces - 1]
        if (last & 2047) == low and (utf8 or not _high_surrogate_end(s.texts.p, s.texts.n)):
            if bytes_put(&s.texts, text, n) < 0:
                return -1
            s.piece_ends[s.n_pieces - 1] = s.texts.n * 2048 + low
            return 0
    if s.n_pieces == s.pieces_cap:
        cap = s.pieces_cap * 2 if s.pieces_cap else 64
        q = <int64_t*>realloc(s.piece_ends, cap * sizeof(int64_t))
        if q == NULL:
            return -1
        s.piece_ends, s.pieces_cap = q, cap
    if bytes_put(&s.texts, text, n) < 0:
        return -1
    s.piece_ends[s.n_pieces] = s.texts.n * 2048 + low
    s.n_pieces += 1
    return 0


cdef inline bint _high_surrogate_end(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Whether raw JSON string bytes may end with a high surrogate's escape (\\uD800-\\uDBFF;
    an escaped backslash before `uD8..` is taken as one too: it only keeps a piece apart)."""
    return (n >= 6 and p[n - 6] == 92 and p[n - 5] == 117 and (p[n - 4] == 100 or p[n - 4] == 68)
            and (56 <= p[n - 3] <= 57 or 97 <= p[n - 3] <= 98 or 65 <= p[n - 3] <= 66))


cdef inline bint _is_digit(unsigned char c) noexcept nogil:
    return 48 <= c <= 57


cdef inline bint _digit_change_ok(const unsigned char* u, const unsigned char* t, Py_ssize_t i,
                                  Py_ssize_t z) noexcept nogil:
    """Byte i differs: both are digits, and the new digit run does not begin with 0."""
    cdef Py_ssize_t k = i
    if not (_is_digit(u[i]) and _is_digit(t[i])):
        return False
    while k > 0 and _is_digit(u[k - 1]):
        k -= 1
    return not (u[k] == 48 and k + 1 < z and _is_digit(u[k + 1]))


cdef bint _tail_same(const unsigned char* u, const unsigned char* t, Py_ssize_t z) noexcept nogil:
    """The event's tail `u` is the shape's tail `t` but for digits replaced by other digits, one
    for one: a counter the server repeats in every event (the Responses API's sequence_number)
    changes no key and no structure, and benchc reads no value there. A changed digit run that
    would begin with 0 (an invalid JSON number where it is one) is no match. Compared 8 bytes
    at a time: a few bytes differ, if any."""
    cdef Py_ssize_t i = 0, j
    cdef uint64_t a, b
    while i + 8 <= z:
        memcpy(&a, u + i, 8)
        memcpy(&b, t + i, 8)
        if a != b:
            for j in range(i, i + 8):
                if u[j] != t[j] and not _digit_change_ok(u, t, j, z):
                    return False
        i += 8
    for j in range(i, z):
        if u[j] != t[j] and not _digit_change_ok(u, t, j, z):
            return False
    return True


cdef bint _counter_same(StreamCore* s, const unsigned char* u, const unsigned char* t,
                        Py_ssize_t z) noexcept nogil:
    """_tail_same where the tail's known counter is the only change: the bytes before and
    after its digit run as the shape's, and the run digits (not a number that begins with 0)."""
    cdef Py_ssize_t a = s.counter_at, b = s.counter_at + s.counter_len, i
    if memcmp(u, t, a) != 0 or memcmp(u + b, t + b, z - b) != 0:
        return False
    if b - a > 1 and u[a] == 48:
        return False
    for i in range(a, b):
        if not _is_digit(u[i]):
            return False
    return True


cdef void _note_counter(StreamCore* s, const unsigned char* u, const unsigned char* t, Py_ssize_t z) noexcept nogil:
    """After a match by _tail_same: where the tail's digits changed, when they are one digit
    run (a counter), for _counter_same."""
    cdef Py_ssize_t i = 0, j = z - 1
    if memcmp(u, t, z) == 0:
        return  # the same tail (chat's: nothing in it counts)
    while i < z and u[i] == t[i]:
        i += 1
    if i == z:
        return  # the same tail
    while u[j] == t[j]:
        j -= 1
    while i > 0 and _is_digit(u[i - 1]):
        i -= 1
    while j + 1 < z and _is_digit(u[j + 1]):
        j += 1
    for k in range(i, j + 1):
        if not _is_digit(u[k]):
            return  # changes in more than one run: no counter
    s.counter_at, s.counter_len = i, j + 1 - i


cdef int _same_shape(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """The event is this stream's text chunk shape with another text: read that text (1);
    0 when it is not."""
    cdef Py_ssize_t a = s.shape_head.n, z = s.shape_tail.n, e
    cdef int64_t nbytes = 0
    if n < a + z or memcmp(p, s.shape_head.p, a) != 0:
        return 0
    if not (s.counter_len and _counter_same(s, p + n - z, s.shape_tail.p, z)):
        if not _tail_same(p + n - z, s.shape_tail.p, z):
            return 0
        if s.call_len and memcmp(p + n - z + s.call_at, s.shape_tail.p + s.call_at, s.call_len) != 0:
            return 0  # another call's piece: the full path reads its index
        _note_counter(s, p + n - z, s.shape_tail.p, z)
    e = _string(p, a, n, &nbytes)  # must close exactly where the tail begins
    if e != n - z + 1 or e - 1 == a:
        return 0  # another string layout, or an empty text: the full path decides
    if s.keep_text and _piece(s, p + a, e - 1 - a, False, s.shape_kind, s.shape_call) < 0:
        return -1
    return 1 if _text(s, nbytes, -1, s.shape_kind, now) == 0 else -1


cdef int _text(StreamCore* s, int64_t nbytes, int64_t tokens, int kind, int64_t now) noexcept nogil:
    s.text_bytes += nbytes
    if s.keep_text and s.text_bytes > C_MAX_KEPT_TEXT and not s.oversized:
        # the twin's bound on kept text: the stream is no longer read. Not _stop: the event being
        # read may lie in s.line or s.data, which _stop frees and the caller reads on (a shape)
        s.oversized = C_TEXT_TOO_LARGE
    if s.n_tokens <= C_GAPS_KEPT and s.n_tokens >= s.cap - 1 and _grow(s) < 0:
        return -1
    if s.first_text_ns:
        if _gap(s, now - s.last_text_ns, tokens, kind) < 0:
            return -1
    else:
        s.first_text_ns = now
    s.last_text_ns = now
    s.text_chunks += 1
    if s.n_tokens <= C_GAPS_KEPT:  # the chunks on either side of the kept gaps
        s.tokens[s.n_tokens] = tokens
        s.kinds[s.n_tokens] = kind
        s.n_tokens += 1
    s.last_kind = kind
    if kind == REASONING:
        s.reasoning_chunks += 1
        if not s.first_reasoning_ns:
            s.first_reasoning_ns = now
    elif kind == TOOL:
        s.tool_chunks += 1
        if not s.first_tool_ns:
            s.first_tool_ns = now
    elif not s.first_answer_ns:
        s.first_answer_ns = now
    return 0


cdef int _gap(StreamCore* s, int64_t gap, int64_t tokens, int kind) noexcept nogil:
    """One gap, ended by a chunk of `tokens` tokens (-1: unknown) and of `kind` (the twin's _gap):
    kept, or past GAPS_KEPT recorded as record_gaps and record_answer_gaps would record it."""
    if s.text_chunks == 1 or gap > s.max_gap_ns:
        s.max_gap_ns = gap
    if s.n_gaps < C_GAPS_KEPT:
        s.gaps[s.n_gaps] = gap
        s.n_gaps += 1
        return 0
    if _spill(s, SPILL_ITL, _to_us(gap), 1) < 0:
        return -1
    if tokens > 0 and _spill(s, SPILL_TOKEN, _to_us(gap // tokens), tokens) < 0:
        return -1
    if not (s.last_kind or kind) and _spill(s, SPILL_ANSWER, _to_us(gap), 1) < 0:
        return -1
    return 0


cdef int _spill(StreamCore* s, int which, int64_t us, int64_t count) noexcept nogil:
    """Record into the stream's own histogram `which`, made (with the GIL, once) when first needed."""
    if s.spill[which] == NULL:
        s.spill[which] = _new_histogram()
        if s.spill[which] == NULL:
            return -1
    (<Histogram>s.spill[which]).record_nogil(us, count)
    return 0


cdef PyObject* _new_histogram() noexcept with gil:
    """A histogram of the point's layout, as an owned reference; NULL when out of memory."""
    try:
        h = Histogram(LOWEST_US, HIGHEST_US, DIGITS)
    except MemoryError:
        return NULL
    Py_INCREF(h)
    return <PyObject*>h


cdef int _grow(StreamCore* s) noexcept nogil:
    # the kept chunks' arrays stop at GAPS_KEPT + 1 entries (and a spare)
    cdef Py_ssize_t cap = min(s.cap * 4, C_GAPS_KEPT + 2)
    cdef int64_t* g = <int64_t*>realloc(s.gaps, cap * sizeof(int64_t))
    cdef unsigned char* k
    if g == NULL:
        return -1
    s.gaps = g
    g = <int64_t*>realloc(s.tokens, cap * sizeof(int64_t))
    if g == NULL:
        return -1
    s.tokens = g
    k = <unsigned char*>realloc(s.kinds, cap)
    if k == NULL:
        return -1
    s.kinds = k
    s.cap = cap
    return 0


cdef int _slow(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil:
    """Anything the fast path does not read: the twin's own interpretation of the event
    (json.loads), under the GIL -- the receive loop's thread takes it only here."""
    with gil:
        try:
            return _apply(s, PyBytes_FromStringAndSize(<const char*>p, n), now)
        except Exception:  # MemoryError and the like: the caller reports it
            return -1


cdef int _apply(StreamCore* s, bytes payload, int64_t now) except -2:
    cdef bytes fin = None, txt = None, err, rid_b
    cdef int r
    fields = _interpret(payload)
    if fields is None:
        s.malformed += 1
        if s.malformed == 1:
            s.example_len = min(len(payload), EXAMPLE_KEPT)
            memcpy(s.example, <const char*>payload, s.example_len)
        return 0
    (text_bytes, finish, completion, prompt, error, text, cached, timings, kind, rtokens, unknown, rid, ends,
     calls) = fields
    if ends:
        _end(s, now)
    if unknown:
        s.unknown_events += 1
        return 0
    if rid is not None:
        rid_b = rid.encode("utf-8", "surrogatepass")
        if bytes_set(&s.response_id, rid_b, len(rid_b)) < 0:
            return -1
        s.has_response_id = True
    if error is not None:
        err = error.encode("utf-8", "surrogatepass")
        if bytes_set(&s.error_event, err, len(err)) < 0:
            return -1
        s.has_error_event = True
    if cached is not None:
        s.usage_cached = cached
    if timings is not None:  # the last one sent, whole (as the twin keeps it)
        s.has_timings = True
        s.timings_n[0] = timings.get("cache_n", -1)
        s.timings_n[1] = timings.get("prompt_n", -1)
        s.timings_n[2] = timings.get("predicted_n", -1)
        s.timings_ms[0] = timings.get("prompt_ms", -1.0)
        s.timings_ms[1] = timings.get("predicted_ms", -1.0)
    if finish is not None:
        fin = finish.encode("utf-8", "surrogatepass")
    call = 0
    if text_bytes and s.keep_text:
        if calls is not None:  # a tool text: kept piece by call (a chat delta may carry several)
            for call, piece in calls:
                txt = piece.encode("utf-8", "surrogatepass")
                if _piece(s, txt, len(txt), True, kind, call) < 0:
                    return -1
            call = -1
        else:
            txt = text.encode("utf-8", "surrogatepass")
    r = _commit(s, fin is not None, fin if fin is not None else b"", len(fin) if fin is not None else 0,
                completion is not None, completion if completion is not None else 0,
                prompt is not None, prompt if prompt is not None else 0,
                rtokens if rtokens is not None else -1, text_bytes,
                txt if txt is not None else b"", len(txt) if txt is not None else 0, True, kind, call, now)
    if r == 0 and kind == TOOL and text_bytes and fin is None and completion is None and prompt is None \
            and rtokens is None and cached is None and timings is None and error is None and calls is not None and len(calls) == 1:
        return _tool_shape(s, <const unsigned char*>payload, len(payload), text_bytes, calls[0][0])
    return r


cdef int _tool_shape(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t text_bytes,
                     int call) noexcept nogil:
    """A chat delta whose only output is a tool call's argument piece (the twin read it): the
    stream's shape, when its text is exactly the one `"arguments":"..."` string of the event, so
    that the calls's next pieces, the same bytes around another string, are read in place."""
    cdef Py_ssize_t k = _find(p, 0, n, b'"arguments":"', 13), e
    cdef int64_t nbytes = 0
    if k < 0 or _find(p, k + 13, n, b'"arguments":"', 13) >= 0:
        return 0  # none, or several calls' arguments: the twin reads every such event
    e = _string(p, k + 13, n, &nbytes)
    if e < 0 or nbytes != text_bytes or e - 1 == k + 13:
        return 0
    return 0 if _take_shape(s, p, n, k + 13, e - 1, TOOL, call) == 1 else -1


# ---------------------------------------------------------------- the Python face

cdef object _text_or_none(bint has, Bytes* b):
    return _bytes_of(b).decode("utf-8", "surrogatepass") if has else None


cdef object _kept(StreamCore* s, int which, bint by_call=False):
    """The kept pieces of the kinds in `which`: bit 1 << kind (1 answer, 2 reasoning, 4 tool),
    joined; by_call: joined per call index, in the order the calls first came (a list)."""
    cdef Py_ssize_t i, a = 0, end
    cdef bytes all_, piece
    cdef int64_t tag
    if not s.keep_text:
        raise ValueError("this parser was not asked to keep the text")
    all_ = _bytes_of(&s.texts)
    out = []
    calls = {}
    for i in range(s.n_pieces):
        tag = s.piece_ends[i]
        end = tag >> 11
        piece = all_[a:end]
        a = end
        if not (which & (1 << ((tag >> 1) & 3))):
            continue
        if tag & 1:
            text = piece.decode("utf-8", "surrogatepass")
        elif b"\\" in piece:
            text = json.loads(b'"' + piece + b'"')
        else:
            text = piece.decode("utf-8", "surrogatepass")
        if by_call:
            calls.setdefault((tag >> 3) & 255, []).append(text)
        else:
            out.append(text)
    if by_call:
        return ["".join(v) for v in calls.values()]
    return "".join(out)


cdef class StreamParser:
    """Feed it every socket read with the read's arrival time (see the twin)."""

    def __cinit__(self, bint keep_text=False, bint body=False):
        if stream_init(&self.core, keep_text, body) < 0:
            stream_free(&self.core)
            raise MemoryError()

    def __dealloc__(self):
        stream_free(&self.core)

    def feed(self, data, int64_t now_ns):
        cdef bytes b = data if type(data) is bytes else bytes(data)
        if stream_feed(&self.core, b, len(b), now_ns) < 0:
            raise MemoryError("the stream parser ran out of memory")

    def close(self, int64_t now_ns):
        cdef bytes kept
        if self.core.body:
            # the body's one interpretation (the twin's _close_body), once its reading ended
            if self.core.body_read or self.core.oversized:
                return
            self.core.body_read = True
            self.core.events = 1
            kept = _bytes_of(&self.core.data)
            free(self.core.data.p)  # given back: what is needed is read now
            self.core.data.p = NULL
            self.core.data.n = self.core.data.cap = 0
            self._apply_body(_interpret_body(kept), kept)
            return
        if stream_close(&self.core, now_ns) < 0:
            raise MemoryError("the stream parser ran out of memory")

    cdef _apply_body(self, fields, bytes kept):
        cdef bytes err
        if fields is None:
            self.core.malformed += 1
            self.core.example_len = min(len(kept), EXAMPLE_KEPT)
            memcpy(self.core.example, <const char*>kept, self.core.example_len)
            return
        prompt, results, error = fields
        if prompt is not None:
            self.core.usage_prompt = prompt
        if results is not None:
            self.core.results = results
        if error is not None:
            err = error.encode("utf-8", "surrogatepass")
            if bytes_set(&self.core.error_event, err, len(err)) < 0:
                raise MemoryError("the stream parser ran out of memory")
            self.core.has_error_event = True

    @property
    def body(self):
        """This parser reads one JSON body, not an event stream."""
        return self.core.body

    @property
    def results(self):
        return self.core.results

    @property
    def first_text_ns(self):
        return self.core.first_text_ns

    @property
    def last_text_ns(self):
        return self.core.last_text_ns

    @property
    def done_ns(self):
        return self.core.done_ns

    @property
    def text_chunks(self):
        return self.core.text_chunks

    @property
    def text_bytes(self):
        return self.core.text_bytes

    @property
    def usage_completion(self):
        return self.core.usage_completion

    @property
    def usage_prompt(self):
        return self.core.usage_prompt

    @property
    def usage_cached(self):
        return self.core.usage_cached

    @property
    def first_reasoning_ns(self):
        return self.core.first_reasoning_ns

    @property
    def first_answer_ns(self):
        return self.core.first_answer_ns

    @property
    def reasoning_chunks(self):
        return self.core.reasoning_chunks

    @property
    def usage_reasoning(self):
        return self.core.usage_reasoning

    @property
    def first_tool_ns(self):
        return self.core.first_tool_ns

    @property
    def tool_chunks(self):
        return self.core.tool_chunks

    @property
    def unknown_events(self):
        return self.core.unknown_events

    @property
    def server_timings(self):
        """llama.cpp's `timings` (the last one sent): its kept fields, as the twin's dict."""
        cdef int k
        if not self.core.has_timings:
            return None
        out = {}
        for k in range(3):
            if self.core.timings_n[k] >= 0:
                out[TIMINGS_INT[k]] = self.core.timings_n[k]
        for k in range(2):
            if self.core.timings_ms[k] >= 0:
                out[TIMINGS_MS[k]] = self.core.timings_ms[k]
        return out

    @property
    def malformed(self):
        return self.core.malformed

    @property
    def oversized(self):
        return self.core.oversized

    @property
    def first_bytes(self):
        return PyBytes_FromStringAndSize(<char*>self.core.first, self.core.first_len)

    @property
    def multi_token_chunks(self):
        return self.core.multi_token_chunks

    @property
    def events(self):
        return self.core.events

    @property
    def finish_reason(self):
        return _text_or_none(self.core.has_finish, &self.core.finish)

    @property
    def error_event(self):
        return _text_or_none(self.core.has_error_event, &self.core.error_event)

    @property
    def response_id(self):
        return _text_or_none(self.core.has_response_id, &self.core.response_id)

    @property
    def malformed_example(self):
        if not self.core.malformed:
            return None
        return PyBytes_FromStringAndSize(<char*>self.core.example, self.core.example_len)

    @property
    def gaps_ns(self):
        return [self.core.gaps[i] for i in range(self.core.n_gaps)]

    @property
    def max_gap_ns(self):
        return self.core.max_gap_ns

    @property
    def chunk_tokens(self):
        return [self.core.tokens[i] for i in range(self.core.n_tokens)]

    @property
    def answer_gaps_ns(self):
        """The kept gaps between consecutive answer chunks (see the twin)."""
        cdef Py_ssize_t i
        cdef unsigned char* k = self.core.kinds
        return [self.core.gaps[i] for i in range(self.core.n_gaps) if not (k[i] or k[i + 1])]

    def text(self):
        """The whole output (kept only with keep_text=True; decoded here, off the hot path)."""
        return _kept(&self.core, 7)

    def reasoning_text(self):
        """The reasoning chunks' text (keep_text=True)."""
        return _kept(&self.core, 2)

    def answer_text(self):
        """The answer chunks' text (keep_text=True): what a chat's next turn sends back."""
        return _kept(&self.core, 1)

    def tool_text(self):
        """The tool-call chunks' text (keep_text=True): the names and arguments, as streamed."""
        return _kept(&self.core, 4)

    def tool_call_texts(self):
        """Each tool call's text (keep_text=True), in the order the calls first streamed (see the twin)."""
        return _kept(&self.core, 4, True)


    def record_gaps(self, Histogram itl, Histogram itl_token=None):
        """Record the chunk gaps (us) into `itl`, and per token into `itl_token` where a chunk's
        token count is known: a chunk of k tokens after gap g is k tokens of g/k."""
        cdef Py_ssize_t i
        cdef int64_t k
        for i in range(self.core.n_gaps):  # record_nogil: the C call, as record() makes it
            itl.record_nogil(_to_us(self.core.gaps[i]), 1)
        _merge(itl, self.core.spill[SPILL_ITL])
        if itl_token is not None:
            for i in range(self.core.n_gaps):
                k = self.core.tokens[i + 1]
                if k > 0:
                    itl_token.record_nogil(_to_us(self.core.gaps[i] // k), k)
            _merge(itl_token, self.core.spill[SPILL_TOKEN])

    def record_answer_gaps(self, Histogram itl_answer):
        """Record the answer's chunk gaps (us) into `itl_answer` (see answer_gaps_ns)."""
        cdef Py_ssize_t i
        cdef unsigned char* k = self.core.kinds
        for i in range(self.core.n_gaps):
            if not (k[i] or k[i + 1]):
                itl_answer.record_nogil(_to_us(self.core.gaps[i]), 1)
        _merge(itl_answer, self.core.spill[SPILL_ANSWER])


cdef _merge(Histogram into, PyObject* spilled):
    """Add a stream's histogram of the gaps past GAPS_KEPT (NULL: it has none) to `into`."""
    if spilled != NULL:
        into.merge(<Histogram>spilled)
