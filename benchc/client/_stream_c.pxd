# The stream parser's core (csrc/client/_stream_c.pyx): a C struct and the functions over it,
# run without the GIL. StreamParser wraps one; the receive loop (_rxloop_c) feeds the struct of
# a StreamParser from its own thread. A field the parser learns to read is added here once.

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

from benchc.client._bytes cimport Bytes

cdef enum:
    EXAMPLE_KEPT = 712  # bytes of the first malformed event kept (the twin's _body_py.EXAMPLE_KEPT)
    FIRST_KEPT = 200  # bytes of the stream's start kept (the twin's FIRST_BYTES_KEPT)

cdef struct StreamCore:
    # Hot fields first: one stream's state is cold when its next read comes, so what every
    # read touches sits together; buffers a read rarely needs come last.
    # SSE framing, as benchc/client/_sse_py.py: the common event is one `data:` line then a
    # blank line, often in one read: it is read in place (offsets into the current buffer)
    Py_ssize_t pa, pb
    bint has_data, skip_lf, has_shape, keep_text
    int oversized  # 0, or the twin's LINE_TOO_LONG / EVENT_TOO_LARGE: the stream is no longer read
    Py_ssize_t first_len  # bytes in `first` (the stream's start, FIRST_KEPT at most)
    int bom  # the stream's first bytes so far that began a UTF-8 BOM (held back); -1 once past them
    int shape_kind  # what the shape's text is (the twin's ANSWER, REASONING or TOOL: its head says)
    # a tool shape's call index (the twin's call_index), and where the digits of its
    # `"output_index":` / `"index":` lie in the tail (length 0: in the head, or none), which must
    # match exactly: another call's piece is not this call's (the tail's digits may change else)
    int shape_call
    Py_ssize_t call_at, call_len
    # the counter in the shape's tail (the Responses API's sequence_number): where its digit
    # run starts in the tail and its length (0: none seen), so that a match compares the
    # bytes around it whole
    Py_ssize_t counter_at, counter_len
    Py_ssize_t data_lines
    # what the stream carried (the twin's attributes)
    int64_t first_text_ns, last_text_ns, done_ns, text_chunks, text_bytes, events, prev_usage
    int64_t usage_completion, usage_prompt, malformed, multi_token_chunks
    # reasoning models: the first chunk of each kind, the reasoning chunks, and usage.
    # completion_tokens_details.reasoning_tokens (-1: not reported)
    int64_t first_reasoning_ns, first_answer_ns, reasoning_chunks, usage_reasoning
    # tool calls: the first tool-call chunk and their count; events of a type no API has (skipped)
    int64_t first_tool_ns, tool_chunks, unknown_events
    int64_t* gaps  # between consecutive text chunks (ns): the first GAPS_KEPT (the twin's)
    int64_t* tokens  # per kept text chunk: its token count, -1 when unknown
    unsigned char* kinds  # per kept text chunk: the twin's ANSWER (0), REASONING (1) or TOOL (2)
    Py_ssize_t n_gaps, n_tokens, cap
    int64_t max_gap_ns  # the largest gap of all (0 until there is one)
    int last_kind  # the last text chunk's kind
    # the gaps past GAPS_KEPT, recorded as they come into Histograms (owned references, NULL
    # until the first): the twin's _spill, [ITL, per-token ITL, answer ITL]
    PyObject* spill[3]
    Bytes line  # a line begun in an earlier read
    Bytes data  # the current event's data lines (joined with LF) once they outlive their read
    # The shape of this stream's plain text chunk: the bytes before its text value (with the
    # opening quote) and from its closing quote on. A server repeats them for every token of
    # a request (id, model, created...): an event that starts and ends with exactly these
    # bytes has the same keys in the same places, so only its text needs reading.
    Bytes shape_head, shape_tail
    bint has_finish, has_error_event, has_response_id
    bint ended  # the response's end event came (the twin's _ended): later events are not read
    Bytes finish, error_event  # UTF-8 (surrogatepass), as the twin's str round-trips
    Bytes response_id  # the Responses API's response id (its end event's), as the twin's
    # the output's pieces, with keep_text: raw JSON string bytes (escapes decoded when asked
    # for the text) or UTF-8 text; piece_ends[i] = (end offset in texts) * 8 + kind * 2
    # + (1 if UTF-8)
    Bytes texts
    int64_t* piece_ends
    Py_ssize_t n_pieces, pieces_cap
    # read once per stream, at its end, by the twin's interpret (see _stream_py): the cached
    # prompt tokens (-1: not reported) and llama.cpp's timings, in the twin's TIMINGS_INT and
    # TIMINGS_MS order (-1: that field was absent from the last `timings` object)
    int64_t usage_cached
    bint has_timings
    int64_t timings_n[3]
    double timings_ms[2]
    # A non-streamed answer (body mode, benchc/client/_body_py.py): its skeleton is kept in
    # `data` as it arrives; the skimmer's state (depth, the string being read, the container
    # at depth 3) and the results the interpretation counted (-1: none said)
    bint body, body_done, body_escape, body_object3, body_key3, body_read
    int body_depth, body_string
    int64_t results
    Py_ssize_t example_len
    unsigned char example[EXAMPLE_KEPT]
    unsigned char first[FIRST_KEPT]

cdef int stream_init(StreamCore* s, bint keep_text, bint body=*) noexcept nogil
cdef void stream_free(StreamCore* s) noexcept nogil
cdef int stream_feed(StreamCore* s, const unsigned char* p, Py_ssize_t n, int64_t now) noexcept nogil
cdef int stream_close(StreamCore* s, int64_t now) noexcept nogil

cdef class StreamParser:
    cdef StreamCore core
    cdef _apply_body(self, fields, bytes kept)
