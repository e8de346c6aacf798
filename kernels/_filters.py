"""The resize's filters, for both targets: ATen's antialiased bilinear and bicubic
(_upsample_bilinear2d_aa / _upsample_bicubic2d_aa, align_corners=False) and its nearest
and nearest-exact indices. Compiled with kernels/_pixel.py's helpers (_compile.HELPERS
reads both modules)."""
from __future__ import annotations

from numpy import float32, int32


def filter_window(i, scale, in_size, antialias, mode):
    """Source window of output index i (0-based in the resized, uncropped frame), for the
    filter `mode` (the FILTER column: 0 bilinear, 1 bicubic, 2 nearest-exact, 3 nearest).

    Returns (center, invscale, lo, hi): input indices lo <= j < hi contribute with
    weight filter_weight(j, center, invscale, mode == 1) (to be normalized by their sum).
    The filter reaches 1 (bilinear) or 2 (bicubic) input pixels either side, stretched
    by the scale when antialiasing a downscale: ATen's _upsample_*2d_aa, PIL's resize.
    The nearest modes reach half a pixel, never stretched: the window is the one pixel
    floor(center), ATen's index, with center (i + 0.5) scale (nearest-exact) or i scale
    (nearest) in float32; its one weight, normalized, is 1."""
    radius = float32(2.0) if mode == 1 else float32(1.0)
    offset = float32(0.5)
    if mode >= 2:
        radius = float32(0.5)
        if mode == 3:
            offset = float32(0.0)
    if antialias and scale >= float32(1.0) and mode < 2:
        support = radius * scale
        invscale = float32(1.0) / scale
    else:
        support = radius
        invscale = float32(1.0)
    center = scale * (float32(i) + offset)
    lo = int32(center - support + float32(0.5))
    if lo < 0:
        lo = int32(0)
    hi = int32(center + support + float32(0.5))
    if hi > in_size:
        hi = int32(in_size)
    return center, invscale, lo, hi


def tri_weight(j, center, invscale):
    x = (float32(j) - center + float32(0.5)) * invscale
    if x < float32(0.0):
        x = -x
    if x < float32(1.0):
        return float32(1.0) - x
    return float32(0.0)


def cubic_weight(j, center, invscale):
    """Keys' cubic convolution with a = -0.5 (PIL's and ATen's antialiased bicubic)."""
    x = (float32(j) - center + float32(0.5)) * invscale
    if x < float32(0.0):
        x = -x
    a = float32(-0.5)
    if x < float32(1.0):
        return ((a + float32(2.0)) * x - (a + float32(3.0))) * x * x + float32(1.0)
    if x < float32(2.0):
        return ((a * x - float32(5.0) * a) * x + float32(8.0) * a) * x - float32(4.0) * a
    return float32(0.0)


def filter_weight(j, center, invscale, cubic):
    if cubic:
        return cubic_weight(j, center, invscale)
    return tri_weight(j, center, invscale)
