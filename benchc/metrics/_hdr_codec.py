"""HdrHistogram's standard compressed V2 encoding ("HISTFAAA..."), shared by both cores.

Layout (HdrHistogram Java/C, `encodeIntoCompressedByteBuffer`), all big-endian:
    external header: cookie 0x1c849314, length of the zlib payload       (8 bytes)
    zlib(payload):   cookie 0x1c849313, payload_len, normalizing_index_offset,
                     significant_figures (4 x uint32), lowest and highest
                     trackable value (2 x uint64), integer-to-double ratio
                     (float64), then the counts up to the highest non-zero one,
                     each ZigZag LEB128; a run of N zero counts is written as -N.
and the whole thing base64 encoded. Encoding runs once per point, off the hot
path, so one Python implementation serves the Cython and the Python core.
"""

from __future__ import annotations

import base64
import struct
import zlib

ENCODING_COOKIE = 0x1C849303 | 0x10
COMPRESSION_COOKIE = 0x1C849304 | 0x10
_COOKIE_MASK = ~0xF0 & 0xFFFFFFFF
_EXT = struct.Struct(">II")
_PAYLOAD = struct.Struct(">IIIIQQd")
MAX_COUNTS = 4 * 1024 * 1024


class HdrFormatError(ValueError):
    """An encoded histogram that cannot be read."""


def _zigzag_leb128(values, out: bytearray) -> None:
    for v in values:
        z = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
        for _ in range(8):
            if z < 0x80:
                break
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        else:
            out.append(z & 0xFF)  # the ninth byte holds 8 bits
            continue
        out.append(z)


def _runs(counts, limit: int):
    i = 0
    while i < limit:
        c = counts[i]
        i += 1
        if c:
            yield c
            continue
        zeros = 1
        while i < limit and counts[i] == 0:
            zeros += 1
            i += 1
        yield -zeros


def encode(counts, limit: int, lowest: int, highest: int, digits: int) -> str:
    """counts[0:limit] as an HdrHistogram V2 base64 string."""
    body = bytearray()
    _zigzag_leb128(_runs(counts, limit), body)
    payload = _PAYLOAD.pack(ENCODING_COOKIE, len(body), 0, digits, lowest, highest, 1.0) + bytes(body)
    compressed = zlib.compress(payload)
    return base64.b64encode(_EXT.pack(COMPRESSION_COOKIE, len(compressed)) + compressed).decode("ascii")


def decode(text: str | bytes) -> tuple[int, int, int, list[int]]:
    """(lowest, highest, significant digits, counts) of an encoded histogram."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as e:
        raise HdrFormatError(f"not base64: {e}") from e
    if len(raw) < _EXT.size:
        raise HdrFormatError("too short for an HdrHistogram")
    cookie, length = _EXT.unpack_from(raw)
    if cookie & _COOKIE_MASK != 0x1C849304:
        raise HdrFormatError(f"not a compressed V2 HdrHistogram (cookie {cookie:#x})")
    if length != len(raw) - _EXT.size:
        raise HdrFormatError(f"length {length} does not match the {len(raw) - _EXT.size} bytes given")
    try:
        payload = zlib.decompress(raw[_EXT.size:])
    except zlib.error as e:
        raise HdrFormatError(f"corrupt payload: {e}") from e
    if len(payload) < _PAYLOAD.size:
        raise HdrFormatError("payload too short")
    pcookie, plen, _offset, digits, lowest, highest, _ratio = _PAYLOAD.unpack_from(payload)
    if pcookie & _COOKIE_MASK != 0x1C849303:
        raise HdrFormatError(f"not a V2 payload (cookie {pcookie:#x})")
    data = payload[_PAYLOAD.size:_PAYLOAD.size + plen]
    counts: list[int] = []
    i, n = 0, len(data)
    while i < n:
        z, shift = 0, 0
        for k in range(9):
            if i >= n:
                raise HdrFormatError("truncated counts")
            b = data[i]
            i += 1
            if k == 8:
                z |= b << 56
                break
            z |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        v = (z >> 1) ^ -(z & 1)
        if v < 0:
            counts.extend([0] * -v)
        else:
            counts.append(v)
        if len(counts) > MAX_COUNTS:
            raise HdrFormatError("too many counts")
    return lowest, highest, digits, counts
