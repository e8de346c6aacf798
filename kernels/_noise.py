"""GaussianNoise's numbers, for both targets: each pixel's standard normal value a function
of the sample's key and the pixel's place and channel. Compiled with kernels/_pixel.py's
helpers (_compile.HELPERS reads both modules); CUDA swaps cos2pi for libdevice's cospif."""
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
    u1 = float32((h1 >> uint64(8)) + uint64(1)) * float32(1.0 / 16777216.0)  # (0, 1]
    u2 = float32(h2 >> uint64(8)) * float32(1.0 / 16777216.0)  # [0, 1)
    return float32(math.sqrt(float32(-2.0) * math.log(u1))) * cos2pi(u2)


def cos2pi(u):
    """cos(2 pi u) for u in [0, 1) (CUDA: libdevice's cospif, which needs no reduction of a
    large argument: cosf's slow path would cost the kernels registers)."""
    return float32(math.cos(float32(6.2831855) * u))


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
