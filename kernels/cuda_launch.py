"""Launching the fused CUDA kernels on torch tensors: torch's current stream (through
cuda.external_stream), tensors passed by __cuda_array_interface__, no synchronize."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import fused


def run(src, geom: np.ndarray, factors: np.ndarray, order: np.ndarray, mean: np.ndarray, std: np.ndarray,
        view, *, normalize: bool, antialias: bool, stream: Any = None) -> None:
    """`src` (uint8, 1-D) and `view` ([N, 3, h, w], any strides) are CUDA tensors; the
    small per-sample arrays are copied to the device on the same stream."""
    import torch
    from numba import cuda

    dev = src.device
    n, _, oh, ow = view.shape
    if n == 0:
        return
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    # inside the tensor's device context: a thread whose current device is another one (the
    # Loader's threads, precache --device cuda:1) must not launch that device's module here
    with torch.cuda.device(index), cuda.gpus[index]:
        _run(src, geom, factors, order, mean, std, view, dev, normalize=normalize, antialias=antialias,
             stream=stream if stream is not None else torch.cuda.current_stream(dev))


def _run(src, geom, factors, order, mean, std, view, dev, *, normalize: bool, antialias: bool, stream: Any) -> None:
    import torch
    from numba import cuda

    n, _, oh, ow = view.shape
    ts = stream
    nb_stream = cuda.external_stream(ts.cuda_stream)
    with torch.cuda.stream(ts):
        # pinned staging: torch's host allocator keeps each buffer until its copy is done
        g, f, o, m, s = (torch.from_numpy(a).pin_memory().to(dev, non_blocking=True)
                         for a in (geom, factors, order, mean, std))
        if view.dtype == torch.float32:
            scratch = view  # each thread reads its own pixel before writing it
        else:
            scratch = torch.empty((n, 3, oh, ow), dtype=torch.float32, device=dev)
        gray_sum = torch.zeros(n, dtype=torch.float64, device=dev)
    src_d, g_d, f_d, o_d, m_d, s_d, out_d, scratch_d, gray_d = (
        cuda.as_cuda_array(t) for t in (src, g, f, o, m, s, view, scratch, gray_sum))
    fused.fused_cuda(src_d, g_d, f_d, o_d, m_d, s_d, out_d, normalize=normalize, antialias=antialias,
                     stream=nb_stream, scratch=scratch_d, gray_sum=gray_d)
