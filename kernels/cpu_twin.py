"""The CPU twin of the CUDA kernels: compiled from cpu_passes.py and cpu_resample.py, run
on a pool of threads (GIL released) over numpy arrays."""
from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import numpy as np

from . import _compile, cpu_passes, cpu_resample
from ._compile import first_use
from ._barrier import STAT_WIDTH
from ._pixel import MAX_BLUR
from .layout import BW, GEOM_NAMES, step_args


@functools.cache
def cpu_kernel():
    """The CPU twin, compiled on first use: samples first, first+step, ... of a batch,
    GIL released (the launcher runs one slice per thread of its pool)."""
    return _cpu_namespace()["_cpu_batch"]


def cpu_stages() -> dict:
    """The CPU twin's stages of a sample, compiled as the kernel uses them (`_axis_weights`,
    `_vertical_pass`, `transpose`, `_horizontal_pass`, `_output_pass`): for a benchmark
    that times each (gpudecode.bench.suite.kernels --stages)."""
    ns = _cpu_namespace()
    return {k: ns[k] for k in ("_axis_weights", "_vertical_pass", "transpose", "_horizontal_pass", "_output_pass")}


@functools.cache
def _cpu_namespace() -> dict:
    """Every function of cpu_passes.py and cpu_resample.py compiled for the CPU, in one
    namespace with _pixel's helpers (a pass added there is compiled: no list to edit)."""
    import inspect

    from . import _simd

    jit = _compile.cpu_jit
    ns = _compile.cpu_namespace()
    ns.update(GEOM_NAMES)
    ns["np"] = np
    ns["float32"] = np.float32
    ns["U"] = np.uint64
    ns.update({name: getattr(_simd, name) for name in _simd.__all__})  # (transpose, prefetch, ...)
    for module in (cpu_passes, cpu_resample):
        for name, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == module.__name__:
                marks = {"fastmath": getattr(fn, "fastmath", None), "inline": getattr(fn, "inline", None)}
                ns[name] = jit(**{k: v for k, v in marks.items() if v})(_compile.rebind(fn, ns))
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
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pool():
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            from .._threads import one_torch_thread

            _POOL = ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="gpudecode-kernel",
                                       initializer=one_torch_thread)
        return _POOL


def each_on_threads(work: Callable[[int], None], n: int, threads: int) -> None:
    """work(0), ..., work(n - 1) on up to `threads` threads, the calling one among them
    (the others the kernel's pool's, their torch ops on one thread each), each taking the
    next index when it is free: for per-image work of uneven sizes (canvas.build's torch
    warps). The first exception is raised once every thread has stopped; after it no
    index is started."""
    threads = max(1, min(threads, n))
    if threads == 1:
        for i in range(n):
            work(i)
        return
    lock = threading.Lock()
    left = iter(range(n))
    failed = threading.Event()

    def drain() -> None:
        while not failed.is_set():
            with lock:
                i = next(left, None)
            if i is None:
                return
            try:
                work(i)
            except BaseException:
                failed.set()
                raise

    futures = [_pool().submit(drain) for _ in range(threads - 1)]
    try:
        drain()
    finally:
        errors = [f.exception() for f in futures]  # (waits for each: the buffers stay until then)
    for error in errors:
        if error is not None:
            raise error


def cpu_work_shape(threads: int, wide: int, out_shape: tuple[int, ...], direct: bool) -> tuple[int, int]:
    """The CPU twin's float32 work rows, one per task: the resample's two planes over a
    source window `wide` pixels wide, AugMix's two images, and (unless the output is
    float32 written in place) the staging of one sample's output. Returns (threads,
    floats a row)."""
    oh, ow = out_shape[2], out_shape[3]
    main = 2 * oh * wide * 3 + 4 * ow * oh * 3  # (px, px2 and AugMix's two)
    return threads, main + (0 if direct else 3 * oh * ow)


def axis_taps(geom: np.ndarray) -> int:
    """The most filter taps any output pixel of these samples reads along one axis, bounded
    from above, at least 4 (cpu_passes._axis_taps, compiled: a launch's few microseconds)."""
    return int(_cpu_namespace()["_axis_taps"](geom))


