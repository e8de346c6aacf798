"""The fused kernel's data layout, shared by both targets: the geometry columns of a
sample, the per-sample step arguments, the statistics and the buffers' shapes
(fused.py's docstring says what each array holds)."""
from __future__ import annotations

import numpy as np

from ._pixel import ARGS
from .ops import BARRIER_MASK, has

OFFSET, H, W, SY, SX, SC, TOP, LEFT, BH, BW, VH, VW, OY, OX, FLIP, VFLIP, FILTER, FILLR, FILLG, FILLB, OH, OW, PAD = range(23)
# FILTER: the resample's filter (0 bilinear, 1 bicubic, 2 nearest-exact, 3 nearest, 4 PIL's nearest); FILL*: the
# padding's colour, levels; OH, OW: the sample's own output size, in the top-left corner of the batch's (a batch of
# images of their own sizes, zeros around each: Compose(ragged=True)); 0: the batch's; PAD: what the padding
# (outside the resized frame) reads: 0 the fill, 1 the edge, 2 a reflection, 3 a symmetric one (torch's pad modes)
GEOM = 23
THREADS_PER_BLOCK = (16, 16)  # 256 threads: one histogram bin each (equalize)
STATS = 7  # per sample and barrier level: grey sum, min r g b, max r g b (float64)
_SUM_TYPE = np.float64


def step_args(factors: np.ndarray, order: np.ndarray) -> np.ndarray:
    """args [N, K, ARGS] from the older factors-by-op-id form: step k's factor is
    factors[n, order[n, k]]."""
    n, k = order.shape
    args = np.zeros((n, k, ARGS), np.float32)
    rows = np.arange(n)[:, None]
    args[:, :, 0] = factors[rows, np.clip(order, 0, factors.shape[1] - 1)]
    return args


def barrier_levels(order: np.ndarray) -> int:
    """The most barrier ops any sample of the batch has: the segment launches it needs."""
    if order.size == 0:
        return 0
    return int(has(order, BARRIER_MASK).sum(axis=1).max())


GEOM_NAMES = dict(OFFSET=OFFSET, H=H, W=W, SY=SY, SX=SX, SC=SC, TOP=TOP, LEFT=LEFT, BH=BH, BW=BW, VH=VH,
                  VW=VW, OY=OY, OX=OX, FLIP=FLIP, VFLIP=VFLIP, FILTER=FILTER, FILLR=FILLR, FILLG=FILLG, FILLB=FILLB, OH=OH,
                  OW=OW, PAD=PAD)


def own_sizes(geom: np.ndarray, oh: int, ow: int) -> tuple[np.ndarray, bool]:
    """`geom` with every row's OH, OW set (the batch's (oh, ow) where a row leaves them 0:
    what the CUDA kernels read), and whether a sample is smaller than the batch (the
    segment kernel's variant that reads them). A copy only where a row is changed."""
    own = geom[:, OH] > 0
    ragged = bool(((geom[own, OH] != oh) | (geom[own, OW] != ow)).any()) if own.any() else False
    if own.all():
        return geom, ragged
    geom = geom.copy()
    geom[~own, OH] = oh
    geom[~own, OW] = ow
    return geom, ragged


def launch_geometry(n: int, oh: int, ow: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    bx, by = THREADS_PER_BLOCK
    return ((ow + bx - 1) // bx, (oh + by - 1) // by, n), THREADS_PER_BLOCK


def stats_init(n: int, levels: int) -> np.ndarray:
    """The statistics' starting values, float64 [N, levels, STATS]: sums 0, mins above
    any value (2), maxes below (-2)."""
    st = np.zeros((n, max(levels, 1), STATS), _SUM_TYPE)
    st[:, :, 1:4] = 2.0
    st[:, :, 4:7] = -2.0
    return st


def scratch_shape(n: int, levels: int, oh: int, ow: int) -> tuple[int, ...]:
    """The float32 scratch a batch with `levels` barrier levels needs (1 or 2 images per
    sample: kernel s writes scratch[s % 2] for s < levels)."""
    return (max(1, min(levels, 2)), n if levels else 1, 3, oh if levels else 1, ow if levels else 1)


def aux_shape(n: int, mix: bool, oh: int, ow: int) -> tuple[int, ...]:
    """AugMix's two images per sample (the original, the mix), float32; a stand-in
    without AugMix."""
    return (2, n, 3, oh, ow) if mix else (2, 1, 3, 1, 1)


def hist_shape(n: int, levels: int, equalize: bool) -> tuple[int, ...]:
    return (n, levels, 3, 256) if equalize and levels else (1, 1, 3, 256)
