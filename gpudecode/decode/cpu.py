"""CPU decoding: JPEG through libjpeg-turbo decoding only the needed window, PNG natively
(gpudecode._native, native threads, GIL released: a direct path with libpng's pixels and
verdicts, libpng itself where that path cannot be sure; pyspng where the module was built
without libpng); tensor samples
(.npy, from `gpudecode precache`) read in place (see CpuDecoder); anything else through
Pillow. Everything comes out RGB uint8:

- grey JPEG/PNG: the grey value in all three channels;
- CMYK/YCCK JPEG: Pillow's conversion (Adobe's inverted CMYK understood);
- palette PNG: expanded; alpha: dropped (not composited), as Pillow's convert("RGB");
- 16-bit PNG: the high byte of each sample (Pillow instead clips 16-bit grey to 255);
- a PNG saved under a .jpg name: decoded by what its bytes are, not by its name.

Exact mode (default) matches Pillow's full decode cropped to the same box bit for bit.
Fast mode: fast integer IDCT, plain upsampling, and DCT-domain downscaling by 1/2, 1/4
or 1/8 where the box is at least that many times the output size.
"""
from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import torch

from .. import _native
from ..errors import Cancelled, known
from ..kernels.workspace import huge_pages
from ..tensors import npy_layout, npy_rgb
from ._base import DecodedBatch, Request, Requests, hwc_strides, pillow_formats
from ._span import span


