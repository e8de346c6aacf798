"""The decoder protocol."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence, overload

import numpy as np

if TYPE_CHECKING:
    import torch

# The only Pillow plugins untrusted bytes may reach: the image formats training sets hold.
# Without the list, Pillow tries every plugin it has: EPS bytes named .jpg would reach its
# EPS plugin, which runs Ghostscript where it is installed.
PILLOW_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "PPM")  # (Pillow reads MPO as JPEG)

# Formats read through an optional Pillow plugin (pip install 'gpudecode[formats]'): Pillow's
# format id -> (the name people call it, the package, its module, the call that registers it).
# AVIF is Pillow's own from Pillow 11.2 where its wheel has libavif; pillow-avif-plugin before.
PLUGIN_FORMATS = {
    "AVIF": ("AVIF", "pillow-avif-plugin", "pillow_avif", None),
    "HEIF": ("HEIC/HEIF", "pillow-heif", "pillow_heif", "register_heif_opener"),
    "JXL": ("JPEG XL", "pillow-jxl-plugin", "pillow_jxl", None),
}
_OPENABLE: tuple[str, ...] | None = None


def is_pil(image: object) -> bool:
    """Whether `image` is a PIL image (Pillow not imported: it cannot be one)."""
    pil = sys.modules.get("PIL.Image")
    return pil is not None and isinstance(image, pil.Image)


def pillow_formats() -> tuple[str, ...]:
    """The formats Pillow may open here: PILLOW_FORMATS and each PLUGIN_FORMATS entry that
    Pillow has (its own or a plugin's, registered here on first call)."""
    global _OPENABLE
    if _OPENABLE is None:
        import importlib

        from PIL import Image

        Image.init()
        for fid, (_, _, module, register) in PLUGIN_FORMATS.items():
            if fid in Image.OPEN:
                continue
            try:
                mod = importlib.import_module(module)
                if register is not None:
                    getattr(mod, register)()
            except Exception:  # not installed, or its native library failed to load: said per image
                continue
        _OPENABLE = PILLOW_FORMATS + tuple(f for f in PLUGIN_FORMATS if f in Image.OPEN)
    return _OPENABLE


def sniff_plugin_format(data: bytes) -> str | None:
    """The PLUGIN_FORMATS id of `data` by its signature (an ISO-BMFF `ftyp` brand, JPEG XL's
    codestream or container), or None."""
    head = bytes(data[:32])
    if head[:2] == b"\xff\x0a" or head[:12] == b"\x00\x00\x00\x0cJXL \r\n\x87\n":
        return "JXL"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "AVIF"
        if brand in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"):
            return "HEIF"
    return None


def missing_plugin(data: bytes) -> str | None:
    """Why `data` cannot be opened here when it is a plugin format whose plugin is missing."""
    fid = sniff_plugin_format(data)
    if fid is None or fid in pillow_formats():
        return None
    name, package, _, _ = PLUGIN_FORMATS[fid]
    return f"a {name} image, and Pillow has no {name} support here: pip install 'gpudecode[formats]' ({package})"


@dataclass(slots=True)
class Request:
    """One image to decode: its bytes, format ("jpeg", "png" or "other", from the
    probe), full size, and the box (top, left, height, width) of it that is needed."""

    data: bytes
    format: str
    height: int
    width: int
    box: tuple[int, int, int, int]
    shard: str = ""
    key: str = ""


class Requests(Sequence[Request]):
    """A batch of requests as columns (what the Loader's pipeline hands a decoder): each
    Request is made when indexed, for decoders that read them one at a time; the CPU
    decoder reads the columns (no object per image). `boxes`: a list of (top, left,
    height, width), or an int64 array [N, 4]."""

    __slots__ = ("datas", "formats", "heights", "widths", "boxes", "shards", "keys")

    def __init__(self, datas: list, formats: list[str], heights: list[int], widths: list[int],
                 boxes: Sequence[tuple[int, int, int, int]] | np.ndarray, shards: list[str], keys: list[str]) -> None:
        self.datas, self.formats, self.heights, self.widths = datas, formats, heights, widths
        self.boxes, self.shards, self.keys = boxes, shards, keys

    @classmethod
    def of(cls, requests: Sequence[Request]) -> "Requests":
        """`requests` as columns (itself when it is a Requests)."""
        if isinstance(requests, Requests):
            return requests
        return cls([r.data for r in requests], [r.format for r in requests], [r.height for r in requests],
                   [r.width for r in requests], [r.box for r in requests], [r.shard for r in requests],
                   [r.key for r in requests])

    def __len__(self) -> int:
        return len(self.datas)

    @overload
    def __getitem__(self, k: int) -> Request: ...

    @overload
    def __getitem__(self, k: slice) -> list[Request]: ...

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        box = self.boxes[k]
        return Request(self.datas[k], self.formats[k], self.heights[k], self.widths[k],
                       tuple(box.tolist()) if isinstance(box, np.ndarray) else box, self.shards[k], self.keys[k])


@dataclass
class DecodedBatch:
    """The pixels of a decoded batch, as the fused kernel reads them: image k's pixel
    (y, x, c) is the uint8 at `pixels[offsets[k] + y*sy + x*sx + c*sc]`, (sy, sx, sc) =
    `strides[k]` in bytes (HWC, CHW, pitched rows, or sc = 0 for grey read as RGB), for y,
    x below `shapes[k]` (height, width). `boxes[k]` is the requested box (top, left,
    height, width) inside those pixels: the whole of a decoded crop window, or the crop
    inside a full decode. `errors[k]` is None, or why image k could not be decoded (its
    row is then unused).

    `pixels` may be a view spanning several allocations of the decoder's (one per image,
    on a CUDA device one virtual address space): only the bytes of each image are ever
    read. `owner` keeps those allocations alive as long as this object is."""

    pixels: torch.Tensor  # uint8, 1-D, on the decoder's device
    offsets: np.ndarray   # int64 [N]
    shapes: np.ndarray    # int64 [N, 2]
    strides: np.ndarray   # int64 [N, 3]: bytes between rows, columns, channels
    boxes: np.ndarray     # int64 [N, 4]
    errors: list[str | None]
    owner: Any = None
    pending: Any = None  # checks the decoder left running (a _span.Untouched), or None: see settle()
    # a split decoder's engines on this batch: name -> (images, seconds busy on the host, the batch's span)
    engines: dict[str, tuple[int, float, float]] | None = None

    @classmethod
    def made(cls, pixels: torch.Tensor, shapes: Any, layout: str = "CHW", *, offsets: np.ndarray | None = None,
             strides: np.ndarray | None = None) -> "DecodedBatch":
        """Whole images made by a step before the kernel (a canvas, a first pass), of
        `shapes` (h, w), packed one after the other in `pixels` in `layout` ("CHW" or
        "HWC"), or at the given `offsets` with the given `strides`."""
        shapes = np.asarray(shapes, np.int64).reshape(-1, 2)
        n, area = len(shapes), shapes[:, 0] * shapes[:, 1]
        if offsets is None:
            offsets = np.concatenate([[0], np.cumsum(area * 3)[:-1]]).astype(np.int64)
        if strides is None:  # (row, column, channel) byte strides
            strides = (np.stack([shapes[:, 1], np.ones(n, np.int64), area], axis=1) if layout == "CHW" else
                       np.stack([shapes[:, 1] * 3, np.full(n, 3), np.ones(n, np.int64)], axis=1))
        boxes = np.zeros((n, 4), np.int64)
        boxes[:, 2:] = shapes
        return cls(pixels, np.asarray(offsets, np.int64), shapes, np.asarray(strides, np.int64), boxes, [None] * n)

    def settle(self) -> "DecodedBatch":
        """Completes the decoder's deferred checks (on a GPU they run on the stream and are
        waited for here, when the pixels are about to be used): an image the decoder said it
        decoded but never wrote becomes that image's error, never stale pixels. Call it
        before reading `errors`; it returns the batch."""
        if self.pending is not None:
            for k in self.pending.result():
                self.errors[k] = ("the decoder reported this image decoded but never wrote it (its output buffer "
                                  "still holds the marker written before the decode): refused, not trained on the "
                                  "pixels left there by an earlier image")
            self.pending = None
        return self


def hwc_strides(shapes: np.ndarray) -> np.ndarray:
    """Strides of packed HWC RGB images of `shapes` [N, 2]."""
    shapes = np.asarray(shapes, np.int64).reshape(-1, 2)
    out = np.empty((len(shapes), 3), np.int64)
    out[:, 0] = 3 * shapes[:, 1]
    out[:, 1] = 3
    out[:, 2] = 1
    return out


class Decoder(Protocol):
    """Compressed bytes in, pixels out.

    `buffers`: how many results of decode() may be in use at once: a result stays valid
    until `buffers` more decode() calls have returned (a decoder with a ring of output
    buffers), or None when each result owns its memory. A caller that keeps k results
    alive at once (the Loader keeps 3: one in the kernel, one queued, one being decoded)
    needs buffers >= k."""

    name: str
    device: str

    @property
    def backend(self) -> str:
        """What actually decodes, in words (the library and version, GPU, hardware or CPU)."""
        ...

    @property
    def buffers(self) -> int | None: ...

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        """Decodes every request (never raises for one bad image: see errors, read after
        DecodedBatch.settle(); a decoder with `interrupt()`, stopped by it from another
        thread, raises errors.Cancelled)."""
        ...

    def close(self) -> None:
        """Releases the decoder's threads and buffers."""
        ...


def strip_exif(data: bytes) -> bytes:
    """`data` (a JPEG) without its EXIF APP1 segments, or `data` itself when it has none
    or its header cannot be walked (the decoder then says what is wrong). For decoders
    that always apply the EXIF orientation (torchcodec): gpudecode never applies it (as
    torchvision's ImageFolder and Pillow's plain open do), so every decoder gives the
    same pixels, and a 90-degree orientation does not swap the size the header gave."""
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return data
    cut: list[tuple[int, int]] = []
    i = 2
    while i + 4 <= n:
        if data[i] != 0xFF:
            return data  # not a marker where one must be: leave it to the decoder
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: the header is over
            break
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2 or i + 2 + length > n:
            return data
        if marker == 0xE1 and data[i + 4:i + 10] == b"Exif\x00\x00":
            cut.append((i, i + 2 + length))
        i += 2 + length
    if not cut:
        return data
    out = bytearray()
    last = 0
    for a, b in cut:
        out += data[last:a]
        last = b
    out += data[last:]
    return bytes(out)
