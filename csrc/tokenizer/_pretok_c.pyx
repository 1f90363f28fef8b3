# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Pre-tokenization in C; same API and results as benchc/tokenizer/_pretok_py.py.

For the pattern chains of _patterns.KNOWN (every spelling of the GPT-2, cl100k, o200k and
DeepSeek families) a hand-written scanner finds the pieces over the text's code points,
reading Unicode classes from _unicode_classes (built from `regex` itself, so both cores
see one Unicode version). Each piece is written as
UTF-8 into a buffer and handed to the compiled BPE, so encoding a text makes no Python
object per piece. Any other chain runs the twin's `regex` split: correct, not faster.

Every scan below transcribes one alternation of its pattern, in the pattern's order;
the comments name the alternative each branch stands for.
"""

from cpython.unicode cimport (
    Py_UNICODE_ISSPACE, PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ)
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t
from libc.stdlib cimport free, malloc, realloc

from benchc.tokenizer._bpe_c cimport BPE

from benchc.tokenizer import _patterns, _pretok_py
from benchc.tokenizer import _unicode_classes as _U

cdef enum:
    LETTER = 1
    NUMBER = 2
    MARK = 4
    PUNCT = 8
    SYMBOL = 16
    SPACE = 32
    UPPER = 64   # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}]
    LOWER = 128  # [\p{Ll}\p{Lm}\p{Lo}]
    HAN = 256

cdef enum:
    CL100K = 1
    DEEPSEEK = 2
    GPT2 = 3
    O200K = 4

# the class table and the contraction folds, loaded on first use (about 0.2 s)
cdef bytes _classes = None
cdef bytes _folds = None
cdef const uint16_t* _cls_of = NULL
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
    _cls_of = <const uint16_t*><const char*>_classes


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
    uint16_t* cl       # their class bits
    Py_ssize_t* ends   # piece ends, in order
    Py_ssize_t npieces


cdef inline Py_ssize_t _run(const uint16_t* cl, Py_ssize_t i, Py_ssize_t b, uint16_t mask) noexcept nogil:
    while i < b and cl[i] & mask:
        i += 1
    return i


cdef inline Py_ssize_t _newlines(const Py_UCS4* cp, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    while i < b and _nl(cp[i]):
        i += 1
    return i


cdef inline Py_ssize_t _digits(Text* t, Py_ssize_t i, Py_ssize_t b, int max_digits) noexcept nogil:
    """\\p{N}{1,max_digits} at i, a digit."""
    cdef Py_ssize_t j = i + 1
    while j < b and j - i < max_digits and t.cl[j] & NUMBER:
        j += 1
    return j


cdef inline Py_ssize_t _spaces(Text* t, Py_ssize_t i, Py_ssize_t b, bint to_end) noexcept nogil:
    """(\\s++$ when to_end) | \\s*[\\r\\n]+ | \\s+(?!\\S) | \\s+ at i, a space; b acts as the
    end of the text."""
    cdef Py_ssize_t j = _run(t.cl, i, b, SPACE), k, last_nl = -1
    if to_end and j == b:
        return j
    for k in range(i, j):
        if _nl(t.cp[k]):
            last_nl = k
    if last_nl >= 0:
        return last_nl + 1  # \s* backs off to the run's last newline
    if j == b or j - 1 == i:
        return j
    return j - 1  # (?!\S): leave the last space to the word after it


cdef inline Py_ssize_t _contraction(Text* t, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """Length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: 0, 2 or 3."""
    cdef Py_UCS4 f1, f2
    if t.cp[i] != 39 or i + 1 >= b:
        return 0
    f1 = _fold(t.cp[i + 1])
    if f1 == 115 or f1 == 116 or f1 == 109 or f1 == 100:  # s t m d
        return 2
    if i + 2 < b:
        f2 = _fold(t.cp[i + 2])
        if (f2 == 101 and (f1 == 114 or f1 == 118)) or (f1 == 108 and f2 == 108):  # re ve ll
            return 3
    return 0


cdef inline Py_ssize_t _cl100k_at(Text* t, Py_ssize_t i, Py_ssize_t b, int max_digits,
                                   uint16_t letters, bint to_end) noexcept nogil:
    """(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?LETTERS+|\\p{N}{1,max_digits}
    | ?[^\\s LETTERS \\p{N}]+[\\r\\n]*|(\\s++$)|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ at i (always matches)."""
    cdef Py_UCS4 c = t.cp[i]
    cdef uint16_t k = t.cl[i]
    cdef uint16_t not_other = SPACE | letters | NUMBER
    cdef Py_ssize_t j = _contraction(t, i, b)
    if j:
        return i + j
    if k & letters:  # letters, no prefix
        return _run(t.cl, i, b, letters)
    if not _nl(c) and not (k & (LETTER | NUMBER)) and i + 1 < b and t.cl[i + 1] & letters:
        return _run(t.cl, i + 1, b, letters)  # one prefix character, then letters
    if k & NUMBER:
        return _digits(t, i, b, max_digits)
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
    return _spaces(t, i, b, to_end)


cdef inline Py_ssize_t _gpt2_at(Text* t, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ at i
    (always matches; the contractions are case-sensitive)."""
    cdef Py_UCS4 c = t.cp[i], c1, c2
    cdef uint16_t k = t.cl[i], k1
    cdef Py_ssize_t j
    if c == 39 and i + 1 < b:
        c1 = t.cp[i + 1]
        if c1 == 115 or c1 == 116 or c1 == 109 or c1 == 100:  # s t m d
            return i + 2
        if i + 2 < b:
            c2 = t.cp[i + 2]
            if (c2 == 101 and (c1 == 114 or c1 == 118)) or (c1 == 108 and c2 == 108):  # re ve ll
                return i + 3
    if c == 32 and i + 1 < b and not (t.cl[i + 1] & SPACE):
        i += 1  # " ?" before a letter, digit or other run
        k = t.cl[i]
    if k & LETTER:
        return _run(t.cl, i, b, LETTER)
    if k & NUMBER:
        return _run(t.cl, i, b, NUMBER)
    if not (k & SPACE):
        j = i
        while j < b and not (t.cl[j] & (SPACE | LETTER | NUMBER)):
            j += 1
        return j
    j = _run(t.cl, i, b, SPACE)
    if j == b or j - i == 1:
        return j
    return j - 1  # (?!\\S): leave the last space to what follows


cdef inline bint _in(uint16_t k, uint16_t mask, uint16_t excl) noexcept nogil:
    return (k & mask) != 0 and (k & excl) == 0


cdef inline Py_ssize_t _upper_lower(Text* t, Py_ssize_t s, Py_ssize_t b, uint16_t up, uint16_t lo,
                                     uint16_t excl) noexcept nogil:
    """[UP]*[LO]+ at s, or -1. UP and LO overlap (Lm, Lo, marks): [UP]* takes the whole run,
    then gives characters back until [LO]+ can match, as the regex engine backtracks."""
    cdef Py_ssize_t r = s, e
    while r < b and _in(t.cl[r], up, excl):
        r += 1
    if r < b and _in(t.cl[r], lo, excl):
        e = r
        while e < b and _in(t.cl[e], lo, excl):
            e += 1
        return e
    e = r - 1  # back off to the last character of the run that [LO]+ takes
    while e >= s and not _in(t.cl[e], lo, excl):
        e -= 1
    return e + 1 if e >= s else -1


cdef inline Py_ssize_t _upper_then_lower(Text* t, Py_ssize_t s, Py_ssize_t b, uint16_t up, uint16_t lo,
                                          uint16_t excl) noexcept nogil:
    """[UP]+[LO]* at s, or -1."""
    cdef Py_ssize_t r = s
    while r < b and _in(t.cl[r], up, excl):
        r += 1
    if r == s:
        return -1
    while r < b and _in(t.cl[r], lo, excl):
        r += 1
    return r


cdef inline Py_ssize_t _o200k_at(Text* t, Py_ssize_t i, Py_ssize_t b, int max_digits, bint contractions,
                                  bint slash, bint han) noexcept nogil:
    """([\\p{Han}]+ when han)
    |[^\\r\\n\\p{L}\\p{N}]?[UP]*[LO]+(contraction)?|[^\\r\\n\\p{L}\\p{N}]?[UP]+[LO]*(contraction)?
    |\\p{N}{1,max_digits}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n(/)]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ at i
    (always matches); UP = [\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}], LO = [\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}],
    both without Han when han."""
    cdef Py_UCS4 c = t.cp[i]
    cdef uint16_t k = t.cl[i]
    cdef uint16_t up = UPPER | MARK, lo = LOWER | MARK, excl = HAN if han else 0
    cdef uint16_t not_other = SPACE | LETTER | NUMBER
    cdef bint prefix = not _nl(c) and not (k & (LETTER | NUMBER)) and i + 1 < b
    cdef Py_ssize_t e = -1, j
    if han and k & HAN:
        return _run(t.cl, i, b, HAN)
    # each word alternative: with the one-character prefix first, then without it
    if prefix:
        e = _upper_lower(t, i + 1, b, up, lo, excl)
    if e < 0:
        e = _upper_lower(t, i, b, up, lo, excl)
    if e < 0 and prefix:
        e = _upper_then_lower(t, i + 1, b, up, lo, excl)
    if e < 0:
        e = _upper_then_lower(t, i, b, up, lo, excl)
    if e >= 0:
        return e + _contraction(t, e, b) if contractions else e
    if k & NUMBER:
        return _digits(t, i, b, max_digits)
    if c == 32 and i + 1 < b and not (t.cl[i + 1] & not_other):
        i += 1  # " ?" then other characters
        k = t.cl[i]
    if not (k & not_other):
        j = i
        while j < b and not (t.cl[j] & not_other):
            j += 1
        while j < b and (_nl(t.cp[j]) or (slash and t.cp[j] == 47)):
            j += 1
        return j
    return _spaces(t, i, b, False)


cdef inline Py_ssize_t _deepseek_at(Text* t, Py_ssize_t i, Py_ssize_t b) noexcept nogil:
    """[ASCII punctuation][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+
    | ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+ at i, or -1 (no match)."""
    cdef Py_UCS4 c = t.cp[i]
    cdef uint16_t k = t.cl[i]
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
        return _spaces(t, i, b, False)
    return -1


cdef inline void _emit(Text* t, Py_ssize_t end) noexcept nogil:
    t.ends[t.npieces] = end
    t.npieces += 1


cdef void _scan_cl100k(Text* t, Py_ssize_t n, int max_digits, uint16_t letters, bint to_end) noexcept nogil:
    cdef Py_ssize_t i = 0
    while i < n:
        i = _cl100k_at(t, i, n, max_digits, letters, to_end)
        _emit(t, i)


cdef void _scan_gpt2(Text* t, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0
    while i < n:
        i = _gpt2_at(t, i, n)
        _emit(t, i)


cdef void _scan_o200k(Text* t, Py_ssize_t n, int max_digits, bint contractions, bint slash,
                      bint han) noexcept nogil:
    cdef Py_ssize_t i = 0
    while i < n:
        i = _o200k_at(t, i, n, max_digits, contractions, slash, han)
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
    cdef uint16_t _letters
    cdef bint _to_end, _contractions, _slash, _han
    cdef object _twin

    def __init__(self, patterns):
        self.patterns = tuple(patterns)
        self._twin = _pretok_py.Scanner(self.patterns)
        how = _patterns.KNOWN.get(self.patterns)
        self.fast = how is not None
        if how is None:
            return
        _load_tables()
        if how[0] == "cl100k":
            self._family = CL100K
            _, self._max_digits, marks, self._to_end = how
            self._letters = LETTER | MARK if marks else LETTER
        elif how[0] == "o200k":
            self._family = O200K
            _, self._max_digits, self._contractions, self._slash, self._han = how
        elif how[0] == "gpt2":
            self._family = GPT2
        else:
            self._family = DEEPSEEK

    cdef int _scan(self, str text, Text* t) except -1:
        """Fills t (allocated here; the caller frees it with _free) with the pieces of text."""
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i
        cdef int kind = PyUnicode_KIND(text)
        cdef void* data = PyUnicode_DATA(text)
        t.npieces = 0
        t.cp = <Py_UCS4*>malloc((n + 1) * sizeof(Py_UCS4))
        t.cl = <uint16_t*>malloc((n + 1) * sizeof(uint16_t))
        t.ends = <Py_ssize_t*>malloc((n + 1) * sizeof(Py_ssize_t))
        if t.cp == NULL or t.cl == NULL or t.ends == NULL:
            _free(t)
            raise MemoryError()
        for i in range(n):
            t.cp[i] = PyUnicode_READ(kind, data, i)
            t.cl[i] = _cls_of[t.cp[i]]
        if self._family == CL100K:
            _scan_cl100k(t, n, self._max_digits, self._letters, self._to_end)
        elif self._family == O200K:
            _scan_o200k(t, n, self._max_digits, self._contractions, self._slash, self._han)
        elif self._family == GPT2:
            _scan_gpt2(t, n)
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
        cdef int32_t* ids = NULL
        cdef Py_ssize_t n
        if not self.fast:
            return self._twin.encode(text, bpe)
        if not isinstance(bpe, BPE):  # the twin's merger: our pieces, its merge
            for piece in self.split(text):
                out += bpe.encode_piece(_pretok_py.piece_bytes(piece))
            return out
        n = self._merge(text, <BPE>bpe, &ids)
        try:
            return (<BPE>bpe).ids_list(ids, n)
        finally:
            free(ids)

    def count(self, str text, bpe):
        if not self.fast or not isinstance(bpe, BPE):
            return len(self.encode(text, bpe))
        return self._merge(text, <BPE>bpe, NULL)

    cdef Py_ssize_t _merge(self, str text, BPE bpe, int32_t** ids_out) except -1:
        """Merges every piece and returns how many ids; with ids_out, they are kept in a
        buffer handed to the caller (who frees it)."""
        cdef Text t
        cdef Py_ssize_t k, start = 0, longest = 0, nbytes, m, total = 0, cap
        cdef unsigned char* buf = NULL
        cdef int32_t* ids = NULL
        cdef int32_t* grown
        self._scan(text, &t)
        try:
            for k in range(t.npieces):
                longest = max(longest, t.ends[k] - start)
                start = t.ends[k]
            cap = 4 * longest + 1 + (PyUnicode_GET_LENGTH(text) if ids_out != NULL else 0)
            buf = <unsigned char*>malloc(4 * longest + 1)
            ids = <int32_t*>malloc(cap * sizeof(int32_t))
            if buf == NULL or ids == NULL:
                raise MemoryError()
            start = 0
            for k in range(t.npieces):
                nbytes = _utf8(t.cp, start, t.ends[k], buf)
                start = t.ends[k]
                if ids_out == NULL:
                    total += bpe.encode_into(buf, nbytes, ids)
                    continue
                if total + nbytes + 1 > cap:  # a piece has at most one id per byte
                    cap = 2 * cap + nbytes
                    grown = <int32_t*>realloc(ids, cap * sizeof(int32_t))
                    if grown == NULL:
                        raise MemoryError()
                    ids = grown
                total += bpe.encode_into(buf, nbytes, ids + total)
            if ids_out != NULL:
                ids_out[0] = ids
                ids = NULL
            return total
        finally:
            free(buf)
            free(ids)
            _free(&t)


def run_cuts(str text, Py_ssize_t limit):
    """As the twin's: offsets where a run of spaces or of non-spaces (str.isspace) longer than
    limit is cut, every limit characters into it; one pass over the code points."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i, run = 0
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef int space, previous = -1
    cdef list cuts = []
    for i in range(n):
        space = Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))
        if space == previous:
            run += 1
            if run > limit:
                cuts.append(i)
                run = 1
        else:
            previous = space
            run = 1
    return cuts


cdef void _free(Text* t) noexcept:
    free(t.cp)
    free(t.cl)
    free(t.ends)
    t.cp = NULL
    t.cl = NULL
    t.ends = NULL
