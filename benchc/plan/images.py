"""Images in prompts: synthetic PNGs, and the images a JSONL dataset names.

`workload.images: {count, width, height, format: png}` puts `count` images of width x height
pixels into every prompt, as base64 data URLs in the API's image content part (the adapter's
form: client/apis.py). Each image is a pure function of (seed, prompt stream, request index,
image number): any worker builds it alone, the same spec gives the same bytes on any machine,
and no two requests send the same image, so a server's multimodal cache (vLLM caches
processed images by their content hash) finds nothing a point did not send itself -- unless
`prompts: shared`, where a shared prompt carries the same images each time it is sent.

The picture is a grid of 16 x 16-pixel cells of random colours: it compresses about as a
simple drawing does (a noise image would not compress at all and send several times the
bytes of a photo of that size), and its content differs from cell to cell.

PNG is written here (no imaging library): the signature, IHDR, one zlib IDAT of filter-0
scanlines, IEND (PNG spec, RFC 2083). JPEG would need an encoder benchc does not have.

A JSONL record may name images: `"images": ["a.png", ...]`, paths relative to the dataset
file (PNG, JPEG, WebP or GIF, by their first bytes), read when the plan is compiled.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from benchc.errors import PlanError
from benchc.inputs import IMAGE_BYTES, input_problem

CELL = 16  # pixels per side of one colour cell
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# media types by a file's first bytes
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
          (b"RIFF", "image/webp"))


@dataclass(frozen=True)
class Image:
    """One image as a request carries it: its media type, base64 data and size in pixels
    (None where benchc did not read it: a JPEG a file named)."""

    media_type: str
    data: str  # base64
    width: int | None
    height: int | None

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"

    def to_json(self) -> dict:
        """What a digest covers: its size and its bytes' sha256 (not the bytes)."""
        return {"media_type": self.media_type, "width": self.width, "height": self.height,
                "sha256": hashlib.sha256(self.data.encode()).hexdigest()}


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def encode_png(rgb: bytes, width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of `rgb` (height rows of width x 3 bytes)."""
    if len(rgb) != width * height * 3:
        raise ValueError("rgb must hold width x height x 3 bytes")
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))  # filter 0: none
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # depth 8, colour type 2 (RGB)
    idat = zlib.compress(raw, 6)
    return _PNG_SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR, or None if `data` is not a PNG."""
    if len(data) < 24 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def synthetic_png(seed: int, stream: int, index: int, k: int, width: int, height: int) -> bytes:
    """Image k of request (stream, index): a grid of random-colour cells, deterministic."""
    import numpy as np

    rng = np.random.default_rng([seed & ((1 << 63) - 1), stream + 1, index, k])
    cells = rng.integers(0, 256, ((height + CELL - 1) // CELL, (width + CELL - 1) // CELL, 3), dtype=np.uint8)
    pixels = np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)[:height, :width]
    return encode_png(np.ascontiguousarray(pixels).tobytes(), width, height)


def synthetic_images(params: dict, seed: int, stream: int, index: int, first: int = 0) -> tuple[Image, ...]:
    """The images of request (stream, index) by workload.images (`params`: count, width, height):
    images first .. first + count - 1 of it (a session's turn t takes those from t x count on,
    so each turn's are its own)."""
    w, h = params["width"], params["height"]
    return tuple(Image("image/png", base64.b64encode(synthetic_png(seed, stream, index, k, w, h)).decode(),
                       w, h) for k in range(first, first + params["count"]))


def image_params(cfg: dict | None) -> dict | None:
    """workload.images as the plan keeps it (format png, the only one built)."""
    if not cfg:
        return None
    return {"source": "synthetic", "count": cfg["count"], "width": cfg["width"], "height": cfg["height"],
            "format": cfg.get("format", "png")}


def read_image(path_text: str, base_dir: Path, where: str) -> Image:
    """An image file a dataset names, as a request carries it; PlanError names a bad one."""
    p = Path(path_text).expanduser()
    path = p if p.is_absolute() else base_dir / p
    if why := input_problem(path, IMAGE_BYTES, "image"):
        raise PlanError(f"{where}: {why}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PlanError(f"{where}: image {path}: {e.strerror}") from e
    media = next((m for magic, m in _MAGIC if data.startswith(magic)), None)
    if media is None:
        raise PlanError(f"{where}: image {path} is not a PNG, JPEG, GIF or WebP file")
    size = png_size(data)
    return Image(media, base64.b64encode(data).decode(), *(size or (None, None)))


__all__ = ["Image", "encode_png", "png_size", "synthetic_png", "synthetic_images", "image_params",
           "read_image"]
