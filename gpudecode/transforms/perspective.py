"""F.perspective's canvas made natively on the CPU (RandomPerspective before the geometry:
`[RandomPerspective(), Resize((224, 224))]`): torch's ops make it in about 5.7 ms for a
500x375 image on one core (a bmm for the grid, a float copy of the image and a coverage
channel for grid_sample), the native warp (csrc/warp.cpp, a perspective warp's grid) in
well under one, the same bytes.

F.perspective's grid is the pixel centres [x, y, 1] (from 0.5) by bmm with the numerator's
matrix (over the half size) and with the denominator's [c6, c7, 1], divided, less 1. The
bmm's floats are those of the three products summed in its order (measured: 60 of 60 random
grids here, tests/test_perspective_native.py); the native warp sums them so, then picks or
blends as grid_sample does (transforms.warped's nearest and bilinear). Used where a probe
at first use agrees with torch's ops (another BLAS, another rounding: torch's ops then)."""
from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np
import torch

from .. import _native
from .args import BILINEAR, NEAREST
from .warped import grid_sample_filled, native_warp, perspective_coefficients, perspective_image_grid, probe_image

_EXACT: dict[float, bool] = {}  # interpolation -> whether the probe agreed (perspective_is_exact)


def _native_args(coefficients: Sequence[float], size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, ys, scale) for the native warp: the pixel centres as torch.linspace makes them,
    the numerator's matrix over the half size ([3, 2] row by row) and the denominator's [c6,
    c7, 1], in float32 as F.perspective's tensors hold them."""
    h, w = size
    c = [float(v) for v in coefficients]
    num = torch.tensor([[c[0], c[1], c[2]], [c[3], c[4], c[5]]], dtype=torch.float32)
    scaled = num.t().div(torch.tensor([0.5 * w, 0.5 * h], dtype=torch.float32))
    den = torch.tensor([c[6], c[7], 1.0], dtype=torch.float32)
    xs = torch.linspace(0.5, w - 0.5, steps=w)
    ys = torch.linspace(0.5, h - 0.5, steps=h)
    return xs.numpy(), ys.numpy(), torch.cat([scaled.reshape(-1), den]).numpy()


def _native_perspective(chw: torch.Tensor, coefficients: Sequence[float], interpolation: float,
                        levels: np.ndarray | None, out: torch.Tensor) -> None:
    xs, ys, scale = _native_args(coefficients, (int(chw.shape[1]), int(chw.shape[2])))
    sample = _native.warp_affine_nearest if interpolation == NEAREST else _native.warp_affine_bilinear
    sample(chw.numpy(), xs, ys, scale, levels, out.numpy())


def perspective_is_exact(interpolation: float) -> bool:
    """Whether the native perspective warp of `interpolation` makes torch's bytes here: the
    native warps exact (transforms.warped.native_warp), and a probe (three draws on a 37x53
    image of levels, a fill and none) byte for byte torch's ops."""
    if interpolation not in _EXACT:
        ok = native_warp(interpolation, 0) is not None
        if ok:
            h, w = 37, 53
            img = probe_image(h, w)
            start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
            for seed, fill in ((0, None), (1, (10, 200, 30)), (2, 0)):
                rng = random.Random(seed)
                end = [[x + rng.randrange(-12, 13), y + rng.randrange(-9, 10)] for x, y in start]
                d = perspective_coefficients(start, end)
                made = native_warp(interpolation, fill)
                got = torch.empty((3, h, w), dtype=torch.uint8)
                if made is None:
                    ok = False
                    break
                _native_perspective(img, d, interpolation, made[1], got)
                want = grid_sample_filled(img, perspective_image_grid(d, (h, w), img.device), interpolation, fill)
                ok = ok and torch.equal(got, want)
        _EXACT[interpolation] = ok
    return _EXACT[interpolation]


def native_perspective(chw: torch.Tensor, coefficients: Sequence[float], interpolation: float, fill: Any,
                       out: torch.Tensor) -> bool:
    """F.perspective of a uint8 image [3, h, w] into `out` (uint8 [3, h, w], contiguous)
    natively, where it makes torch's bytes (a CPU image, nearest or bilinear, the probe
    agreeing); False where it does not run (the caller's torch ops then)."""
    if chw.device.type != "cpu" or chw.dtype != torch.uint8 or not out.is_contiguous() or \
            interpolation not in (NEAREST, BILINEAR) or not perspective_is_exact(interpolation):
        return False
    made = native_warp(interpolation, fill)
    if made is None:
        return False
    _native_perspective(chw, coefficients, interpolation, made[1], out)
    return True
