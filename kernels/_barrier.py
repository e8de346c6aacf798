"""The barrier ops' formulas, written once for both targets: what a barrier op (the op
table's `barrier` flag: it reads more than its own pixel) gives at one output pixel of the
image before it, given the statistic its table entry names, and the per-op set-up a
barrier needs before its pixels (the blur's weights, the equalize table's entries).

Both interpreters run a sample's program as the same segments (barrier_step): the
per-pixel ops of a segment, then the barrier that ends it, with the statistic of the
image at its turn. What stays target-specific is reducing a statistic over the image
(CUDA: per block in shared memory, atomics across blocks, a parallel scan of the
histogram; the CPU: vectorized passes over its channel rows), reading a pixel (`fetch`:
[3, h, w] on CUDA, [w, 3, h] on the CPU) and the loop over pixels. The CPU twin keeps
vectorized passes of its own for the barriers that have them (cpu_passes._barrier_fast);
tests/test_barrier_interpreter.py holds each to barrier_pixel. A barrier op added to the
table needs its barrier_<name> here (barrier_pixel's branch for it is generated from the
table: kernels/opgen.py), and nothing in either interpreter.

Compiled with kernels/_pixel.py's helpers (_compile.HELPERS reads both modules).
"""
from __future__ import annotations

from numpy import float32, float64, int32

from ._pixel import (MAX_BLUR, affine_pixel, autocontrast, autocontrast_bounds, blend, blur_first,  # noqa: F401
                     clamp01, equalize_level, fetch, gauss_weight, perspective_pixel, quantize, reflect,
                     sharpen_channel)

# <generated: barrier ops>
from .ops import CONTRAST
from .ops import AUTOCONTRAST
from .ops import EQUALIZE
from .ops import SHARPNESS
from .ops import BLUR_X
from .ops import AFFINE
from .ops import BLUR_Y
from .ops import PERSPECTIVE
# </generated: barrier ops>

# The statistic row of a barrier (CUDA: stats[n, level]; the CPU: one row per sample):
# [0] the grey sum (float64), [1:4] the channels' minima, [4:7] their maxima.
STAT_WIDTH = 7


def contrast_mean(st, oh, ow, a):
    """CONTRAST's grey mean, from the statistic row's grey sum, times its step's scale
    (1 + a[1]: exactly the mean where a[1] is 0)."""
    return float32(st[0] / float64(oh * ow)) * (float32(1.0) + a[1])


def equalize_entry(k, before, rest):
    """Entry k of a channel's equalize table, on the float scale: torchvision's (PIL's)
    level from the count of pixels below bin k (`before`) and the count outside the
    channel's top non-empty bin (`rest`); only quantized where that is under 255."""
    step = rest // 255
    level = equalize_level(k, before, max(step, int32(1))) if step > 0 else int32(k)
    return float32(level) * float32(1.0 / 255.0)


def barrier_prepare(op, a, wts):
    """What a barrier needs of its arguments before its pixels, once per sample: the
    blur's normalized weights in wts[:size] and, at wts[MAX_BLUR], the first tap that
    counts (blur_first); nothing for the other barriers."""
    if op == BLUR_X or op == BLUR_Y:
        size = int32(a[0])
        total = float32(0.0)
        for i in range(size):
            w = float32(gauss_weight(i, size, a[1]))
            wts[i] = w
            total += w
        for i in range(size):
            wts[i] = wts[i] / total
        wts[MAX_BLUR] = float32(blur_first(wts, size))


# Each barrier op of the table, barrier_<name>(a, img, y, x, oh, ow, st, lut, wts) -> (r, g, b):
# its step's args a, output pixel (y, x) of img (the image before it, read through fetch), its
# statistic row st, lut (the equalize tables of the three channels, 768 floats) and wts
# (barrier_prepare's blur weights). `barrier_pixel`, below, is generated from the table
# (kernels/opgen.py): a barrier op added to it is its row there and its function here.

def barrier_contrast(a, img, y, x, oh, ow, st, lut, wts):
    m = contrast_mean(st, oh, ow, a)
    return blend(fetch(img, 0, y, x), m, a[0]), blend(fetch(img, 1, y, x), m, a[0]), \
        blend(fetch(img, 2, y, x), m, a[0])


