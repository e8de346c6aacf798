"""The fused augment kernel: crop + antialiased resize + flip, then each sample's program
of ops (ColorJitter's four, grayscale, solarize, invert, posterize, autocontrast, equalize,
sharpness, Gaussian blur, affine warps) + Normalize.

Data layout, shared by both targets:
    src      uint8 [total]     every image of the batch, packed; sample n starts at
                               geom[n, OFFSET] and pixel (y, x, c) is at
                               offset + y*SY + x*SX + c*SC (HWC or CHW, by strides)
    geom     int64 [N, GEOM]   per-sample geometry (columns named below)
    args     float32 [N, K, ARGS]  step k's arguments (the op table, kernels/ops.py, says what they mean)
    order    int32 [N, K]      op ids in application order, -1 after the last
    mean,std float32 [3]       Normalize
    out      [N, 3, H, W]      float32/float16/uint8; any strides (NHWC is a view)
(`factors` float32 [N, NUM_OPS] by op id, the older form, is still taken: see step_args.)

Geometry: the box (TOP, LEFT, BH, BW) of the source is resized to (VH, VW) and the
output is the window at (OY, OX) of that resized image (zeros outside it, as
torchvision's padding CenterCrop): RandomResizedCrop is box=crop, V=out size, O=0;
Resize+CenterCrop is box=whole image, V=resized size, O=crop offset. FLIP mirrors x,
VFLIP mirrors y (of the output: torchvision flips the transformed image).

A program is cut at its barrier ops (the op table's barrier flag: they read the whole
image or a neighbourhood of the image before them). On CUDA, kernel 1 resamples and runs the ops
up to the first barrier; kernel 2, launched once per barrier level s = 1, 2, ..., runs
barrier s and the per-pixel ops after it. Between them the image sits in a float32
scratch (two, alternating) and the statistic the next barrier needs (grey sum, channel
min and max, histograms: the op table's statistic) is reduced per block and added atomically. A sample whose
program ends in a launch writes its output there; later launches skip it.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any

import numpy as np

from . import _compile
from ._pixel import (AFFINE, ARGS, AUTOCONTRAST, BLUR_X, BLUR_Y, CONTRAST, EQUALIZE, MIX_ADD, MIX_END, MIX_SAVE,
                     PERSPECTIVE)
from .ops import AUX_MASK, BARRIER_MASK, HISTOGRAM_MASK, MEAN_MASK, RANGE_MASK, has

OFFSET, H, W, SY, SX, SC, TOP, LEFT, BH, BW, VH, VW, OY, OX, FLIP, VFLIP, CUBIC, FILLR, FILLG, FILLB = range(20)
GEOM = 20  # CUBIC: the sample resamples bicubic (else bilinear); FILL*: the padding's colour, levels
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


# ---------------------------------------------------------------------------------------
# CUDA: one thread per output pixel. Bodies are plain functions compiled by cuda_kernels().

def _write_out(out, n, y, x, r, g, b, mean, std, normalize, to_uint8):
    out[n, 0, y, x] = encode_output(r, 0, mean, std, normalize, to_uint8)
    out[n, 1, y, x] = encode_output(g, 1, mean, std, normalize, to_uint8)
    out[n, 2, y, x] = encode_output(b, 2, mean, std, normalize, to_uint8)


def _block_reduce(op, r, g, b, active, t, partial, red, hs, stats, hist, n, level):
    """The statistic barrier `op` will need (its op table entry says which), of this
    block's pixels, added into stats[n, level] or hist[n, level]. Every thread of the block
    calls it (it syncs)."""
    if (MEAN_MASK >> op) & 1:
        partial[t] = float64(gray(r, g, b)) if active else float64(0.0)
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                partial[t] += partial[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            cuda.atomic.add(stats, (n, level, 0), partial[0])
    elif (RANGE_MASK >> op) & 1:
        big = float32(2.0)
        red[t] = r if active else big
        red[256 + t] = g if active else big
        red[512 + t] = b if active else big
        red[768 + t] = r if active else -big
        red[1024 + t] = g if active else -big
        red[1280 + t] = b if active else -big
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                for c in range(3):
                    red[c * 256 + t] = min(red[c * 256 + t], red[c * 256 + t + step])
                    red[768 + c * 256 + t] = max(red[768 + c * 256 + t], red[768 + c * 256 + t + step])
            cuda.syncthreads()
            step //= 2
        if t == 0:
            for c in range(3):
                cuda.atomic.min(stats, (n, level, 1 + c), float64(red[c * 256]))
                cuda.atomic.max(stats, (n, level, 4 + c), float64(red[768 + c * 256]))
    elif (HISTOGRAM_MASK >> op) & 1:
        for c in range(3):
            hs[c * 256 + t] = 0
        cuda.syncthreads()
        if active:
            cuda.atomic.add(hs, quantize(r), 1)
            cuda.atomic.add(hs, 256 + quantize(g), 1)
            cuda.atomic.add(hs, 512 + quantize(b), 1)
        cuda.syncthreads()
        for c in range(3):
            v = hs[c * 256 + t]
            if v != 0:
                cuda.atomic.add(hist, (n, level, c, t), v)


def _resample_body(src, geom, args, order, antialias, scratch, stats, hist, aux, mean, std, normalize, to_uint8,
                   out):
    """Kernel 1. Grid (ceil(W/16), ceil(H/16), N), block (16, 16). The resized pixel and
    the ops before the sample's first barrier; then its output (no barrier), or
    scratch[0] and the statistic of that barrier."""
    partial = cuda.shared.array(256, float64)
    red = cuda.shared.array(1536, float32)
    hs = cuda.shared.array(768, int32)
    n = cuda.blockIdx.z
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    x = cuda.blockIdx.x * cuda.blockDim.x + tx
    y = cuda.blockIdx.y * cuda.blockDim.y + ty
    oh = out.shape[2]
    ow = out.shape[3]
    active = x < ow and y < oh
    g = geom[n]
    r = float32(0.0)
    gg = float32(0.0)
    b = float32(0.0)
    if active:
        xs = ow - 1 - x if g[FLIP] != 0 else x
        ys = oh - 1 - y if g[VFLIP] != 0 else y
        vy = ys + g[OY]
        vx = xs + g[OX]
        if vy >= 0 and vy < g[VH] and vx >= 0 and vx < g[VW]:
            bh = g[BH]
            bw = g[BW]
            cubic = g[CUBIC] != 0
            cy, iy, ylo, yhi = filter_window(vy, float32(bh) / float32(g[VH]), bh, antialias, cubic)
            cx, ix, xlo, xhi = filter_window(vx, float32(bw) / float32(g[VW]), bw, antialias, cubic)
            wysum = float32(0.0)
            for j in range(ylo, yhi):
                wysum += filter_weight(j, cy, iy, cubic)
            wxsum = float32(0.0)
            for i in range(xlo, xhi):
                wxsum += filter_weight(i, cx, ix, cubic)
            base = g[OFFSET] + g[TOP] * g[SY] + g[LEFT] * g[SX]
            for j in range(ylo, yhi):
                wy = filter_weight(j, cy, iy, cubic) / wysum
                ar = float32(0.0)
                ag = float32(0.0)
                ab = float32(0.0)
                for i in range(xlo, xhi):
                    wx = filter_weight(i, cx, ix, cubic) / wxsum
                    p = base + j * g[SY] + i * g[SX]
                    ar += wx * float32(src[p])
                    ag += wx * float32(src[p + g[SC]])
                    ab += wx * float32(src[p + 2 * g[SC]])
                r += wy * ar
                gg += wy * ag
                b += wy * ab
            r = r / float32(255.0)
            gg = gg / float32(255.0)
            b = b / float32(255.0)
            if cubic:  # the cubic overshoots; a uint8 image resized stays in its range
                r = clamp01(r)
                gg = clamp01(gg)
                b = clamp01(b)
        else:  # padding (outside the resized frame): the fill's colour
            r = float32(g[FILLR]) * float32(1.0 / 255.0)
            gg = float32(g[FILLG]) * float32(1.0 / 255.0)
            b = float32(g[FILLB]) * float32(1.0 / 255.0)
    end = barrier_step(order[n], 1)
    if active:
        r, gg, b = apply_ops(r, gg, b, order[n], args[n], 0, end, aux, n, y, x)
    if end >= order.shape[1] or order[n, end] < 0:  # the whole program ran: the output
        if active:
            _write_out(out, n, y, x, r, gg, b, mean, std, normalize, to_uint8)
        return
    if active:
        scratch[0, n, 0, y, x] = r
        scratch[0, n, 1, y, x] = gg
        scratch[0, n, 2, y, x] = b
    _block_reduce(order[n, end], r, gg, b, active, ty * 16 + tx, partial, red, hs, stats, hist, n, 0)


def _barrier_pixel(op, a, img, y, x, oh, ow, stats, n, level, lut, wts):
    """Barrier op `op` (args a) at output pixel (y, x) of img [3, oh, ow], the image
    before it, with the statistic of its level (stats, or lut: the equalize table as
    floats, wts: the blur's normalized weights and, at MAX_BLUR, its first tap)."""
    if op == CONTRAST:
        m = float32(stats[n, level, 0] / float64(oh * ow))
        return blend(img[0, y, x], m, a[0]), blend(img[1, y, x], m, a[0]), blend(img[2, y, x], m, a[0])
    if op == AUTOCONTRAST:
        lr, sr = autocontrast_bounds(float32(stats[n, level, 1]), float32(stats[n, level, 4]))
        lg, sg = autocontrast_bounds(float32(stats[n, level, 2]), float32(stats[n, level, 5]))
        lb, sb = autocontrast_bounds(float32(stats[n, level, 3]), float32(stats[n, level, 6]))
        return autocontrast(img[0, y, x], lr, sr), autocontrast(img[1, y, x], lg, sg), autocontrast(img[2, y, x], lb, sb)
    if op == EQUALIZE:
        return lut[quantize(img[0, y, x])], lut[256 + quantize(img[1, y, x])], lut[512 + quantize(img[2, y, x])]
    if op == SHARPNESS:
        if y == 0 or x == 0 or y == oh - 1 or x == ow - 1:
            return clamp01(img[0, y, x]), clamp01(img[1, y, x]), clamp01(img[2, y, x])
        return sharpen_channel(img, 0, y, x, a[0]), sharpen_channel(img, 1, y, x, a[0]), \
            sharpen_channel(img, 2, y, x, a[0])
    if op == BLUR_X or op == BLUR_Y:
        size = int32(a[0])
        first = int32(wts[MAX_BLUR])  # (blur_first, kept after the weights)
        half = size // 2
        r = float32(0.0)
        g = float32(0.0)
        b = float32(0.0)
        for i in range(first, size - first):
            w = wts[i]
            yy = reflect(y + i - half, oh) if op == BLUR_Y else y
            xx = reflect(x + i - half, ow) if op == BLUR_X else x
            r += w * img[0, yy, xx]
            g += w * img[1, yy, xx]
            b += w * img[2, yy, xx]
        return r, g, b
    if op == AFFINE:
        return affine_pixel(img, y, x, oh, ow, a)
    if op == PERSPECTIVE:
        return perspective_pixel(img, y, x, oh, ow, a)
    return img[0, y, x], img[1, y, x], img[2, y, x]  # (no barrier op of the table comes here: tests/test_op_table)


def _segment_body(level, scratch, args, order, stats, hist, aux, mean, std, normalize, to_uint8, out):
    """Kernel 2, for barrier level `level` >= 1. Same grid. Samples with that many
    barriers: the barrier (reading scratch[(level - 1) % 2]) and the per-pixel ops up to
    the next one; then the output, or scratch[level % 2] and the next statistic."""
    partial = cuda.shared.array(256, float64)
    red = cuda.shared.array(1536, float32)
    hs = cuda.shared.array(768, int32)
    lut = cuda.shared.array(768, float32)
    rest = cuda.shared.array(3, int32)  # per channel: the pixels outside its top histogram bin
    wts = cuda.shared.array(64, float32)  # MAX_BLUR weights, then the first tap that counts
    n = cuda.blockIdx.z
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    t = ty * 16 + tx
    x = cuda.blockIdx.x * cuda.blockDim.x + tx
    y = cuda.blockIdx.y * cuda.blockDim.y + ty
    oh = out.shape[2]
    ow = out.shape[3]
    active = x < ow and y < oh
    k = barrier_step(order[n], level)
    if k >= order.shape[1] or order[n, k] < 0:  # this sample's program is done
        return
    op = order[n, k]
    a = args[n, k]
    if op == EQUALIZE:  # the table of each channel, from its histogram (a scan in shared memory)
        for c in range(3):
            hs[c * 256 + t] = hist[n, level - 1, c, t]
        cuda.syncthreads()
        for c in range(3):  # inclusive prefix sums, in place (Hillis-Steele)
            step = 1
            while step < 256:
                v = hs[c * 256 + t - step] if t >= step else int32(0)
                cuda.syncthreads()
                hs[c * 256 + t] += v
                cuda.syncthreads()
                step *= 2
        total = int32(oh * ow)
        for c in range(3):  # the last non-empty bin is where the sums first reach the total
            before = hs[c * 256 + t - 1] if t > 0 else int32(0)
            if hs[c * 256 + t] == total and before < total:
                rest[c] = total - (hs[c * 256 + t] - before)
        cuda.syncthreads()
        for c in range(3):
            step = rest[c] // 255
            before = hs[c * 256 + t - 1] if t > 0 else int32(0)
            level_ = equalize_level(t, before, max(step, int32(1))) if step > 0 else int32(t)
            lut[c * 256 + t] = float32(level_) * float32(1.0 / 255.0)
        cuda.syncthreads()
    if op == BLUR_X or op == BLUR_Y:  # the normalized weights, then where they start to count
        if t == 0:
            size = int32(a[0])
            total = float32(0.0)
            for i in range(size):
                w = float32(gauss_weight(i, size, a[1]))
                wts[i] = w
                total += w
            for i in range(size):
                wts[i] = wts[i] / total
            wts[MAX_BLUR] = float32(blur_first(wts, size))
        cuda.syncthreads()
    r = float32(0.0)
    gg = float32(0.0)
    b = float32(0.0)
    if active:
        r, gg, b = _barrier_pixel(op, a, scratch[(level - 1) % 2, n], y, x, oh, ow, stats, n, level - 1, lut, wts)
    end = barrier_step(order[n], level + 1)
    if active:
        r, gg, b = apply_ops(r, gg, b, order[n], args[n], k + 1, end, aux, n, y, x)
    if end >= order.shape[1] or order[n, end] < 0:
        if active:
            _write_out(out, n, y, x, r, gg, b, mean, std, normalize, to_uint8)
        return
    if active:
        scratch[level % 2, n, 0, y, x] = r
        scratch[level % 2, n, 1, y, x] = gg
        scratch[level % 2, n, 2, y, x] = b
    _block_reduce(order[n, end], r, gg, b, active, t, partial, red, hs, stats, hist, n, level)


@functools.cache
def cuda_kernels() -> tuple:
    """(resample_kernel, segment_kernel), compiled on first use for each signature, and
    kept on disk (_compile.cuda_cache) so other processes and ranks load them."""
    from numba import cuda

    ns = _cuda_namespace()
    cache = _compile.cuda_cache()
    return cuda.jit(ns["_resample_body"], cache=cache), cuda.jit(ns["_segment_body"], cache=cache)


def _cuda_namespace() -> dict:
    """The kernel bodies and their device helpers, rebound for CUDA."""
    from numba import cuda, float32, float64, int32

    ns = dict(_compile.cuda_namespace())
    ns.update(GEOM_NAMES, float32=float32, float64=float64, int32=int32)
    helpers: tuple = (_write_out, _block_reduce, _barrier_pixel)
    for fn in helpers:
        ns[fn.__name__] = cuda.jit(device=True, inline="always")(_compile.rebind(fn, ns))
    bodies: tuple = (_resample_body, _segment_body)
    for fn in bodies:
        ns[fn.__name__] = _compile.rebind(fn, ns)
    return ns


GEOM_NAMES = dict(OFFSET=OFFSET, H=H, W=W, SY=SY, SX=SX, SC=SC, TOP=TOP, LEFT=LEFT, BH=BH, BW=BW, VH=VH,
                  VW=VW, OY=OY, OX=OX, FLIP=FLIP, VFLIP=VFLIP, CUBIC=CUBIC, FILLR=FILLR, FILLG=FILLG, FILLB=FILLB)


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


def fused_cuda(src, geom, args, order, mean, std, out, *, normalize: bool, antialias: bool = True,
               stream=0, scratch=None, stats=None, hist=None, aux=None, levels: int | None = None) -> None:
    """Launches the kernels on `stream` (numba stream, or 0). Arguments are device
    arrays or objects with __cuda_array_interface__ (torch CUDA tensors); nothing is
    synchronized here. `args` may be the older factors [N, NUM_OPS] (host arrays only).
    scratch (float32, scratch_shape), stats (stats_init's values) and hist (int32 zeros,
    hist_shape) and aux (float32, aux_shape) may be given as device arrays to reuse
    buffers; `levels`
    (barrier_levels(order)) saves reading a device `order` back."""
    from numba import cuda

    n, _, oh, ow = out.shape
    if n == 0:
        return
    if isinstance(args, np.ndarray) and args.ndim == 2:
        args = step_args(args, np.asarray(order))
    host_order = order if isinstance(order, np.ndarray) or (levels is not None and hist is not None) else \
        order.copy_to_host()
    if levels is None:
        levels = barrier_levels(host_order)
    resample, segment = cuda_kernels()
    if scratch is None:
        scratch = cuda.device_array(scratch_shape(n, levels, oh, ow), dtype=np.float32, stream=stream)
    if stats is None:
        stats = cuda.to_device(stats_init(n, levels), stream=stream)
    if hist is None:
        hist = cuda.to_device(np.zeros(hist_shape(n, levels, bool(has(host_order, HISTOGRAM_MASK).any())),
                                       np.int32),
                              stream=stream)
    if aux is None:
        aux = cuda.device_array(aux_shape(n, bool(has(host_order, AUX_MASK).any()), oh, ow),
                                dtype=np.float32, stream=stream)
    to_uint8 = np.dtype(str(out.dtype).replace("torch.", "")) == np.uint8
    grid, block = launch_geometry(n, oh, ow)
    resample[grid, block, stream](src, geom, args, order, antialias, scratch, stats, hist, aux, mean, std, normalize,
                                  to_uint8, out)
    for level in range(1, levels + 1):
        segment[grid, block, stream](level, scratch, args, order, stats, hist, aux, mean, std, normalize, to_uint8,
                                     out)


# ---------------------------------------------------------------------------------------
# CPU twin: the same helpers, in separable passes arranged so that every inner loop runs
# over contiguous memory and every ColorJitter loop over unit-stride channel rows:
#   vertical    source rows -> vert [oh, bw*3]    (interleaved, as the source)
#   transpose   vert -> vt [bw*3, oh]             (row 3*i + c: box column i, channel c)
#   horizontal  vt -> px [ow*3, oh]               (row 3*x + c: output column x, channel c)
#   ColorJitter op by op over px (r, g, b of column x are rows 3x, 3x+1, 3x+2)
#   transpose   px -> out[c] [oh, ow], one channel at a time, applying Normalize on the
#               way (the uint8 scaling is a pass of its own before it)
# The transposes are 8x8 vector shuffles (_simd), the output ones with non-temporal
# stores where aligned. One sample at a time, GIL released.

def _axis_weights(out_size, vsize, voff, box, flip, antialias, cubic):
    """Per output index: first source index, tap count, and normalized weights; and a
    validity mask for indices that fall outside the resized frame (padding)."""
    scale = float32(box) / float32(vsize)
    first = np.zeros(out_size, np.int64)
    count = np.zeros(out_size, np.int64)
    valid = np.zeros(out_size, np.bool_)
    taps = 1
    for o in range(out_size):
        v = (out_size - 1 - o if flip else o) + voff
        if v >= 0 and v < vsize:
            c, inv, lo, hi = filter_window(v, scale, box, antialias, cubic)
            first[o] = lo
            count[o] = hi - lo
            valid[o] = True
            taps = max(taps, hi - lo)
    weights = np.zeros((out_size, taps), np.float32)
    for o in range(out_size):
        if valid[o]:
            v = (out_size - 1 - o if flip else o) + voff
            c, inv, lo, hi = filter_window(v, scale, box, antialias, cubic)
            total = float32(0.0)
            if cubic:  # (one loop per filter: the bilinear one as it was, with no branch in it)
                for j in range(lo, hi):
                    total += cubic_weight(j, c, inv)
                for j in range(lo, hi):
                    weights[o, j - lo] = cubic_weight(j, c, inv) / total
            else:
                for j in range(lo, hi):
                    total += tri_weight(j, c, inv)
                for j in range(lo, hi):
                    weights[o, j - lo] = tri_weight(j, c, inv) / total
    return first, count, weights, valid


# Index arithmetic below is cast to unsigned (U) or goes through per-row slices: numba
# checks signed indices for negative wraparound, and that check stops vectorization.

def _op_pass(px, ow, op, factor, mean):
    """One ColorJitter op in place over px [ow*3, n] (channel rows, see above); one
    loop per op, so each loop has a fixed body the compiler vectorizes."""
    n = px.shape[1]
    if op == BRIGHTNESS or op == CONTRAST or op == SOLARIZE or op == INVERT or op == POSTERIZE or op == SOLARIZE_ADD:
        flat = px.reshape(ow * 3 * n)
        if op == SOLARIZE_ADD:
            for i in range(ow * 3 * n):
                flat[i] = solarize_add(flat[i], factor)
        elif op == BRIGHTNESS:
            for i in range(ow * 3 * n):
                flat[i] = clamp01(flat[i] * factor)
        elif op == CONTRAST:
            for i in range(ow * 3 * n):
                flat[i] = blend(flat[i], mean, factor)
        elif op == SOLARIZE:
            for i in range(ow * 3 * n):
                flat[i] = solarize(flat[i], factor)
        elif op == POSTERIZE:
            for i in range(ow * 3 * n):
                flat[i] = posterize(flat[i], factor)
        else:
            for i in range(ow * 3 * n):
                flat[i] = float32(1.0) - flat[i]
        return
    for x in range(ow):
        if op == SATURATION:
            _saturation_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2], factor)
        elif op == HUE:
            _hue_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2], factor)
        elif op == GRAYSCALE:
            _gray_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2])


