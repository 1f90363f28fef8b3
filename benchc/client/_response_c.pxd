# The response reader's core (csrc/client/_response_c.pyx): a C struct and the functions over
# it, run without the GIL. ResponseReader wraps one; the receive loop (_rxloop_c) feeds the
# struct of such an object from its own thread.

from libc.stdint cimport int64_t

from benchc.client._chunked_c cimport ChunkedCore
from benchc.client._bytes cimport Bytes
from benchc.client._stream_c cimport StreamCore

cdef enum:
    RESPONSE_EXCERPT = 300  # as the twin's EXCERPT
    RESPONSE_KEPT = 80  # as the twin's KEPT
    # the body's framing, once the head is read
    MODE_HEAD = 0
    MODE_CHUNKED = 1
    MODE_LENGTH = 2
    MODE_CLOSE = 3

cdef struct ResponseCore:
    # what every read touches first (one stream's state is cold when its next read comes)
    StreamCore* parser  # the body of a 200 goes here
    int status  # -1 until a final head was read
    int mode
    int64_t remaining  # MODE_LENGTH: body bytes still to come
    bint got_bytes, keep_alive, finished
    bint failed  # memory ran out (or the parser's interpret raised)
    int64_t end_ns, last_rx_ns
    int64_t sent_ns  # t0: a read stamped before it is dated here (and counted in early_reads)
    int64_t early_reads
    int error  # 0, or one of the twin's codes (HEAD_TOO_LARGE .. LOST)
    int lost_errno  # LOST: the read's errno, 0 when the server closed
    Py_ssize_t named_len, excerpt_len
    bint has_keep_alive  # a Keep-Alive header came: its value (lower case) in keep_alive_value
    Py_ssize_t keep_alive_len
    Bytes head  # the head read so far
    ChunkedCore chunked  # its hot fields first, its line buffer last
    unsigned char named[RESPONSE_KEPT]  # the bytes a message names (a status line, a value)
    unsigned char keep_alive_value[RESPONSE_KEPT]  # `timeout=5, max=100`, for http1's keep-alive rules
    unsigned char excerpt[RESPONSE_EXCERPT]

cdef void response_init(ResponseCore* r, StreamCore* parser, int64_t sent_ns) noexcept nogil
cdef void response_free(ResponseCore* r) noexcept nogil
cdef void response_feed(ResponseCore* r, unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil
cdef void response_lost(ResponseCore* r, int err, int64_t now) noexcept nogil

cdef class ResponseReader:
    cdef ResponseCore core
    cdef Bytes scratch  # a read's bytes, de-chunked in place
    cdef readonly object parser
    cdef object _lost_text
