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

from benchc.errors import ResultFormatError

ENCODING_COOKIE = 0x1C849303 | 0x10
COMPRESSION_COOKIE = 0x1C849304 | 0x10
_COOKIE_MASK = ~0xF0 & 0xFFFFFFFF
_EXT = struct.Struct(">II")
_PAYLOAD = struct.Struct(">IIIIQQd")
MAX_COUNTS = 4 * 1024 * 1024
# What a header may say (HdrHistogram's own constructor checks, and a ceiling of 2^62 on the
# highest value: past it the bucket arithmetic of an int64 layout overflows, and the C core's
# sizing loop would never end). Checked before any histogram is built from a header.
MAX_HIGHEST = 2**62 - 1
MAX_COUNT = 2**63 - 1
# The payload of a valid histogram: its header and at most MAX_COUNTS counts of 9 bytes each;
# decompression stops there, so a small zlib bomb cannot take gigabytes.
_MAX_PAYLOAD = 40 + 9 * MAX_COUNTS


class HdrFormatError(ResultFormatError, ValueError):
    """An encoded histogram that cannot be read: a result document's damage (exit 5)."""


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


def check_layout(lowest: int, highest: int, digits: int) -> None:
    """The layout a histogram may have (both cores' constructors and the decoder call this):
    HdrFormatError, a ValueError, naming the field outside its range."""
    if not 1 <= digits <= 5:
        raise HdrFormatError(f"significant digits {digits} outside 1..5")
    if lowest < 1:
        raise HdrFormatError(f"lowest trackable value {lowest} is less than 1")
    if highest > MAX_HIGHEST:
        raise HdrFormatError(f"highest trackable value {highest} is 2^62 or more (the most an int64 "
                             "layout holds)")
    if highest < 2 * lowest:
        raise HdrFormatError(f"highest trackable value {highest} is less than twice the lowest ({lowest})")


def check_header(text: str | bytes) -> None:
    """What decode() checks before the counts, at the cost of a base64 and a zlib call (no
    loop over the counts): the framing, a payload no larger than a histogram's, and the
    layout. Result documents are checked so when read (results/values.py); the counts are
    checked as a tool decodes them."""
    _payload(text)


def _payload(text: str | bytes) -> tuple[bytes, int, int, int, int]:
    """(payload, payload length, lowest, highest, digits), the header checked."""
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
        inflate = zlib.decompressobj()
        payload = inflate.decompress(raw[_EXT.size:], _MAX_PAYLOAD)
    except zlib.error as e:
        raise HdrFormatError(f"corrupt payload: {e}") from e
    if inflate.unconsumed_tail:
        raise HdrFormatError(f"payload larger than a histogram's {_MAX_PAYLOAD} bytes")
    if len(payload) < _PAYLOAD.size:
        raise HdrFormatError("payload too short")
    pcookie, plen, _offset, digits, lowest, highest, _ratio = _PAYLOAD.unpack_from(payload)
    if pcookie & _COOKIE_MASK != 0x1C849303:
        raise HdrFormatError(f"not a V2 payload (cookie {pcookie:#x})")
    check_layout(lowest, highest, digits)
    return payload, plen, lowest, highest, digits


def decode(text: str | bytes) -> tuple[int, int, int, list[int]]:
    """(lowest, highest, significant digits, counts) of an encoded histogram; HdrFormatError
    names what is wrong with one that cannot be read (a header outside what the encoding
    allows, a count past int64, more counts than MAX_COUNTS)."""
    payload, plen, lowest, highest, digits = _payload(text)
    data = payload[_PAYLOAD.size:_PAYLOAD.size + plen]
    counts: list[int] = []
    total = 0
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
            if len(counts) - v > MAX_COUNTS:  # checked before the run is built: -v may be 2^63
                raise HdrFormatError("too many counts")
            counts.extend([0] * -v)
        else:
            counts.append(v)
            total += v
            if total > MAX_COUNT:
                raise HdrFormatError("total count is past int64")
            if len(counts) > MAX_COUNTS:
                raise HdrFormatError("too many counts")
    return lowest, highest, digits, counts
