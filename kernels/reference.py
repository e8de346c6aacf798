"""A plain numpy version of the fused kernel's math, written independently of
`_pixel` (vectorized, float64), used only as a test oracle."""
from __future__ import annotations

import numpy as np


def _keys(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel, a = -0.5, of |x|."""
    a, x = -0.5, np.abs(x)
    near = (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    far = a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def resize_matrix(out_size: int, in_size: int, vsize: int, voff: int, flip: bool = False,
                  antialias: bool = True, cubic: bool = False) -> np.ndarray:
    """[out_size, in_size] weights of ATen's antialiased bilinear (or bicubic) resize
    (align_corners False) of in_size -> vsize, rows at voff + o (mirrored when flip);
    zero rows outside."""
    m = np.zeros((out_size, in_size))
    scale = in_size / vsize
    radius = 2.0 if cubic else 1.0
    support = radius * (scale if (antialias and scale >= 1) else 1.0)
    inv = 1.0 / scale if (antialias and scale >= 1) else 1.0
    for o in range(out_size):
        v = (out_size - 1 - o if flip else o) + voff
        if not 0 <= v < vsize:
            continue
        center = scale * (v + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        j = np.arange(lo, hi)
        x = (j - center + 0.5) * inv
        w = _keys(x) if cubic else np.clip(1 - np.abs(x), 0, None)
        m[o, lo:hi] = w / w.sum()
    return m


def resample_reference(img: np.ndarray, box: tuple[int, int, int, int], vsize: tuple[int, int],
                       voff: tuple[int, int], out_size: tuple[int, int], flip: bool,
                       antialias: bool = True, cubic: bool = False) -> np.ndarray:
    """img uint8 HWC -> float64 [3, h, w] in [0, 1] (the bicubic's overshoot clipped)."""
    t, l, bh, bw = box
    crop = img[t:t + bh, l:l + bw].astype(np.float64) / 255.0
    my = resize_matrix(out_size[0], bh, vsize[0], voff[0], False, antialias, cubic)
    mx = resize_matrix(out_size[1], bw, vsize[1], voff[1], flip, antialias, cubic)
    x = np.einsum("yi,ijc,xj->cyx", my, crop, mx)
    return np.clip(x, 0, 1) if cubic else x


def _gray(x: np.ndarray) -> np.ndarray:
    return 0.2989 * x[0] + 0.587 * x[1] + 0.114 * x[2]


def _hue(x: np.ndarray, factor: float) -> np.ndarray:
    r, g, b = x
    maxc, minc = x.max(0), x.min(0)
    delta = maxc - minc
    s = np.where(maxc > 0, delta / np.where(maxc > 0, maxc, 1), 0)
    d = np.where(delta > 0, delta, 1)
    h = np.select([delta == 0, maxc == r, maxc == g], [0.0, ((g - b) / d) % 6, (b - r) / d + 2], (r - g) / d + 4)
    h = (h / 6.0 + factor) % 1.0
    # the textbook inverse: channel n = v - v*s*clip(min(k, 4-k), 0, 1), k = (n + 6h) mod 6
    out = []
    for n in (5, 3, 1):
        k = (n + h * 6) % 6
        out.append(maxc - maxc * s * np.clip(np.minimum(k, 4 - k), 0, 1))
    return np.clip(np.stack(out), 0, 1)


def jitter_reference(x: np.ndarray, order, factors) -> np.ndarray:
    """ColorJitter ops on float [3, h, w] in the given order (op ids), clamping after each."""
    for op in order:
        if op < 0:
            break
        f = float(factors[op])
        if op == 0:
            x = np.clip(x * f, 0, 1)
        elif op == 1:
            x = np.clip(x * f + _gray(x).mean() * (1 - f), 0, 1)
        elif op == 2:
            x = np.clip(x * f + _gray(x)[None] * (1 - f), 0, 1)
        else:
            x = _hue(x, f)
    return x


def fused_reference(img: np.ndarray, box, vsize, voff, out_size, flip, order, factors, mean=None, std=None,
                    antialias: bool = True, cubic: bool = False) -> np.ndarray:
    x = jitter_reference(resample_reference(img, box, vsize, voff, out_size, flip, antialias, cubic), order, factors)
    if mean is not None:
        x = (x - np.asarray(mean)[:, None, None]) / np.asarray(std)[:, None, None]
    return x
