"""The CUDA kernels: one thread per output pixel. Kernel 1 resamples and runs a sample's
program up to its first barrier; kernel 2, launched once per barrier level, runs the
barrier and the per-pixel ops after it (fused.py's docstring). The bodies are plain
functions, compiled for CUDA by cuda_kernels() in the namespace of kernels/_pixel.py."""
from __future__ import annotations

import functools

import numpy as np

from . import _compile
from .layout import (GEOM_NAMES, aux_shape, barrier_levels, hist_shape, launch_geometry, own_sizes, scratch_shape,
                     stats_init, step_args)
from .ops import AUX_MASK, HISTOGRAM_MASK, MEAN_MASK, RANGE_MASK, has


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
    g = geom[n]
    oh = g[OH]  # the sample's own size (layout.own_sizes sets the batch's where a row leaves it 0)
    ow = g[OW]
    if (x >= ow or y >= oh) and x < out.shape[3] and y < out.shape[2]:  # around a smaller sample: zeros
        for c in range(3):
            out[n, c, y, x] = float32(0.0)
    active = x < ow and y < oh
    r = float32(0.0)
    gg = float32(0.0)
    b = float32(0.0)
    if active:
        xs = ow - 1 - x if g[FLIP] != 0 else x
        ys = oh - 1 - y if g[VFLIP] != 0 else y
        vy = frame_index(ys + g[OY], g[VH], g[PAD])  # (the padding's pixel, where it reads the frame)
        vx = frame_index(xs + g[OX], g[VW], g[PAD])
        if vy >= 0 and vy < g[VH] and vx >= 0 and vx < g[VW]:
            bh = g[BH]
            bw = g[BW]
            mode = g[FILTER]
            cubic = mode == 1
            cy, iy, ylo, yhi = filter_window(vy, float32(bh) / float32(g[VH]), bh, g[VH], antialias, mode)
            cx, ix, xlo, xhi = filter_window(vx, float32(bw) / float32(g[VW]), bw, g[VW], antialias, mode)
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


def _segment_body(level, geom, scratch, args, order, stats, hist, aux, mean, std, normalize, to_uint8, out):
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
    if RAGGED:  # (a constant: the variant for samples of their own sizes; kernel 1 wrote the zeros around them)
        oh = geom[n, OH]
        ow = geom[n, OW]
    active = x < ow and y < oh
    k = barrier_step(order[n], level)
    if k >= order.shape[1] or order[n, k] < 0:  # this sample's program is done
        return
    op = order[n, k]
    a = args[n, k]
    if (HISTOGRAM_MASK >> op) & 1:  # the equalize table of each channel, from its histogram (a scan in shared memory)
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
            before = hs[c * 256 + t - 1] if t > 0 else int32(0)
            lut[c * 256 + t] = equalize_entry(t, before, rest[c])
        cuda.syncthreads()
    if t == 0:  # (the blur's weights: barrier_prepare)
        barrier_prepare(op, a, wts)
    cuda.syncthreads()
    r = float32(0.0)
    gg = float32(0.0)
    b = float32(0.0)
    if active:
        r, gg, b = barrier_pixel(op, a, scratch[(level - 1) % 2, n], y, x, oh, ow, stats[n, level - 1], lut, wts)
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
    """(resample_kernel, segment_kernel, the segment kernel for samples of their own
    sizes), compiled on first use for each signature, and kept on disk
    (_compile.cuda_cache) so other processes and ranks load them."""
    from numba import cuda

    ns = _cuda_namespace()
    cache = _compile.cuda_cache()
    return tuple(cuda.jit(ns[name], cache=cache) for name in ("_resample_body", "_segment_body", "_segment_ragged"))


def _cuda_namespace(fresh: bool = False) -> dict:
    """The kernel bodies and their device helpers, rebound for CUDA (`fresh`: helpers not
    yet compiled, for another compute capability than the process's first)."""
    from numba import float32, float64, int32

    ns = dict(_compile.fresh_cuda_namespace() if fresh else _compile.cuda_namespace())
    ns.update(GEOM_NAMES, float32=float32, float64=float64, int32=int32)
    helpers: tuple = (_write_out, _block_reduce)
    for fn in helpers:
        ns[fn.__name__] = _compile.cuda_device(_compile.rebind(fn, ns))
    bodies: tuple = (_resample_body, _segment_body)
    ns["RAGGED"] = False
    for fn in bodies:
        ns[fn.__name__] = _compile.rebind(fn, ns)
    # the segment kernel reading each sample's own size (OH, OW) where a batch holds samples of their own
    # sizes: a variant of its own (a name of its own: its own disk cache), as the size held in registers costs
    # the other one occupancy (test_kernels: ptxas's registers)
    ragged = _compile.rebind(_segment_body, {**ns, "RAGGED": True})
    ragged.__qualname__ = ragged.__name__ = "_segment_ragged"
    ns["_segment_ragged"] = ragged
    return ns


