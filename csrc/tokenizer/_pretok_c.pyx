# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Pre-tokenization in C; same API and results as benchc/tokenizer/_pretok_py.py.

For the pattern chains of _pretok_py.KNOWN a hand-written scanner finds the pieces
over the text's code points, reading Unicode classes from _unicode_classes (built
from `regex` itself, so both cores see one Unicode version). Each piece is written as
UTF-8 into a buffer and handed to the compiled BPE, so encoding a text makes no Python
object per piece. Any other chain runs the twin's `regex` split: correct, not faster.

Every scan below transcribes one alternation of its pattern, in the pattern's order;
the comments name the alternative each branch stands for.
"""

from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ
from libc.stdint cimport int32_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc

from benchc.tokenizer._bpe_c cimport BPE

from benchc.tokenizer import _pretok_py
from benchc.tokenizer import _unicode_classes as _U

cdef enum:
    LETTER = 1
    NUMBER = 2
    MARK = 4
    PUNCT = 8
    SYMBOL = 16
    SPACE = 32

cdef enum:
    CL100K = 1
    DEEPSEEK = 2

# the class table and the contraction folds, loaded on first use (about 0.2 s)
cdef bytes _classes = None
cdef bytes _folds = None
cdef const uint8_t* _cls_of = NULL
cdef const uint8_t* _fold_of = NULL
cdef Py_ssize_t _fold_limit = 0


cdef void _load_tables() except *:
    global _classes, _folds, _cls_of, _fold_of, _fold_limit
    if _cls_of != NULL:
        return
    _classes = _U.class_table()
    _folds = _U.contraction_folds()
    _fold_limit = len(_folds)
    _fold_of = _folds
    _cls_of = _classes


cdef inline bint _nl(Py_UCS4 c) noexcept nogil:
    return c == 10 or c == 13


cdef inline Py_UCS4 _fold(Py_UCS4 c) noexcept nogil:
    return _fold_of[c] if c < <Py_UCS4>_fold_limit else 0


cdef inline bint _ascii_punct(Py_UCS4 c) noexcept nogil:
    return 33 <= c <= 47 or 58 <= c <= 64 or 91 <= c <= 96 or 123 <= c <= 126


cdef inline bint _ascii_alpha(Py_UCS4 c) noexcept nogil:
    return 65 <= c <= 90 or 97 <= c <= 122


cdef inline bint _cjk(Py_UCS4 c) noexcept nogil:
    # [一-龥぀-ゟ゠-ヿ]
    return 0x4E00 <= c <= 0x9FA5 or 0x3040 <= c <= 0x30FF


cdef struct Text:
    Py_UCS4* cp        # code points
    uint8_t* cl        # their class bits
    Py_ssize_t* ends   # piece ends, in order
    Py_ssize_t npieces


cdef inline Py_ssize_t _run(const uint8_t* cl, Py_ssize_t i, Py_ssize_t b, uint8_t mask) noexcept nogil:
    while i < b and cl[i] & mask:
        i += 1
    return i


cdef inline Py_ssize_t _newlines(const Py_UCS4* cp, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    while i < b and _nl(cp[i]):
        i += 1
    return i


cdef inline Py_ssize_t _spaces(Text* t, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """\\s*[\\r\\n]+ | \\s+(?!\\S) | \\s+ at i, a space; b acts as the end of the text."""
    cdef Py_ssize_t j = _run(t.cl, i, b, SPACE), k, last_nl = -1
    for k in range(i, j):
        if _nl(t.cp[k]):
            last_nl = k
    if last_nl >= 0:
        return last_nl + 1  # \s* backs off to the run's last newline
    if j == b or j - 1 == i:
        return j
    return j - 1  # (?!\S): leave the last space to the word after it


cdef inline Py_ssize_t _cl100k_at(Text* t, Py_ssize_t i, Py_ssize_t b, int max_digits,
                                   uint8_t letters) noexcept nogil:
    """(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?LETTERS+|\\p{N}{1,max_digits}
    | ?[^\\s LETTERS \\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ at i (always matches)."""
    cdef Py_UCS4 c = t.cp[i], f1, f2
    cdef uint8_t k = t.cl[i]
    cdef uint8_t not_other = SPACE | letters | NUMBER
    cdef Py_ssize_t j
    if c == 39 and i + 1 < b:  # contractions
        f1 = _fold(t.cp[i + 1])
        if f1 == 115 or f1 == 116 or f1 == 109 or f1 == 100:  # s t m d
            return i + 2
        if i + 2 < b:
            f2 = _fold(t.cp[i + 2])
            if (f2 == 101 and (f1 == 114 or f1 == 118)) or (f1 == 108 and f2 == 108):  # re ve ll
                return i + 3
    if k & letters:  # letters, no prefix
        return _run(t.cl, i, b, letters)
    if not _nl(c) and not (k & (LETTER | NUMBER)) and i + 1 < b and t.cl[i + 1] & letters:
        return _run(t.cl, i + 1, b, letters)  # one prefix character, then letters
    if k & NUMBER:
        j = i + 1
        while j < b and j - i < max_digits and t.cl[j] & NUMBER:
            j += 1
        return j
    if c == 32 and i + 1 < b and not (t.cl[i + 1] & not_other):
        j = i + 1  # " ?" then other characters
        while j < b and not (t.cl[j] & not_other):
            j += 1
        return _newlines(t.cp, j, b)
    if not (k & not_other):
        j = i
        while j < b and not (t.cl[j] & not_other):
            j += 1
        return _newlines(t.cp, j, b)
    return _spaces(t, i, b)


cdef inline Py_ssize_t _deepseek_at(Text* t, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """[ASCII punctuation][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+
    | ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ at i, or -1 (no match)."""
    cdef Py_UCS4 c = t.cp[i]
    cdef uint8_t k = t.cl[i]
    cdef Py_ssize_t j
    if _ascii_punct(c) and i + 1 < b and _ascii_alpha(t.cp[i + 1]):
        j = i + 1
        while j < b and _ascii_alpha(t.cp[j]):
            j += 1
        return j
    if k & (LETTER | MARK):
        return _run(t.cl, i, b, LETTER | MARK)
    if not _nl(c) and not (k & (LETTER | PUNCT | SYMBOL)) and i + 1 < b and t.cl[i + 1] & (LETTER | MARK):
        return _run(t.cl, i + 1, b, LETTER | MARK)
    if c == 32 and i + 1 < b and t.cl[i + 1] & (PUNCT | SYMBOL):
        return _newlines(t.cp, _run(t.cl, i + 1, b, PUNCT | SYMBOL), b)
    if k & (PUNCT | SYMBOL):
        return _newlines(t.cp, _run(t.cl, i, b, PUNCT | SYMBOL), b)
    if k & SPACE:
        return _spaces(t, i, b)
    return -1


cdef inline void _emit(Text* t, Py_ssize_t end) noexcept nogil:
    t.ends[t.npieces] = end
    t.npieces += 1


cdef void _scan_cl100k(Text* t, Py_ssize_t n, int max_digits, uint8_t letters) noexcept nogil:
    cdef Py_ssize_t i = 0
    while i < n:
        i = _cl100k_at(t, i, n, max_digits, letters)
        _emit(t, i)


cdef void _deepseek_words(Text* t, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    # third Split: matches and the gaps between them are pieces
    cdef Py_ssize_t i = a, e
    cdef bint gap = False
    while i < b:
        e = _deepseek_at(t, i, b)
        if e < 0:
            gap = True
            i += 1
            continue
        if gap:
            _emit(t, i)
            gap = False
        _emit(t, e)
        i = e
    if gap:
        _emit(t, b)


cdef void _scan_deepseek(Text* t, Py_ssize_t n) noexcept nogil:
    # first Split \p{N}{1,3}, then [一-龥぀-ゟ゠-ヿ]+ within each piece, then the words
    cdef Py_ssize_t i = 0, j, p, q
    cdef bint cjk
    while i < n:
        j = i + 1
        if t.cl[i] & NUMBER:
            while j < n and j - i < 3 and t.cl[j] & NUMBER:
                j += 1
        else:
            while j < n and not (t.cl[j] & NUMBER):
                j += 1
        p = i
        while p < j:
            cjk = _cjk(t.cp[p])
            q = p + 1
            while q < j and _cjk(t.cp[q]) == cjk:
                q += 1
            _deepseek_words(t, p, q)
            p = q
        i = j


cdef inline Py_ssize_t _utf8(const Py_UCS4* cp, Py_ssize_t a, Py_ssize_t b, unsigned char* out) noexcept nogil:
    """UTF-8 of cp[a:b]; a lone surrogate is written as `surrogatepass` writes it."""
    cdef Py_ssize_t n = 0, i
    cdef uint32_t c
    for i in range(a, b):
        c = <uint32_t>cp[i]
        if c < 0x80:
            out[n] = <unsigned char>c
            n += 1
        elif c < 0x800:
            out[n] = <unsigned char>(0xC0 | (c >> 6))
            out[n + 1] = <unsigned char>(0x80 | (c & 0x3F))
            n += 2
        elif c < 0x10000:
            out[n] = <unsigned char>(0xE0 | (c >> 12))
            out[n + 1] = <unsigned char>(0x80 | ((c >> 6) & 0x3F))
            out[n + 2] = <unsigned char>(0x80 | (c & 0x3F))
            n += 3
        else:
            out[n] = <unsigned char>(0xF0 | (c >> 18))
            out[n + 1] = <unsigned char>(0x80 | ((c >> 12) & 0x3F))
            out[n + 2] = <unsigned char>(0x80 | ((c >> 6) & 0x3F))
            out[n + 3] = <unsigned char>(0x80 | (c & 0x3F))
            n += 4
    return n


cdef class Scanner:
    """Scanner(patterns): split / encode / count, as the twin's."""

    cdef readonly tuple patterns
    cdef readonly bint fast
    cdef int _family, _max_digits
    cdef uint8_t _letters
    cdef object _twin

    def __init__(self, patterns):
        self.patterns = tuple(patterns)
        self._twin = _pretok_py.Scanner(self.patterns)
        how = _pretok_py.KNOWN.get(self.patterns)
        self.fast = how is not None
        if how is None:
            return
        _load_tables()
        if how[0] == "cl100k":
            self._family = CL100K
            self._max_digits = how[1]
            self._letters = LETTER | MARK if how[2] else LETTER
        else:
            self._family = DEEPSEEK

    cdef int _scan(self, str text, Text* t) except -1:
        """Fills t (allocated here; the caller frees it with _free) with the pieces of text."""
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i
        cdef int kind = PyUnicode_KIND(text)
        cdef void* data = PyUnicode_DATA(text)
        t.npieces = 0
        t.cp = <Py_UCS4*>malloc((n + 1) * sizeof(Py_UCS4))
        t.cl = <uint8_t*>malloc(n + 1)
        t.ends = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
        if t.cp == NULL or t.cl == NULL or t.ends == NULL:
            _free(t)
            raise MemoryError()
        for i in range(n):
            t.cp[i] = PyUnicode_READ(kind, data, i)
            t.cl[i] = _cls_of[t.cp[i]]
        if self._family == CL100K:
            _scan_cl100k(t, n, self._max_digits, self._letters)
        else:
            _scan_deepseek(t, n)
        return 0

    def split(self, str text):
        cdef Text t
        cdef Py_ssize_t k, start = 0
        if not self.fast:
            return self._twin.split(text)
        self._scan(text, &t)
        try:
            out = []
            for k in range(t.npieces):
                out.append(text[start:t.ends[k]])
                start = t.ends[k]
            return out
        finally:
            _free(&t)

    def encode(self, str text, bpe):
        cdef list out = []
        if not self.fast:
            return self._twin.encode(text, bpe)
        if not isinstance(bpe, BPE):  # the twin's merger: our pieces, its merge
            for piece in self.split(text):
                out += bpe.encode_piece(_pretok_py.piece_bytes(piece))
            return out
        self._merge(text, <BPE>bpe, out)
        return out

    def count(self, str text, bpe):
        if not self.fast or not isinstance(bpe, BPE):
            return len(self.encode(text, bpe))
        return self._merge(text, <BPE>bpe, None)

    cdef Py_ssize_t _merge(self, str text, BPE bpe, list out) except -1:
        """Merges every piece; appends the ids to out when it is a list. Returns the count."""
        cdef Text t
        cdef Py_ssize_t k, start = 0, longest = 0, nbytes, m, total = 0, j
        cdef unsigned char* buf = NULL
        cdef int32_t* ids = NULL
        self._scan(text, &t)
        try:
            for k in range(t.npieces):
                longest = max(longest, t.ends[k] - start)
                start = t.ends[k]
            buf = <unsigned char*>malloc(4 * longest + 1)
            ids = <int32_t*>malloc((4 * longest + 1) * sizeof(int32_t))
            if buf == NULL or ids == NULL:
                raise MemoryError()
            start = 0
            for k in range(t.npieces):
                nbytes = _utf8(t.cp, start, t.ends[k], buf)
                start = t.ends[k]
                m = bpe.encode_into(buf, nbytes, ids)
                total += m
                if out is not None:
                    for j in range(m):
                        out.append(ids[j])
            return total
        finally:
            free(buf)
            free(ids)
            _free(&t)


cdef void _free(Text* t) noexcept:
    free(t.cp)
    free(t.cl)
    free(t.ends)
    t.cp = NULL
    t.cl = NULL
    t.ends = NULL
