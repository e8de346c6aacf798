"""Per-pixel math, written once as plain Python and compiled for both targets.

`kernels/_compile.py` rebinds these functions' globals and compiles them as numba CUDA
device functions (GPU kernels) or as numba CPU functions (the CPU twin). Everything is
float32, as torchvision computes on float32 tensors. The formulas follow
torchvision.transforms.v2.functional: `_blend` for brightness/contrast/saturation,
`_rgb_to_hsv`/`_hsv_to_rgb` for hue, and ATen's antialiased bilinear filter
(upsample_bilinear2d_aa, align_corners=False) for the resize.
"""
import math

from numpy import float32, int32

# Op ids: ColorJitter's four in torchvision's fn_idx convention, then the per-pixel ops
# that follow it (RandomGrayscale, RandomSolarize, RandomInvert). A sample's `order` lists
# the ops it drew (-1 ends the list); factors[op] is the op's parameter.
BRIGHTNESS = 0
CONTRAST = 1
SATURATION = 2
HUE = 3
GRAYSCALE = 4  # factor unused
SOLARIZE = 5   # factor: the threshold, on the float scale (levels / 255)
INVERT = 6     # factor unused
POSTERIZE = 7  # factor: the levels kept, 2 ** bits
NUM_OPS = 8


def filter_window(i, scale, in_size, antialias):
    """Source window of output index i (0-based in the resized, uncropped frame).

    Returns (center, invscale, lo, hi): input indices lo <= j < hi contribute with
    weight tri_weight(j, center, invscale) (to be normalized by their sum)."""
    if antialias and scale >= float32(1.0):
        support = scale
        invscale = float32(1.0) / scale
    else:
        support = float32(1.0)
        invscale = float32(1.0)
    center = scale * (float32(i) + float32(0.5))
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


def apply_op(op, r, g, b, factor, mean):
    """One ColorJitter operation on one pixel; `mean` is the image's grayscale mean
    (used by contrast only)."""
    if op == BRIGHTNESS:
        return clamp01(r * factor), clamp01(g * factor), clamp01(b * factor)
    if op == CONTRAST:
        return blend(r, mean, factor), blend(g, mean, factor), blend(b, mean, factor)
    if op == SATURATION:
        l = gray(r, g, b)
        return blend(r, l, factor), blend(g, l, factor), blend(b, l, factor)
    if op == HUE:
        return adjust_hue(r, g, b, factor)
    if op == GRAYSCALE:
        l = gray(r, g, b)
        return l, l, l
    if op == SOLARIZE:
        return solarize(r, factor), solarize(g, factor), solarize(b, factor)
    if op == INVERT:
        return float32(1.0) - r, float32(1.0) - g, float32(1.0) - b
    if op == POSTERIZE:
        return posterize(r, factor), posterize(g, factor), posterize(b, factor)
    return r, g, b


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


def apply_ops(r, g, b, order, factors, first, last, mean):
    """Ops order[first:last] (op ids; -1 ends the list) with their factors[op]."""
    for k in range(first, last):
        op = order[k]
        if op < 0:
            break
        r, g, b = apply_op(op, r, g, b, factors[op], mean)
    return r, g, b


def contrast_position(order):
    """Index of contrast in a sample's op order, or the number of ops if it has none."""
    n = 0
    for k in range(order.shape[0]):
        if order[k] < 0:
            break
        if order[k] == CONTRAST:
            return k
        n += 1
    return n


def encode_output(v, c, mean, std, normalize, to_uint8):
    """Final value of channel c: normalized, or scaled to uint8 as torchvision's to_dtype
    (value * (255 + 1 - 1e-3), truncated). Normalize multiplies by 1/std (torchvision
    divides: the two differ by at most an ulp), which the CPU twin's vector transpose
    applies on the way out."""
    if normalize:
        return (v - mean[c]) * (float32(1.0) / std[c])
    if to_uint8:
        return float32(math.floor(v * float32(255.999)))
    return v
