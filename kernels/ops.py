"""The kernel's op table: every op a sample's program can hold, declared once.

A sample's program is a list of op ids (`order`, -1 ends it) and one row of arguments a
step (`args`, ARGS floats). Everything that needs to know something of an op reads it
here: its id (its place in OPS), how many argument floats it reads, whether it is a
barrier (it reads more of the image than its own pixel, so the image before it must be
complete: the CUDA kernel ends a segment there), the statistic of the whole image it
needs (the CUDA kernel reduces it at the end of the segment before), and whether it uses
the sample's two aux images (AugMix). The CUDA kernels and the CPU twin (`_pixel`,
`fused`), the launchers' buffer sizing (`fused.hist_shape`/`aux_shape` from the
program) and the Python draws (Compose's encoding refuses a step that emits more
arguments than its op reads) all read this table; the native draws
write geometry only. Masks are ints (bit `id`), so a compiled kernel tests an op with a
shift and no range of ids.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Op(NamedTuple):
    name: str
    args: int              # argument floats it reads from its step's row
    barrier: bool = False  # reads more than its own pixel: the image before it complete
    statistic: str = ""    # what a barrier needs of the whole image: MEAN, RANGE, HISTOGRAM, or none
    aux: bool = False      # uses the sample's aux images (the original and the mix: AugMix)
    pixel: bool = False    # one factor, one pixel: `_pixel.op_<name>(r, g, b, factor, mean)`, dispatched
    #                        by the generated `_pixel.apply_op` (kernels/opgen.py)
    doc: str = ""


MEAN = "grey mean"             # the image's grey mean (float64 sum)
RANGE = "channel range"        # each channel's min and max
HISTOGRAM = "channel histogram"  # each channel's 256-bin histogram

# In id order. ColorJitter's four come first, in torchvision's fn_idx convention.
OPS: tuple[Op, ...] = (
    Op("BRIGHTNESS", 1, pixel=True, doc="the factor"),
    Op("CONTRAST", 2, True, MEAN, pixel=True, doc="the factor; the grey mean's scale less 1 (0; for an image of "
                                                "one channel, kept as three equal ones, 1 / (0.2989 + 0.587 + "
                                                "0.114) - 1: the mean of that channel, as torchvision takes it); "
                                                "blends with the image's grey mean"),
    Op("SATURATION", 1, pixel=True, doc="the factor"),
    Op("HUE", 1, pixel=True, doc="the shift, in turns"),
    Op("GRAYSCALE", 0, pixel=True),
    Op("SOLARIZE", 1, pixel=True, doc="the threshold, on the float scale (levels / 255)"),
    Op("INVERT", 0, pixel=True),
    Op("POSTERIZE", 1, pixel=True, doc="the levels kept, 2 ** bits"),
    Op("AUTOCONTRAST", 0, True, RANGE),
    Op("EQUALIZE", 0, True, HISTOGRAM),
    Op("SHARPNESS", 1, True, doc="the factor; reads a 3x3 neighbourhood"),
    Op("BLUR_X", 2, True, doc="Gaussian blur along x: kernel size, sigma; reads a row's neighbours"),
    Op("AFFINE", 10, True, doc="torchvision's theta divided by (w/2, h/2) (6), the interpolation (0 nearest, "
                               "1 bilinear, 2: an integer pixel map, source = (a0 x + a1 y + a2, a3 x + a4 y + "
                               "a5); 3, 4: PIL's Image.transform(AFFINE) bilinear, bicubic: a0..a5 PIL's "
                               "matrix), the fill r, g, b (NaN: none, zeros outside); reads any pixel"),
    Op("BLUR_Y", 2, True, doc="the same along y (a GaussianBlur is BLUR_X then BLUR_Y)"),
    Op("MIX_SAVE", 1, aux=True, doc="AugMix: keep the image (the original), start the mix as m0 * image"),
    Op("MIX_ADD", 1, aux=True, doc="AugMix: mix += w * image (a chain's result); the image is the original again"),
    Op("MIX_END", 0, aux=True, doc="AugMix: the image is the mix"),
    Op("SOLARIZE_ADD", 1, pixel=True, doc="timm's SolarizeAdd: a level under 128 gets `add` (float scale), capped at 1"),
    Op("PERSPECTIVE", 12, True, doc="torchvision's perspective: its coefficients c0..c5 (a0..a5), the "
                                    "interpolation (0 nearest, 1 bilinear), the fill r, g, b as AFFINE's, then c6, "
                                    "c7 (a10, a11): source = ((c0 x + c1 y + c2), (c3 x + c4 y + c5)) / (c6 x + "
                                    "c7 y + 1) at pixel centres; reads any pixel"),
    Op("PERMUTE_CHANNELS", 1, pixel=True, doc="torchvision's permute_channels: output channel i is input channel p[i], the "
                                  "permutation as p[0] + 3 p[1] + 9 p[2]"),
    Op("GAUSSIAN_NOISE", 6, doc="torchvision's gaussian_noise: mean, sigma, clip (1: to [0, 1]), the sample's "
                                "32-bit noise key as two 16-bit halves (each pixel's normal value a hash of the "
                                "key, its place and channel), one channel (1: every channel gets the first's "
                                "noise, an image of one channel kept as three equal ones)"),
)

ID: dict[str, int] = {op.name: i for i, op in enumerate(OPS)}
NUM_OPS = len(OPS)
ARGS = max(op.args for op in OPS)  # floats per program step: the widest op's
OPS_ARGS: tuple[int, ...] = tuple(op.args for op in OPS)


def _mask(pred) -> int:
    return sum(1 << i for i, op in enumerate(OPS) if pred(op))


BARRIER_MASK = _mask(lambda op: op.barrier)
MEAN_MASK = _mask(lambda op: op.statistic == MEAN)
RANGE_MASK = _mask(lambda op: op.statistic == RANGE)
HISTOGRAM_MASK = _mask(lambda op: op.statistic == HISTOGRAM)
AUX_MASK = _mask(lambda op: op.aux)

# <generated: constants>
BRIGHTNESS = 0
CONTRAST = 1
SATURATION = 2
HUE = 3
GRAYSCALE = 4
SOLARIZE = 5
INVERT = 6
POSTERIZE = 7
AUTOCONTRAST = 8
EQUALIZE = 9
SHARPNESS = 10
BLUR_X = 11
AFFINE = 12
BLUR_Y = 13
MIX_SAVE = 14
MIX_ADD = 15
MIX_END = 16
SOLARIZE_ADD = 17
PERSPECTIVE = 18
PERMUTE_CHANNELS = 19
GAUSSIAN_NOISE = 20
# </generated: constants>

# ColorJitter's operations by torchvision's fn_idx (the order its draws give, native and
# Python) -> the op ids
JITTER_OPS = (BRIGHTNESS, CONTRAST, SATURATION, HUE)


# op id + 1 -> the op's bit (index 0: no op)
_OP_BITS = np.array([0] + [1 << k for k in range(NUM_OPS)], np.int64)


def op_bits(order: np.ndarray) -> np.ndarray:
    """For each entry of `order` (op ids, -1 for none), its op's bit (0 for none; an id
    past the last reads as the last): `op_bits(order) & mask` asks of a whole mask at once."""
    return _OP_BITS.take(np.asarray(order).astype(np.int64) + 1, mode="clip")


def has(order: np.ndarray, mask: int) -> np.ndarray:
    """For each entry of `order` (op ids, -1 for none), whether its op is in `mask`."""
    return (op_bits(order) & mask) != 0

