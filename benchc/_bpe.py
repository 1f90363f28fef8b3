"""Selector: the compiled byte-pair merger when built, else the pure-Python twin."""

from benchc._core import use_extensions

if use_extensions():
    try:
        from benchc._bpe_c import BPE
    except ImportError:  # not compiled (no C compiler at install): the twin is exact, only slower
        from benchc._bpe_py import BPE
else:
    from benchc._bpe_py import BPE

CORE = "cython" if BPE.__module__ == "benchc._bpe_c" else "python"

__all__ = ["BPE", "CORE"]
