"""PNG split in two halves that run where a batch runs (issue 56): the host reads the
chunks, the inflate and the pixel work run on the batch's device.

A PNG decode is (1) a walk over the chunks: IHDR, PLTE, the IDAT payloads joined into
one zlib stream; (2) inflating that stream; (3) undoing each row's filter and turning the
samples into RGB. `read_png` is (1), on the host: no pixel work, in C++ with the GIL
released (csrc/png_walk.cpp: the decoder's threads walk a batch's PNGs at once; a walk
holding the GIL caps the whole process, whatever its threads: bench/RESULTS.md). On a GPU, (2) is nvCOMP's
batched Deflate (every image's stream of the batch in one call) and (3) the CUDA kernels
of kernels/png.py; on the CPU, (2) is zlib on the decoder's threads and (3) the same
kernels' CPU twin. Either way the pixels equal the CPU decoder's (libpng with
csrc/png_decode.cpp's transforms: palette to RGB, grey of 1-4 bits scaled, 16 bits to
their high byte, alpha dropped, grey to RGB), bit for bit: tests/test_png.py.

What `read_png` refuses is what libpng refuses before the pixels: a wrong signature, IHDR
not first or of the wrong length, sizes of 0 or over libpng's default limit of 1,000,000,
a bit depth the colour type does not allow, unknown compression, filter or interlace
methods, a CRC error in a critical chunk (IHDR, PLTE, IDAT; an ancillary chunk's is
ignored, as libpng discards the chunk), an unknown critical chunk, a palette image
without PLTE before IDAT, a bad PLTE length, a second PLTE, no IDAT, a chunk cut short:
each up to the first IDAT chunk. From there on libpng reads a chunk only when the stream
asks for more data, so the walk reads as it does: a chunk of another kind ends the image
data whatever it holds, and a fault (below) ends it without refusing the PNG.
Then the stream: a zlib header PNG does not allow, less or more data than the rows need,
a stream that does not end after them, a wrong Adler-32, bytes after the stream in the
IDAT chunk it ends in (libpng's "extra compressed data"; IDAT chunks after that one are
not read, as libpng reads none). zlib checks the Adler-32 on the CPU. On a GPU nvCOMP
inflates the raw Deflate inside the wrapper, and kernels/png.py's Adler kernel checks each
stream against the four bytes that end it; zlib on the host decides an image it refuses
(an error in zlib's words, or, for a stream that ends before the last IDAT chunk, zlib's
inflate uploaded and unfiltered again). An image whose stream declares a window under
32 KiB that its data outgrows goes to libpng on the host (libpng, inflating a row at a
time, keeps only that window and refuses a distance past it; a whole-stream inflate takes
it). One difference is left, for streams made so: zlib reads the four bytes right after
the Deflate data, and nvCOMP does not say where that data ends, so a stream with bytes
between the two is refused on the CPU and, where its pixels and last four bytes agree,
taken on the GPU (its pixels what its Deflate data says). A filter type over 4 is
refused by the kernel. Where nvCOMP refuses a batch as a whole (its call raises), the batch is
inflated by zlib on the host instead, so each image gets its own verdict
(`nvcomp_fallbacks` counts such batches, `describe()` says why).
Interlaced (Adam7) images, those outgrowing their declared window, and those with a fault
after their image data began (a later IDAT chunk cut short or failing its CRC, a chunk
header that is not one: libpng reads on only as far as the stream asks, so it refuses such
a PNG only where the stream reaches the fault) are decoded by the CPU decoder's libpng on
the host and uploaded (`describe()` says how many went so).
"""
from __future__ import annotations

import itertools
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .. import _native
from ..kernels.png import BAD_ADLER, BAD_FILTER
from ._base import DecodedBatch, Request, Requests, hwc_strides

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
USER_LIMIT = 1_000_000  # libpng's default PNG_USER_WIDTH_MAX / HEIGHT_MAX
_CRITICAL = (b"IHDR", b"PLTE", b"IDAT", b"IEND")