# The channel rows go to these as separate arguments: LLVM then checks at run time that
# they do not overlap and vectorizes (with the three rows as slices of one array in one
# function, it gives up and the loops run scalar, 5-10x slower).

def _saturation_rows(r, g, b, factor):
    for i in range(r.shape[0]):
        l = gray(r[i], g[i], b[i])
        r[i] = blend(r[i], l, factor)
        g[i] = blend(g[i], l, factor)
        b[i] = blend(b[i], l, factor)


def _hue_rows(r, g, b, factor):
    for i in range(r.shape[0]):
        rr, gg, bb = adjust_hue(r[i], g[i], b[i], factor)
        r[i] = rr
        g[i] = gg
        b[i] = bb


def _gray_rows(r, g, b):
    for i in range(r.shape[0]):
        l = gray(r[i], g[i], b[i])
        r[i] = l
        g[i] = l
        b[i] = l


def _gray_sum_rows(r, g, b):
    total = 0.0
    for i in range(r.shape[0]):
        total += gray(r[i], g[i], b[i])
    return total


def _gray_mean(px, ow):
    n = px.shape[1]
    total = 0.0
    for x in range(ow):
        total += _gray_sum_rows(px[3 * x], px[3 * x + 1], px[3 * x + 2])
    return float32(total / (ow * n))


