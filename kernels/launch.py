"""Launching the fused kernels on torch tensors: one entry for both targets (the CUDA
kernels on the tensors' device and stream, or the CPU twin on host threads), and the
mapping of a failed CUDA launch to the project's error."""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ..errors import KernelLaunchError
from .cpu_twin import fused_cpu
from .workspace import Workspace

MAX_CUDA_BATCH = 65535  # the kernels' grid is (columns, rows, images): gridDim.z's limit


def launch_failure(err: BaseException, shape: tuple[int, ...], device: str) -> KernelLaunchError | None:
    """`err`, raised launching the fused CUDA kernel, as a KernelLaunchError when it is
    the driver's, the compiler's or numba's (a bad launch, an unsupported GPU or PTX, a
    typing error), naming the output shape and device; None for anything else (out of
    memory, a bug), which stays what it is."""
    from numba.core.errors import NumbaError
    from numba.cuda.cudadrv import driver, error

    names = ("CudaAPIError", "CudaDriverError", "CudaSupportError", "LinkerError", "CudaRuntimeError", "NvvmError",
             "NvrtcError")  # (the simulator's driver module has only some of them)
    kinds = (NumbaError, *{k for m in (driver, error) for n in names if isinstance(k := getattr(m, n, None), type)})
    if not isinstance(err, kinds):
        return None
    detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return KernelLaunchError(f"the fused CUDA kernel could not be launched on {device} for an output of "
                             f"{list(shape)}: {type(err).__name__}{': ' + detail if detail else ''}")



def launch(src, geom: np.ndarray, args: np.ndarray, order: np.ndarray, mean: np.ndarray, std: np.ndarray, view, *,
           normalize: bool, antialias: bool, stream: Any = None, num_threads: int | None = None,
           workspace: Workspace | None = None) -> None:
    """Runs the fused kernel on a packed uint8 tensor `src` (1-D, CPU or CUDA) with
    complete geom rows, writing the [N, 3, h, w] tensor `view` (any strides, on src's
    device; a channel stride of 0: one channel, the three equal values written to it): on
    CUDA on `stream` (default: torch's current one), on the CPU with `num_threads` threads
    (default all cores). `workspace`: the buffers the kernel works in, kept by the caller
    between launches; without one they are made for this call.

    Raises:
        KernelLaunchError: the CUDA kernel could not be compiled or launched (names the
            batch shape and device; the driver's error as __cause__).
    """
    import torch

    if view.dtype == torch.bfloat16 or (view.dtype == torch.float16 and not src.is_cuda):
        # (no bfloat16 stores in either numba target, no float16 in numba's CPU one: the kernel writes
        # float32 and torch casts it, rounding to nearest, ties to even, on the kernel's stream)
        flat = (workspace.tensor("16-bit-staging", (view.numel(),), torch.float32, view.device)
                if workspace is not None else torch.empty(view.numel(), dtype=torch.float32, device=view.device))
        # laid out as `view` is where it is dense in some order (NHWC's permuted view): the cast then runs
        # over memory in order, not across strides
        dense = min(view.stride()) >= 0 and sum((n - 1) * st for n, st in zip(view.shape, view.stride())) + 1 == \
            view.numel()
        staging = flat.as_strided(tuple(view.shape), view.stride()) if dense else flat.view(tuple(view.shape))
        launch(src, geom, args, order, mean, std, staging, normalize=normalize, antialias=antialias, stream=stream,
               num_threads=num_threads, workspace=workspace)
        with torch.cuda.stream(stream) if src.is_cuda and stream is not None else contextlib.nullcontext():
            if view.stride(1) == 0:  # (one channel written three times: its memory once)
                view[:, :1].copy_(staging[:, :1])
            else:
                view.copy_(staging)
        return
    if not src.is_cuda and view.stride(1) == 0 and bool((np.asarray(order) < 0).all()):
        # (one channel written three times, no program: the CPU twin's 1:1 and direct paths write a dense batch, so
        # it writes one in the workspace and its first channel is copied out; a sample with a program is staged by
        # the twin anyway, which then copies its first channel alone)
        staging = (workspace.tensor("one-channel-staging", tuple(view.shape), view.dtype, view.device)
                   if workspace is not None else torch.empty(tuple(view.shape), dtype=view.dtype))
        launch(src, geom, args, order, mean, std, staging, normalize=normalize, antialias=antialias,
               num_threads=num_threads, workspace=workspace)
        view[:, :1].copy_(staging[:, :1])
        return
    if src.is_cuda:
        from . import cuda_launch

        if view.shape[0] > MAX_CUDA_BATCH:
            raise KernelLaunchError(f"a batch of {view.shape[0]} images is over the {MAX_CUDA_BATCH} one CUDA "
                                    "grid holds (its z dimension): use a smaller batch_size")
        try:
            cuda_launch.run(src, geom, args, order, mean, std, view, normalize=normalize, antialias=antialias,
                            stream=stream, workspace=workspace)
        except Exception as e:
            failed = launch_failure(e, tuple(view.shape), str(src.device))
            if failed is None:
                raise
            raise failed from e
        return
    fused_cpu(src.numpy(), geom, args, order, mean, std, view.numpy(), normalize=normalize, antialias=antialias,
              num_threads=num_threads, workspace=workspace)
