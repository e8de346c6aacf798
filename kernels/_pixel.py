"""Per-pixel math, written once as plain Python and compiled for both targets.

`kernels/_compile.py` rebinds these functions' globals and compiles them as numba CUDA
device functions (GPU kernels) or as numba CPU functions (the CPU twin). Everything is
float32, as torchvision computes on float32 tensors. The formulas follow
torchvision.transforms.v2.functional: `_blend` for brightness/contrast/saturation,
`_rgb_to_hsv`/`_hsv_to_rgb` for hue; the resize's filters are kernels/_filters.py's,
GaussianNoise's numbers kernels/_noise.py's (compiled with these).
"""
import math

from numpy import float32, int32

# The op ids, their argument counts and barriers: the kernel's op table (kernels/ops.py).
# A sample's `order` lists the ops it drew (-1 ends the list) and args[k] holds step k's
# arguments (ARGS floats; args[k, 0] is the factor of a one-number op).
# (the kernels compiled from this module's namespace read the masks from here too)
# <generated: imports>
from .ops import (AFFINE, ARGS, AUTOCONTRAST, AUX_MASK,  # noqa: F401  (the kernels compiled from this namespace read them)
                  BARRIER_MASK, BLUR_X, BLUR_Y, BRIGHTNESS, CONTRAST, EQUALIZE, GAUSSIAN_NOISE, GRAYSCALE,
                  HISTOGRAM_MASK, HUE, INVERT, MEAN_MASK, MIX_ADD, MIX_END, MIX_SAVE, NUM_OPS,
                  PERMUTE_CHANNELS, PERSPECTIVE, POSTERIZE, RANGE_MASK, SATURATION, SHARPNESS, SOLARIZE,
                  SOLARIZE_ADD)
# </generated: imports>

from ._noise import add_noise, cos2pi, hash32, log_ratio24, noise_key, noise_normal  # noqa: E402, F401  (GaussianNoise's)
from ._filters import cubic_weight, filter_weight, filter_window, frame_index, pil_nearest_index, tri_weight  # noqa: E402, F401  (the resample's)
from ._colour import (clamp01, gray, blend, floorf, adjust_hue, hue_channel, op_brightness, op_contrast,  # noqa: E402, F401  (the colour ops: their module)
                      op_saturation, op_hue, op_grayscale, op_solarize, op_invert, op_posterize,
                      op_solarize_add, op_permute_channels, apply_op, channel, solarize_add, posterize,
                      solarize)

MAX_BLUR = 63    # largest Gaussian kernel side the CUDA kernel keeps weights for
BLUR_TAIL = 1e-10  # blur taps under this share of the sum are skipped (they change no value by 1e-9)


def is_barrier(op):
    """An op that needs more of the image than its own pixel (a statistic of the whole
    image, a neighbourhood, or any pixel): the image before it must be complete (op >= 0;
    the op table's barrier flags)."""
    return ((BARRIER_MASK >> op) & 1) != 0


def barrier_step(order, s):
    """Index of the s-th barrier op (s >= 1) in a sample's program, or its length
    (the index of its -1, or order's size) when it has fewer."""
    count = 0
    for k in range(order.shape[0]):
        op = order[k]
        if op < 0:
            return k
        if is_barrier(op):
            count += 1
            if count == s:
                return k
    return order.shape[0]


