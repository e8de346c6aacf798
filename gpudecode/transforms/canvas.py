"""Canvas steps: first in a Compose, before its geometry, each makes every image a new
uint8 image (a canvas) of its own size, which the geometry step then reads as it reads a
decoded image. RandomZoomOut (SSD's; torchvision's detection reference): the image
padded with a fill onto a canvas up to `side_range` times its size; RandomRotation with
expand=True (transforms.warps): the whole image rotated, on its bounding box;
ElasticTransform (transforms.warps): the image displaced by a field of its size; and,
where a geometry step follows them, RandomRotation, RandomAffine and RandomPerspective
at the image's size (`canvas_first`: elsewhere they are program steps).

A canvas step declares `canvas` (True; or `canvas_first`), `canvas_why` (why it must
come first), `canvas_size(params, size)`, `canvas_layout` ("HWC" or "CHW") and
`paint(canvas, image, params)`: the canvas made as torchvision makes it (F.pad of a
uint8 image; F.rotate's, F.affine's, F.perspective's and F.elastic's grid_sample, fill
and rounding to uint8), with torch's own ops on the images' device, then packed as a
decoded batch; so the fused output equals torchvision's Compose from there on as it does
for a decoded image. `build` is that step,
`Compose.apply` calls it."""
from __future__ import annotations

import math

import random
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from ..decode._base import DecodedBatch
from ..errors import TransformError
from ..kernels import fused
from ..kernels.cpu_twin import each_on_threads
from ..kernels.workspace import Workspace
from .base import Transform
from .geometry import CenterCrop, RandomCrop
from .convert import levels
from .args import on_device, pad_fill
from .warped import native_warp, warp_read_box

__all__ = ["CanvasStep", "Pad", "RandomZoomOut", "build", "windows", "reads_parts", "part_box"]


class CanvasStep(Protocol):
    """What a canvas step declares (RandomZoomOut; RandomRotation with expand=True;
    ElasticTransform). `canvas_layout`: the layout `paint` writes, "HWC" ([h, w, 3], as
    decoders leave images) or "CHW" ([3, h, w], as torch's grid_sample gives them: the
    kernel reads either through the canvas's strides, and a CHW canvas saves the warps a
    transposing copy an image)."""

    canvas: bool
    canvas_why: str
    canvas_layout: str

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict: ...

    def canvas_size(self, params: dict, size: tuple[int, int]) -> tuple[int, int]: ...

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, params: dict) -> None: ...