def _image(px, ow, oh):
    """px [ow*3, oh] (row 3x + c: column x, channel c) as the image [ow, 3, oh] that the
    CPU's `fetch` reads as (c, y, x)."""
    return px.reshape((ow, 3, oh))


def _min_max_row(row, lo, hi):
    """(min, max) of lo, hi and the row's values (compiled with fastmath: it vectorizes;
    min and max round nothing)."""
    for i in range(row.shape[0]):
        lo = min(lo, row[i])
        hi = max(hi, row[i])
    return lo, hi


def _autocontrast_pass(px, ow):
    n = px.shape[1]
    for c in range(3):
        lo = float32(2.0)
        hi = float32(-2.0)
        for x in range(ow):
            lo, hi = _min_max_row(px[3 * x + c], lo, hi)
        low, scale = autocontrast_bounds(lo, hi)
        for x in range(ow):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = autocontrast(row[i], low, scale)


def _equalize_pass(px, ow):
    """torchvision's equalize: each channel through the LUT of its uint8 histogram (or
    only quantized, where every pixel but the top level's makes fewer than 255)."""
    n = px.shape[1]
    hist = np.zeros(256, np.int64)
    lut = np.empty(256, np.float32)
    total = ow * n
    for c in range(3):
        hist[:] = 0
        for x in range(ow):
            row = px[3 * x + c]
            for i in range(n):
                hist[quantize(row[i])] += 1
        top = 255
        while hist[top] == 0:
            top -= 1
        step = (total - hist[top]) // 255
        cum = 0
        for k in range(256):
            lut[k] = float32(equalize_level(k, cum, max(step, 1)) if step > 0 else k) * float32(1.0 / 255.0)
            cum += hist[k]
        for x in range(ow):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = lut[quantize(row[i])]


