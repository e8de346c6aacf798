"""The colour math of one pixel, plain Python compiled for both targets with _pixel
(kernels/_compile.py): torchvision's formulas on float32 (`_blend` for brightness,
contrast and saturation, `_rgb_to_hsv`/`_hsv_to_rgb` for hue, posterize, solarize) and
the one-factor per-pixel ops of the op table, each `op_<name>(r, g, b, factor, mean)`,
dispatched by `apply_op`, generated from the table (kernels/opgen.py): a new such op is
its row in kernels/ops.py and its function here.
"""
import math

from numpy import float32, int32

# <generated: pixel ops>
from .ops import BRIGHTNESS
from .ops import CONTRAST
from .ops import SATURATION
from .ops import HUE
from .ops import GRAYSCALE
from .ops import SOLARIZE
from .ops import INVERT
from .ops import POSTERIZE
from .ops import SOLARIZE_ADD
from .ops import PERMUTE_CHANNELS
# </generated: pixel ops>


def clamp01(x):
    if x < float32(0.0):
        return float32(0.0)
    if x > float32(1.0):
        return float32(1.0)
    return x


def gray(r, g, b):
    """torchvision's rgb_to_grayscale weights."""
    return r * float32(0.2989) + g * float32(0.587) + b * float32(0.114)


def blend(x, y, ratio):
    """torchvision's _blend on float images: clamp(x * ratio + y * (1 - ratio), 0, 1)."""
    return clamp01(x * ratio + y * (float32(1.0) - ratio))


def floorf(x):
    """floor as float32 (the CPU target swaps in np.floor, which stays vectorizable)."""
    return float32(math.floor(x))


def adjust_hue(r, g, b, hue):
    """rgb -> hsv, h = (h + hue) mod 1, hsv -> rgb, with torchvision's formulas
    (_rgb_to_hsv, _hsv_to_rgb). Branch-free (selects only), so the CPU loop vectorizes
    and GPU warps do not diverge."""
    maxc = max(r, max(g, b))
    minc = min(r, min(g, b))
    crange = maxc - minc
    flat = crange == float32(0.0)
    div = float32(1.0) if flat else crange
    # torchvision's bc - gc, 2 + rc - bc, 4 + gc - rc with rc = (maxc - r) / div etc.:
    # the same values (to an ulp) with one reciprocal instead of three divisions
    inv = float32(1.0) / div
    h_r = (g - b) * inv
    h_g = float32(2.0) + (b - r) * inv
    h_b = float32(4.0) + (r - g) * inv
    h = h_r if maxc == r else (h_g if maxc == g else h_b)
    h = h * float32(1.0 / 6.0) + float32(1.0)  # torchvision: fmod(h / 6 + 1, 1); h / 6 + 1 > 0
    h = h - floorf(h)
    h = h + hue
    h = h - floorf(h)  # torch.remainder(h, 1.0)
    # hsv -> rgb. torchvision picks (v, p, q, t) by sector, with p = v(1-s), q = v(1-sf),
    # t = v(1-s+sf); the closed form channel_n = v - C * clamp(min(k, 4 - k), 0, 1),
    # k = (n + 6h) mod 6, n = 5, 3, 1 for r, g, b and chroma C = v*s = max - min, gives
    # the same values in every sector with fewer operations and no select chains
    # (torchvision's clamps of p, q, t are implied: results lie in [min, max]).
    h6 = h * float32(6.0)
    return hue_channel(float32(5.0), h6, maxc, crange), hue_channel(float32(3.0), h6, maxc, crange), \
        hue_channel(float32(1.0), h6, maxc, crange)


def hue_channel(n, h6, v, chroma):
    k = n + h6
    k = k - float32(6.0) if k >= float32(6.0) else k
    m = min(k, float32(4.0) - k)
    m = max(float32(0.0), min(m, float32(1.0)))
    return v - chroma * m


# The one-factor per-pixel ops (the op table's `pixel` ops): (r, g, b) -> (r, g, b); `mean`
# is the image's grey mean (CONTRAST's).

def op_brightness(r, g, b, factor, mean):
    return clamp01(r * factor), clamp01(g * factor), clamp01(b * factor)


def op_contrast(r, g, b, factor, mean):
    return blend(r, mean, factor), blend(g, mean, factor), blend(b, mean, factor)


def op_saturation(r, g, b, factor, mean):
    l = gray(r, g, b)
    return blend(r, l, factor), blend(g, l, factor), blend(b, l, factor)


def op_hue(r, g, b, factor, mean):
    return adjust_hue(r, g, b, factor)


def op_grayscale(r, g, b, factor, mean):
    l = gray(r, g, b)
    return l, l, l


def op_solarize(r, g, b, factor, mean):
    return solarize(r, factor), solarize(g, factor), solarize(b, factor)


def op_invert(r, g, b, factor, mean):
    return float32(1.0) - r, float32(1.0) - g, float32(1.0) - b


def op_posterize(r, g, b, factor, mean):
    return posterize(r, factor), posterize(g, factor), posterize(b, factor)


def op_solarize_add(r, g, b, factor, mean):
    return solarize_add(r, factor), solarize_add(g, factor), solarize_add(b, factor)


def op_permute_channels(r, g, b, factor, mean):
    k = int32(factor + float32(0.5))  # p[0] + 3 p[1] + 9 p[2]
    return channel(r, g, b, k % 3), channel(r, g, b, (k // 3) % 3), channel(r, g, b, k // 9)


# <generated: apply_op>
def apply_op(op, r, g, b, factor, mean):
    """One per-pixel op (the op table's `pixel` ops) on one pixel; `mean` is the image's
    grey mean (CONTRAST's). An op that is not one returns the pixel as it is."""
    if op == BRIGHTNESS:
        return op_brightness(r, g, b, factor, mean)
    if op == CONTRAST:
        return op_contrast(r, g, b, factor, mean)
    if op == SATURATION:
        return op_saturation(r, g, b, factor, mean)
    if op == HUE:
        return op_hue(r, g, b, factor, mean)
    if op == GRAYSCALE:
        return op_grayscale(r, g, b, factor, mean)
    if op == SOLARIZE:
        return op_solarize(r, g, b, factor, mean)
    if op == INVERT:
        return op_invert(r, g, b, factor, mean)
    if op == POSTERIZE:
        return op_posterize(r, g, b, factor, mean)
    if op == SOLARIZE_ADD:
        return op_solarize_add(r, g, b, factor, mean)
    if op == PERMUTE_CHANNELS:
        return op_permute_channels(r, g, b, factor, mean)
    return r, g, b
# </generated: apply_op>


def channel(r, g, b, i):
    """Channel i of the pixel (r, g, b)."""
    if i == 0:
        return r
    if i == 1:
        return g
    return b


def solarize_add(v, add):
    """timm's solarize_add (a lookup table on uint8 levels): v + add, capped at 1, where
    v is under 128 levels; the rest unchanged."""
    if v < float32(128.0 / 255.0):
        return min(v + add, float32(1.0))
    return v


def posterize(v, levels):
    """torchvision's posterize on float images: floor(v * levels) clamped to
    [0, levels - 1], times 1 / levels."""
    q = floorf(v * levels)
    q = max(float32(0.0), min(q, levels - float32(1.0)))
    return q * (float32(1.0) / levels)


def solarize(v, threshold):
    """torchvision's solarize on float images: a value at or over `threshold` is inverted."""
    if v >= threshold:
        return float32(1.0) - v
    return v
