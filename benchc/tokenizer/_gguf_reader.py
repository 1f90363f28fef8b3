"""Reads the metadata of a GGUF file (llama.cpp's model format): the header and the
key/value section, where the tokenizer lives; tensors are never read, so a model of many
gigabytes costs only its first megabytes. Format: github.com/ggml-org/ggml docs/gguf.md
(versions 2 and 3, little-endian). The `gguf` package (llama.cpp's own reader and writer)
is used by the tests to write files and check this reader, not at run time.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
            12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8",
          11: "<i8", 12: "<f8"}
STRING, ARRAY = 8, 9


class GGUFError(ValueError):
    pass


class _Reader:
    def __init__(self, f: BinaryIO):
        self.f = f
        self.raw = bytearray()  # every byte read: the tokenizer's sha256 is taken over them
        at = f.tell()
        self.size = f.seek(0, 2)
        f.seek(at)

    def take(self, n: int) -> bytes:
        if n > self.size - self.f.tell():  # a forged length would allocate it before the short read
            raise GGUFError(f"truncated file (a value of {n:,} bytes past its end)")
        b = self.f.read(n)
        if len(b) != n:
            raise GGUFError("truncated file")
        self.raw += b
        return b

    def scalar(self, kind: int):
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.scalar(10)).decode("utf-8", "surrogateescape")

    def value(self, kind: int):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.scalar(4), self.scalar(10)
            if item == STRING:
                return [self.string() for _ in range(count)]
            if item in _NUMPY:
                # imported here: every run imports this module (the tokenizer's loaders), few read
                # a GGUF file, and numpy is a tenth of a second of `benchc run`'s start
                import numpy as np

                dtype = np.dtype(_NUMPY[item])
                return np.frombuffer(self.take(dtype.itemsize * count), dtype).tolist()
            return [self.value(item) for _ in range(count)]
        if kind in _SCALARS:
            return self.scalar(kind)
        raise GGUFError(f"unknown value type {kind}")


def read_metadata(f: BinaryIO) -> tuple[dict, bytes]:
    """(key -> value, the bytes read) of a GGUF file's metadata."""
    magic = f.read(4)
    if magic != b"GGUF":
        raise GGUFError("not a GGUF file (no GGUF magic)")
    r = _Reader(f)
    r.raw += magic
    version = r.scalar(4)
    if version not in (2, 3):
        raise GGUFError(f"GGUF version {version} is not supported (2 and 3 are; a big-endian file "
                        "reads as a huge version)")
    r.scalar(10)  # tensor count
    n_kv = r.scalar(10)
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.scalar(4))
    return meta, bytes(r.raw)