def _sharpness_pass(px, px2, ow, oh, factor):
    """adjust_sharpness over whole rows: output row 3x + c from rows 3(x-1)+c, 3x+c and
    3(x+1)+c of the image before it, shifted by -1, 0, +1 (so each loop vectorizes)."""
    if oh <= 2 or ow <= 2:
        return
    px2[:, :] = px
    m = oh - 2
    for x in range(1, ow - 1):
        for c in range(3):
            a = px2[3 * (x - 1) + c]
            b = px2[3 * x + c]
            d = px2[3 * (x + 1) + c]
            _sharpen_row(px[3 * x + c][1:oh - 1], a[0:m], a[1:m + 1], a[2:m + 2], b[0:m], b[1:m + 1], b[2:m + 2],
                         d[0:m], d[1:m + 1], d[2:m + 2], factor)


def _sharpen_row(out, a0, a1, a2, b0, b1, b2, d0, d1, d2, factor):
    for i in range(out.shape[0]):
        ring = a0[i] + a1[i] + a2[i] + b0[i] + b2[i] + d0[i] + d1[i] + d2[i]
        out[i] = sharpen_value(b1[i], ring, factor)


def _blur_weights(size, sigma):
    """The normalized 1-D weights and the taps worth reading, first to last (blur_first)."""
    w = np.empty(size, np.float32)
    total = float32(0.0)
    for i in range(size):
        w[i] = float32(gauss_weight(i, size, sigma))
        total += w[i]
    for i in range(size):
        w[i] = w[i] / total
    first = blur_first(w, size)
    return w, first, size - first


def _blur_x_pass(px, px2, ow, a):
    """torchvision's gaussian_blur along x (reflect padding): each output row 3x + c a
    weighted sum of whole rows 3x' + c, into px2, then back."""
    k = int(a[0])
    w, first, last = _blur_weights(k, a[1])
    half = k // 2
    n = px.shape[1]
    for x in range(ow):
        for c in range(3):
            dst = px2[3 * x + c]
            src = px[3 * reflect(x + first - half, ow) + c]
            w0 = w[first]
            for i in range(n):
                dst[i] = w0 * src[i]
            for j in range(first + 1, last):
                src = px[3 * reflect(x + j - half, ow) + c]
                wj = w[j]
                for i in range(n):
                    dst[i] += wj * src[i]
    px[:, :] = px2


def _blur_y_pass(px, oh, a):
    """The same along y, in place: each row through a reflect-padded copy of itself."""
    k = int(a[0])
    w, first, last = _blur_weights(k, a[1])
    half = k // 2
    pad = np.empty(oh + 2 * half, np.float32)
    for r in range(px.shape[0]):
        row = px[r]
        for i in range(oh + 2 * half):
            pad[i] = row[reflect(i - half, oh)]
        w0 = w[first]
        p0 = pad[first:first + oh]
        for i in range(oh):
            row[i] = w0 * p0[i]
        for j in range(first + 1, last):
            wj = w[j]
            pj = pad[j:j + oh]
            for i in range(oh):
                row[i] += wj * pj[i]


