"""GaussianNoise's numbers, for both targets: each pixel's standard normal value a function
of the sample's key and the pixel's place and channel. Compiled with kernels/_pixel.py's
helpers (_compile.HELPERS reads both modules)."""
from __future__ import annotations

import math

from numpy import float32, int32, uint64


# GaussianNoise: each pixel's normal value is a function of the sample's key and the
# pixel's place and channel (the same on both targets, whatever runs where): 32-bit hashes
# (Wellons' lowbias32, a bijection; uint64 holding 32 bits, masked after each product, so
# Python ints, numpy scalars and both compiled targets agree) give two uniforms, and
# Box-Muller a standard normal value.

def hash32(z):
    m = uint64(0xFFFFFFFF)
    z = z ^ (z >> uint64(16))
    z = (z * uint64(0x7FEB352D)) & m
    z = z ^ (z >> uint64(15))
    z = (z * uint64(0x846CA68B)) & m
    return z ^ (z >> uint64(16))


def noise_key(lo, hi):
    """The 32-bit key from its two 16-bit halves (argument floats)."""
    return uint64(int32(lo)) | (uint64(int32(hi)) << uint64(16))


def noise_normal(key, y, x, c):
    """Standard normal, for pixel (y, x) and channel c of the sample keyed `key`."""
    m = uint64(0xFFFFFFFF)
    base = hash32((hash32(((uint64(y) << uint64(16)) | uint64(x)) & m) ^ key) & m)
    h1 = hash32((base + uint64(2 * c + 1) * uint64(0x9E3779B9)) & m)
    h2 = hash32((base + uint64(2 * c + 2) * uint64(0x9E3779B9)) & m)
    k1 = (h1 >> uint64(8)) + uint64(1)  # u1 = k1 / 2**24 in (0, 1]
    u2 = float32(h2 >> uint64(8)) * float32(1.0 / 16777216.0)  # [0, 1)
    return float32(math.sqrt(float32(-2.0) * log_ratio24(k1))) * cos2pi(u2)


# Box-Muller's log and cosine in plain float32 arithmetic (selects, products, one division):
# the CPU twin's noise loop then vectorizes (a call to libm's logf or cosf in it kept it
# scalar: 1.58 ms -> 0.25 ms a 224x224 image, AMD EPYC Zen 5), and both targets compute
# the same formula. Errors against float64's, over every input they get: log_ratio24 2.5
# float32 ulps at most, cos2pi 2.0e-7 (the float32 rounding of its argument, as cosf of
# a float32 2 pi u had): tests/test_colour_ops.py.

def log_ratio24(k):
    """log(k / 2**24) for an integer 1 <= k <= 2**24 (exact as float32): k = f 2**e with
    f in [sqrt(1/2), sqrt(2)) by halvings (selects), then log f = 2 atanh(s), s = (f - 1)
    / (f + 1), |s| < 0.172, by its series to s**11."""
    f = float32(k)
    e = float32(-24.0)
    big = f >= float32(65536.0)
    f = f * float32(1.0 / 65536.0) if big else f
    e = e + float32(16.0) if big else e
    big = f >= float32(256.0)
    f = f * float32(1.0 / 256.0) if big else f
    e = e + float32(8.0) if big else e
    big = f >= float32(16.0)
    f = f * float32(1.0 / 16.0) if big else f
    e = e + float32(4.0) if big else e
    big = f >= float32(4.0)
    f = f * float32(0.25) if big else f
    e = e + float32(2.0) if big else e
    big = f >= float32(2.0)
    f = f * float32(0.5) if big else f
    e = e + float32(1.0) if big else e
    big = f >= float32(1.4142135)  # f in [1, 2): to [sqrt(1/2), sqrt(2))
    f = f * float32(0.5) if big else f
    e = e + float32(1.0) if big else e
    s = (f - float32(1.0)) / (f + float32(1.0))
    z = s * s
    p = float32(1.0 / 11.0)
    p = p * z + float32(1.0 / 9.0)
    p = p * z + float32(1.0 / 7.0)
    p = p * z + float32(1.0 / 5.0)
    p = p * z + float32(1.0 / 3.0)
    p = p * z + float32(1.0)
    return e * float32(0.6931472) + float32(2.0) * s * p


def cos2pi(u):
    """cos(2 pi u) for u in [0, 1): folded to t = 2 pi min(a, 1/2 - a), a = |u - round(u)|,
    in [0, pi/2] (the sign from which half a lies in), then its Taylor series to t**14."""
    v = u - float32(1.0) if u >= float32(0.5) else u
    a = -v if v < float32(0.0) else v  # [0, 1/2]
    far = a > float32(0.25)
    t = (float32(0.5) - a if far else a) * float32(6.2831855)
    z = t * t
    p = float32(-1.0 / 87178291200.0)
    p = p * z + float32(1.0 / 479001600.0)
    p = p * z + float32(-1.0 / 3628800.0)
    p = p * z + float32(1.0 / 40320.0)
    p = p * z + float32(-1.0 / 720.0)
    p = p * z + float32(1.0 / 24.0)
    p = p * z + float32(-0.5)
    p = p * z + float32(1.0)
    return -p if far else p


def add_noise(v, mean, sigma, clip, key, y, x, c):
    """torchvision's gaussian_noise: v + (mean + N(0, 1) * sigma), clamped to [0, 1]
    when `clip` (1.0)."""
    out = v + (mean + noise_normal(key, y, x, c) * sigma)
    if clip > float32(0.5):  # (_pixel.clamp01's steps)
        if out < float32(0.0):
            return float32(0.0)
        if out > float32(1.0):
            return float32(1.0)
    return out