class RandomZoomOut(Transform, converts="torchvision.RandomZoomOut"):
    """torchvision's RandomZoomOut: with probability p, a canvas of int(h * r) x
    int(w * r), r uniform in `side_range`, filled with `fill` (levels), the image at a
    uniformly drawn place on it ("padding": [left, top, right, bottom], torchvision's
    make_params; absent when the coin said no). The canvases differ in size, so a geometry
    step must follow."""

    group = "canvas"
    canvas = True
    canvas_why = "it changes the image's size"
    canvas_layout = "HWC"  # (the image copied as it was decoded)
    places = True  # the image lies on its canvas unchanged, at place(): masks and boxes follow it

    def place(self, params: dict) -> tuple[int, int]:
        """Where the image's top-left corner lies on its canvas (top, left)."""
        left, top = params["padding"][:2] if "padding" in params else (0, 0)
        return int(top), int(left)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(levels(t.fill, floats), tuple(t.side_range), t.p)

    def __init__(self, fill: Any = 0, side_range: Sequence[float] = (1.0, 4.0), p: float = 0.5) -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"p must be in [0, 1], not {p!r}")
        if len(side_range) != 2 or not all(math.isfinite(float(v)) for v in side_range) or side_range[0] < 1.0 \
                or side_range[0] > side_range[1]:
            raise ValueError(f"Invalid side range provided {side_range} (finite numbers, 1 <= min <= max).")
        self.fill = fill
        self.side_range = (float(side_range[0]), float(side_range[1]))
        self.p = float(p)
        self._fill = pad_fill(fill, "RandomZoomOut")
        self._fill_rows: dict[torch.device, torch.Tensor] = {}

    def __getstate__(self) -> dict:
        """Pickled (to a worker process) without the fill rows kept on devices."""
        return {**self.__dict__, "_fill_rows": {}}

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        """torchvision's draws, in its order and float32 arithmetic: the coin, r, then the
        two places (torch.rand's values are float32)."""
        if rng.random() >= self.p:
            return {}
        h, w = size
        lo, hi = self.side_range
        r = np.float32(lo) + np.float32(rng.random()) * np.float32(hi - lo)
        cw, ch = int(np.float32(w) * r), int(np.float32(h) * r)
        u0, u1 = np.float32(rng.random()), np.float32(rng.random())
        left, top = int(np.float32(cw - w) * u0), int(np.float32(ch - h) * u1)
        return {"padding": [left, top, cw - (left + w), ch - (top + h)]}

    def canvas_size(self, params: dict, size: tuple[int, int]) -> tuple[int, int]:
        """The canvas (h, w) of an image of `size` with these params."""
        if "padding" not in params:
            return size
        left, top, right, bottom = params["padding"]
        return size[0] + top + bottom, size[1] + left + right

    def paint(self, canvas: torch.Tensor, image: torch.Tensor, params: dict) -> None:
        """F.pad of `image` (uint8 HWC) into `canvas` (uint8 HWC, its size)."""
        if "padding" not in params:
            canvas.copy_(image)
            return
        (h, w), (ch, cw) = image.shape[:2], canvas.shape[:2]
        left, top = params["padding"][:2]
        rows2d = canvas.view(ch, cw * 3)
        bands = (rows2d[:top], rows2d[top + h:], rows2d[top:top + h, :left * 3], rows2d[top:top + h, (left + w) * 3:])
        if len(set(self._fill)) == 1:  # one level: the four bands set as memory
            for band in bands:
                band.fill_(self._fill[0])
        else:  # an RGB fill: one row of it copied into the bands (a broadcast of 3 bytes costs 5x)
            row = self._fill_row(cw, canvas.device)
            bands[0][:] = row
            bands[1][:] = row
            bands[2][:] = row[:left * 3]
            bands[3][:] = row[(left + w) * 3:]
        canvas[top:top + h, left:left + w] = image

    def paint_window(self, out: torch.Tensor, image: torch.Tensor, at: tuple[int, int],
                     window: tuple[int, int, int, int]) -> None:
        """The window (top, left, height, width) of the canvas `paint` makes, into `out`
        (uint8 HWC, the window's size): `image` (uint8 HWC: the image, or the part of it
        decoded) lying at `at` (top, left) on the canvas, its part inside the window, the
        fill around."""
        t0, l0, wh, ww = window
        top, left = at
        h, w = image.shape[:2]
        y0, y1, x0, x1 = max(top, t0), min(top + h, t0 + wh), max(left, l0), min(left + w, l0 + ww)
        if y0 >= y1 or x0 >= x1 or (y1 - y0, x1 - x0) != (wh, ww):  # (fill where the image does not cover it)
            if len(set(self._fill)) == 1:
                out.fill_(self._fill[0])
            else:
                out.view(wh, ww * 3)[:] = self._fill_row(ww, out.device)
        if y0 < y1 and x0 < x1:
            out[y0 - t0:y1 - t0, x0 - l0:x1 - l0] = image[y0 - top:y1 - top, x0 - left:x1 - left]

    def _fill_row(self, width: int, device: torch.device) -> torch.Tensor:
        """The RGB fill repeated `width` times, uint8 on `device`: kept a device and made
        again only for a wider canvas (no new tensor, nor host-to-device copy, an image;
        that one from pinned memory, not waiting for the stream)."""
        row = self._fill_rows.get(device)
        if row is None or row.numel() < width * 3:
            row = self._fill_rows[device] = on_device(torch.tensor(self._fill, dtype=torch.uint8).repeat(max(width, 1024)),
                                                      device)
        return row[:width * 3]