def _affine_pass(px, px2, ow, oh, a):
    """The warp, column by column (each output row of px is contiguous), one loop per
    interpolation so that none of them branches on it."""
    px2[:, :] = px
    img = _image(px2, ow, oh)
    mode = a[6]
    fill = a[7] == a[7]  # NaN: none (zeros)
    f0 = a[7] if fill else float32(0.0)
    f1 = a[8] if fill else float32(0.0)
    f2 = a[9] if fill else float32(0.0)
    for x in range(ow):
        r0 = px[3 * x]
        r1 = px[3 * x + 1]
        r2 = px[3 * x + 2]
        if mode == float32(0.0):  # (affine_nearest, with the fill's test out of the loop)
            for y in range(oh):
                sx, sy, inside = nearest_source(y, x, oh, ow, a)
                if inside:
                    r0[y] = img[sx, 0, sy]
                    r1[y] = img[sx, 1, sy]
                    r2[y] = img[sx, 2, sy]
                else:
                    r0[y] = f0
                    r1[y] = f1
                    r2[y] = f2
        elif mode == float32(1.0):
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_bilinear(img, y, x, oh, ow, a)
        elif mode >= float32(3.0):
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_pil(img, y, x, oh, ow, a)
        else:
            for y in range(oh):
                r0[y], r1[y], r2[y] = affine_integer(img, y, x, oh, ow, a)


def _perspective_pass(px, px2, ow, oh, a):
    """The perspective warp, column by column, as _affine_pass (nearest or bilinear)."""
    px2[:, :] = px
    img = _image(px2, ow, oh)
    fill = a[7] == a[7]  # NaN: none (zeros)
    f0 = a[7] if fill else float32(0.0)
    f1 = a[8] if fill else float32(0.0)
    f2 = a[9] if fill else float32(0.0)
    for x in range(ow):
        r0 = px[3 * x]
        r1 = px[3 * x + 1]
        r2 = px[3 * x + 2]
        if a[6] == float32(0.0):
            for y in range(oh):
                sx, sy, inside = perspective_nearest_source(y, x, oh, ow, a)
                if inside:
                    r0[y] = img[sx, 0, sy]
                    r1[y] = img[sx, 1, sy]
                    r2[y] = img[sx, 2, sy]
                else:
                    r0[y] = f0
                    r1[y] = f1
                    r2[y] = f2
        else:
            for y in range(oh):
                r0[y], r1[y], r2[y] = perspective_bilinear(img, y, x, oh, ow, a)

def _mix_pass(px, keep, mix, op, w):
    """AugMix's ops over the whole image (apply_ops' per pixel): keep and start the mix,
    add a chain's result and restore the original, or end with the mix."""
    flat = px.reshape(px.size)
    if op == MIX_SAVE:
        for i in range(flat.shape[0]):
            keep[i] = flat[i]
            mix[i] = w * flat[i]
    elif op == MIX_ADD:
        for i in range(flat.shape[0]):
            mix[i] = mix[i] + w * flat[i]
            flat[i] = keep[i]
    else:
        for i in range(flat.shape[0]):
            flat[i] = mix[i]


def _program(px, px2, aux, ow, oh, order, args):
    """A sample's program, op by op over the whole image (a barrier's statistic is that
    of the image at its turn); aux: AugMix's two image areas."""
    for k in range(order.shape[0]):
        op = order[k]
        if op < 0:
            break
        a = args[k]
        if op == MIX_SAVE or op == MIX_ADD or op == MIX_END:
            _mix_pass(px, aux[0], aux[1], op, a[0])
        elif op == CONTRAST:
            _op_pass(px, ow, op, a[0], _gray_mean(px, ow))
        elif op == AUTOCONTRAST:
            _autocontrast_pass(px, ow)
        elif op == EQUALIZE:
            _equalize_pass(px, ow)
        elif op == SHARPNESS:
            _sharpness_pass(px, px2, ow, oh, a[0])
        elif op == BLUR_X:
            _blur_x_pass(px, px2, ow, a)
        elif op == BLUR_Y:
            _blur_y_pass(px, oh, a)
        elif op == AFFINE:
            _affine_pass(px, px2, ow, oh, a)
        elif op == PERSPECTIVE:
            _perspective_pass(px, px2, ow, oh, a)
        else:
            _op_pass(px, ow, op, a[0], float32(0.0))


def _encode_pass(px, ow, mean, std, normalize, to_uint8):
    """Normalize (or the uint8 scaling) in place over the channel rows."""
    n = px.shape[1]
    for x in range(ow):
        for c in range(3):
            row = px[3 * x + c]
            for i in range(n):
                row[i] = encode_output(row[i], c, mean, std, normalize, to_uint8)


def _rows_u8(dst, src, p, step, w, count, n):
    """dst[t] = sum_k w[k] * src[p + k*step + t] for t < n: up to three taps in one store
    per element (the order of the sum is that of accumulating tap by tap)."""
    s0 = src[p:p + n]
    w0 = w[0]
    if count == 1:
        for t in range(n):
            dst[t] = w0 * float32(s0[t])
        return
    s1 = src[p + step:p + step + n]
    w1 = w[1]
    if count == 2:
        for t in range(n):
            dst[t] = w0 * float32(s0[t]) + w1 * float32(s1[t])
        return
    s2 = src[p + 2 * step:p + 2 * step + n]
    w2 = w[2]
    for t in range(n):
        dst[t] = w0 * float32(s0[t]) + w1 * float32(s1[t]) + w2 * float32(s2[t])
    for k in range(3, count):
        sk = src[p + k * step:p + k * step + n]
        wk = w[k]
        for t in range(n):
            dst[t] += wk * float32(sk[t])


def _rows_f32(dst, rows, first, w, count):
    """dst[t] = sum_k w[k] * rows[first + k, t]: the float twin of _rows_u8."""
    n = dst.shape[0]
    s0 = rows[first]
    w0 = w[0]
    if count == 1:
        for t in range(n):
            dst[t] = w0 * s0[t]
        return
    s1 = rows[first + 1]
    w1 = w[1]
    if count == 2:
        for t in range(n):
            dst[t] = w0 * s0[t] + w1 * s1[t]
        return
    s2 = rows[first + 2]
    w2 = w[2]
    for t in range(n):
        dst[t] = w0 * s0[t] + w1 * s1[t] + w2 * s2[t]
    for k in range(3, count):
        sk = rows[first + k]
        wk = w[k]
        for t in range(n):
            dst[t] += wk * sk[t]


def _vertical_pass(src, g, yf, yc, yw, yv, oh, work):
    """Stage 1 of a sample: the box's rows resampled to oh rows, [oh, bw*3] interleaved,
    into work[:oh * bw * 3]."""
    bw = g[BW]
    sy = g[SY]
    sx = g[SX]
    sc = g[SC]
    base = g[OFFSET] + g[TOP] * sy + g[LEFT] * sx
    inv255 = float32(1.0 / 255.0)
    n3 = bw * 3
    vert = work[:oh * n3].reshape((oh, n3))
    packed = sx == 3 and sc == 1
    wrow = np.empty(yw.shape[1], np.float32)
    for y in range(oh):
        row = vert[y]
        if not yv[y]:
            row[:] = 0.0
            continue
        for k in range(yc[y]):
            wrow[k] = yw[y, k] * inv255
        p = base + yf[y] * sy
        if packed:
            _rows_u8(row, src, p, sy, wrow, yc[y], n3)
        else:
            row[:] = 0.0
            for k in range(yc[y]):
                w = wrow[k]
                for i in range(bw):
                    q = U(p + k * sy + i * sx)
                    j = U(3 * i)
                    row[j] += w * float32(src[q])
                    row[j + U(1)] += w * float32(src[q + U(sc)])
                    row[j + U(2)] += w * float32(src[q + U(2 * sc)])