def barrier_autocontrast(a, img, y, x, oh, ow, st, lut, wts):
    lr, sr = autocontrast_bounds(float32(st[1]), float32(st[4]))
    lg, sg = autocontrast_bounds(float32(st[2]), float32(st[5]))
    lb, sb = autocontrast_bounds(float32(st[3]), float32(st[6]))
    return autocontrast(fetch(img, 0, y, x), lr, sr), autocontrast(fetch(img, 1, y, x), lg, sg), \
        autocontrast(fetch(img, 2, y, x), lb, sb)


def barrier_equalize(a, img, y, x, oh, ow, st, lut, wts):
    return lut[quantize(fetch(img, 0, y, x))], lut[256 + quantize(fetch(img, 1, y, x))], \
        lut[512 + quantize(fetch(img, 2, y, x))]


def barrier_sharpness(a, img, y, x, oh, ow, st, lut, wts):
    # (the border keeps its values, clamped: torchvision's blend clamps; an image this
    # small as it is, as torchvision's)
    if oh <= 2 or ow <= 2:
        return fetch(img, 0, y, x), fetch(img, 1, y, x), fetch(img, 2, y, x)
    if y == 0 or x == 0 or y == oh - 1 or x == ow - 1:
        return clamp01(fetch(img, 0, y, x)), clamp01(fetch(img, 1, y, x)), clamp01(fetch(img, 2, y, x))
    return sharpen_channel(img, 0, y, x, a[0]), sharpen_channel(img, 1, y, x, a[0]), \
        sharpen_channel(img, 2, y, x, a[0])


def blur_pixel(a, img, y, x, oh, ow, wts, along_y):
    """A Gaussian blur's taps along x or y (reflected at the border), barrier_prepare's weights."""
    size = int32(a[0])
    first = int32(wts[MAX_BLUR])
    half = size // 2
    r = float32(0.0)
    g = float32(0.0)
    b = float32(0.0)
    for i in range(first, size - first):
        w = wts[i]
        yy = reflect(y + i - half, oh) if along_y else y
        xx = x if along_y else reflect(x + i - half, ow)
        r += w * fetch(img, 0, yy, xx)
        g += w * fetch(img, 1, yy, xx)
        b += w * fetch(img, 2, yy, xx)
    return r, g, b


def barrier_blur_x(a, img, y, x, oh, ow, st, lut, wts):
    return blur_pixel(a, img, y, x, oh, ow, wts, False)


def barrier_blur_y(a, img, y, x, oh, ow, st, lut, wts):
    return blur_pixel(a, img, y, x, oh, ow, wts, True)


def barrier_affine(a, img, y, x, oh, ow, st, lut, wts):
    return affine_pixel(img, y, x, oh, ow, a)


def barrier_perspective(a, img, y, x, oh, ow, st, lut, wts):
    return perspective_pixel(img, y, x, oh, ow, a)


# <generated: barrier_pixel>
def barrier_pixel(op, a, img, y, x, oh, ow, st, lut, wts):
    """Barrier op `op` (the op table's `barrier` ops) at output pixel (y, x) of img, the image
    before it: its barrier_<name> (see above). An op that is not one reads the pixel as it is."""
    if op == CONTRAST:
        return barrier_contrast(a, img, y, x, oh, ow, st, lut, wts)
    if op == AUTOCONTRAST:
        return barrier_autocontrast(a, img, y, x, oh, ow, st, lut, wts)
    if op == EQUALIZE:
        return barrier_equalize(a, img, y, x, oh, ow, st, lut, wts)
    if op == SHARPNESS:
        return barrier_sharpness(a, img, y, x, oh, ow, st, lut, wts)
    if op == BLUR_X:
        return barrier_blur_x(a, img, y, x, oh, ow, st, lut, wts)
    if op == AFFINE:
        return barrier_affine(a, img, y, x, oh, ow, st, lut, wts)
    if op == BLUR_Y:
        return barrier_blur_y(a, img, y, x, oh, ow, st, lut, wts)
    if op == PERSPECTIVE:
        return barrier_perspective(a, img, y, x, oh, ow, st, lut, wts)
    return fetch(img, 0, y, x), fetch(img, 1, y, x), fetch(img, 2, y, x)
# </generated: barrier_pixel>
