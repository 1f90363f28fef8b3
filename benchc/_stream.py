"""Selector: the compiled stream parser when built, else the pure-Python twin."""

from benchc._core import use_extensions

if use_extensions():
    try:
        from benchc._stream_c import StreamParser
    except ImportError:  # not compiled (no C compiler at install): the twin is exact, only slower
        from benchc._stream_py import StreamParser
else:
    from benchc._stream_py import StreamParser

from benchc._stream_py import ns_to_us  # noqa: E402 - one definition of the rounding, both cores

CORE = "cython" if StreamParser.__module__ == "benchc._stream_c" else "python"

__all__ = ["StreamParser", "ns_to_us", "CORE"]