def pil_pixels(im, *, grey: bool = False) -> np.ndarray:
    """A PIL image's pixels as every image here comes out (the module docstring): uint8
    [H, W, 3] RGB; 16-bit (and 32-bit integer) grey by the high byte of each level; any
    other mode as Pillow's convert("RGB") makes it (palette expanded, alpha dropped). With
    `grey`, grey (L or 16-bit) stays one channel, [H, W, 1] (the kernel reads it as RGB:
    the same output). The array may be read-only (Pillow's own bytes)."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        a = (np.asarray(im, dtype=np.uint32) >> 8).astype(np.uint8)[..., None]
        return a if grey else np.repeat(a, 3, axis=2)
    if grey and im.mode == "L":
        return np.asarray(im)[..., None]
    return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


def _pillow_rgb(data: bytes, max_pixels: int) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data), formats=pillow_formats()) as im:
        if max_pixels and im.width * im.height > max_pixels:
            raise ValueError(f"image of {im.width}x{im.height} pixels is over the limit of {max_pixels} pixels")
        return pil_pixels(im)


def _png_rgb(data: bytes, max_pixels: int, height: int, width: int) -> np.ndarray:
    if max_pixels and height * width > max_pixels:
        raise ValueError(f"image of {width}x{height} pixels is over the limit of {max_pixels} pixels")
    if _native.has_png:  # libpng, GIL released
        out = np.empty((height, width, 3), np.uint8)
        err = _native.decode_batch([data], np.ones(1, np.uint8), np.array([[0, 0, height, width]], np.int32),
                                   np.ones(1, np.int32), np.zeros(1, np.int64), out.reshape(-1), False, max_pixels, 1)
        if err[0]:
            raise ValueError(err[0])
        return out
    import pyspng

    return pyspng.load(data, format="RGB")


def _png_backend() -> str:
    """What decodes a PNG here, with the libpng that runs and how it came in."""
    if not _native.has_png:
        return "pyspng"
    v = known(_native.libpng, "the versions of the libpng built in")
    how = "linked in" if v["linked_in"] else "shared"
    if v["running"] != v["built"]:  # (a shared libpng of the same SONAME was loaded first)
        how += f", built against {v['built']}"
    return f"PNG natively (libpng {v['running']}, {how}, for what its direct path leaves)"


def host_rgb(r: Request, max_pixels: int) -> np.ndarray:
    """The whole image of a non-JPEG request, RGB uint8 HWC, decoded on the host: PNG
    through libpng (or pyspng), tensor samples (.npy) as a view of their bytes, the rest by Pillow.

    Raises:
        ValueError (or the decoder's own exception): unreadable, or over max_pixels.
    """
    if r.format == "npy":
        if max_pixels and r.height * r.width > max_pixels:
            raise ValueError(f"image of {r.width}x{r.height} pixels is over the limit of {max_pixels} pixels")
        return npy_rgb(r.data)
    if r.format == "png":
        return _png_rgb(r.data, max_pixels, r.height, r.width)
    return _pillow_rgb(r.data, max_pixels)


def scale_for(box: tuple[int, int, int, int], out_size: tuple[int, int]) -> int:
    """The largest DCT scaling denominator (8, 4, 2) the box allows: box >= s * `out_size`
    (the least size the kernel resizes the box to: _Plan.decode_frame)."""
    for s in (8, 4, 2):
        if box[2] >= s * out_size[0] and box[3] >= s * out_size[1]:
            return s
    return 1


class CpuDecoder:
    """Decodes into a ring of `buffers` output buffers (default 3): a DecodedBatch's
    pixels stay valid until that many more batches have been decoded.

    Tensor samples are not copied (`zero_copy`, default): the batch's pixels are then a
    view spanning the ring buffer and the samples' own bytes (a memory-mapped shard's,
    see ShardReader's map_extensions), and the kernel reads each crop window in place.
    zero_copy=False copies the windows into the ring buffer (for a caller that uploads
    the pixels as one block); `pinned` makes the ring's buffers page-locked, so that block
    goes to a GPU in one copy that does not block the host (the split decoder's CPU
    engine: gpudecode.decode.split)."""

    name = "cpu"
    device = "cpu"

    def __init__(self, *, num_threads: int = 2, max_pixels: int = 0, fast: bool = False,
                 out_size: tuple[int, int] | None = None, buffers: int = 3, zero_copy: bool = True,
                 pinned: bool = False) -> None:
        if buffers < 1:
            raise ValueError("buffers must be >= 1")
        if pinned and zero_copy:
            raise ValueError("pinned=True is for a decoder whose pixels are uploaded: give zero_copy=False too")
        self.zero_copy = zero_copy
        self.pinned = pinned
        self.num_threads = max(1, num_threads)
        self.max_pixels = max_pixels
        self.fast = fast
        self.out_size = out_size
        self.buffers = buffers
        self._buffers = [np.empty(0, np.uint8) for _ in range(buffers)]
        self._tensors: list[torch.Tensor | None] = [None] * buffers  # pinned: each buffer's own tensor
        self._turn = 0
        self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="gpudecode-decoder-pool")
        self._stop = np.zeros(1, np.uint8)  # read by the native threads between rows
        self.backend = (f"the CPU: libjpeg-turbo (crop windows{', fast mode' if fast else ''}), "
                        f"{_png_backend()} "
                        f"and Pillow, on {self.num_threads} native threads")

    def interrupt(self) -> None:
        """Ends a decode running on another thread: the native threads look at this between
        rows and scans, so even a huge PNG stops within milliseconds; that decode, and every
        later one until resume(), raises Cancelled."""
        self._stop[0] = 1

    def resume(self) -> None:
        """Undoes interrupt(): decodes run again."""
        self._stop[0] = 0

    def _check_stop(self) -> None:
        if self._stop[0]:
            raise Cancelled("the decoder was interrupted (its Loader was closed) before this batch was decoded")

    def _windows(self, rq: Requests, ks: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(boxes [len(ks), 4] in the decoded images' pixels, DCT scale denominators) of
        images ks: their boxes, at scale 1 unless fast DCT scaling applies to a JPEG."""
        boxes = np.asarray(rq.boxes, np.int64).reshape(-1, 4)[ks]  # (a copy: scaled in place below)
        scales = np.ones(len(ks), np.int64)
        if not (self.fast and self.out_size):
            return boxes, scales
        for j, k in enumerate(ks):
            if rq.formats[k] != "jpeg":
                continue
            s = scale_for(rq.boxes[k], self.out_size)
            if s == 1:
                continue
            t, l, h, w = rq.boxes[k]
            sh, sw = -(-rq.heights[k] // s), -(-rq.widths[k] // s)  # libjpeg's scaled size: ceil
            t2, l2 = t // s, l // s
            boxes[j] = (t2, l2, max(1, min(sh - t2, h // s)), max(1, min(sw - l2, w // s)))
            scales[j] = s
        return boxes, scales

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        self._check_stop()
        rq = Requests.of(requests)
        n = len(rq)
        errors: list[str | None] = [None] * n
        # JPEG (and PNG where the native module has libpng): decoded on native threads
        native = ("jpeg", "png") if _native.has_png else ("jpeg",)
        fmts = rq.formats
        jpeg = [k for k, f in enumerate(fmts) if f in native]
        tensor = [k for k, f in enumerate(fmts) if f == "npy"] if len(jpeg) < n else []
        other = [k for k, f in enumerate(fmts) if f not in native and f != "npy"] if len(jpeg) + len(tensor) < n else []
        decoded = self._decode_on_host(rq, other, errors)
        # the buffer holds the JPEG windows and the tensor ones (unless they are read in
        # place), whose sizes are known before decoding, then the others' (known after)
        in_place = self.zero_copy and bool(tensor)
        packed = jpeg if in_place else jpeg + tensor
        wboxes, wscales = self._windows(rq, packed)
        offsets = np.zeros(n, np.int64)
        shapes = np.zeros((n, 2), np.int64)
        total = 0
        if packed:
            hw = wboxes[:, 2:]
            ends = np.cumsum(hw[:, 0] * hw[:, 1] * 3)
            offsets[packed] = np.concatenate(([0], ends[:-1]))
            shapes[packed] = hw
            total = int(ends[-1])
        for k in other:
            offsets[k] = total
            if k in decoded:
                shapes[k] = decoded[k].shape[:2]
                total += decoded[k].size
        buf = self._next_buffer(total)
        if jpeg:  # (the first of `packed`)
            self._decode_native(rq, jpeg, wboxes[:len(jpeg)], wscales[:len(jpeg)], offsets, buf, errors)
        for k in other:
            if k in decoded:
                a = decoded[k]
                buf[offsets[k]:offsets[k] + a.size] = a.reshape(-1)
        boxes = np.zeros((n, 4), np.int64)
        if in_place:
            return self._in_place(rq, tensor, buf, total, offsets, shapes, boxes, errors)
        self._copy_tensors(rq, tensor, offsets, buf, errors)
        boxes[:, 2:] = shapes  # every image here is decoded to its window exactly
        return DecodedBatch(self._pixels(buf, total), offsets, shapes, hwc_strides(shapes), boxes, errors)

    def _decode_on_host(self, requests: Sequence[Request], ks: list[int],
                        errors: list[str | None]) -> dict[int, np.ndarray]:
        """Images ks (formats without a native decoder) decoded on the pool, cut to their
        windows; a failure is its image's error."""
        decoded: dict[int, np.ndarray] = {}

        def one(k: int) -> None:
            r = requests[k]
            try:
                img = host_rgb(r, self.max_pixels)
            except Exception as e:  # every decoder failure becomes this image's error
                errors[k] = f"{type(e).__name__}: {e}"
                return
            if img.shape[:2] != (r.height, r.width):
                errors[k] = f"decoded size {img.shape[:2]} differs from the header's {(r.height, r.width)}"
                return
            t, l, h, w = r.box
            decoded[k] = np.ascontiguousarray(img[t:t + h, l:l + w])

        for f in [self._pool.submit(one, k) for k in ks]:
            f.result()
        return decoded

    def _next_buffer(self, total: int) -> np.ndarray:
        """The next buffer of the ring (see buffers=), grown to `total` bytes if need be."""
        self._turn = (self._turn + 1) % len(self._buffers)
        if self._buffers[self._turn].size < total:
            size = int(total * 1.25) + 1
            if self.pinned:  # (torch's tensor kept: torch knows its memory is page-locked)
                t = self._tensors[self._turn] = torch.empty(size, dtype=torch.uint8, pin_memory=True)
                self._buffers[self._turn] = t.numpy()
            else:  # (2 MiB pages where the kernel gives them: kernels.workspace.huge_pages)
                self._buffers[self._turn] = huge_pages(np.empty(size, np.uint8))
        return self._buffers[self._turn]

    def _pixels(self, buf: np.ndarray, total: int) -> torch.Tensor:
        """The first `total` bytes (at least one) of ring buffer `buf` as a tensor: a slice of
        its pinned tensor when the ring is pinned (so a copy to a GPU need not wait)."""
        n = max(int(total), 1)
        t = self._tensors[self._turn]
        return t[:n] if self.pinned and t is not None else torch.from_numpy(buf[:n])

    def _decode_native(self, rq: Requests, ks: list[int], boxes: np.ndarray, scales: np.ndarray,
                       offsets: np.ndarray, buf: np.ndarray, errors: list[str | None]) -> None:
        """JPEG and PNG images ks on the native threads, into buf at their offsets, each
        its window (boxes [len(ks), 4]) at its DCT scale."""
        whole = len(ks) == len(rq)
        fmts = rq.formats if whole else [rq.formats[k] for k in ks]
        kinds = np.array([f == "png" for f in fmts], np.uint8)  # 0 JPEG, 1 PNG
        datas = rq.datas if whole else [rq.datas[k] for k in ks]
        errs = _native.decode_batch(datas, kinds, boxes.astype(np.int32), scales.astype(np.int32), offsets[ks], buf,
                                    self.fast, self.max_pixels, self.num_threads, self._stop)
        self._check_stop()  # the images not finished read "stopped": not errors of theirs
        for k, e in zip(ks, errs):
            if e:
                errors[k] = e

    def _copy_tensors(self, requests: Sequence[Request], ks: list[int], offsets: np.ndarray, buf: np.ndarray,
                      errors: list[str | None]) -> None:
        """Tensor samples ks: each window straight from the sample's bytes into buf."""
        def one(k: int) -> None:
            t, l, h, w = requests[k].box
            try:
                img = host_rgb(requests[k], self.max_pixels)
            except Exception as e:  # this image's error, not the batch's
                errors[k] = f"{type(e).__name__}: {e}"
                return
            buf[offsets[k]:offsets[k] + h * w * 3].reshape(h, w, 3)[:] = img[t:t + h, l:l + w]

        for f in [self._pool.submit(one, k) for k in ks]:
            f.result()

    def _in_place(self, rq: Requests, tensor: list[int], buf: np.ndarray, total: int,
                  offsets: np.ndarray, shapes: np.ndarray, boxes: np.ndarray, errors: list[str | None]
                  ) -> DecodedBatch:
        """The batch with its tensor samples read where they are: a view spanning the ring
        buffer (the decoded images, at `offsets`) and every tensor sample's pixels, each
        image's offset measured from the view's start."""
        boxes[:, 2:] = shapes
        # every tensor sample's header parsed, and its address taken, in one native call
        every = len(tensor) == len(rq)
        datas = rq.datas if every else [rq.datas[k] for k in tensor]
        addr, hs, ws, starts, refusals = _native.tensor_layouts(datas)
        probed_h = np.array(rq.heights if every else [rq.heights[k] for k in tensor], np.int64)
        probed_w = np.array(rq.widths if every else [rq.widths[k] for k in tensor], np.int64)
        rows = np.asarray(tensor, np.int64)
        if not (not any(refusals) and np.array_equal(hs, probed_h) and np.array_equal(ws, probed_w)
                and (not self.max_pixels or int((hs * ws).max(initial=0)) <= self.max_pixels)):
            good = self._refusals(tensor, datas, refusals, hs, ws, starts, probed_h, probed_w, errors)
            rows, addr, hs, ws, starts = rows[good], addr[good], hs[good], ws[good], starts[good]
            every = False
        if len(rows):
            shapes[rows, 0] = hs
            shapes[rows, 1] = ws
            # the window inside the whole stored image
            every_box = np.asarray(rq.boxes, np.int64).reshape(-1, 4)
            boxes[rows] = every_box if every else every_box[rows]
        addresses, sizes = addr + starts, hs * ws * 3
        if total:  # the ring buffer's decoded images first
            addresses = np.concatenate(([buf.ctypes.data], addresses))
            sizes = np.concatenate(([total], sizes))
        pixels, rel = span(addresses, sizes, torch.device("cpu"))
        if total:
            mapped = set(tensor)
            offsets[[k for k in range(len(rq)) if k not in mapped]] += rel[0]
            rel = rel[1:]
        offsets[rows] = rel
        return DecodedBatch(pixels, offsets, shapes, hwc_strides(shapes), boxes, errors, owner=(buf, datas))

    def _refusals(self, tensor: list[int], datas: list, refusals: list, hs: np.ndarray, ws: np.ndarray,
                  starts: np.ndarray, probed_h: np.ndarray, probed_w: np.ndarray, errors: list[str | None]
                  ) -> np.ndarray:
        """Which tensor samples are read (a bool mask): a header the native parser refused
        goes to numpy's parser (hs, ws, starts updated), which decides and says what is
        wrong; a size other than the probe's, or over max_pixels, is the image's error."""
        good = np.ones(len(tensor), bool)

        def refuse(j: int, why: str) -> None:  # this image's error, not the batch's
            errors[tensor[j]] = why
            good[j] = False

        for j in [j for j, e in enumerate(refusals) if e]:
            try:
                hs[j], ws[j], starts[j] = npy_layout(datas[j])
            except Exception as e:
                refuse(j, f"{type(e).__name__}: {e}")
        odd = good & ((hs != probed_h) | (ws != probed_w))
        for j in np.flatnonzero(odd).tolist():
            refuse(j, f"ValueError: tensor sample is {hs[j]}x{ws[j]}, its probe said {probed_h[j]}x{probed_w[j]}")
        if self.max_pixels:
            for j in np.flatnonzero(good & (hs * ws > self.max_pixels)).tolist():
                refuse(j, f"ValueError: image of {ws[j]}x{hs[j]} pixels is over the limit of {self.max_pixels} pixels")
        return good

    def close(self) -> None:
        self._pool.shutdown(wait=False)