class Pad(RandomZoomOut, converts="torchvision.Pad"):
    """torchvision's Pad: each image on a canvas larger by `padding` (torchvision's
    argument: an int, or 1, 2 or 4 of them, read as (left, top, right, bottom)), filled
    with `fill` (levels), drawn from no random number. A canvas step like RandomZoomOut at
    a fixed place, so a geometry step follows it; before a RandomCrop the plan folds it
    into the crop's own padding (`fold_into`: no canvas is made, the kernel reads past the
    image as the fill). The padding modes that read the image's own pixels ("edge",
    "reflect", "symmetric") fuse only so folded."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.padding, levels(t.fill, floats), t.padding_mode)

    def __init__(self, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> None:
        from .geometry import PAD_MODES, _padding

        if padding_mode not in PAD_MODES:
            raise TransformError(f"Pad(padding_mode={padding_mode!r}) cannot be fused: one of {', '.join(PAD_MODES)}")
        self.padding = _padding(padding)
        if min(self.padding) < 0:
            raise ValueError(f"Pad's padding must be >= 0, not {padding!r}")
        super().__init__(fill, (1.0, 1.0), 1.0)
        self.padding_mode = padding_mode

    def __repr__(self) -> str:
        return f"Pad(padding={list(self.padding)}, fill={list(self._fill)}, padding_mode={self.padding_mode!r})"

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        """{"padding": [left, top, right, bottom]}, as RandomZoomOut's draws say where the
        image lies; no random number is taken."""
        return {"padding": list(self.padding)}

    def window(self) -> Transform:
        """This Pad as the geometry's last step (geometry.PadWindow): a window of the
        (resized) image larger by the padding, read 1:1; no canvas is made."""
        from .pad_window import PadWindow

        return PadWindow(self.padding, self._fill, self.padding_mode, repr(self))

    def fold_into(self, crop: Any) -> Transform | None:
        """The RandomCrop that pads as this Pad and then `crop` do (their paddings added,
        the same draws: torchvision's RandomCrop draws over the padded size either way), or
        None where that crop pads too in another way (another fill or mode; or a reflection
        of the reflection), or is not a RandomCrop."""
        from .geometry import RandomCrop

        if type(crop) is not RandomCrop:
            return None
        if any(crop.padding) or crop.pad_if_needed:
            if crop.padding_mode != self.padding_mode or self.padding_mode in ("reflect", "symmetric"):
                return None
            if self.padding_mode == "constant" and tuple(crop.crop_fill) != tuple(self._fill):
                return None
        padding = tuple(a + b for a, b in zip(self.padding, crop.padding))
        return RandomCrop(crop.size, padding, crop.pad_if_needed, list(self._fill), self.padding_mode)


def shown(step: Any) -> str:
    """A canvas step's name as the user wrote it: its class's, or what made it (a Pad made of
    a RandomCrop's padding: "RandomCrop's padding", leading.crop_then_resize)."""
    return getattr(step, "written_as", None) or type(step).__name__


def read_window(step: Any, params: dict, size: tuple[int, int],
                window: Sequence[int]) -> tuple[int, int, int, int]:
    """The part of an image of `size` (top, left, height, width, in the image) that the
    `window` of its canvas covers, under a step that places it (RandomZoomOut): what a
    decoder need decode of it; (0, 0, 1, 1) where the window holds none of it (fill only)."""
    top, left = step.place(params)
    h, w = size
    t, l, wh, ww = (int(v) for v in window)
    y0, y1, x0, x1 = max(t, top), min(t + wh, top + h), max(l, left), min(l + ww, left + w)
    if y0 >= y1 or x0 >= x1:
        return (0, 0, 1, 1)
    return (y0 - top, x0 - left, y1 - y0, x1 - x0)


def reads_parts(plan: Any) -> bool:
    """Whether a decoder need give only the part of each image that the crop's window of
    a warp's canvas picks (part_box): a RandomResizedCrop of a rotation's or affine's
    canvas (`[RandomRotation(30), RandomResizedCrop(224), ...]`; no first pass, no flip
    before the canvas or the crop), where the CPU makes it natively, byte for byte torch's
    (warped.native_warp: nearest, or bilinear). Only where the canvases are painted on the
    CPU."""
    step = plan.canvas
    return bool(plan.rrc and getattr(step, "paints_window", False) and hasattr(step, "sampling_matrix") and
                not plan.first and not any(plan.canvas_flip)
                and not any(plan.mirror) and native_warp(step.interpolation, step.fill) is not None)


def part_box(step: Any, params: dict, size: tuple[int, int], window: Sequence[int]) -> tuple[int, int, int, int]:
    """The part of an image of `size` (top, left, height, width) that `window` of the warp
    `step`'s canvas picks from (warped.warp_read_box): what a decoder need decode of it."""
    return warp_read_box(step.sampling_matrix(params, size), size, step.canvas_size(params, size), window)


def build(step: CanvasStep, decoded: DecodedBatch, params: Sequence[dict], sizes: Sequence[tuple[int, int]],
          rows: np.ndarray, workspace: Workspace | None = None, windows: np.ndarray | None = None, *,
          num_threads: int = 1, flips: tuple[bool, bool] = (False, False), parts: bool = False) -> DecodedBatch:
    """The canvases `step` makes of images `rows` of `decoded` (whole images of `sizes`,
    drawn for with `params`), packed one after the other in one buffer on its device, each
    in the step's `canvas_layout` (HWC or CHW, said by the batch's strides), in `rows`'
    order: the `workspace`'s "canvas" buffer (kernels.workspace.Workspace; reused batch
    after batch, grown when a batch's canvases need more), or a new one without it.
    `windows` (int64 [len(rows), 4], top, left, height, width in each canvas), for a step
    that places the image (RandomZoomOut's `paint_window`): only those windows of the
    canvases are made (a crop of a canvas up to 16 times its image reads a part of it), of
    the part of each image the decoder was asked for (read_window), where its box says; for
    a warp that `paints_window` (RandomRotation's, RandomAffine's), each window painted
    from the whole image, as the whole canvas has it. On the CPU the images are painted on
    up to `num_threads` threads, an image at a time each (torch's ops on one thread each).
    `flips` (horizontal, vertical; plan.canvas_flip): a sample that drew that flip has its
    image flipped before its canvas is made, as torchvision flips it before the warp.
    `parts` (reads_parts): a warp's image may be the part of it part_box says (a decoder's
    window), its box in its pixels where the decoder's box says."""
    pixels = decoded.pixels
    if windows is not None:
        out_sizes = [(int(wh), int(ww)) for wh, ww in np.asarray(windows)[:, 2:].tolist()]
    else:
        out_sizes = [step.canvas_size(params[k], sizes[k]) for k in rows.tolist()]
    total = sum(h * w * 3 for h, w in out_sizes)
    buf = (workspace.tensor("canvas", (total,), torch.uint8, pixels.device) if workspace is not None
           else torch.empty(total, dtype=torch.uint8, device=pixels.device))
    made = DecodedBatch.made(buf, out_sizes, step.canvas_layout)
    offsets = made.offsets
    planar = step.canvas_layout == "CHW"
    places = getattr(step, "places", False)
    ks = rows.tolist()
    if not (windows is not None and (places or parts)):
        for k in ks:
            h, w = sizes[k]
            if tuple(decoded.boxes[k].tolist()) != (0, 0, h, w) or tuple(decoded.shapes[k].tolist()) != (h, w):
                raise TransformError(f"a canvas step needs whole decoded images: image {k} is the {tuple(decoded.boxes[k].tolist())}"
                                     f" window of {tuple(decoded.shapes[k].tolist())}")

    def paint(i: int) -> None:
        k, at = ks[i], int(offsets[i])
        h, w = sizes[k]
        if windows is not None and places:
            _paint_part(step, decoded, k, params[k], (h, w), tuple(windows[i].tolist()), buf, at)
            return
        sy, sx, sc = decoded.strides[k].tolist()
        if windows is not None and parts and tuple(decoded.shapes[k].tolist()) != (h, w):
            _paint_from_part(step, decoded, k, params[k], (h, w), tuple(windows[i].tolist()), buf, at)
            return
        image = pixels.as_strided((h, w, 3), (sy, sx, sc), int(decoded.offsets[k]))
        axes = [a for a, on, key in ((1, flips[0], "flip"), (0, flips[1], "vflip")) if on and params[k].get(key)]
        image = image.flip(axes) if axes else image
        ch, cw = out_sizes[i]
        region = buf[at:at + ch * cw * 3]
        part = {} if windows is None else {"window": tuple(windows[i].tolist())}  # (a warp's: the crop's part only)
        step.paint(region.view(3, ch, cw) if planar else region.view(ch, cw, 3), image, params[k], **part)

    each_on_threads(paint, len(ks), num_threads if pixels.device.type == "cpu" else 1)
    return made


def windows(plan: Any, geom: np.ndarray, out: tuple[int, int]) -> np.ndarray | None:
    """The part of each canvas the geometry reads (int64 [N, 4]: top, left, height, width),
    where only that part need be made (build's `windows`), else None: a crop resized
    (RandomResizedCrop's) of a canvas that places its image or of a warp that paints a
    window: the crop; a crop of the output's size (`out`) inside a warp's canvas
    (CenterCrop's, RandomCrop's, read 1:1): that crop. `geom`'s columns are made those of
    the window, read from its top-left."""
    step, g = plan.canvas, geom
    paints = getattr(step, "paints_window", False)
    if plan.rrc and (paints or getattr(step, "places", False)):
        made = g[:, fused.TOP:fused.BW + 1].copy()
        g[:, fused.TOP] = g[:, fused.LEFT] = 0
        return made
    oh, ow = out
    if not paints or plan.rrc or plan.ragged or len(plan.geometry) != 1 or \
            type(plan.geometry[0]) not in (CenterCrop, RandomCrop):
        return None
    top, left = g[:, fused.OY], g[:, fused.OX]
    if not ((g[:, fused.VH] == g[:, fused.H]) & (g[:, fused.VW] == g[:, fused.W]) & (top >= 0) & (left >= 0)
            & (top + oh <= g[:, fused.VH]) & (left + ow <= g[:, fused.VW])).all():  # (a crop padded: the whole canvas)
        return None
    made = np.stack([top, left, np.full_like(top, oh), np.full_like(top, ow)], axis=1)
    g[:, fused.TOP:fused.BW + 1] = (0, 0, oh, ow)
    g[:, fused.VH], g[:, fused.VW] = oh, ow
    g[:, fused.OY] = g[:, fused.OX] = 0
    return made


def _decoded_pixels(decoded: DecodedBatch, k: int) -> torch.Tensor:
    """Image k's pixels as the decoder gave them (HWC at its strides: a part, or the whole)."""
    sh, sw = (int(v) for v in decoded.shapes[k])
    sy, sx, sc = decoded.strides[k].tolist()
    return decoded.pixels.as_strided((sh, sw, 3), (sy, sx, sc), int(decoded.offsets[k]))


def _paint_from_part(step: Any, decoded: DecodedBatch, k: int, params: dict, size: tuple[int, int],
                     window: tuple[int, int, int, int], buf: torch.Tensor, at: int) -> None:
    """Window `window` of image k's warp canvas painted into `buf` at `at` (planar) from the
    part of the image the decoder gave (part_box's; its box says where it lies in its pixels).

    Raises:
        TransformError: a part of another size than part_box's (a decoder that scaled it)."""
    t, l, h, w = part_box(step, params, size, window)
    bt, bl, bh, bw = (int(v) for v in decoded.boxes[k])
    if (bh, bw) != (h, w):
        raise TransformError(f"a warp's canvas needs its image's part {(t, l, h, w)} at full scale: image {k}'s was "
                             f"decoded as {bh}x{bw}")
    _, _, wh, ww = window
    step.paint(buf[at:at + wh * ww * 3].view(3, wh, ww), _decoded_pixels(decoded, k), params, window=window,
               part=(t - bt, l - bl, size[0], size[1]))


def _paint_part(step: Any, decoded: DecodedBatch, k: int, params: dict, size: tuple[int, int],
                window: tuple[int, int, int, int], buf: torch.Tensor, at: int) -> int:
    """Window `window` of image k's canvas painted into `buf` at `at` from the part of the
    image the decoder gave (asked for read_window's; its box says where that lies in its
    pixels): the bytes written.

    Raises:
        TransformError: a part decoded at another size (a decoder that scaled it down)."""
    t, l, h, w = read_window(step, params, size, window)
    bt, bl, bh, bw = (int(v) for v in decoded.boxes[k])
    if (bh, bw) == tuple(size):  # (the whole image: a first pass's, or a decoder's)
        t = l = 0
    elif (bh, bw) != (h, w):
        raise TransformError(f"a canvas step needs its images at full scale: image {k}'s part {(t, l, h, w)} was "
                             f"decoded as {bh}x{bw}")
    pixels = _decoded_pixels(decoded, k)
    top, left = step.place(params)
    _, _, wh, ww = window
    step.paint_window(buf[at:at + wh * ww * 3].view(wh, ww, 3), pixels, (top + t - bt, left + l - bl), window)
    return wh * ww * 3
