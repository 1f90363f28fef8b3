"""Selector: the compiled HdrHistogram recorder when built, else the pure-Python twin."""

from benchc._core import use_extensions

if use_extensions():
    try:
        from benchc._hdr_c import Histogram
    except ImportError:  # not compiled (no C compiler at install): the twin is exact, only slower
        from benchc._hdr_py import Histogram
else:
    from benchc._hdr_py import Histogram

CORE = "cython" if Histogram.__module__ == "benchc._hdr_c" else "python"

__all__ = ["Histogram", "CORE"]
