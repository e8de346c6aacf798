"""Flips the kernel makes last, where torchvision's come earlier: a warp before a flip
(its ops mirrored on flipped samples: mirror_ops), a flip before the geometry (the
window, or the crop, mirrored in its frame: mirror_first; the decoder's windows alike:
mirrored_windows)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import TransformError
from ..kernels import fused
from ..kernels.ops import AFFINE, PERSPECTIVE
from .args import BILINEAR, NEAREST
from .warped import mirrored_perspective
from .warps import INTEGER_MAP

if TYPE_CHECKING:
    from .plan import _Plan


def mirror_ops(prog: list, size: tuple[int, int], h: bool, v: bool) -> list:
    """Program ops (op, args) of an image of `size` whose warps come before a flip along x
    (`h`) or y (`v`), mirrored for the kernel, which flips first: each warp op becomes the
    one that, on the flipped image, gives torchvision's warp, then the flip. A nearest warp
    is marked (interpolation -1 x, -2 y, -3 both: the kernel evaluates it at the mirrored
    pixel, kernels/_pixel.mirror_flags, so that even a half-way point picks torchvision's
    pixel); a bilinear one is conjugated (theta's terms that change sign under the mirror,
    in the centred frame, negated: within float32 rounding of the warp on the unflipped
    image); an exact quarter turn's integer map is conjugated in whole pixels; a
    perspective warp's coefficients are conjugated (warped.mirrored_perspective). The
    other ops act alike on a flipped image."""
    height, width = size
    out = []
    for op, a in prog:
        if op in (AFFINE, PERSPECTIVE):
            a, mode = list(a), a[6]
            if mode == NEAREST:
                a[6] = -float(h + 2 * v)
            elif op == PERSPECTIVE:
                c = mirrored_perspective([*a[:6], a[10], a[11]], size, h, v)
                a[:6], a[10], a[11] = c[:6], c[6], c[7]
            elif mode == BILINEAR:
                for k in ((1, 2, 3) if h else ()) + ((1, 3, 5) if v else ()):
                    a[k] = -a[k]
            elif mode == INTEGER_MAP:  # (source = (a0 x + a1 y + a2, a3 x + a4 y + a5) in pixels)
                if h:
                    a[:6] = [a[0], -a[1], (width - 1) * (1 - a[0]) - a[2], -a[3], a[4], a[3] * (width - 1) + a[5]]
                if v:
                    a[:6] = [a[0], -a[1], a[1] * (height - 1) + a[2], -a[3], a[4], (height - 1) * (1 - a[4]) - a[5]]
            else:
                raise TransformError(f"a warp of interpolation {mode} cannot be mirrored for a flip after it")
            out.append((op, tuple(a)))
        else:
            out.append((op, a))
    return out


def mirror_first(plan: "_Plan", geom: np.ndarray, out: np.ndarray) -> None:
    """A flip before the geometry (plan.mirror): torchvision flips the image and crops the
    flipped one at the drawn window; the kernel crops first and flips last, so each
    flipped sample's window is mirrored in its frame, in place: a crop that is resized
    (RandomResizedCrop's) in the image, a window of the resized image (RandomCrop's,
    CenterCrop's, with their padding) in that resized image, and both for a
    RandomResizedCrop followed by a crop (rrc_window). `out`: the output's (h, w), or each
    row's."""
    for on, between, flag, (lo, ext, frame), (olo, oframe, oext) in (
            (plan.mirror[0], plan.window_mirror[0], fused.FLIP, (fused.LEFT, fused.BW, fused.W), (fused.OX, fused.VW, 1)),
            (plan.mirror[1], plan.window_mirror[1], fused.VFLIP, (fused.TOP, fused.BH, fused.H), (fused.OY, fused.VH, 0))):
        if not (on or between):
            continue
        rows = geom[:, flag] != 0
        if plan.rrc and on:  # (a flip between the crops: the first one as drawn, its window mirrored)
            geom[rows, lo] = geom[rows, frame] - geom[rows, lo] - geom[rows, ext]
        if not plan.rrc or plan.rrc_window:  # (the window of the frame: a second crop's, after the first)
            size = out[..., oext] if out.ndim == 1 else out[rows, oext]
            geom[rows, olo] = geom[rows, oframe] - geom[rows, olo] - size


def mirrored_windows(plan: "_Plan", boxes: Any, flips: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The windows (top, left, height, width) [N, 4] a RandomResizedCrop's kernel reads
    where a flip comes before it (mirror_first's, for the decoder): `flips` [N, 2]."""
    boxes = np.array(boxes, np.int64).reshape(-1, 4)
    for axis, on, column in ((1, plan.mirror[0], 0), (0, plan.mirror[1], 1)):  # (left: the flip's; top: the vflip's)
        if on:
            rows = np.asarray(flips[:, column], bool)
            boxes[rows, axis] = sizes[rows, axis] - boxes[rows, axis] - boxes[rows, axis + 2]
    return boxes
