"""A minimal reader of the protobuf wire format, enough for SentencePiece's .model file.

Why not the `protobuf` package: a .model is a ModelProto with a handful of fields
(pieces, trainer and normalizer specs), read once; the wire format is four record kinds
(https://protobuf.dev/programming-guides/encoding/), and reading it here keeps benchc free
of a compiled dependency and of generated schema code whose runtime version must match.
The field numbers benchc reads are named where they are used (_sentencepiece.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


class ProtobufError(ValueError):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each record of one message, in order: ints for
    VARINT/FIXED64/FIXED32 (raw bits), bytes for BYTES (a string, bytes or a sub-message)."""
    i, n = 0, len(buf)
    value: int | bytes
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, i = _varint(buf, i)
        elif wire == FIXED64:
            if i + 8 > n:
                raise ProtobufError("truncated fixed64")
            value = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wire == FIXED32:
            if i + 4 > n:
                raise ProtobufError("truncated fixed32")
            value = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        elif wire == BYTES:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ProtobufError("truncated length-delimited field")
            value = buf[i:i + size]
            i += size
        else:
            raise ProtobufError(f"unsupported wire type {wire} (field {number})")
        yield number, wire, value


def as_float(bits: int) -> float:
    """A FIXED32 record's bits as the float it stores."""
    return struct.unpack("<f", bits.to_bytes(4, "little"))[0]
