"""Launching the fused CUDA kernels on torch tensors: torch's current stream (through
cuda.external_stream), tensors passed by __cuda_array_interface__, no synchronize."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import fused
from .ops import AUX_MASK, HISTOGRAM_MASK, has
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
        _run(src, geom, args, order, mean, std, view, dev, normalize=normalize, antialias=antialias,
             stream=stream if stream is not None else torch.cuda.current_stream(dev),
             ws=workspace if workspace is not None else Workspace())


def _run(src, geom, args, order, mean, std, view, dev, *, normalize: bool, antialias: bool, stream: Any,
         ws: Workspace) -> None:
    import torch
    from numba import cuda

    n, _, oh, ow = view.shape
    levels = fused.barrier_levels(order)
    equalize = bool(has(order, HISTOGRAM_MASK).any())
    ts = stream
    nb_stream = cuda.external_stream(ts.cuda_stream)
    with torch.cuda.stream(ts):
        # the per-sample arrays through the workspace's pinned buffers (rewritten only once
        # their last copy has completed), the rest declared by the kernels and kept there
        g, a, o, m, s, st = (ws.upload(name, np.ascontiguousarray(x), dev) for name, x in (
            ("geom", geom), ("args", args), ("order", order), ("mean", mean), ("std", std),
            ("stats", fused.stats_init(n, levels))))
        ws.uploaded()
        scratch = ws.tensor("scratch", fused.scratch_shape(n, levels, oh, ow), torch.float32, dev)
        hist = ws.tensor("hist", fused.hist_shape(n, levels, equalize), torch.int32, dev, zero=True)
        aux = ws.tensor("aux", fused.aux_shape(n, bool(has(order, AUX_MASK).any()), oh, ow), torch.float32,
                        dev)
    src_d, g_d, a_d, o_d, m_d, s_d, out_d, scratch_d, st_d, hist_d, aux_d = (
        cuda.as_cuda_array(t) for t in (src, g, a, o, m, s, view, scratch, st, hist, aux))
    # a variant's first launch in a process compiles it (or loads it from the disk cache): said on stderr when slow
    variant = ("cuda", str(dev), str(view.dtype), view.is_contiguous())
    with fused.first_use(variant, "CUDA"):
        fused.fused_cuda(src_d, g_d, a_d, o_d, m_d, s_d, out_d, normalize=normalize, antialias=antialias,
                         stream=nb_stream, scratch=scratch_d, stats=st_d, hist=hist_d, aux=aux_d, levels=levels)
