"""A batch's drawn parameters: drawn (in Python, or in one native call), kept, and
encoded for the kernel — for a plan (transforms.plan), without its Compose.

`python_params` draws each sample's parameters in Python (random.Random's uniform,
randint and shuffle over the sample's SplitMix64 stream) and gives them as one dict per
sample, with torchvision's names; the kernel wants them as arrays (`encode_dicts`). For
the plans most training runs use (any supported geometry, the flips, a ColorJitter,
Normalize, ToDtype) `_native.draw_batch` makes the same draws, in the same order and with
the same floating-point operations, for the whole batch at once, and gives them as
columns; `Draws` turns the columns into the kernel's arrays with numpy, and into the dicts
only when something asks for them. Other plans (a program step other than a plain
ColorJitter, RandomErasing, subclasses of the steps) are drawn by the Python path, and
`Draws` holds its dicts. tests/test_draws.py compares the two paths draw by draw.
"""
from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any, Iterator, Sequence, overload

import numpy as np

from .. import _native
from ..errors import TransformError, known
from ..kernels import fused
from ..kernels.ops import ARGS, CONTRAST, GRAYSCALE, JITTER_OPS, OPS, OPS_ARGS
from .colour import _JITTER_NAMES, NO_CHANGE_ON_ONE, ONE_CHANNEL_MEAN, ColorJitter, Grayscale, one_channel
from .crops import CornerCrop
from .geometry_choice import GeometryChoice, chosen, geometry_draws, geometry_row
from .geometry import CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, Resize
from .mirrors import mirror_first, mirror_ops, mirrored_windows
from .nested_crops import CropOfCrop
from .pad_window import PadWindow
from .rng import _epoch_key, _SampleRandom
from .canvas import part_box, read_window, reads_parts, shown

if TYPE_CHECKING:
    from .plan import _Plan

__all__ = ["Draws", "as_draws", "draw_batch", "python_params", "encode_dicts", "native_spec", "CANVAS_MAX_PIXELS"]

# The most pixels a canvas step may make of one image (Pillow's decompression-bomb limit, the
# Loader's default max_pixels): a 65,000x1 image rotated with expand=True would need a canvas
# of ~46,000 x 46,000 (25 GB as float32): that image's error, not the process's MemoryError.
CANVAS_MAX_PIXELS = 2 * 89_478_485

# the columns of _native.draw_batch's ints (csrc/draws.h)
_TOP, _LEFT, _CH, _CW, _RH, _RW, _FLIP, _VFLIP, _ORDER, _WTOP, _WLEFT = 0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13
_JITTER_IDS = np.array(JITTER_OPS, np.int32)


def draw_batch(plan: "_Plan", sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
               indices: Sequence[int] | np.ndarray | None = None, size_array: np.ndarray | None = None,
               boxes: Sequence[np.ndarray] | None = None) -> "Draws":
    """The batch's draws as a `Draws`: for the common plans in one native call for the
    batch, else by the Python path. (seed, epoch, index) fixes each sample's draws (and,
    where a step draws from them, its boxes). `size_array`: `sizes` as int64 [N, 2], where
    the caller has it; `boxes`: each image's boxes, XYXY float32 [K, 4] in its own
    coordinates, for a plan that reads them (RandomIoUCrop's)."""
    if plan.reads_boxes:
        return Draws(plan, sizes, dicts=python_params(plan, sizes, seed, epoch=epoch, indices=indices, boxes=boxes))
    spec = plan.native_spec
    if spec is not None and len(sizes):
        idx = np.arange(len(sizes), dtype=np.int64) if indices is None else np.asarray(indices)
        if idx.dtype == np.int64 and idx.shape == (len(sizes),):  # (Python ints beyond int64: the Python path)
            if size_array is None:
                size_array = np.asarray(sizes, np.int64).reshape(-1, 2)
            cols = _native.draw_batch(spec, size_array, idx, _epoch_key(seed, epoch))
            if cols is not None and plan.pad_mode >= 2:  # (a padding past one reflection: the Python path names it)
                frames = cols[0][:, _RH:_RW + 1] if any(g[0] == 2 for g in spec[0]) else size_array
                cols = cols if plan.geometry[-1].reflects(frames).all() else None  # type: ignore[attr-defined]
            if cols is not None:  # (None: a sample it cannot draw; the Python path names why)
                return Draws(plan, sizes, columns=cols, size_array=size_array)
    return Draws(plan, sizes, dicts=python_params(plan, sizes, seed, epoch=epoch, indices=indices))


