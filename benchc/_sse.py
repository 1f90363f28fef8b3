"""Selector: the compiled SSE decoder when built, else the pure-Python twin."""

from benchc._core import use_extensions

if use_extensions():
    try:
        from benchc._sse_c import SSEDecoder
    except ImportError:  # not compiled (no C compiler at install): the twin is exact, only slower
        from benchc._sse_py import SSEDecoder
else:
    from benchc._sse_py import SSEDecoder

CORE = "cython" if SSEDecoder.__module__ == "benchc._sse_c" else "python"

__all__ = ["SSEDecoder", "CORE"]