def _horizontal_pass(work, oh, bw, ow, xf, xc, xw, xv):
    """Stage 3: the transposed rows [bw*3, oh] resampled to [ow*3, oh] (the three channel
    rows of a column are adjacent, so each output column is one contiguous weighted sum
    of [3*oh] blocks), after the two [oh, bw*3] areas of work."""
    n3 = bw * 3
    vt = work[oh * n3:2 * oh * n3].reshape((bw, 3 * oh))
    px3 = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow, 3 * oh))
    for x in range(ow):
        if xv[x]:
            _rows_f32(px3[x], vt, xf[x], xw[x], xc[x])
        else:
            px3[x, :] = 0.0


def _pad_fill_pass(px3, g, yv, xv, oh, ow):
    """The padding (rows or columns outside the resized frame) in the fill's colour, in
    px3 [ow, 3*oh] (a column's three channel rows adjacent)."""
    for c in range(3):
        v = float32(g[FILLR + c]) * float32(1.0 / 255.0)
        for x in range(ow):
            row = px3[x, c * oh:(c + 1) * oh]
            if not xv[x]:
                row[:] = v
                continue
            for y in range(oh):
                if not yv[y]:
                    row[y] = v


def _clamp_pass(px):
    for i in range(px.shape[0]):
        px[i] = clamp01(px[i])


def _output_pass(work, oh, bw, ow, mean, std, normalize, to_uint8, dst, doff, nhwc):
    """Stage 5: each channel transposed to [oh, ow] into dst, with Normalize as
    encode_output does it on the way (or after the uint8 scaling); for NHWC, px [ow*3, oh]
    transposed as a whole is [oh, ow*3], the NHWC image: Normalize goes first, in place."""
    n3 = bw * 3
    px = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow * 3, oh))
    pxs = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh]
    if nhwc or (to_uint8 and not normalize):
        _encode_pass(px, ow, mean, std, normalize, to_uint8)
    if nhwc:  # the (v - 0) * 1 affine only to get the streaming stores
        transpose(pxs, 0, oh, dst, doff, 3 * ow, 3 * ow, oh, True, float32(0.0), float32(1.0))
        return
    for c in range(3):
        m = mean[c] if normalize else float32(0.0)
        s = float32(1.0) / std[c] if normalize else float32(1.0)
        transpose(pxs, c * oh, 3 * oh, dst, doff + c * oh * ow, ow, ow, oh, normalize, m, s)


def _cpu_sample(src, g, args, order, mean, std, normalize, to_uint8, antialias, oh, ow, dst, doff, work, nhwc):
    """One sample; writes its float32 result contiguously at dst[doff:], as [3, oh, ow],
    or as [oh, ow, 3] with `nhwc`. Its stages are functions of their own, so that a
    benchmark times each (gpudecode.bench.suite.kernels --stages)."""
    bh = g[BH]
    bw = g[BW]
    cubic = g[CUBIC] != 0
    yf, yc, yw, yv = _axis_weights(oh, g[VH], g[OY], bh, g[VFLIP] != 0, antialias, cubic)
    xf, xc, xw, xv = _axis_weights(ow, g[VW], g[OX], bw, g[FLIP] != 0, antialias, cubic)
    n3 = bw * 3
    # 1. vertical: the box's rows resampled to oh rows, [oh, bw*3] interleaved
    _vertical_pass(src, g, yf, yc, yw, yv, oh, work)
    # 2. transpose to [bw*3, oh], so the horizontal pass reads whole rows too
    transpose(work, 0, n3, work, oh * n3, oh, oh, n3, False, float32(0.0), float32(1.0))
    # 3. horizontal: [ow*3, oh]
    _horizontal_pass(work, oh, bw, ow, xf, xc, xw, xv)
    if cubic:  # the cubic overshoots; a uint8 image resized stays in its range
        _clamp_pass(work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh])
    if g[FILLR] != 0 or g[FILLG] != 0 or g[FILLB] != 0:  # (zeros are there already)
        _pad_fill_pass(work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow, 3 * oh)), g, yv, xv, oh, ow)
    # 4. the sample's program, op by op over the whole image (a second image-sized area
    # after px for the ops that read neighbours)
    if order[0] >= 0:
        px = work[2 * oh * n3:2 * oh * n3 + ow * 3 * oh].reshape((ow * 3, oh))
        base2 = 2 * oh * n3 + ow * 3 * oh
        px2 = work[base2:base2 + ow * 3 * oh].reshape((ow * 3, oh))
        aux = work[base2 + ow * 3 * oh:base2 + 3 * ow * 3 * oh].reshape((2, ow * 3 * oh))
        _program(px, px2, aux, ow, oh, order, args)
    # 5. the output, transposed (and normalized) into dst
    _output_pass(work, oh, bw, ow, mean, std, normalize, to_uint8, dst, doff, nhwc)


def _is_identity(g, order, oh, ow):
    """The sample needs no resampling and no ColorJitter: its box is read 1:1 (a crop,
    flip and padding at most: CenterCrop or RandomCrop of a stored image of the training
    size, or no geometry at all), from packed HWC pixels."""
    return (g[BH] == g[VH] and g[BW] == g[VW] and order[0] < 0 and g[SX] == 3 and g[SC] == 1
            and g[VH] >= 1 and g[VW] >= 1 and g[VFLIP] == 0)


def _scale_row(t, src, p, n, inv255):
    """t[i] = src[p + i] / 255 as the resampling's single unit tap computes it."""
    s = src[p:p + n]
    for i in range(n):
        t[i] = inv255 * float32(s[i])


def _fill(o, a, b, v):
    for x in range(a, b):
        o[x] = v


def _channel_row(o, t, c, x0, x1, v0, sub, mul):
    """o[x] = (t[3 * (v0 + x - x0) + c] - sub) * mul for x0 <= x < x1: one channel out of
    an interleaved row, at a fixed stride (the loop vectorizes)."""
    n = x1 - x0
    oo = o[x0:x1]
    tt = t[3 * v0 + c:]
    for i in range(n):
        oo[i] = (tt[U(3 * i)] - sub) * mul


def _channel_row_flipped(o, t, c, x0, x1, v0, sub, mul):
    """_channel_row reading t backwards from column v0 (a flip): o[x] = (t[3 * (v0 - (x -
    x0)) + c] - sub) * mul. Its own function: one loop choosing its stride at run time
    did not vectorize, and neither direction got the speed of a fixed one."""
    n = x1 - x0
    oo = o[x0:x1]
    first = 3 * v0 + c
    for i in range(n):
        oo[i] = (t[U(first - 3 * i)] - sub) * mul