def python_params(plan: "_Plan", sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                  indices: Sequence[int] | np.ndarray | None = None,
                  boxes: Sequence[np.ndarray] | None = None) -> list[dict]:
    """make_params drawn in Python, a sample at a time: every plan (the reference of the
    native draws). Each step draws in the Compose's order; the erasing last. `boxes`: see
    draw_batch (a step that reads them sees them where it stands: on the canvas)."""
    if plan.reads_boxes:
        if boxes is None:
            raise TransformError(f"{type(plan.geometry[0]).__name__} draws its crop from each image's boxes: give "
                                 "them (draw_batch(sizes, seed, boxes=[...]); the Loader reads its gpudecode.Boxes "
                                 "field)")
        if len(boxes) != len(sizes):
            raise ValueError(f"{len(boxes)} entries of boxes for {len(sizes)} images")
    if indices is None:
        indices = range(len(sizes))
    elif isinstance(indices, np.ndarray):
        indices = indices.tolist()
    out = []
    key = _epoch_key(seed, epoch)
    crops: list[tuple[int, int, tuple[int, int], np.ndarray, dict]] = []  # (a crop drawn from the boxes: made for the batch)
    later: list[tuple[_SampleRandom, tuple[int, int]]] = []  # each sample's stream and size, for its draws after the geometry
    for i, ((h, w), idx) in enumerate(zip(sizes, indices)):
        if h <= 0 or w <= 0:
            raise ValueError(f"image size must be positive, got {(h, w)}")
        rng = _SampleRandom(key, idx)  # sample_rng(seed, epoch, idx)
        p: dict = {"flip": False, "brightness": None, "contrast": None, "saturation": None, "hue": None,
                   "order": [0, 1, 2, 3]}
        size = (h, w)
        for step in plan.first:  # (the first pass: on the whole image, in the Compose's order)
            d = step.draw(rng, size)
            _check_first(step, size)
            if step is plan.first_resize:  # (its Resize's size, what the steps after it see, under a key of its
                d = {"first_resize": d["resize"]}  # own: a Resize of the geometry draws "resize")
                size = d["first_resize"]
            p.update(d)
        if plan.canvas is not None:
            d = plan.canvas.draw(rng, size)
            size = plan.canvas.canvas_size(d, size)
            if size[0] * size[1] > CANVAS_MAX_PIXELS:  # (refused before any allocation: that image's error)
                raise ValueError(f"its canvas would be {size[0]}x{size[1]} pixels, over the limit of "
                                 f"{CANVAS_MAX_PIXELS:,} (a {h}x{w} image under {shown(plan.canvas)})")
            p.update(d)
        if plan.reads_boxes:  # (its key now; its crop with the batch's, below, where it sees the boxes)
            crops.append((i, rng.getrandbits(64), size, boxes[i], dict(p)))  # type: ignore[index]
        else:
            d, size = geometry_draws(plan, rng, size)
            p.update(d)
        out.append(p)
        later.append((rng, size))
    if crops:  # (drawn for the batch at once; each sample's stream took its one number above)
        seen = _seen_all(plan, [c[3] for c in crops], [c[4] for c in crops], [sizes[c[0]] for c in crops])
        made = plan.geometry[0].crops([c[1] for c in crops], [c[2] for c in crops], seen)  # type: ignore[attr-defined]
        for (i, *_), d in zip(crops, made):
            out[i].update(d)
    for p, (rng, size), hw in zip(out, later, sizes):  # (each sample's stream goes on where it stood)
        if plan.flip is not None:
            p.update(plan.flip.draw(rng, size))
        if plan.vflip is not None:
            p.update(plan.vflip.draw(rng, size))
        osize = sample_out(plan, p, size) if plan.ragged else plan.image_output(int(hw[0]), int(hw[1]))  # what the program sees
        for step in plan.program:  # in the Compose's order
            p.update(step.draw(rng, osize))
        if plan.post is not None:  # (after the program's steps, as in the Compose)
            p.update(plan.post.draw(rng, osize))
        if plan.erase is not None:  # drawn last: the other steps' draws are unchanged
            p.update(plan.erase.draw(rng, osize))
    return out


