"""Launching the fused CUDA kernels on torch tensors: torch's current stream (through
cuda.external_stream), tensors passed by __cuda_array_interface__, no synchronize."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fused
from .ops import AUX_MASK, BARRIER_MASK, HISTOGRAM_MASK, op_bits
from .workspace import Workspace


def run(src, geom: np.ndarray, args: np.ndarray, order: np.ndarray, mean: np.ndarray, std: np.ndarray,
        view, *, normalize: bool, antialias: bool, stream: Any = None, workspace: Workspace | None = None) -> None:
    """`src` (uint8, 1-D) and `view` ([N, 3, h, w], any strides) are CUDA tensors; the
    small per-sample arrays (args [N, K, ARGS], or factors [N, NUM_OPS] by op id) are
    copied to the device on the same stream. The scratch, statistics, histograms, aux
    planes and those copies are kept in `workspace` (the caller's, reused launch after
    launch on one stream; without one, a new one for this launch)."""
    import torch
    from numba import cuda

    dev = src.device
    n, _, oh, ow = view.shape
    if n == 0:
        return
    if args.ndim == 2:
        args = fused.step_args(args, order)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    # inside the tensor's device context: a thread whose current device is another one (the
    # Loader's threads, precache --device cuda:1) must not launch that device's module here
    with torch.cuda.device(index), cuda.gpus[index]:
        _run(src, geom, args, order, mean, std, view, dev, index, normalize=normalize, antialias=antialias,
             stream=stream if stream is not None else torch.cuda.current_stream(dev),
             ws=workspace if workspace is not None else Workspace())


def _run(src, geom, args, order, mean, std, view, dev, index: int, *, normalize: bool, antialias: bool,
         stream: Any, ws: Workspace) -> None:
    import torch
    from numba import cuda

    nb_stream = _external_stream(index, stream.cuda_stream)
    with torch.cuda.stream(stream):
        arrays, levels = launch_arrays(src, geom, args, order, mean, std, view, ws, cuda.as_cuda_array)
    # a variant's first launch in a process compiles it (or loads it from the disk cache): said on stderr when slow
    variant = ("cuda", str(dev), str(view.dtype), view.is_contiguous())
    with fused.first_use(variant, "CUDA"):
        fused.fused_cuda(*arrays[:7], normalize=normalize, antialias=antialias, stream=nb_stream, scratch=arrays[7],
                         stats=arrays[8], hist=arrays[9], aux=arrays[10], levels=levels, ragged=arrays[11])


def launch_arrays(src, geom: np.ndarray, args: np.ndarray, order: np.ndarray, mean: np.ndarray, std: np.ndarray,
                  view, ws: Workspace, convert: Callable[[Any], Any]) -> tuple[tuple, int]:
    """The kernels' eleven array arguments (src, geom, args, order, mean, std, out,
    scratch, stats, hist, aux), each converted by `convert` (numba's wrapper of a CUDA
    tensor), then whether a sample is smaller than the batch (layout.own_sizes: `geom`'s
    OH, OW are set on the way up), and the batch's barrier levels. The per-sample arrays and the statistics'
    starting values go up in one copy on the current stream (ws.upload_packed); the
    buffers and their wrappers are the workspace's, made at a launch's first use of a
    shape: a launch after it converts only `src` and `view`. Device-agnostic (on CPU
    tensors with a numpy `convert` it runs under the CUDA simulator: tests)."""
    import torch

    n, _, oh, ow = view.shape
    dev = src.device
    geom, ragged = fused.own_sizes(geom, oh, ow)
    bits = op_bits(order)  # (read once for the three questions below)
    levels = int(np.count_nonzero(bits & BARRIER_MASK, axis=1).max()) if order.size else 0
    equalize = bool((bits & HISTOGRAM_MASK).any())
    mix = bool((bits & AUX_MASK).any())
    # (no barrier: the kernels never read the statistics, so they get one sample's, as scratch does)
    g, a, o, m, s, st = ws.upload_packed("launch", [np.ascontiguousarray(x) for x in (
        geom, args, order, mean, std, _stats_start(n if levels else 1, levels))], dev, convert=convert)
    if dev.type == "cuda":
        ws.uploaded()
    _, scratch = ws.converted_tensor("scratch", fused.scratch_shape(n, levels, oh, ow), torch.float32, dev, convert)
    hist_t, hist = ws.converted_tensor("hist", fused.hist_shape(n, levels, equalize), torch.int32, dev, convert)
    hist_t.zero_()
    _, aux = ws.converted_tensor("aux", fused.aux_shape(n, mix, oh, ow), torch.float32, dev, convert)
    return (convert(src), g, a, o, m, s, convert(view), scratch, st, hist, aux, ragged), levels


@functools.lru_cache(maxsize=8)
def _stats_start(n: int, levels: int) -> np.ndarray:
    """fused.stats_init(n, levels), made once for each size (read-only: it is only sent)."""
    st = fused.stats_init(n, levels)
    st.flags.writeable = False
    return st


@functools.lru_cache(maxsize=64)
def _external_stream(index: int, handle: int) -> Any:
    """numba's object for torch's stream `handle` on device `index` (made once: a launch
    on the same stream reuses it; the object owns nothing)."""
    from numba import cuda

    return cuda.external_stream(handle)