def _cpu_identity(src, g, mean, std, normalize, oh, ow, dst, doff, work):
    """The identity-geometry sample (_is_identity) straight to its NCHW float32 output:
    each source row scaled once, then split into the three channel rows (flipped, padded)
    with Normalize on the way. The same arithmetic as _cpu_sample on such a sample (a
    unit tap of 1/255, then (v - mean) * (1 / std)), so the same bits, at memory speed."""
    vh = g[VH]
    vw = g[VW]
    oy = g[OY]
    ox = g[OX]
    flip = g[FLIP] != 0
    inv255 = float32(1.0 / 255.0)
    # the output columns whose source column vx = (flip ? ow - 1 - x : x) + ox is inside
    if flip:  # column x reads vx = ow - 1 - x + ox, descending from v0
        x0 = max(0, ow - 1 + ox - (vw - 1))
        x1 = min(ow, ow + ox)
        v0 = ow - 1 - x0 + ox
    else:
        x0 = max(0, -ox)
        x1 = min(ow, vw - ox)
        v0 = x0 + ox
    x1 = max(x0, x1)
    t = work[:3 * vw]
    subs = np.zeros(3, np.float32)
    muls = np.ones(3, np.float32)
    pads = np.zeros(3, np.float32)
    for c in range(3):
        if normalize:
            subs[c] = mean[c]
            muls[c] = float32(1.0) / std[c]
        pads[c] = (float32(g[FILLR + c]) * float32(1.0 / 255.0) - subs[c]) * muls[c]  # a padded pixel, normalized
    base = g[OFFSET] + g[TOP] * g[SY] + g[LEFT] * 3
    for y in range(oh):
        vy = y + oy
        inside = vy >= 0 and vy < vh and x1 > x0
        if inside:
            _scale_row(t, src, base + vy * g[SY], 3 * vw, inv255)
        for c in range(3):
            start = doff + (c * oh + y) * ow
            o = dst[start:start + ow]
            if not inside:
                _fill(o, 0, ow, pads[c])
                continue
            if x0 > 0:  # (a slice assignment per row costs more than the row itself)
                _fill(o, 0, x0, pads[c])
            if x1 < ow:
                _fill(o, x1, ow, pads[c])
        if not inside:
            continue
        # eight columns at a time, all three channels at once (vector shuffles); the
        # last n % 8 columns one channel at a time
        n8 = (x1 - x0) // 8 * 8
        r0 = doff + y * ow
        for k in range(0, n8, 8):
            if flip:
                deinterleave3x8_affine_reversed(t, 3 * (v0 - k - 7), dst, r0 + x0 + k, r0 + oh * ow + x0 + k,
                                                r0 + 2 * oh * ow + x0 + k, subs[0], muls[0], subs[1], muls[1],
                                                subs[2], muls[2])
            else:
                deinterleave3x8_affine(t, 3 * (v0 + k), dst, r0 + x0 + k, r0 + oh * ow + x0 + k,
                                       r0 + 2 * oh * ow + x0 + k, subs[0], muls[0], subs[1], muls[1],
                                       subs[2], muls[2])
        if n8 < x1 - x0:
            for c in range(3):
                start = doff + (c * oh + y) * ow
                o = dst[start:start + ow]
                if flip:
                    _channel_row_flipped(o, t, c, x0 + n8, x1, v0 - n8, subs[c], muls[c])
                else:
                    _channel_row(o, t, c, x0 + n8, x1, v0 + n8, subs[c], muls[c])


def _cpu_batch(src, geom, args, order, mean, std, normalize, to_uint8, antialias, out, direct, nhwc, flat_out,
               work, tmp, first, step, fast_identity):
    """Samples first, first + step, ... of the batch. With `direct`, flat_out is out's
    own contiguous float32 buffer (NCHW, or NHWC with `nhwc`) and samples are written
    there; otherwise each goes through `tmp` and is copied (cast) into out, whatever its
    dtype and strides. With `fast_identity`, samples that need no resampling and no
    ColorJitter take _cpu_identity where the output is NCHW float32."""
    oh = out.shape[2]
    ow = out.shape[3]
    size = 3 * oh * ow
    for i in range(first, out.shape[0], step):
        if fast_identity and direct and not nhwc and not to_uint8 and _is_identity(geom[i], order[i], oh, ow):
            _cpu_identity(src, geom[i], mean, std, normalize, oh, ow, flat_out, i * size, work)
        elif direct:
            _cpu_sample(src, geom[i], args[i], order[i], mean, std, normalize, to_uint8, antialias, oh, ow,
                        flat_out, i * size, work, nhwc)
        else:
            _cpu_sample(src, geom[i], args[i], order[i], mean, std, normalize, to_uint8, antialias, oh, ow,
                        tmp, 0, work, False)
            o = out[i]
            for c in range(3):
                for y in range(oh):
                    row = tmp[(c * oh + y) * ow:(c * oh + y + 1) * ow]
                    orow = o[c, y]
                    for x in range(ow):
                        orow[x] = row[x]
    store_fence()  # the output transposes may stream past the cache: order them first


@functools.cache
def cpu_kernel():
    """The CPU twin, compiled on first use: samples first, first+step, ... of a batch,
    GIL released (the launcher runs one slice per thread of its pool)."""
    ns = _cpu_namespace()
    return _compile.cpu_jit()(_compile.rebind(_cpu_batch, ns))


def cpu_stages() -> dict:
    """The CPU twin's stages of a sample, compiled as the kernel uses them (`_axis_weights`,
    `_vertical_pass`, `transpose`, `_horizontal_pass`, `_output_pass`): for a benchmark
    that times each (gpudecode.bench.suite.kernels --stages)."""
    ns = _cpu_namespace()
    return {k: ns[k] for k in ("_axis_weights", "_vertical_pass", "transpose", "_horizontal_pass", "_output_pass")}


@functools.cache
def _cpu_namespace() -> dict:
    from . import _simd

    jit = _compile.cpu_jit
    ns = _compile.cpu_namespace()
    ns.update(GEOM_NAMES)
    ns["np"] = np
    ns["float32"] = np.float32
    ns["U"] = np.uint64
    ns["transpose"] = _simd.transpose
    ns["store_fence"] = _simd.store_fence
    ns["deinterleave3x8_affine"] = _simd.deinterleave3x8_affine
    ns["deinterleave3x8_affine_reversed"] = _simd.deinterleave3x8_affine_reversed
    for fn in (_saturation_rows, _hue_rows, _gray_rows, _axis_weights, _op_pass, _encode_pass, _rows_u8, _rows_f32,
               _gray_mean, _image, _autocontrast_pass, _equalize_pass, _sharpen_row, _sharpness_pass, _blur_weights,
               _blur_x_pass, _blur_y_pass, _mix_pass,
               _affine_pass, _perspective_pass, _program, _vertical_pass, _horizontal_pass, _clamp_pass, _pad_fill_pass, _output_pass, _cpu_sample, _is_identity, _scale_row, _fill, _channel_row, _channel_row_flipped,
               _cpu_identity):
        ns[fn.__name__] = jit()(_compile.rebind(fn, ns))
    # a reassociating reduction (float64 accumulators) so the grey sum vectorizes
    ns["_gray_sum_rows"] = jit(fastmath={"reassoc", "contract"})(_compile.rebind(_gray_sum_rows, ns))
    ns["_min_max_row"] = jit(fastmath={"nnan", "ninf", "nsz", "reassoc"})(_compile.rebind(_min_max_row, ns))
    return ns