def fused_cuda(src, geom, args, order, mean, std, out, *, normalize: bool, antialias: bool = True,
               stream=0, scratch=None, stats=None, hist=None, aux=None, levels: int | None = None,
               ragged: bool | None = None) -> None:
    """Launches the kernels on `stream` (numba stream, or 0). Arguments are device
    arrays or objects with __cuda_array_interface__ (torch CUDA tensors); nothing is
    synchronized here. `args` may be the older factors [N, NUM_OPS] (host arrays only).
    scratch (float32, scratch_shape), stats (stats_init's values) and hist (int32 zeros,
    hist_shape) and aux (float32, aux_shape) may be given as device arrays to reuse
    buffers; `levels`
    (barrier_levels(order)) saves reading a device `order` back. A host `geom` gets its
    OH, OW set where they are 0 (layout.own_sizes); a device one must have them, and
    `ragged` (whether a sample is smaller than the batch) then says which segment kernel runs."""
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
    if isinstance(geom, np.ndarray):
        geom, ragged = own_sizes(geom, oh, ow)
    resample, segment, segment_ragged = cuda_kernels()
    if ragged:
        segment = segment_ragged
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
        segment[grid, block, stream](level, geom, scratch, args, order, stats, hist, aux, mean, std, normalize, to_uint8,
                                     out)


def compile_ptx_all(ccs=((8, 0), (9, 0)), *, text: bool = False, variants=None) -> dict:
    """Compiles both CUDA kernels to PTX for every compute capability in `ccs` and each
    output dtype and layout, with real type inference and code generation (no GPU
    needed; not under the simulator). Returns {(kernel, cc, variant): ptx length}, or
    the PTX itself with `text` (for ptxas). `variants`: only these ("float32-C", "uint8-A", ...),
    or a dict of them, each to the ccs it is made for (of `ccs`, in its order). Each
    kernel and variant is typed and lowered once (for its first cc: about two thirds of
    a compile) and its IR made PTX for each of its ccs by NVVM (_ptx_each_cc)."""
    from numba import types as t

    sizes = {}
    common = (t.float32[:, :, ::1], t.int32[:, ::1])
    tail_in = (t.float32[:, :, :, :, ::1], t.float64[:, :, ::1], t.int32[:, :, :, ::1], t.float32[:, :, :, :, ::1],
               t.float32[::1], t.float32[::1], t.boolean, t.boolean)
    ns = _cuda_namespace(fresh=True)  # (device functions compiled anew)
    resample, segment, ragged = ns["_resample_body"], ns["_segment_body"], ns["_segment_ragged"]
    for out_t in (t.float32, t.float16, t.uint8):
        for layout in ("C", "A"):  # contiguous NCHW, and strided (NHWC views)
            name = f"{out_t}-{layout}"
            if variants is not None and name not in variants:
                continue
            these = tuple(cc for cc in ccs if cc in variants[name]) if isinstance(variants, dict) else tuple(ccs)
            out = out_t[:, :, :, ::1] if layout == "C" else out_t[:, :, :, :]
            r_sig = (t.uint8[::1], t.int64[:, ::1], *common, t.boolean, *tail_in, out)
            s_sig = (t.int64, t.int64[:, ::1], t.float32[:, :, :, :, ::1], *common, *tail_in[1:], out)
            for kernel, fn, sig in (("resample", resample, r_sig), ("segment", segment, s_sig),
                                    ("segment_ragged", ragged, s_sig)):
                for cc, ptx in _ptx_each_cc(fn, sig, these).items():
                    sizes[(kernel, cc, name)] = ptx if text else len(ptx)
    return sizes


def _ptx_each_cc(fn, sig, ccs) -> dict:
    """{cc: PTX} of kernel `fn` for `sig`: typed and lowered once, for ccs[0] (its device
    functions too: _compile.compiling_for), then NVVM of that IR for each cc. numba-cuda's
    code library makes PTX for any cc from its IR; for these kernels on sm_90 it is a
    compile_ptx for sm_90's text but for the numbering of the shared arrays' names
    (checked when this was written, numba-cuda 0.30: bench/RESULTS.md). Where that
    numba-cuda internal is not there, compile_ptx for each cc."""
    from numba import cuda
    from numba.core.compiler_lock import global_compiler_lock

    try:
        from numba.cuda.compiler import _compile_pyfunc_with_fixup  # type: ignore[attr-defined]
    except ImportError:  # (another numba-cuda: a whole compile a cc)
        out = {}
        for cc in ccs:
            with _compile.compiling_for(cc):
                out[cc] = cuda.compile_ptx(fn, sig, cc=cc)[0]
        return out
    with global_compiler_lock, _compile.compiling_for(ccs[0]):
        lib, _ = _compile_pyfunc_with_fixup(fn, sig, device=False, cc=ccs[0], abi="numba")
        out = {}
        for cc in ccs:
            ptxs = lib.get_asm_strs(cc=cc)
            if len(ptxs) != 1:
                raise RuntimeError(f"{fn.__name__} compiled to {len(ptxs)} PTX modules for cc {cc}, not one")
            out[cc] = ptxs[0]
        return out
