"""The fused augment kernel: crop + antialiased resize + flip + ColorJitter + Normalize
in one pass per output pixel (plus a grey-mean reduction when contrast is on).

Data layout, shared by both targets:
    src      uint8 [total]     every image of the batch, packed; sample n starts at
                               geom[n, OFFSET] and pixel (y, x, c) is at
                               offset + y*SY + x*SX + c*SC (HWC or CHW, by strides)
    geom     int64 [N, GEOM]   per-sample geometry (columns named below)
    factors  float32 [N, 4]    ColorJitter factors by op id (brightness, contrast,
                               saturation, hue)
    order    int32 [N, 4]      op ids in application order, -1 after the last
    mean,std float32 [3]       Normalize
    out      [N, 3, H, W]      float32/float16/uint8; any strides (NHWC is a view)

Geometry: the box (TOP, LEFT, BH, BW) of the source is resized to (VH, VW) and the
output is the window at (OY, OX) of that resized image (zeros outside it, as
torchvision's padding CenterCrop): RandomResizedCrop is box=crop, V=out size, O=0;
Resize+CenterCrop is box=whole image, V=resized size, O=crop offset. FLIP mirrors x.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import _compile

OFFSET, H, W, SY, SX, SC, TOP, LEFT, BH, BW, VH, VW, OY, OX, FLIP = range(15)
GEOM = 15
THREADS_PER_BLOCK = (16, 16)
_SUM_TYPE = np.float64


# ---------------------------------------------------------------------------------------
# CUDA: one thread per output pixel. Bodies are plain functions compiled by cuda_kernels().

def _resample_body(src, geom, factors, order, antialias, scratch, gray_sum):
    """Kernel 1. Grid (ceil(W/16), ceil(H/16), N), block (16, 16). Writes scratch
    [N, 3, H, W] float32 (resized pixel with the ops before contrast applied) and adds
    each sample's grey sum to gray_sum[n] (float64) when the sample has contrast."""
    partial = cuda.shared.array(256, float64)
    n = cuda.blockIdx.z
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    x = cuda.blockIdx.x * cuda.blockDim.x + tx
    y = cuda.blockIdx.y * cuda.blockDim.y + ty
    oh = scratch.shape[2]
    ow = scratch.shape[3]
    active = x < ow and y < oh
    g = geom[n]
    kc = contrast_position(order[n])
    has_contrast = kc < 4 and order[n, kc] == CONTRAST
    r = float32(0.0)
    gg = float32(0.0)
    b = float32(0.0)
    if active:
        xs = ow - 1 - x if g[FLIP] != 0 else x
        vy = y + g[OY]
        vx = xs + g[OX]
        if vy >= 0 and vy < g[VH] and vx >= 0 and vx < g[VW]:
            bh = g[BH]
            bw = g[BW]
            cy, iy, ylo, yhi = filter_window(vy, float32(bh) / float32(g[VH]), bh, antialias)
            cx, ix, xlo, xhi = filter_window(vx, float32(bw) / float32(g[VW]), bw, antialias)
            wysum = float32(0.0)
            for j in range(ylo, yhi):
                wysum += tri_weight(j, cy, iy)
            wxsum = float32(0.0)
            for i in range(xlo, xhi):
                wxsum += tri_weight(i, cx, ix)
            base = g[OFFSET] + g[TOP] * g[SY] + g[LEFT] * g[SX]
            for j in range(ylo, yhi):
                wy = tri_weight(j, cy, iy) / wysum
                ar = float32(0.0)
                ag = float32(0.0)
                ab = float32(0.0)
                for i in range(xlo, xhi):
                    wx = tri_weight(i, cx, ix) / wxsum
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
        r, gg, b = apply_ops(r, gg, b, order[n], factors[n], 0, kc, float32(0.0))
        scratch[n, 0, y, x] = r
        scratch[n, 1, y, x] = gg
        scratch[n, 2, y, x] = b
    t = ty * cuda.blockDim.x + tx
    partial[t] = float64(gray(r, gg, b)) if (active and has_contrast) else float64(0.0)
    cuda.syncthreads()
    step = 128
    while step > 0:
        if t < step:
            partial[t] += partial[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0 and has_contrast:
        cuda.atomic.add(gray_sum, n, partial[0])


def _finish_body(scratch, gray_sum, factors, order, mean, std, normalize, to_uint8, out):
    """Kernel 2. Same grid. Applies contrast (with the sample's grey mean) and the ops
    after it, then Normalize or the uint8 scaling, and writes out[n, c, y, x]."""
    n = cuda.blockIdx.z
    x = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    y = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    oh = scratch.shape[2]
    ow = scratch.shape[3]
    if x >= ow or y >= oh:
        return
    r = scratch[n, 0, y, x]
    g = scratch[n, 1, y, x]
    b = scratch[n, 2, y, x]
    kc = contrast_position(order[n])
    m = float32(gray_sum[n] / float64(oh * ow))
    r, g, b = apply_ops(r, g, b, order[n], factors[n], kc, 4, m)
    out[n, 0, y, x] = encode_output(r, 0, mean, std, normalize, to_uint8)
    out[n, 1, y, x] = encode_output(g, 1, mean, std, normalize, to_uint8)
    out[n, 2, y, x] = encode_output(b, 2, mean, std, normalize, to_uint8)


@functools.cache
def cuda_kernels() -> tuple:
    """(resample_kernel, finish_kernel), compiled on first use."""
    from numba import cuda, float32, float64

    extra = {"float32": float32, "float64": float64}
    ns = _compile.cuda_namespace()
    ns.update(extra)
    ns.update(GEOM_NAMES)
    resample = cuda.jit(_compile._rebind(_resample_body, ns))
    finish = cuda.jit(_compile._rebind(_finish_body, ns))
    return resample, finish


GEOM_NAMES = dict(OFFSET=OFFSET, H=H, W=W, SY=SY, SX=SX, SC=SC, TOP=TOP, LEFT=LEFT, BH=BH, BW=BW, VH=VH,
                  VW=VW, OY=OY, OX=OX, FLIP=FLIP)


def launch_geometry(n: int, oh: int, ow: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    bx, by = THREADS_PER_BLOCK
    return ((ow + bx - 1) // bx, (oh + by - 1) // by, n), THREADS_PER_BLOCK


def fused_cuda(src, geom, factors, order, mean, std, out, *, normalize: bool, antialias: bool = True,
               stream=0, scratch=None, gray_sum=None) -> None:
    """Launches both kernels on `stream` (numba stream, or 0). Arguments are device
    arrays or objects with __cuda_array_interface__ (torch CUDA tensors); nothing is
    synchronized here. `scratch` (float32 [N,3,H,W]) and `gray_sum` (float64 [N],
    zeroed) may be given to reuse buffers; out itself may serve as scratch if float32."""
    from numba import cuda

    n, _, oh, ow = out.shape
    if n == 0:
        return
    resample, finish = cuda_kernels()
    if scratch is None:
        scratch = cuda.device_array((n, 3, oh, ow), dtype=np.float32, stream=stream)
    if gray_sum is None:
        gray_sum = cuda.to_device(np.zeros(n, dtype=_SUM_TYPE), stream=stream)
    to_uint8 = np.dtype(str(out.dtype).replace("torch.", "")) == np.uint8
    grid, block = launch_geometry(n, oh, ow)
    resample[grid, block, stream](src, geom, factors, order, antialias, scratch, gray_sum)
    finish[grid, block, stream](scratch, gray_sum, factors, order, mean, std, normalize, to_uint8, out)


# ---------------------------------------------------------------------------------------
# CPU twin: the same helpers, separable loops (vertical pass over contiguous rows, then
# horizontal), one sample per prange iteration, GIL released.

def _axis_weights(out_size, vsize, voff, box, flip, antialias):
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
            c, inv, lo, hi = filter_window(v, scale, box, antialias)
            first[o] = lo
            count[o] = hi - lo
            valid[o] = True
            taps = max(taps, hi - lo)
    weights = np.zeros((out_size, taps), np.float32)
    for o in range(out_size):
        if valid[o]:
            v = (out_size - 1 - o if flip else o) + voff
            c, inv, lo, hi = filter_window(v, scale, box, antialias)
            total = float32(0.0)
            for j in range(lo, hi):
                total += tri_weight(j, c, inv)
            for j in range(lo, hi):
                weights[o, j - lo] = tri_weight(j, c, inv) / total
    return first, count, weights, valid


def _cpu_sample(src, g, factors, order, mean, std, normalize, to_uint8, antialias, out, plane):
    oh = out.shape[1]
    ow = out.shape[2]
    bh = g[BH]
    bw = g[BW]
    yf, yc, yw, yv = _axis_weights(oh, g[VH], g[OY], bh, False, antialias)
    xf, xc, xw, xv = _axis_weights(ow, g[VW], g[OX], bw, g[FLIP] != 0, antialias)
    sy = g[SY]
    sx = g[SX]
    sc = g[SC]
    base = g[OFFSET] + g[TOP] * sy + g[LEFT] * sx
    inv255 = float32(1.0 / 255.0)
    # vertical pass: rows of the box resampled to oh rows, channels interleaved
    vert = np.zeros((oh, bw * 3), np.float32)
    packed = sx == 3 and sc == 1
    for y in range(oh):
        if not yv[y]:
            continue
        row = vert[y]
        for k in range(yc[y]):
            w = yw[y, k] * inv255
            p = base + (yf[y] + k) * sy
            if packed:
                for t in range(bw * 3):
                    row[t] += w * float32(src[p + t])
            else:
                for i in range(bw):
                    q = p + i * sx
                    row[3 * i] += w * float32(src[q])
                    row[3 * i + 1] += w * float32(src[q + sc])
                    row[3 * i + 2] += w * float32(src[q + 2 * sc])
    kc = contrast_position(order)
    has_contrast = kc < 4 and order[kc] == CONTRAST
    total = 0.0
    # horizontal pass and the ops before contrast (all of them without contrast)
    for y in range(oh):
        row = vert[y]
        for x in range(ow):
            r = float32(0.0)
            gg = float32(0.0)
            b = float32(0.0)
            if xv[x] and yv[y]:
                f0 = xf[x]
                for k in range(xc[x]):
                    w = xw[x, k]
                    t = 3 * (f0 + k)
                    r += w * row[t]
                    gg += w * row[t + 1]
                    b += w * row[t + 2]
            r, gg, b = apply_ops(r, gg, b, order, factors, 0, kc, float32(0.0))
            if has_contrast:
                total += gray(r, gg, b)
                plane[0, y, x] = r
                plane[1, y, x] = gg
                plane[2, y, x] = b
            else:
                out[0, y, x] = encode_output(r, 0, mean, std, normalize, to_uint8)
                out[1, y, x] = encode_output(gg, 1, mean, std, normalize, to_uint8)
                out[2, y, x] = encode_output(b, 2, mean, std, normalize, to_uint8)
    if has_contrast:
        m = float32(total / (oh * ow))
        for y in range(oh):
            for x in range(ow):
                r, gg, b = apply_ops(plane[0, y, x], plane[1, y, x], plane[2, y, x], order, factors, kc, 4, m)
                out[0, y, x] = encode_output(r, 0, mean, std, normalize, to_uint8)
                out[1, y, x] = encode_output(gg, 1, mean, std, normalize, to_uint8)
                out[2, y, x] = encode_output(b, 2, mean, std, normalize, to_uint8)


def _cpu_batch(src, geom, factors, order, mean, std, normalize, to_uint8, antialias, out):
    n = out.shape[0]
    for i in prange(n):
        plane = np.empty((3, out.shape[2], out.shape[3]), np.float32)
        _cpu_sample(src, geom[i], factors[i], order[i], mean, std, normalize, to_uint8, antialias, out[i], plane)


@functools.cache
def cpu_kernel():
    """The CPU twin, compiled on first use (parallel over samples, GIL released)."""
    import numba

    ns = _compile.cpu_namespace()
    ns.update(GEOM_NAMES)
    ns["np"] = np
    ns["float32"] = np.float32
    ns["_axis_weights"] = numba.njit(nogil=True)(_compile._rebind(_axis_weights, ns))
    ns["_cpu_sample"] = numba.njit(nogil=True)(_compile._rebind(_cpu_sample, ns))
    return numba.njit(parallel=True, nogil=True)(_compile._rebind(_cpu_batch, ns))


def fused_cpu(src, geom, factors, order, mean, std, out, *, normalize: bool, antialias: bool = True) -> None:
    """The CPU twin of fused_cuda on numpy arrays (out: [N, 3, H, W], any strides)."""
    if out.shape[0] == 0:
        return
    cpu_kernel()(src, geom, factors, order, mean, std, normalize, out.dtype == np.uint8, antialias, out)