# The CPU twin runs on this pool rather than numba's parallel layer: numba's OpenMP
# layer shares libgomp with torch, whose idle workers spin and took the cores the
# decoder threads need (the CPU loader ran about 10-30% slower that way); these
# threads sleep when idle, and concurrent callers are safe.
_POOL = None
_POOL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's pool threads (a pool that believes it has
    them would hang the first call) and may have inherited a lock held mid-call: both
    are made anew."""
    global _POOL, _POOL_LOCK, _SEEN_LOCK, _STARTED
    _POOL = None
    _POOL_LOCK = threading.Lock()
    _SEEN_LOCK = threading.Lock()
    _STARTED = set(_SEEN)  # a first call another thread had begun is not this process's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pool():
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="gpudecode-kernel")
        return _POOL


def cpu_work_shape(threads: int, wide: int, out_shape: tuple[int, ...], direct: bool) -> tuple[int, int]:
    """The CPU twin's float32 work rows, one per task: the resample's two planes over a
    source window `wide` pixels wide, AugMix's two images, and (unless the output is
    float32 written in place) the staging of one sample's output. Returns (threads,
    floats a row)."""
    oh, ow = out_shape[2], out_shape[3]
    main = 2 * oh * wide * 3 + 4 * ow * oh * 3  # (px, px2 and AugMix's two)
    return threads, main + (0 if direct else 3 * oh * ow)


def reserve_cpu(workspace: Any, threads: int, widest: int, out_shape: tuple[int, ...]) -> None:
    """Makes `workspace` hold the CPU twin's work rows for `threads` tasks and source
    windows up to `widest` pixels (a batch's widest image: a window is never wider), so
    the crops a batch draws never make it grow; what the pipeline declares per batch."""
    workspace.reserve("cpu-work", cpu_work_shape(threads, widest, out_shape, direct=False))


def fused_cpu(src, geom, args, order, mean, std, out, *, normalize: bool, antialias: bool = True,
              num_threads: int | None = None, fast_identity: bool = True, workspace: Any = None) -> None:
    """The CPU twin of fused_cuda on numpy arrays (out: [N, 3, H, W], any strides), on
    `num_threads` threads (default: all cores). Output does not depend on num_threads,
    nor on `fast_identity` (the path for samples read 1:1, see _cpu_identity; off: every
    sample through the general path, for tests). `workspace` (kernels.workspace.Workspace):
    where the work rows are kept between calls (without one they are made for the call)."""
    n = out.shape[0]
    if n == 0:
        return
    if args.ndim == 2:
        args = step_args(args, order)
    threads = max(1, min(num_threads or os.cpu_count() or 1, n))
    oh, ow = out.shape[2], out.shape[3]
    nhwc = out.dtype == np.float32 and out.transpose(0, 2, 3, 1).flags.c_contiguous and not out.flags.c_contiguous
    direct = nhwc or (out.dtype == np.float32 and out.flags.c_contiguous)
    shape = cpu_work_shape(threads, int(geom[:, BW].max()), out.shape, direct)
    work = workspace.array("cpu-work", shape) if workspace is not None else np.empty(shape, np.float32)
    main = shape[1] - (0 if direct else 3 * oh * ow)
    kernel = cpu_kernel()
    head = (src, geom, args, order, mean, std, normalize, out.dtype == np.uint8, antialias, out, direct, nhwc)
    tail = (fast_identity,)
    # per thread: the float32 buffer samples are written to (out's own memory when
    # direct), the work area, and the staging area of the indirect path
    flat = (out.transpose(0, 2, 3, 1) if nhwc else out).reshape(-1) if direct else None
    parts = []
    for t in range(threads):
        stage = work[t, main:main + 3 * oh * ow] if not direct else work[t, :1]
        parts.append((flat if flat is not None else stage, work[t, :main], stage))
    variant = (src.dtype.str, out.dtype.str, normalize, antialias, direct, nhwc, fast_identity)
    with first_use(variant):
        if threads == 1:
            kernel(*head, *parts[0], 0, 1, *tail)
            return
        # parts 1.. on the pool, part 0 on this thread (which would only wait): one hand-off
        # and one thread woken fewer per call
        futures = [_pool().submit(kernel, *head, *parts[t], t, threads, *tail) for t in range(1, threads)]
        try:
            kernel(*head, *parts[0], 0, threads, *tail)
        except BaseException:
            for f in futures:  # (done before the buffers are let go)
                f.exception()
            raise
        for f in futures:
            f.result()


_SEEN: set = set()
_STARTED: set = set()  # variants whose first call has begun (its thread says so if it compiles)
_SEEN_LOCK = threading.Lock()
NOTICE_AFTER_S = 2.0  # a first call still running after this long is compiling: say so


@contextlib.contextmanager
def first_use(variant: tuple, target: str = "CPU"):
    """The first call of each kernel variant in a process loads it from the on-disk cache
    (about 0.5 s) or compiles it (tens of seconds, once per machine and numba version):
    when it is still running after NOTICE_AFTER_S, a line on stderr says what is going
    on, and another how long it took. `target`: "CPU" or "CUDA" (its variants are
    compiled per GPU architecture, 10-20 s each)."""
    with _SEEN_LOCK:
        first = variant not in _SEEN and variant not in _STARTED
        _STARTED.add(variant)
    if not first:  # known, or another thread's first call is announcing it
        yield
        return
    import sys

    t0 = time.perf_counter()
    said = threading.Event()

    def notice() -> None:
        said.set()
        where = _compile.cache_dir()
        kept = (f"once: the result is kept in {where} for every environment with this numba" if where else
                "in every process: the kernel cache is off (GPUDECODE_CACHE_DIR=0 or not writable)")
        what = ("the CPU kernel for this machine (it takes 10-40 s" if target == "CPU" else
                "the CUDA kernels for this GPU (10-20 s for each output type and layout")
        print(f"gpudecode: compiling {what}, {kept})...", file=sys.stderr, flush=True)

    timer = threading.Timer(NOTICE_AFTER_S, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _SEEN.add(variant)
        if said.is_set():
            print(f"gpudecode: {target} kernel compiled in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)


def compile_ptx_all(ccs=((8, 0), (9, 0)), *, text: bool = False, variants=None) -> dict:
    """Compiles both CUDA kernels to PTX for every compute capability in `ccs` and each
    output dtype and layout, with real type inference and code generation (no GPU
    needed; not under the simulator). Returns {(kernel, cc, variant): ptx length}, or
    the PTX itself with `text` (for ptxas). `variants`: only these ("float32-C", "uint8-A", ...)."""
    from numba import cuda, types as t

    ns = _cuda_namespace()
    resample = ns["_resample_body"]
    segment = ns["_segment_body"]
    sizes = {}
    common = (t.float32[:, :, ::1], t.int32[:, ::1])
    tail_in = (t.float32[:, :, :, :, ::1], t.float64[:, :, ::1], t.int32[:, :, :, ::1], t.float32[:, :, :, :, ::1],
               t.float32[::1], t.float32[::1], t.boolean, t.boolean)
    for cc in ccs:
        for out_t in (t.float32, t.float16, t.uint8):
            for layout in ("C", "A"):  # contiguous NCHW, and strided (NHWC views)
                if variants is not None and f"{out_t}-{layout}" not in variants:
                    continue
                out = out_t[:, :, :, ::1] if layout == "C" else out_t[:, :, :, :]
                r_sig = (t.uint8[::1], t.int64[:, ::1], *common, t.boolean, *tail_in, out)
                ptx, _ = cuda.compile_ptx(resample, r_sig, cc=cc)
                sizes[("resample", cc, f"{out_t}-{layout}")] = ptx if text else len(ptx)
                s_sig = (t.int64, t.float32[:, :, :, :, ::1], *common, *tail_in[1:], out)
                ptx, _ = cuda.compile_ptx(segment, s_sig, cc=cc)
                sizes[("segment", cc, f"{out_t}-{layout}")] = ptx if text else len(ptx)
    return sizes