def apply_ops(r, g, b, order, args, first, last, aux, n, y, x):
    """The per-pixel ops order[first:last] (op ids; -1 ends the list), each with its
    step's factor args[k, 0] (barrier ops are not per-pixel: the caller stops before
    them). AugMix's ops keep the pixel's original and mix in aux[0] and aux[1] at
    [n, c, y, x]."""
    for k in range(first, last):
        op = order[k]
        if op < 0:
            break
        w = args[k, 0]
        if op == MIX_SAVE:
            aux[0, n, 0, y, x] = r
            aux[0, n, 1, y, x] = g
            aux[0, n, 2, y, x] = b
            aux[1, n, 0, y, x] = w * r
            aux[1, n, 1, y, x] = w * g
            aux[1, n, 2, y, x] = w * b
        elif op == MIX_ADD:
            aux[1, n, 0, y, x] = aux[1, n, 0, y, x] + w * r
            aux[1, n, 1, y, x] = aux[1, n, 1, y, x] + w * g
            aux[1, n, 2, y, x] = aux[1, n, 2, y, x] + w * b
            r = aux[0, n, 0, y, x]
            g = aux[0, n, 1, y, x]
            b = aux[0, n, 2, y, x]
        elif op == MIX_END:
            r = aux[1, n, 0, y, x]
            g = aux[1, n, 1, y, x]
            b = aux[1, n, 2, y, x]
        elif op == GAUSSIAN_NOISE:
            key = noise_key(args[k, 3], args[k, 4])
            one = args[k, 5] > float32(0.5)  # (one channel: every channel the first's noise)
            r = add_noise(r, args[k, 0], args[k, 1], args[k, 2], key, y, x, 0)
            g = add_noise(g, args[k, 0], args[k, 1], args[k, 2], key, y, x, 0 if one else 1)
            b = add_noise(b, args[k, 0], args[k, 1], args[k, 2], key, y, x, 0 if one else 2)
        else:
            r, g, b = apply_op(op, r, g, b, w, float32(0.0))
    return r, g, b


def quantize(v):
    """torchvision's float -> uint8 conversion (v * (255 + 1 - 1e-3), truncated) of a
    value in [0, 1]."""
    q = int32(floorf(v * float32(255.999)))
    return min(max(q, int32(0)), int32(255))


def autocontrast_bounds(lo, hi):
    """torchvision's autocontrast of a channel with min lo and max hi is
    clamp((v - low) / scale): (low, scale) = (lo, (hi - lo) * 1), or (0, 1) when hi == lo."""
    if hi == lo:
        return float32(0.0), float32(1.0)
    return lo, (hi - lo) * float32(1.0)


def autocontrast(v, low, scale):
    """One value, its channel's autocontrast_bounds given."""
    return clamp01((v - low) / scale)


