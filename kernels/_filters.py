"""The resize's filters, for both targets: ATen's antialiased bilinear and bicubic
(_upsample_bilinear2d_aa / _upsample_bicubic2d_aa, align_corners=False) and its nearest
and nearest-exact indices. Compiled with kernels/_pixel.py's helpers (_compile.HELPERS
reads both modules)."""
from __future__ import annotations

from numpy import float32, float64, int32, int64


def frame_index(v, size, pad):
    """Index v of a frame of `size` pixels along an axis where the padding (outside
    0 <= v < size) reads it under the pad mode `pad` (the PAD column: 1 the edge, 2 a
    reflection without the edge repeated, 3 one with it, as torch's pad modes "replicate",
    "reflect" and "symmetric"); 0, or v inside: v as it is. Clamped into the frame (a
    padding wider than one reflection reaches is refused before the kernel)."""
    if pad == 0 or (v >= 0 and v < size):
        return v
    if pad == 2:
        v = -v if v < 0 else 2 * (size - 1) - v
    elif pad == 3:
        v = -v - 1 if v < 0 else 2 * size - 1 - v
    if v < 0:
        v = 0
    if v > size - 1:
        v = size - 1
    return v


def filter_window(i, scale, in_size, frame, antialias, mode):
    """Source window of output index i (0-based in the resized, uncropped frame of `frame`
    pixels along this axis), for the filter `mode` (the FILTER column: 0 bilinear, 1
    bicubic, 2 nearest-exact, 3 nearest, 4 PIL's nearest).

    Returns (center, invscale, lo, hi): input indices lo <= j < hi contribute with
    weight filter_weight(j, center, invscale, mode == 1) (to be normalized by their sum).
    The filter reaches 1 (bilinear) or 2 (bicubic) input pixels either side, stretched
    by the scale when antialiasing a downscale: ATen's _upsample_*2d_aa, PIL's resize.
    The nearest modes reach half a pixel, never stretched: the window is the one pixel
    floor(center), ATen's index, with center (i + 0.5) scale (nearest-exact) or i scale
    (nearest) in float32; its one weight, normalized, is 1. PIL's nearest (mode 4) is
    pil_nearest_index's pixel."""
    if mode == 4:
        lo = pil_nearest_index(i, in_size, frame)
        return float32(lo) + float32(0.5), float32(1.0), lo, lo + int32(1)
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


def pil_nearest_index(i, in_size, frame):
    """The source pixel PIL's NEAREST resize of `in_size` pixels to `frame` takes for
    output i: Pillow walks the row in doubles (x = a / 2, then x += a, with a = in_size /
    frame) and truncates, so its index is floor((2i + 1) in_size / (2 frame)) except where
    that quotient is a whole number, where the sum's rounding decides (the walk is
    repeated then; it is exact elsewhere, its error far under 1 / (2 frame))."""
    num = int64(2 * i + 1) * int64(in_size)
    den = int64(2) * int64(frame)
    q = num // den
    if num - q * den == 0:
        a = float64(in_size) / float64(frame)
        x = a * float64(0.5)
        for _ in range(i):
            x += a
        q = int64(x)
    if q > in_size - 1:
        q = int64(in_size - 1)
    return int32(q)


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
