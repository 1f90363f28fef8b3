# The chunked decoder's core (csrc/client/_chunked_c.pyx): a C struct and functions over it that
# run without the GIL, shared by its Python class and by the response reader (_response_c).

cdef enum:
    CHUNK_SIZE = 0
    CHUNK_DATA = 1
    CHUNK_DATA_END = 2
    CHUNK_TRAILER = 3
    CHUNK_DONE = 4
    CHUNK_FAILED = 5
    CHUNK_MAX_LINE = 4096  # as the twin's MAX_LINE
    CHUNK_BAD_KEPT = 40  # bytes of an offending line kept for the message
    # why decoding failed (0: it did not)
    CHUNK_TOO_LONG = 1
    CHUNK_NO_CRLF = 2
    CHUNK_BAD_SIZE = 3

cdef struct ChunkedCore:
    # what every read touches first, then the buffers (cache lines a read rarely needs)
    int state
    long long remaining  # payload bytes left in the current chunk
    Py_ssize_t line_len
    int error
    Py_ssize_t bad_len
    unsigned char bad[CHUNK_BAD_KEPT]
    unsigned char line[CHUNK_MAX_LINE + 1]  # a size or trailer line not yet complete

cdef void chunked_init(ChunkedCore* c) noexcept nogil
cdef Py_ssize_t chunked_feed(ChunkedCore* c, const unsigned char* p, Py_ssize_t n, unsigned char* out,
                             Py_ssize_t* rest) noexcept nogil