class PngError(ValueError):
    """Why a PNG cannot be decoded (the decoder makes it that image's error)."""


@dataclass
class PngLayout:
    """A PNG's header and its joined IDAT payload (the zlib stream), from read_png."""

    width: int
    height: int
    depth: int
    color: int
    interlaced: bool
    palette: np.ndarray  # uint8 [256, 3]: PLTE's entries (at most 2**depth), the rest 0
    stream: bytes        # the IDAT payloads joined: a zlib stream
    idat_sizes: tuple[int, ...] = ()  # each IDAT payload's size, in order (where `stream` ends in one: inflate)
    # the fault that ended the image data after its first IDAT chunk (a later IDAT chunk cut short
    # or failing its CRC, a chunk header that is not one), or None: libpng refuses the PNG for it
    # only where its stream reaches that chunk, so such an image is libpng's to decide (decode)
    fault: str | None = None

    @property
    def bpp(self) -> int:
        """Bytes between a byte and the one its filter reads to the left (at least 1)."""
        return max(1, CHANNELS[self.color] * self.depth // 8)

    @property
    def stride(self) -> int:
        """Bytes of a row, without its filter-type byte."""
        return (self.width * CHANNELS[self.color] * self.depth + 7) // 8

    @property
    def filtered_size(self) -> int:
        """Bytes the stream inflates to (non-interlaced): a filter byte and a row, per row."""
        return self.height * (self.stride + 1)

    @property
    def outgrows_its_window(self) -> bool:
        """Whether the stream declares a window under 32 KiB (zlib's CINFO) that the image
        data outgrows: then libpng, inflating a row at a time with only that window of
        history, refuses a distance past it, which a whole-stream inflate (zlib here,
        nvCOMP) would take; such an image goes to libpng."""
        cinfo = self.stream[0] >> 4 if self.stream else 7
        return cinfo < 7 and self.filtered_size > 1 << (cinfo + 8)

    def ends_a_chunk(self, at: int) -> bool:
        """Whether `at` bytes into `stream` is where an IDAT payload ends (all of it, where the
        sizes are not known)."""
        return at in itertools.accumulate(self.idat_sizes) if self.idat_sizes else at == len(self.stream)

    def raw_deflate(self) -> memoryview:
        """The stream without its zlib wrapper (2 header bytes, 4 Adler-32 bytes): what
        nvCOMP's raw Deflate decodes."""
        return memoryview(self.stream)[2:-4]


def read_png(data: bytes | memoryview, max_pixels: int = 0) -> PngLayout:
    """The chunks of a PNG walked and checked (see the module doc), natively with the GIL
    released (csrc/png_walk.cpp: the decoder's threads walk a batch's PNGs at once); the
    IDAT payloads joined. Raises PngError."""
    try:
        w, h, depth, color, interlace, palette, stream, sizes, fault = _native.png_walk(data, max_pixels)
    except ValueError as e:
        raise PngError(str(e)) from None
    return PngLayout(w, h, depth, color, bool(interlace), np.frombuffer(palette, np.uint8).reshape(256, 3).copy(),
                     stream, sizes, fault)


def read_png_reference(data: bytes | memoryview, max_pixels: int = 0) -> PngLayout:
    """read_png in Python: the reference the native walker is held to, message for message
    (tests/test_png_halves.py, the png_halves fuzz target)."""
    buf = memoryview(data)
    n = len(buf)
    if n < 8 or bytes(buf[:8]) != SIGNATURE:
        raise PngError("not a PNG file (its signature is wrong)")
    pos = 8
    header = None
    palette = np.zeros((256, 3), np.uint8)
    have_plte = False
    idat: list[memoryview] = []
    fault = None
    while True:
        if pos + 8 > n:
            break
        length, kind = struct.unpack_from(">I4s", buf, pos)
        end = pos + 8 + length
        critical = not kind[0] & 32
        if length > 0x7FFFFFFF:
            fault = f"chunk at byte {pos} has a length over 2**31 - 1"
        elif not all(65 <= c <= 90 or 97 <= c <= 122 for c in kind):
            fault = f"invalid chunk type {kind!r} at byte {pos}"
        elif idat and kind != b"IDAT":
            break  # the image data is over: libpng reads no further
        elif end + 4 > n:
            if kind not in _CRITICAL:
                break
            fault = f"the data ends inside the {kind.decode()} chunk at byte {pos}"
        elif critical and zlib.crc32(buf[pos + 4:end]) != struct.unpack_from(">I", buf, end)[0]:
            fault = f"CRC error in the {kind.decode()} chunk at byte {pos}"
        if fault is not None:
            if not idat:
                raise PngError(fault)
            break  # (after the image data began: kept, libpng's to decide)
        body = buf[pos + 8:end]
        if header is None:
            if kind != b"IHDR" or length != 13:
                raise PngError("the first chunk is not an IHDR of 13 bytes")
            header = _ihdr(body, max_pixels)
        elif kind == b"IHDR":
            raise PngError("a second IHDR chunk")
        elif kind == b"PLTE":
            if have_plte:
                raise PngError("a second PLTE chunk")
            if header[3] == 3:
                if length == 0 or length % 3 or length > 768:
                    raise PngError(f"invalid palette length {length}")
                count = min(length // 3, 1 << header[2])  # (libpng drops entries past 2**depth silently)
                palette[:count] = np.frombuffer(body, np.uint8, count * 3).reshape(count, 3)
            have_plte = True
        elif kind == b"IDAT":
            if header[3] == 3 and not have_plte:
                raise PngError("a palette image without a PLTE chunk before its image data")
            idat.append(body)
        elif critical and kind != b"IEND":
            raise PngError(f"unknown critical chunk {kind!r}")
        elif kind == b"IEND":
            break
        pos = end + 4
    if header is None:
        raise PngError("the data ends before the IHDR chunk")
    if not idat:
        raise PngError("no image data (IDAT chunk)")
    w, h, depth, color, interlace = header
    stream = b"".join(idat)
    if len(stream) < 2 or stream[0] & 15 != 8 or stream[0] >> 4 > 7 or (stream[0] << 8 | stream[1]) % 31 \
            or stream[1] & 32:
        raise PngError("the image data is not a zlib stream PNG allows")
    return PngLayout(w, h, depth, color, bool(interlace), palette, stream, tuple(len(b) for b in idat), fault)


def _ihdr(body: memoryview, max_pixels: int) -> tuple[int, int, int, int, int]:
    w, h, depth, color, compression, filt, interlace = struct.unpack(">IIBBBBB", body)
    if not 0 < w <= USER_LIMIT or not 0 < h <= USER_LIMIT:
        raise PngError(f"image size {w}x{h} is 0 or over libpng's limit of {USER_LIMIT:,} a side")
    if color not in DEPTHS or depth not in DEPTHS[color]:
        raise PngError(f"bit depth {depth} is not allowed with colour type {color}")
    if compression or filt or interlace > 1:
        raise PngError(f"unknown compression ({compression}), filter ({filt}) or interlace ({interlace}) method")
    if max_pixels > 0 and w * h > max_pixels:
        raise PngError(f"image of {w}x{h} pixels is over the limit of {max_pixels} pixels")
    return w, h, depth, color, interlace


def inflate(layout: PngLayout) -> bytes:
    """The stream inflated by zlib (Adler-32 checked), exactly the rows' bytes; PngError
    when it holds less or more, or does not end after them."""
    want = layout.filtered_size
    d = zlib.decompressobj()
    try:
        out = d.decompress(layout.stream, want + 1)
    except zlib.error as e:
        raise PngError(f"the image data does not inflate: {e}") from None
    if len(out) < want:
        raise PngError(f"not enough image data: {len(out):,} of the {want:,} bytes the rows need")
    if len(out) > want or not d.eof and d.decompress(d.unconsumed_tail, 1):
        raise PngError("more image data than the rows need")
    if not d.eof:
        raise PngError("the zlib stream does not end after the image data (or its Adler-32 is wrong)")
    if d.unused_data and not layout.ends_a_chunk(len(layout.stream) - len(d.unused_data)):
        # libpng refuses the rest of the IDAT chunk the stream ends in ("Extra compressed data", an error
        # as the CPU decoder reads) and reads no IDAT chunk after it
        raise PngError("image data after the end of the zlib stream, in the IDAT chunk it ends in "
                       "(extra compressed data)")
    return out


@dataclass
class _Batch:
    """A batch's PNGs laid out for the kernels."""

    rows: list[int]          # the batch's indices decoded by the kernels
    layouts: list[PngLayout]
    meta: np.ndarray         # int64 [n, 7]: kernels/png.py's columns
    palettes: np.ndarray     # uint8 [n, 256, 3]
    src_off: np.ndarray      # int64 [n]
    src_size: int
    out_size: int


def _plan(layouts: list[PngLayout], rows: list[int]) -> _Batch:
    from ..kernels import png as K

    n = len(layouts)
    meta = np.zeros((n, K.META), np.int64)
    src_off = np.zeros(n, np.int64)
    palettes = np.zeros((n, 256, 3), np.uint8)
    s = o = 0
    for j, lay in enumerate(layouts):
        meta[j] = (lay.height, lay.width, lay.stride, lay.bpp, lay.depth, lay.color, o)
        src_off[j] = s
        palettes[j] = lay.palette
        s += lay.filtered_size
        o += lay.height * lay.width * 3
    return _Batch(rows, layouts, meta, palettes, src_off, s, o)


_SHORTEST_ZLIB = 8  # a zlib header, the shortest Deflate stream (an empty fixed block) and Adler-32
_STAGE_SHARE = 4 << 20  # bytes of compressed streams a thread stages at the least (_nvcomp_decode)
_SIZES_KEPT = 8  # nvCOMP size configs kept (a set of images of one size needs one; a last smaller batch another)


def stage_streams(host: np.ndarray, starts: np.ndarray, raws: Sequence[Any], lo: int, hi: int) -> None:
    """Streams lo..hi of `raws` (bytes-like) copied into `host` at their `starts`: the
    engine's staging before its upload, a share per thread."""
    for i in range(lo, hi):
        host[starts[i]:starts[i + 1]] = np.frombuffer(raws[i], np.uint8)


def adler_stored(layout: PngLayout) -> int:
    """The Adler-32 a PNG's zlib stream ends with (0 where it is too short to hold one)."""
    return struct.unpack(">I", layout.stream[-4:])[0] if len(layout.stream) >= 4 else 0


def _zlib_verdict(layout: PngLayout) -> str:
    """Why zlib refuses `layout`'s stream (one too short for the GPU's inflate), in its words."""
    try:
        inflate(layout)
    except PngError as e:
        return str(e)
    return "the image data is shorter than a zlib stream"  # (zlib takes no such stream: not reached)


_KERNEL_ERRORS = {BAD_FILTER: "a row's filter type is over 4 (PNG defines 0-4)",
                  BAD_ADLER: "the image data does not inflate: its Adler-32 is wrong (incorrect data check)"}


class PngDecoder:
    """PNG decoded by its two halves on `device` (see the module doc). Other formats are
    each that image's error (in a split decoder this engine takes PNG only).

    Args:
        device: "cpu" (zlib on `num_threads` threads + the kernels' CPU twin) or
            "cuda[:N]" (nvCOMP's batched inflate where it imports, else zlib on the host
            and one upload; the CUDA kernels).
        num_threads: host threads for the chunk walk and zlib.
        max_pixels: images over this many pixels are refused (0: no limit).
    """

    name = "png"
    decodes_windows = False
    buffers = None  # each result owns its memory

    def __init__(self, *, device: str = "cpu", num_threads: int = 1, max_pixels: int = 0) -> None:
        self.device = device
        self._dev = torch.device(device)
        self.max_pixels = int(max_pixels)
        self.num_threads = max(1, int(num_threads))
        self._pool: ThreadPoolExecutor | None = None
        self._nvcomp: Any = None
        self._inflated: Any = None  # nvCOMP's last output batch, alive until the next one (_nvcomp_decode)
        self._sizes: dict[tuple[int, ...], Any] | None = {}  # IHDR's sizes -> nvCOMP's config (_nvcomp_decode)
        self.sizes_reused = 0  # batches inflated with kept sizes
        self.sizes_kept_off: str | None = None  # why sizes are not kept (an nvCOMP without configs)
        self.adler_by_zlib = 0  # images the Adler-32 check sent to zlib on the host (_checksums_by_zlib)
        self.host_fallbacks = 0  # interlaced images sent to libpng on the host (decoded, or refused in its words)
        self.window_fallbacks = 0  # images outgrowing their zlib window, decided by libpng on the host
        self.fault_fallbacks = 0  # images with a fault after their image data began, decided by libpng on the host
        self.nvcomp_fallbacks = 0  # batches nvCOMP refused as a whole, inflated by zlib instead
        self.nvcomp_refused: str | None = None  # the last such refusal, in words
        if self._dev.type == "cuda":
            try:
                from nvidia import nvcomp  # type: ignore[import-not-found,attr-defined]

                self._nvcomp = nvcomp.Codec(algorithm="Deflate", bitstream_kind=nvcomp.BitstreamKind.RAW,
                                            device_id=self._dev.index or 0)
            except Exception as e:  # not installed, or no usable GPU for it: zlib on the host
                self._nvcomp_why = f"{type(e).__name__}: {e}"

    @property
    def backend(self) -> str:
        if self._dev.type != "cuda":
            return f"PNG in two halves on the CPU: zlib on {self.num_threads} thread(s), the unfilter kernel's CPU twin"
        inflate_by = "nvCOMP's batched Deflate" if self._nvcomp is not None else \
            f"zlib on the host ({getattr(self, '_nvcomp_why', 'nvCOMP absent')})"
        return f"PNG in two halves on {self._dev}: {inflate_by}, the unfilter kernel in CUDA"

    def detours(self) -> dict:
        """What this decoder sent elsewhere so far: images decided by libpng on the host
        (interlaced, outgrowing their zlib window, a fault after the image data began),
        batches nvCOMP refused as a whole (inflated by zlib), with the last refusal in words,
        images whose Adler-32 zlib decided, batches that reused nvCOMP's sizes
        (Loader.describe() shows it)."""
        return {"interlaced_by_libpng": self.host_fallbacks, "outgrowing_their_window_by_libpng": self.window_fallbacks,
                "a_fault_after_the_image_data_by_libpng": self.fault_fallbacks,
                "batches_inflated_by_zlib": self.nvcomp_fallbacks,
                "nvcomp_refused": self.nvcomp_refused, "adler_by_zlib": self.adler_by_zlib,
                "nvcomp_sizes_reused": self.sizes_reused, **({"nvcomp_sizes_not_kept": self.sizes_kept_off}
                                                             if self.sizes_kept_off else {})}

    def _map(self, fn, items):
        if self.num_threads == 1 or len(items) < 2:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="gpudecode-png")
        return list(self._pool.map(fn, items))

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        rq = Requests.of(requests)
        count = len(rq)
        errors: list[str | None] = [None] * count
        layouts: dict[int, PngLayout] = {}
        host: dict[int, np.ndarray] = {}

        def walk(k: int):
            if rq.formats[k] != "png":
                return k, None, "this decoder takes PNG only"
            try:
                return k, read_png(rq.datas[k], self.max_pixels), None
            except PngError as e:
                return k, None, str(e)

        for k, lay, err in self._map(walk, list(range(count))):
            if err is not None:
                errors[k] = err
            elif lay is not None and (lay.interlaced or lay.outgrows_its_window or lay.fault):  # libpng on the host
                from .cpu import _png_rgb

                try:
                    host[k] = _png_rgb(rq.datas[k], self.max_pixels, lay.height, lay.width)
                except Exception as e:  # its own error, as the CPU decoder says it
                    errors[k] = str(e)
                if lay.interlaced:
                    self.host_fallbacks += 1
                elif lay.fault:
                    self.fault_fallbacks += 1
                else:
                    self.window_fallbacks += 1
            elif lay is not None:
                layouts[k] = lay
        from ..kernels import png as K

        rows = sorted(layouts)
        plan = _plan([layouts[k] for k in rows], rows)
        total = plan.out_size + sum(a.size for a in host.values())
        if self._dev.type == "cuda":
            pixels, kernel_errors = self._run_cuda(plan, total, errors)
        else:
            pixels, kernel_errors = self._run_cpu(plan, total, errors)
        offsets = np.zeros(count, np.int64)
        shapes = np.zeros((count, 2), np.int64)
        for j, k in enumerate(rows):
            offsets[k] = plan.meta[j, K.OUT]
            shapes[k] = (plan.layouts[j].height, plan.layouts[j].width)
            if kernel_errors[j] and errors[k] is None:
                errors[k] = _KERNEL_ERRORS[int(kernel_errors[j])]
        at = plan.out_size
        for k, a in sorted(host.items()):
            pixels[at:at + a.size].copy_(torch.from_numpy(a.reshape(-1)), non_blocking=False)
            offsets[k], shapes[k] = at, a.shape[:2]
            at += a.size
        boxes = np.zeros((count, 4), np.int64)
        for k in range(count):
            if errors[k] is None:
                boxes[k] = rq.boxes[k]
        return DecodedBatch(pixels, offsets, shapes, hwc_strides(shapes), boxes, errors)

    def _inflate_host(self, plan: _Batch, errors: list[str | None], into: np.ndarray) -> None:
        def one(j: int):
            try:
                data = inflate(plan.layouts[j])
            except PngError as e:
                return j, str(e)
            into[plan.src_off[j]:plan.src_off[j] + len(data)] = np.frombuffer(data, np.uint8)
            return j, None

        for j, err in self._map(one, list(range(len(plan.rows)))):
            if err is not None:
                errors[plan.rows[j]] = err

    def _run_cpu(self, plan: _Batch, total: int, errors: list[str | None]) -> tuple[torch.Tensor, np.ndarray]:
        from ..kernels import png as K

        src = np.zeros(max(plan.src_size, 1), np.uint8)
        self._inflate_host(plan, errors, src)
        good = np.array([j for j, k in enumerate(plan.rows) if errors[k] is None], np.int64)
        out = np.zeros(max(total, 1), np.uint8)
        kernel_errors = np.zeros(len(plan.rows), np.int32)
        K.decode_rgb_cpu(src, plan.src_off, plan.meta, plan.palettes, out, kernel_errors, good)
        return torch.from_numpy(out), kernel_errors

    def _run_cuda(self, plan: _Batch, total: int, errors: list[str | None]) -> tuple[torch.Tensor, np.ndarray]:
        from numba import cuda

        from ..kernels import png as K

        dev = self._dev
        src = torch.zeros(max(plan.src_size, 1), dtype=torch.uint8, device=dev)
        by_nvcomp = self._nvcomp is not None and bool(plan.rows) and self._inflate_nvcomp(plan, errors, src)
        if not by_nvcomp:
            staged = torch.zeros(max(plan.src_size, 1), dtype=torch.uint8, pin_memory=True)
            self._inflate_host(plan, errors, staged.numpy())
            src.copy_(staged, non_blocking=True)
        out = torch.zeros(max(total, 1), dtype=torch.uint8, device=dev)
        bad = torch.tensor([0 if errors[k] is None else 1 for k in plan.rows] or [0], dtype=torch.int32, device=dev)
        meta = torch.from_numpy(plan.meta).to(dev)
        pal = torch.from_numpy(plan.palettes).to(dev)
        offs = torch.from_numpy(plan.src_off).to(dev)
        n = len(plan.rows)
        with torch.cuda.device(dev):
            stream = cuda.external_stream(torch.cuda.current_stream(dev).cuda_stream)
            if by_nvcomp:  # (zlib checked the host's streams already)
                lengths = np.array([lay.filtered_size for lay in plan.layouts], np.int64)
                stored = np.array([adler_stored(lay) for lay in plan.layouts], np.int64)
                K.check_adler_cuda(src, offs, torch.from_numpy(lengths).to(dev), torch.from_numpy(stored).to(dev),
                                   torch.zeros((n, 2), dtype=torch.int64, device=dev), bad[:n], int(lengths.max()),
                                   stream)
            K.decode_rgb_cuda(src, offs, meta, pal, out, bad[:n], stream, tallest=int(plan.meta[:, K.H].max()))
            kernel_errors = bad.cpu().numpy()[:n]  # (waits for the kernels: a bad filter or checksum is known here)
            for j, k in enumerate(plan.rows):
                if errors[k] is not None:
                    kernel_errors[j] = 0  # (its error is the inflate's, already said)
            if by_nvcomp and (kernel_errors == BAD_ADLER).any():
                self._checksums_by_zlib(plan, kernel_errors, errors, src, (offs, meta, pal, out), stream)
        return out, kernel_errors

    def _checksums_by_zlib(self, plan: _Batch, kernel_errors: np.ndarray, errors: list[str | None],
                           src: torch.Tensor, args: tuple, stream: Any) -> None:
        """The images whose last four bytes are not the Adler-32 of what nvCOMP inflated,
        decided by zlib on the host as the CPU decides them: refused in zlib's words (a
        wrong Adler-32, bytes after the stream), or taken (a stream that ends in an IDAT
        chunk that more IDAT chunks follow: libpng reads none of them), inflated by zlib,
        uploaded and unfiltered again."""
        from ..kernels import png as K

        again: list[int] = []
        for j in np.flatnonzero(kernel_errors == BAD_ADLER).tolist():
            self.adler_by_zlib += 1
            try:
                data = inflate(plan.layouts[j])
            except PngError as e:
                errors[plan.rows[j]] = str(e)
                kernel_errors[j] = 0
                continue
            lo = int(plan.src_off[j])
            src[lo:lo + len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            again.append(j)
        if again:
            offs, meta, pal, out = args
            redo = torch.ones(len(plan.rows), dtype=torch.int32)
            redo[again] = 0
            redo = redo.to(src.device)
            K.decode_rgb_cuda(src, offs, meta, pal, out, redo, stream, tallest=int(plan.meta[:, K.H].max()))
            kernel_errors[again] = redo.cpu().numpy()[again]  # (a bad filter type, or 0)

    def _inflate_nvcomp(self, plan: _Batch, errors: list[str | None], src: torch.Tensor) -> bool:
        """Every stream of the batch inflated in one nvCOMP call, each copied into `src`
        (its size checked here, its Adler-32 by the caller's kernel). False, nothing set,
        where nvCOMP refused the batch as a whole (the caller inflates it with zlib)."""
        # a stream with no room for a whole zlib stream is never nvCOMP's: zlib says what is wrong
        short = [j for j, lay in enumerate(plan.layouts) if len(lay.stream) < _SHORTEST_ZLIB]
        todo = [j for j, lay in enumerate(plan.layouts) if len(lay.stream) >= _SHORTEST_ZLIB]
        outs: Any = []
        wants = tuple(plan.layouts[j].filtered_size for j in todo)
        fresh = None
        if todo:
            got = self._nvcomp_decode([plan.layouts[j].raw_deflate() for j in todo], wants)
            if got is None:
                return False
            outs, fresh = got
        for j in short:
            errors[plan.rows[j]] = _zlib_verdict(plan.layouts[j])
        fits = True
        for out, j in zip(outs, todo):
            size, want = int(out.buffer_size), plan.layouts[j].filtered_size
            if size != want:  # (zlib's words for the same streams)
                errors[plan.rows[j]] = (f"not enough image data: {size:,} of the {want:,} bytes the rows need"
                                        if size < want else "more image data than the rows need")
                fits = False
                continue
            view = torch.as_tensor(out, device=self._dev).view(torch.uint8).reshape(-1)
            src[int(plan.src_off[j]):int(plan.src_off[j]) + want].copy_(view)
        if fresh is not None and fits and self._sizes is not None:  # (sizes nvCOMP found equal to IHDR's: kept)
            if len(self._sizes) >= _SIZES_KEPT:
                self._sizes.pop(next(iter(self._sizes)))
            self._sizes[wants] = fresh
        return True

    def _nvcomp_decode(self, raws: list[memoryview], wants: tuple[int, ...]) -> tuple[list, Any] | None:
        """Raw Deflate streams staged in pinned memory, uploaded, and inflated in one nvCOMP
        call: (its outputs, the sizes it found as a decompression config, or None where it
        used kept ones), or None where the call raised (counted, the reason kept).

        Sizes: nvCOMP finds each raw stream's inflated size by a pass over it (its cost on
        an H200: bench/RESULTS.md). A batch whose streams' sizes (from IHDR, `wants`) are
        those of an earlier batch, all found equal to IHDR's, reuses that batch's config
        (`_sizes`): a set of images of one size pays the pass once. A stream that does not
        fit them fails the call (inflated again with its sizes found) or is caught by the
        Adler-32 check (decided by zlib).

        The batch is kept (`_inflated`) until the next call: nvCOMP 6's views into a batch do
        not own its memory, and the caller's copies out of them run later on the current
        stream, which the next call synchronizes before its batch replaces this one."""
        from nvidia import nvcomp  # type: ignore[import-not-found,attr-defined]

        starts = np.concatenate([[0], np.cumsum([len(r) for r in raws])]).astype(np.int64)
        cuda = self._dev.type == "cuda"  # (else a test's stand-in for nvCOMP on the CPU)
        staged = torch.empty(max(int(starts[-1]), 1), dtype=torch.uint8, pin_memory=cuda)
        host = staged.numpy()
        # the streams staged on the engine's threads, idle meanwhile, where the batch is large
        # (numpy's copies release the GIL; bench/nvcomp_inflate.py times the copy on its host)
        k = min(self.num_threads, len(raws), max(1, int(starts[-1]) // _STAGE_SHARE))
        cuts = np.linspace(0, len(raws), k + 1).astype(np.int64)
        self._map(lambda j: stage_streams(host, starts, raws, int(cuts[j]), int(cuts[j + 1])), list(range(k)))
        comp = staged.to(self._dev, non_blocking=cuda)
        if cuda:
            torch.cuda.current_stream(self._dev).synchronize()  # (also: the last batch's copies are done)
        self._inflated = None
        kept = self._sizes.get(wants) if self._sizes is not None else None
        fresh = None
        try:
            batch = nvcomp.as_arrays([comp[int(starts[i]):int(starts[i + 1])] for i in range(len(raws))])
            if kept is None and self._sizes is not None:
                try:  # (the pass decode() would make, its result kept)
                    fresh = self._nvcomp.decompression_config(batch)
                except Exception as e:  # (an nvCOMP without it: decode() finds the sizes, as before)
                    self._sizes, self.sizes_kept_off = None, f"{type(e).__name__}: {e}"
            try:
                config = kept if kept is not None else fresh
                outs = (self._nvcomp.decode(batch) if config is None else
                        self._nvcomp.decode(batch, decompression_config=config))
                views = [outs[i] for i in range(len(raws))]  # (indexing waits for nvCOMP's work)
            except Exception:
                if kept is None:
                    raise
                if self._sizes is not None:
                    self._sizes.pop(wants, None)  # a stream these sizes do not fit: its own found
                outs = self._nvcomp.decode(batch)
                views = [outs[i] for i in range(len(raws))]
            else:
                self.sizes_reused += kept is not None
        except Exception as e:  # a stream it cannot take (or its memory) fails the call: zlib says which
            self.nvcomp_fallbacks += 1
            self.nvcomp_refused = f"{type(e).__name__}: {e}"
            return None
        self._inflated = outs
        return views, fresh

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._inflated is not None:  # (the copies out of it first)
            torch.cuda.current_stream(self._dev).synchronize()
            self._inflated = None