def blur_field(src: np.ndarray, kx: np.ndarray, ky: np.ndarray, out: np.ndarray, pad: np.ndarray,
               tmp: np.ndarray) -> None:
    """`src` [h, w] float32 reflect-padded and blurred by kx along x, then ky along y (odd
    lengths, each half under its side), into `out` [h, w]; pad (w + len(kx) - 1) and tmp
    ([h, w]) the caller's scratch: cpu_passes._blur_field, compiled."""
    _cpu_namespace()["_blur_field"](src, kx, ky, out, pad, tmp)


def small_shapes(threads: int, taps: int, out_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, int], Any]]:
    """The CPU twin's small scratch, one row per task (cpu_resample._cpu_sample's ints,
    flts and stats): name -> (shape, dtype), for weights of up to `taps` taps."""
    oh, ow = out_shape[2], out_shape[3]
    return {"cpu-index": ((threads, 3 * (oh + ow) + 256), np.int64),
            "cpu-weights": ((threads, (oh + ow + 1) * taps + 768 + MAX_BLUR + 1 + 9), np.float32),
            "cpu-stats": ((threads, STAT_WIDTH), np.float64)}


def reserve_cpu(workspace: Any, threads: int, widest: int, out_shape: tuple[int, ...], largest: int = 0) -> None:
    """Makes `workspace` hold the CPU twin's work rows for `threads` tasks and source
    windows up to `widest` pixels (a batch's widest image: a window is never wider), so
    the crops a batch draws never make it grow, and its small scratch for weights of a
    source side up to `largest` (default `widest`) resampled to the output's smaller side
    or more (a frame smaller than the output, padded, may still need more: it grows then);
    what the pipeline declares per batch."""
    workspace.reserve("cpu-work", cpu_work_shape(threads, widest, out_shape, direct=False))
    side = max(1, min(out_shape[2], out_shape[3]))
    taps = max(4, int(4.0 * max(1.0, max(largest, widest) / side)) + 3)  # (a bicubic's radius: 2)
    for name, (shape, dtype) in small_shapes(threads, taps, out_shape).items():
        workspace.reserve(name, shape, dtype)


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
    if src.dtype != np.uint8:
        raise TypeError(f"the CPU kernel reads packed uint8 pixels, not {src.dtype}")
    if args.ndim == 2:
        args = step_args(args, order)
    threads = max(1, min(num_threads or os.cpu_count() or 1, n))
    oh, ow = out.shape[2], out.shape[3]
    nhwc = out.dtype == np.float32 and out.transpose(0, 2, 3, 1).flags.c_contiguous and not out.flags.c_contiguous
    direct = nhwc or (out.dtype == np.float32 and out.flags.c_contiguous)
    shape = cpu_work_shape(threads, int(geom[:, BW].max()), out.shape, direct)
    work = workspace.array("cpu-work", shape) if workspace is not None else np.empty(shape, np.float32)
    taps = axis_taps(geom)
    ints, flts, stats = (workspace.array(name, shape, dtype) if workspace is not None else np.empty(shape, dtype)
                         for name, (shape, dtype) in small_shapes(threads, taps, out.shape).items())
    main = shape[1] - (0 if direct else 3 * oh * ow)
    kernel = cpu_kernel()
    head = (src, geom, args, order, mean, std, normalize, out.dtype == np.uint8, antialias, out, direct, nhwc)
    tail = (fast_identity,)
    small = [(ints[t], flts[t], stats[t], taps) for t in range(threads)]
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
            kernel(*head, *parts[0], *small[0], 0, 1, *tail)
            return
        # parts 1.. on the pool, part 0 on this thread (which would only wait): one hand-off
        # and one thread woken fewer per call
        futures = [_pool().submit(kernel, *head, *parts[t], *small[t], t, threads, *tail) for t in range(1, threads)]
        try:
            kernel(*head, *parts[0], *small[0], 0, threads, *tail)
        except BaseException:
            for f in futures:  # (done before the buffers are let go)
                f.exception()
            raise
        for f in futures:
            f.result()
