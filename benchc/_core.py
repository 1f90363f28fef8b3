"""Which core runs the hot path: the compiled Cython modules, or their pure-Python twins.

BENCHC_NO_EXTENSIONS=1 forces the twins (as aiohttp's AIOHTTP_NO_EXTENSIONS).
"""

from __future__ import annotations

import os

HOT_MODULES = ("benchc.metrics._hdr", "benchc.client._stream", "benchc.tokenizer._bpe",
               "benchc.tokenizer._pretok", "benchc.client._chunked", "benchc.client._rx",
               "benchc.tokenizer._spm", "benchc.client._response")


def use_extensions() -> bool:
    return os.environ.get("BENCHC_NO_EXTENSIONS", "") in ("", "0")


def select(name: str, attr: str) -> tuple[object, str]:
    """(`attr` of {name}_c, "cython") when compiled and allowed, else that of the
    pure-Python twin {name}_py with "python"; `name` is the selector module's own
    (benchc.client._stream). A missing build is not an error: the twin gives the same
    results, only slower (CI requires the build instead)."""
    import importlib

    if use_extensions():
        try:
            return getattr(importlib.import_module(f"{name}_c"), attr), "cython"
        except ImportError:
            pass
    return getattr(importlib.import_module(f"{name}_py"), attr), "python"


def core_name() -> str:
    """'cython' when every hot module loaded compiled, else 'python'."""
    import importlib

    cores = {importlib.import_module(m).CORE for m in HOT_MODULES}
    return "cython" if cores == {"cython"} else "python"