def equalize_level(k, cum_before, step):
    """torchvision's (PIL's) equalize LUT entry k: (cum_hist[k - 1] + step // 2) // step,
    clamped to 255; 0 for k = 0. `step` >= 1 (0 means: no equalization, see callers)."""
    if k == 0:
        return int32(0)
    return min(int32((cum_before + step // 2) // step), int32(255))


def nearbyint(x):
    """Round half to even, as grid_sample's nearest mode (std::nearbyint)."""
    f = floorf(x)
    d = x - f
    if d > float32(0.5):
        return f + float32(1.0)
    if d < float32(0.5):
        return f
    half = f * float32(0.5)
    return f if half == floorf(half) else f + float32(1.0)


def grid_source(x, size, t0, t1, t2, other):
    """Source coordinate along one axis of output pixel index x (the other axis' centred
    coordinate `other`), as torchvision's _affine_grid and grid_sample compute it: the
    centred base grid times theta / (size / 2), unnormalized with align_corners=False."""
    xc = float32(x) - float32(size - 1) * float32(0.5)
    gx = xc * t0 + other * t1 + t2
    return (gx + float32(1.0)) * (float32(size) * float32(0.5)) - float32(0.5)


def fetch(img, c, y, x):
    """Value (y, x) of channel c of an image: img[c, y, x] here (CUDA's scratch
    [3, h, w]); the CPU target swaps in its own layout (img [w, 3, h], see _compile)."""
    return img[c, y, x]


def near_image(ix, iy, oh, ow):
    """Whether source coordinates are close enough to the image to read (far outside, or
    NaN: no tap, and no float -> int conversion of a huge value)."""
    return ix > float32(-2.0) and iy > float32(-2.0) and ix < float32(ow + 1) and iy < float32(oh + 1)


def affine_source(y, x, oh, ow, a):
    """(ix, iy, near): the source coordinates of output pixel (y, x) under AFFINE's args
    `a`, and whether they are near enough to the image to read (near_image)."""
    xc = float32(x) - float32(ow - 1) * float32(0.5)
    yc = float32(y) - float32(oh - 1) * float32(0.5)
    ix = grid_source(x, ow, a[0], a[1], a[2], yc)
    iy = grid_source(y, oh, a[4], a[3], a[5], xc)  # xc * a3 + yc * a4 + a5: the same sum
    return ix, iy, near_image(ix, iy, oh, ow)


def perspective_source(y, x, oh, ow, a):
    """(ix, iy, near): the source coordinates of output pixel (y, x) under PERSPECTIVE's
    args, as torchvision's _perspective_grid and grid_sample compute them in float32: the
    pixel centre (x + .5, y + .5) through theta1 / (w/2, h/2) over theta2's denominator,
    minus 1, unnormalized with align_corners=False."""
    xb = float32(x) + float32(0.5)
    yb = float32(y) + float32(0.5)
    hw = float32(ow) * float32(0.5)
    hh = float32(oh) * float32(0.5)
    den = xb * a[10] + yb * a[11] + float32(1.0)
    gx = (xb * (a[0] / hw) + yb * (a[1] / hw) + a[2] / hw) / den - float32(1.0)
    gy = (xb * (a[3] / hh) + yb * (a[4] / hh) + a[5] / hh) / den - float32(1.0)
    ix = (gx + float32(1.0)) * hw - float32(0.5)
    iy = (gy + float32(1.0)) * hh - float32(0.5)
    return ix, iy, near_image(ix, iy, oh, ow)


def nearest_of(ix, iy, near, oh, ow):
    """(sx, sy, inside): grid_sample's nearest source pixel of source coordinates (ix, iy)
    (round half to even), and whether it lies in the image."""
    sx = int32(nearbyint(ix)) if near else int32(-1)
    sy = int32(nearbyint(iy)) if near else int32(-1)
    return sx, sy, near and sx >= 0 and sx < ow and sy >= 0 and sy < oh


def mirror_flags(mode):
    """(x, y): whether a nearest warp is mirrored along each axis, from its interpolation
    argument (-1 x, -2 y, -3 both; 0 neither). A mirrored warp is evaluated at the
    mirrored output pixel and its source pixel mirrored back: on a flipped image, that is
    torchvision's warp, then the flip, to the pixel (a half-way point rounds as round half
    to even rounds it in the unflipped image, which a warp conjugated by the flip would
    not)."""
    return mode == float32(-1.0) or mode == float32(-3.0), mode <= float32(-2.0)


def nearest_source(y, x, oh, ow, a):
    """nearest_of output pixel (y, x) under AFFINE's args (mirrored: mirror_flags)."""
    mx, my = mirror_flags(a[6])
    ix, iy, near = affine_source(oh - 1 - y if my else y, ow - 1 - x if mx else x, oh, ow, a)
    sx, sy, inside = nearest_of(ix, iy, near, oh, ow)
    return ow - 1 - sx if mx else sx, oh - 1 - sy if my else sy, inside


def perspective_nearest_source(y, x, oh, ow, a):
    """nearest_of output pixel (y, x) under PERSPECTIVE's args (mirrored: mirror_flags)."""
    mx, my = mirror_flags(a[6])
    ix, iy, near = perspective_source(oh - 1 - y if my else y, ow - 1 - x if mx else x, oh, ow, a)
    sx, sy, inside = nearest_of(ix, iy, near, oh, ow)
    return ow - 1 - sx if mx else sx, oh - 1 - sy if my else sy, inside


def sample_nearest(img, sx, sy, inside, a):
    """The nearest pixel, zeros outside, or the fill where the sampled mask is under 0.5
    (that is: outside); the fill at a[7:10] (AFFINE's and PERSPECTIVE's)."""
    if inside:
        return fetch(img, 0, sy, sx), fetch(img, 1, sy, sx), fetch(img, 2, sy, sx)
    if a[7] == a[7]:  # a fill (NaN: none)
        return a[7], a[8], a[9]
    return float32(0.0), float32(0.0), float32(0.0)


def affine_nearest(img, y, x, oh, ow, a):
    sx, sy, inside = nearest_source(y, x, oh, ow, a)
    return sample_nearest(img, sx, sy, inside, a)


def sample_bilinear(img, ix, iy, near, oh, ow, a):
    """grid_sample's bilinear value at (ix, iy), taps outside the image zero, summed nw,
    ne, sw, se; with a fill (a[7:10]), the sampled mask (the in-image weights' sum) blends
    it in."""
    fx = floorf(ix)
    fy = floorf(iy)
    x0 = int32(fx) if near else int32(0)
    y0 = int32(fy) if near else int32(0)
    wx1 = ix - fx
    wy1 = iy - fy
    wx0 = float32(1.0) - wx1
    wy0 = float32(1.0) - wy1
    r = float32(0.0)
    g = float32(0.0)
    b = float32(0.0)
    mask = float32(0.0)
    if near:
        for dy in range(2):
            yy = y0 + dy
            wy = wy1 if dy == 1 else wy0
            if yy < 0 or yy >= oh:
                continue
            for dx in range(2):
                xx = x0 + dx
                if xx < 0 or xx >= ow:
                    continue
                w = wy * (wx1 if dx == 1 else wx0)
                r += w * fetch(img, 0, yy, xx)
                g += w * fetch(img, 1, yy, xx)
                b += w * fetch(img, 2, yy, xx)
                mask += w
    if a[7] == a[7]:
        return (r - a[7]) * mask + a[7], (g - a[8]) * mask + a[8], (b - a[9]) * mask + a[9]
    return r, g, b


def affine_bilinear(img, y, x, oh, ow, a):
    ix, iy, near = affine_source(y, x, oh, ow, a)
    return sample_bilinear(img, ix, iy, near, oh, ow, a)


def perspective_bilinear(img, y, x, oh, ow, a):
    ix, iy, near = perspective_source(y, x, oh, ow, a)
    return sample_bilinear(img, ix, iy, near, oh, ow, a)


def perspective_nearest(img, y, x, oh, ow, a):
    sx, sy, inside = perspective_nearest_source(y, x, oh, ow, a)
    return sample_nearest(img, sx, sy, inside, a)


def perspective_pixel(img, y, x, oh, ow, a):
    """Output pixel (y, x) of torchvision's perspective warp of img [3, oh, ow] (same
    size), with PERSPECTIVE's args: nearest (a[6] 0; mirrored, < 0) or bilinear, the fill."""
    if a[6] <= float32(0.0):
        return perspective_nearest(img, y, x, oh, ow, a)
    return perspective_bilinear(img, y, x, oh, ow, a)


def affine_integer(img, y, x, oh, ow, a):
    """An exact pixel permutation (torchvision's rot90 fast paths): source (a0 x + a1 y +
    a2, a3 x + a4 y + a5)."""
    sx = int32(a[0] * float32(x) + a[1] * float32(y) + a[2])
    sy = int32(a[3] * float32(x) + a[4] * float32(y) + a[5])
    if sx >= 0 and sx < ow and sy >= 0 and sy < oh:
        return fetch(img, 0, sy, sx), fetch(img, 1, sy, sx), fetch(img, 2, sy, sx)
    return float32(0.0), float32(0.0), float32(0.0)


def keys_row(v0, v1, v2, v3, d):
    """PIL's cubic through four taps at fraction d (Image.transform's BICUBIC)."""
    p2 = v2 - v0
    p3 = float32(2.0) * (v0 - v1) + v2 - v3
    p4 = v1 - v0 - v2 + v3
    return v1 + d * (p2 + d * (p3 + d * p4))


def clamp_index(i, n):
    if i < 0:
        return int32(0)
    if i >= n:
        return int32(n - 1)
    return i


def affine_pil(img, y, x, oh, ow, a):
    """PIL's Image.transform(size, AFFINE, a[0:6], BILINEAR or BICUBIC, fillcolor): the
    source point of pixel centre (x + .5, y + .5) under PIL's matrix; outside the image
    the fill (zeros without one); inside, taps clamped to the edge; the cubic clipped."""
    fx = a[0] * (float32(x) + float32(0.5)) + a[1] * (float32(y) + float32(0.5)) + a[2]
    fy = a[3] * (float32(x) + float32(0.5)) + a[4] * (float32(y) + float32(0.5)) + a[5]
    if not (fx >= float32(0.0) and fx < float32(ow) and fy >= float32(0.0) and fy < float32(oh)):
        if a[7] == a[7]:
            return a[7], a[8], a[9]
        return float32(0.0), float32(0.0), float32(0.0)
    fx = fx - float32(0.5)
    fy = fy - float32(0.5)
    x0f = floorf(fx)
    y0f = floorf(fy)
    dx = fx - x0f
    dy = fy - y0f
    x0 = int32(x0f)
    y0 = int32(y0f)
    r = float32(0.0)
    g = float32(0.0)
    b = float32(0.0)
    if a[6] == float32(3.0):
        xa = clamp_index(x0, ow)
        xb = clamp_index(x0 + 1, ow)
        ya = clamp_index(y0, oh)
        yb = clamp_index(y0 + 1, oh)
        for c in range(3):
            top = fetch(img, c, ya, xa) + (fetch(img, c, ya, xb) - fetch(img, c, ya, xa)) * dx
            bot = fetch(img, c, yb, xa) + (fetch(img, c, yb, xb) - fetch(img, c, yb, xa)) * dx
            v = top + (bot - top) * dy
            if c == 0:
                r = v
            elif c == 1:
                g = v
            else:
                b = v
        return r, g, b
    xa = clamp_index(x0 - 1, ow)
    xb = clamp_index(x0, ow)
    xc = clamp_index(x0 + 1, ow)
    xd = clamp_index(x0 + 2, ow)
    for c in range(3):
        rows0 = float32(0.0)
        rows1 = float32(0.0)
        rows2 = float32(0.0)
        rows3 = float32(0.0)
        for k in range(4):
            yy = clamp_index(y0 - 1 + k, oh)
            v = keys_row(fetch(img, c, yy, xa), fetch(img, c, yy, xb), fetch(img, c, yy, xc), fetch(img, c, yy, xd),
                         dx)
            if k == 0:
                rows0 = v
            elif k == 1:
                rows1 = v
            elif k == 2:
                rows2 = v
            else:
                rows3 = v
        v = clamp01(keys_row(rows0, rows1, rows2, rows3, dy))
        if c == 0:
            r = v
        elif c == 1:
            g = v
        else:
            b = v
    return r, g, b


def affine_pixel(img, y, x, oh, ow, a):
    """Output pixel (y, x) of torchvision's affine warp of img [3, oh, ow] (same size),
    with AFFINE's args: theta's rows divided by (w/2, h/2), the interpolation, the fill
    (or PIL's, interpolation 3 or 4)."""
    if a[6] == float32(2.0):
        return affine_integer(img, y, x, oh, ow, a)
    if a[6] <= float32(0.0):  # (nearest; mirrored, < 0: nearest_source)
        return affine_nearest(img, y, x, oh, ow, a)
    if a[6] >= float32(3.0):
        return affine_pil(img, y, x, oh, ow, a)
    return affine_bilinear(img, y, x, oh, ow, a)


def sharpen_value(v, ring, f):
    """torchvision's adjust_sharpness of an interior value v whose 8 neighbours sum to
    `ring`: v + (1 - f) * (blur - v), the blur (ring + 5 v) / 13; clamped."""
    blur = ring * float32(1.0 / 13.0) + v * float32(5.0 / 13.0)
    return clamp01(v + (float32(1.0) - f) * (blur - v))


def sharpen_channel(img, c, y, x, f):
    """sharpen_value at interior pixel (y, x) of channel c of img [3, h, w]; the ring
    summed a column at a time, as the CPU twin's vectorized pass sums it (the same float
    sum on both targets)."""
    s = fetch(img, c, y - 1, x - 1) + fetch(img, c, y, x - 1) + fetch(img, c, y + 1, x - 1) \
        + fetch(img, c, y - 1, x) + fetch(img, c, y + 1, x) \
        + fetch(img, c, y - 1, x + 1) + fetch(img, c, y, x + 1) + fetch(img, c, y + 1, x + 1)
    return sharpen_value(fetch(img, c, y, x), s, f)


def reflect(i, n):
    """torch's reflect padding index (n >= 2 and |overhang| < n, checked by the caller)."""
    if i < 0:
        return -i
    if i >= n:
        return 2 * (n - 1) - i
    return i


def blur_first(w, size):
    """The first tap of normalized weights w[:size] at or over BLUR_TAIL (the kernel is
    symmetric: the last worth reading is size - 1 - first)."""
    first = 0
    while first < size // 2 and w[first] < float32(BLUR_TAIL):
        first += 1
    return first


def gauss_weight(i, k, sigma):
    """Unnormalized weight i of torchvision's Gaussian kernel of odd size k:
    exp(-(x_i / sigma)^2), x = linspace(-lim, lim, k), lim = (k - 1) / (2 sqrt 2)."""
    lim = float32(k - 1) / float32(2.0 * math.sqrt(2.0))
    x = -lim + float32(i) * (float32(2.0) * lim / float32(k - 1)) if k > 1 else float32(0.0)
    z = x / sigma
    return math.exp(-(z * z))


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