def first_sizes(plan: "_Plan", params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sizes of the images the first pass makes of images of `sizes` under their draws
    `params`: their own, or its Resize's (`[Resize(256), RandomResizedCrop(224)]`)."""
    if plan.first_resize is None:
        return list(sizes)
    return [tuple(int(v) for v in p["first_resize"]) for p in params]  # type: ignore[misc]


def _check_first(step: Any, size: tuple[int, int]) -> None:
    """Raises the TransformError (a ValueError: its sample's error in a Loader) of an
    image too small for a first-pass step (a blur's kernel past its reflection), drawn or
    not, every epoch alike."""
    for u in step.inner():
        check = getattr(u, "check_size", None)
        if check is not None:
            check(size)


def sample_out(plan: "_Plan", p: dict, size: tuple[int, int]) -> tuple[int, int]:
    """The output (h, w) of one image under its draws `p`: the plan's one size, or (ragged)
    its own: the crop of a RandomIoUCrop alone (read 1:1), its drawn resize, or `size`
    (the image's, or its canvas's: what the geometry starts from)."""
    if plan.out_size is not None:
        return plan.out_size
    if plan.rrc or "crop" in p:  # (a crop read 1:1: a RandomIoUCrop's alone, a Pad's window)
        return int(p["crop"][2]), int(p["crop"][3])
    if "resize" in p:
        return int(p["resize"][0]), int(p["resize"][1])
    return int(size[0]), int(size[1])


def _seen_all(plan: "_Plan", xyxy: Sequence[np.ndarray], ps: Sequence[dict],
              sizes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """`_seen` of each image (its boxes, its draws so far, its size), a canvas that places
    the image moving them all in one call."""
    canvas: Any = plan.canvas
    b = [np.asarray(x, np.float32).reshape(-1, 4) for x in xyxy]
    if canvas is None:
        return b
    if not getattr(canvas, "places", False):
        return [_seen(plan, x, p, (int(hw[0]), int(hw[1]))) for x, p, hw in zip(b, ps, sizes)]
    from .boxes import on_canvas

    counts = [len(x) for x in b]
    if not sum(counts):
        return b
    rows = np.array([[*canvas.place(p), h, w, *canvas.canvas_size(p, (h, w))] for p, (h, w) in zip(ps, sizes)], np.int64)
    moved = on_canvas(np.concatenate(b), np.repeat(rows, counts, axis=0))
    return np.split(moved, np.cumsum(counts)[:-1])


def _seen(plan: "_Plan", xyxy: np.ndarray, p: dict, size: tuple[int, int]) -> np.ndarray:
    """An image's boxes (XYXY float32 [K, 4]) where the geometry sees them: on the canvas a
    canvas step drew (`p`: the draws so far) made of the image of `size`, as the Boxes
    field moves them there (transforms.boxes)."""
    from .boxes import on_canvas
    from .warped import warp_boxes_by

    canvas: Any = plan.canvas
    b = np.asarray(xyxy, np.float32).reshape(-1, 4)
    if canvas is None or not len(b):
        return b
    if getattr(canvas, "places", False):
        return on_canvas(b, np.array([*canvas.place(p), *size, *canvas.canvas_size(p, size)], np.int64))
    if getattr(canvas, "follows", False):
        return warp_boxes_by(b, canvas.drawn(p, size))
    return b


def encode_dicts(plan: "_Plan", params: Sequence[dict],
                 sizes: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel arrays for make_params' dicts: geom int64 [N, GEOM] (the box, resize and
    window columns and FLIP; OFFSET, H, W and strides are the caller's), args float32
    [N, K, ARGS] and order int32 [N, K] (each sample's program: the ops its steps drew, in
    order, K the longest program of the batch). `sizes`: the images' (before a canvas step,
    whose params give the canvas's)."""
    n = len(params)
    given, sizes = sizes, first_sizes(plan, params, sizes)
    if plan.canvas is not None:
        sizes = [plan.canvas.canvas_size(p, s) for p, s in zip(params, sizes)]
    ragged = plan.ragged and plan.out_size is None
    if ragged:  # each image its own output size, in the top-left of the batch's (OH, OW)
        outs = [sample_out(plan, p, s) for p, s in zip(params, sizes)]
        oh, ow = max([1, *(o[0] for o in outs)]), max([1, *(o[1] for o in outs)])
    else:  # (of the images as given: output_size follows them through the first pass)
        oh, ow = plan.output_size(given)
    program = plan.program
    one = plan.one_channel
    G, H, W, FLIP, VFLIP = fused.GEOM, fused.H, fused.W, fused.FLIP, fused.VFLIP
    rows: list[list[int]] = []  # (built as lists: a numpy item assignment costs more than the list's)
    progs: list[list] = []
    OH, OW = fused.OH, fused.OW
    for k, (p, (h, w)) in enumerate(zip(params, sizes)):
        g = [0] * G
        g[H], g[W] = h, w
        so = outs[k] if ragged else (oh, ow)  # this image's output
        if ragged:
            g[OH], g[OW] = so
        geometry_row(plan, g, p, h, w, so)
        g[FLIP] = 1 if p.get("flip", False) and not plan.canvas_flip[0] else 0  # (a canvas flipped: the image was)
        g[VFLIP] = 1 if p.get("vflip", False) and not plan.canvas_flip[1] else 0
        rows.append(g)
        if program:
            prog: list = []
            for i, step in enumerate(program):
                start = len(prog)
                step.emit(p, so, prog)
                h, v = plan.mirrored_at(i, p)
                if h or v:  # (a warp before a flip the sample drew: the kernel flipped first)
                    prog[start:] = mirror_ops(prog[start:], so, h, v)
                if one is not None and one[0] < i <= one[1]:  # (the steps one[0] < i <= one[1] act on one channel)
                    prog[start:] = one_channel(prog[start:])
            progs.append(prog)
    geom = np.array(rows, np.int64).reshape(n, G)
    if any(plan.mirror) or any(plan.window_mirror):
        mirror_first(plan, geom, geom[:, fused.OH:fused.OW + 1] if ragged else np.array([oh, ow]))
    _check_reflection(plan, geom)
    width = max([1, *map(len, progs)])
    order = np.full((n, width), -1, np.int32)
    args = np.zeros((n, width, ARGS), np.float32)
    for k, prog in enumerate(progs):
        for j, (op, a) in enumerate(prog):
            if len(a) > OPS_ARGS[op]:  # (a step whose emit and the op table disagree: a bug, named)
                raise TransformError(f"{OPS[op].name} reads {OPS_ARGS[op]} argument(s), a step emitted {len(a)}")
            order[k, j] = op
            args[k, j, :len(a)] = a
    return geom, args, order


def _check_reflection(plan: "_Plan", geom: np.ndarray) -> None:
    """Raises the draw's ValueError for the first sample whose crop pads past one
    reflection of its frame (the kernel's VH, VW: the image or its resize), as torch's pad
    refuses it; the pipeline then draws the batch's samples alone, each error its own. For
    dicts (a caller's may not come from the draws); native columns are checked when drawn
    (draw_batch), so their encode does not check again."""
    if plan.pad_mode < 2 or not len(geom):
        return
    crop: Any = plan.geometry[-1]
    bad = ~crop.reflects(geom[:, fused.VH:fused.VW + 1])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        crop.draw(random.Random(0), tuple(geom[k, fused.VH:fused.VW + 1].tolist()))  # (raises its error)


def dict_boxes(plan: "_Plan", params: Sequence[dict], sizes: Sequence[tuple[int, int]], *,
               host: bool = False) -> list[tuple[int, int, int, int]]:
    """The window (top, left, height, width) of each image the kernel reads, for a decoder
    to decode no more than that: RandomResizedCrop's crop; the whole image for
    Resize/CenterCrop (every source pixel can reach the output through the filter).
    `host`: the canvases are painted on the CPU, where a warp's canvas may be painted
    from the part of the image its crop picks (canvas.reads_parts)."""
    if host and plan.canvas is not None and reads_parts(plan):  # (`[RandomRotation(30), RRC(224), ...]`)
        return [part_box(plan.canvas, p, (h, w), p["crop"]) for p, (h, w) in zip(params, sizes)]
    if plan.rrc and not plan.makes_images:
        if any(plan.mirror):  # (a flip before the crop: the window mirrored, as the kernel reads it)
            flips = np.array([[p.get("flip", False), p.get("vflip", False)] for p in params], bool).reshape(-1, 2)
            return [tuple(b) for b in mirrored_windows(plan, [p["crop"] for p in params], flips,
                                                       np.array(sizes, np.int64).reshape(-1, 2)).tolist()]
        return [tuple(p["crop"]) for p in params]  # type: ignore[misc]
    if plan.geometry and isinstance(plan.geometry[0], GeometryChoice) and not plan.makes_images:  # (each its option's)
        return [tuple(p["crop"]) if chosen(plan, p).rrc else (0, 0, h, w) for p, (h, w) in zip(params, sizes)]
    if plan.rrc and getattr(plan.canvas, "places", False) and not plan.first:  # (a crop of RandomZoomOut's canvas:
        # the image's part in it; a first pass makes the whole image)
        crops = [p["crop"] for p in params]
        if any(plan.mirror):  # (a flip before an evenly padded canvas: the crop mirrored in it, as the kernel reads it)
            flips = np.array([[p.get("flip", False), p.get("vflip", False)] for p in params], bool).reshape(-1, 2)
            step: Any = plan.canvas
            frames = np.array([step.canvas_size(p, s) for p, s in zip(params, sizes)], np.int64).reshape(-1, 2)
            crops = mirrored_windows(plan, crops, flips, frames).tolist()
        return [read_window(plan.canvas, p, (h, w), c) for p, (h, w), c in zip(params, sizes, crops)]
    return [(0, 0, h, w) for h, w in sizes]  # (a canvas made otherwise, or a first pass, needs the whole image)


def as_draws(plan: "_Plan", params: "Sequence[dict] | Draws", sizes: Sequence[tuple[int, int]]) -> "Draws":
    """`params` as Draws: itself, or a user's list of make_params dicts held by one."""
    if isinstance(params, Draws):
        return params
    return Draws(plan, sizes, dicts=list(params))


class Draws(Sequence[dict]):
    """The parameters drawn for a batch: a sequence of make_params' dicts (made when
    asked for), and the kernel's arrays (`encode`) and decode windows (`boxes`) made from
    columns without them.

    Args:
        plan: the plan they were drawn for (a Compose's `plan`).
        sizes: the images' (height, width).
        columns: (ints [N, 14], factors [N, 4]) from _native.draw_batch; or
        dicts: the Python path's make_params.
        size_array: `sizes` as int64 [N, 2], where the caller has it.
    """

    def __init__(self, plan: "_Plan", sizes: Sequence[tuple[int, int]], *,
                 columns: tuple[np.ndarray, np.ndarray] | None = None, dicts: list[dict] | None = None,
                 size_array: np.ndarray | None = None) -> None:
        self.plan = plan
        self.sizes = sizes
        self.columns = columns
        self._dicts = dicts
        self._size_array = size_array
        self._own: np.ndarray | None = None  # (out_sizes under ragged=True, made when first asked)

    @property
    def size_array(self) -> np.ndarray:
        """`sizes` as int64 [N, 2] (made once)."""
        if self._size_array is None:
            self._size_array = np.asarray(self.sizes, np.int64).reshape(-1, 2)
        return self._size_array

    def __len__(self) -> int:
        return len(self.sizes)

    @overload
    def __getitem__(self, k: int) -> dict: ...

    @overload
    def __getitem__(self, k: slice) -> list[dict]: ...

    def __getitem__(self, k: Any) -> Any:
        return self.dicts()[k]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.dicts())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return f"Draws({self.dicts()!r})"

    def dicts(self) -> list[dict]:
        """make_params' dicts, as the Python path gives them (keys in its order)."""
        if self._dicts is None:
            self._dicts = self._from_columns()
        return self._dicts

    def _from_columns(self) -> list[dict]:
        ints, factors = known(self.columns, "the draws' columns")
        plan = self.plan
        kinds = [type(g) for g in plan.geometry]
        resize = Resize in kinds
        crop = any(issubclass(k, (RandomResizedCrop, CenterCrop, RandomCrop, PadWindow, CropOfCrop)) for k in kinds)
        jitter = any(type(t) is not Grayscale for t in plan.program)
        grey = len(plan.program) > int(jitter)  # (a Grayscale step: no draw, its key set)
        window = tuple(plan.geometry[1].size) if plan.rrc_window else None  # type: ignore[attr-defined]
        iv = ints.tolist()
        fv = [[None if v != v else v for v in r] for r in factors.tolist()] if jitter else None  # (NaN: off)
        out = []
        for k, r in enumerate(iv):
            p: dict = {"flip": bool(r[_FLIP]), "brightness": None, "contrast": None, "saturation": None, "hue": None,
                       "order": r[_ORDER:_ORDER + 4]}
            if resize:
                p["resize"] = (r[_RH], r[_RW])
            if crop:
                p["crop"] = (r[_TOP], r[_LEFT], r[_CH], r[_CW])
            if window is not None:
                p["window"] = (r[_WTOP], r[_WLEFT], *window)
            if plan.vflip is not None:
                p["vflip"] = bool(r[_VFLIP])
            if jitter:
                f = fv[k]  # type: ignore[index]
                p["brightness"], p["contrast"], p["saturation"], p["hue"] = f
            if grey:
                p["grayscale"] = True
            out.append(p)
        return out

    def out_sizes(self, rows: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Each image's output (h, w), int64 [N, 2] (of the images `rows`, default all):
        the plan's one size, or with ragged=True each image's own (sample_out, made once
        for the batch: the boxes, the masks and the output ring each ask)."""
        plan = self.plan
        if plan.out_size is not None or not plan.ragged:
            pick = range(len(self.sizes)) if rows is None else np.asarray(rows, np.int64).tolist()
            one = plan.out_size or plan.output_size([self.sizes[k] for k in pick])
            return np.tile(np.asarray(one, np.int64), (len(pick), 1))
        if self._own is None:
            dicts = self.dicts()
            own = np.zeros((len(self.sizes), 2), np.int64)
            for k, size in enumerate(self.sizes):
                if plan.canvas is not None:
                    size = plan.canvas.canvas_size(dicts[k], size)
                own[k] = sample_out(plan, dicts[k], size)
            self._own = own
        return self._own.copy() if rows is None else self._own[np.asarray(rows, np.int64)]

    def boxes(self, *, host: bool = False) -> np.ndarray:
        """Compose.decode_boxes as an int64 array [N, 4]: the window of each image the
        kernel reads (top, left, height, width); `host`: dict_boxes'."""
        if self.columns is None:
            return np.asarray(dict_boxes(self.plan, self.dicts(), self.sizes, host=host), np.int64).reshape(-1, 4)
        if self.plan.rrc:
            if any(self.plan.mirror):
                ints = self.columns[0]
                return mirrored_windows(self.plan, ints[:, _TOP:_CW + 1], ints[:, _FLIP:_VFLIP + 1], self.size_array)
            return self.columns[0][:, _TOP:_CW + 1]
        out = np.zeros((len(self.sizes), 4), np.int64)  # the whole image
        out[:, 2:] = self.size_array
        return out

    def encode(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernel's arrays (encode_dicts) for the images `rows` (a row may come more
        than once; None: every image, in order)."""
        plan = self.plan
        if self.columns is None:
            dicts = self.dicts()
            if rows is None:
                return encode_dicts(plan, dicts, self.sizes)
            return encode_dicts(plan, [dicts[k] for k in rows], [self.sizes[k] for k in rows])
        pick: Any = slice(None) if rows is None else rows  # (every image: views, not copies)
        ints, factors, sizes = self.columns[0][pick], self.columns[1][pick], self.size_array[pick]
        n = len(ints)
        if plan.out_size is not None:
            oh, ow = plan.out_size
        elif n and not plan.geometry and (sizes == sizes[0]).all():  # (no geometry: one size, the batch's)
            oh, ow = sizes[0].tolist()
        else:  # (none, or several: output_size says what it makes of them)
            oh, ow = plan.output_size([tuple(s) for s in sizes.tolist()])
        geom = np.zeros((n, fused.GEOM), np.int64)
        geom[:, fused.H], geom[:, fused.W] = sizes[:, 0], sizes[:, 1]
        if plan.rrc:
            t, l, bh, bw = ints[:, _TOP], ints[:, _LEFT], ints[:, _CH], ints[:, _CW]
            bad = (t < 0) | (l < 0) | (bh <= 0) | (bw <= 0) | (t + bh > sizes[:, 0]) | (l + bw > sizes[:, 1])
            if bad.any():  # (RandomResizedCrop's fallback on a sliver of an image: as torchvision's, empty)
                k = int(np.flatnonzero(bad)[0])
                h, w = sizes[k].tolist()
                raise ValueError(f"crop {tuple(ints[k, _TOP:_CW + 1].tolist())} is outside the {h}x{w} image")
            geom[:, fused.TOP:fused.BW + 1] = ints[:, _TOP:_CW + 1]
            if plan.rrc_window:  # (resized to RandomResizedCrop's size; the output, the second crop's window of it)
                geom[:, fused.VH], geom[:, fused.VW] = plan.geometry[0].size  # type: ignore[attr-defined]
                geom[:, fused.OY], geom[:, fused.OX] = ints[:, _WTOP], ints[:, _WLEFT]
            else:
                geom[:, fused.VH], geom[:, fused.VW] = oh, ow
        else:
            geom[:, fused.BH], geom[:, fused.BW] = sizes[:, 0], sizes[:, 1]
            kinds = [g[0] for g in plan.native_spec[0]]  # type: ignore[index]
            geom[:, fused.VH:fused.VW + 1] = ints[:, _RH:_RW + 1] if 2 in kinds else sizes
            if 3 in kinds or 4 in kinds or 5 in kinds or 6 in kinds:  # CenterCrop, RandomCrop, CornerCrop, PadWindow:
                # the crop's offset
                geom[:, fused.OY], geom[:, fused.OX] = ints[:, _TOP], ints[:, _LEFT]
        geom[:, fused.FLIP] = ints[:, _FLIP]
        geom[:, fused.VFLIP] = ints[:, _VFLIP]
        if any(plan.mirror) or any(plan.window_mirror):
            mirror_first(plan, geom, np.array([oh, ow]))
        geom[:, fused.FILTER] = plan.resample
        geom[:, fused.FILLR:fused.FILLB + 1] = plan.pad_fill
        geom[:, fused.PAD] = plan.pad_mode
        if not plan.program:
            return geom, np.zeros((n, 1, ARGS), np.float32), np.full((n, 1), -1, np.int32)
        # each program step's ops: the jitter's in each sample's order (those whose range is on, the same for all),
        # a Grayscale's one op
        on = np.array([r is not None for r in plan.native_spec[3] or (None,) * 4])  # type: ignore[index]
        width = int(on.sum())
        one = plan.one_channel
        orders, argss = [], []
        for i, step in enumerate(plan.program):
            if type(step) is Grayscale:
                order, args = np.full((n, 1), GRAYSCALE, np.int32), np.zeros((n, 1, ARGS), np.float32)
            else:  # (the ColorJitter)
                drawn = ints[:, _ORDER:_ORDER + 4]
                ops = drawn[on[drawn]].reshape(n, width)
                order = _JITTER_IDS[ops]  # (fn_idx -> the kernel's op ids)
                args = np.zeros((n, width, ARGS), np.float32)
                args[:, :, 0] = np.take_along_axis(factors, ops, axis=1)
            if one is not None and one[0] < i <= one[1]:  # (on one channel: colour.one_channel on the arrays)
                args[order == CONTRAST, 1] = ONE_CHANNEL_MEAN
                order = np.where(np.isin(order, NO_CHANGE_ON_ONE), -1, order)
            orders.append(order)
            argss.append(args)
        order, args = np.concatenate(orders, axis=1), np.concatenate(argss, axis=1)
        if order.shape[1] == 0:
            return geom, np.zeros((n, 1, ARGS), np.float32), np.full((n, 1), -1, np.int32)
        if (order < 0).any():  # (ops dropped: each row's others first, in order, as encode_dicts leaves them)
            at = np.argsort(order < 0, axis=1, kind="stable")
            order, args = np.take_along_axis(order, at, axis=1), np.take_along_axis(args, at[:, :, None], axis=1)
            args[order < 0] = 0
            width = max(1, int((order >= 0).sum(axis=1).max()))
            order, args = np.ascontiguousarray(order[:, :width]), np.ascontiguousarray(args[:, :width])
        return geom, args, order


def native_spec(plan: "_Plan") -> tuple | None:
    """The plan as _native.draw_batch reads it, or None when the Python path draws it."""
    if plan.ragged and plan.out_size is None:  # (each image's own output size: the Python path's)
        return None
    if plan.erase is not None or plan.makes_images or plan.post is not None or plan.crop_resized or (
            plan.rrc_window and plan.pad_mode >= 2) or any(isinstance(g, GeometryChoice) for g in plan.geometry):
        # (a window padded by reflection: the Python path checks it; a choice: each image its option's draws)
        return None
    geometry: list[tuple] = []
    g: Any
    for at, g in enumerate(plan.geometry):
        kind = type(g)
        if len(g.filter_modes) > 1:  # a mode drawn an image: the Python path draws it
            return None
        if at == 1 and plan.rrc_window:  # (the crop of the RandomResizedCrop's output: its window)
            frame = tuple(plan.geometry[0].size)  # type: ignore[attr-defined]
            geometry.append((7, *frame, *g.size) if kind is CenterCrop else
                            (8, *frame, *g.size, *g.padding, int(g.pad_if_needed)))
        elif kind is RandomResizedCrop:
            geometry.append((1, g.scale[0], g.scale[1], math.log(g.ratio[0]), math.log(g.ratio[1]), min(g.ratio), max(g.ratio)))
        elif kind is Resize:
            if g.size is None:  # (the longer side to max_size: the Python path's)
                return None
            size = (g.size, -1) if isinstance(g.size, int) else g.size
            geometry.append((2, *size, -1 if g.max_size is None else g.max_size))
        elif kind is CenterCrop:
            geometry.append((3, *g.size))
        elif kind is CornerCrop:
            geometry.append((5, *g.size, *g.native))
        elif kind is RandomCrop:
            geometry.append((4, *g.size, *g.padding, int(g.pad_if_needed)))
        elif kind is CropOfCrop:  # (the first crop, then the second of its output: its offsets added)
            a, b = g.first, g.second
            geometry.append((3, *a.size) if type(a) is CenterCrop else (4, *a.size, *a.padding, int(a.pad_if_needed)))
            geometry.append((9, *a.size, 3 if type(b) is CenterCrop else 4, *b.size))
        elif kind is PadWindow:
            geometry.append((6, *g.padding))
        else:
            return None
        if any(abs(v) >= 2 ** 53 for v in geometry[-1]):  # (passed as doubles)
            return None
    flips = []
    for f, kind in ((plan.flip, RandomHorizontalFlip), (plan.vflip, RandomVerticalFlip)):
        if f is not None and type(f) is not kind:
            return None
        flips.append(-1.0 if f is None else f.p)
    jitter = None
    drawn = [t for t in plan.program if type(t) is not Grayscale]  # (a Grayscale draws nothing: its op is encoded)
    if drawn:
        if len(drawn) != 1 or type(drawn[0]) is not ColorJitter:
            return None
        cj = drawn[0]
        jitter = tuple(getattr(cj, name) for name in _JITTER_NAMES)
    return (geometry, flips[0], flips[1], jitter)
