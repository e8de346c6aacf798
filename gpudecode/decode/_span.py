"""Zero-copy views over images a decoder left in separate allocations.

A decoder that returns one buffer per image (nvImageCodec's Images, torchcodec's tensors)
need not have its images copied into one packed buffer for the kernel: the kernel reads
image k at `pixels[offsets[k] + ...]`, so `pixels` can be a byte view running from the
lowest image address to the end of the highest, and `offsets[k]` each image's distance
from that start. On a CUDA device every allocation lives in one virtual address space;
on the host, in the process's. Only the bytes of each image are ever read through the
view (the gaps between allocations never are), and the DecodedBatch's `owner` keeps the
images alive while the view is in use.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np
import torch


class _CudaBytes:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to wrap `n` bytes at `ptr`."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


def span(addresses: Sequence[int], sizes: Sequence[int], device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """(1-D uint8 view from min(addresses) to max(address + size), each address's offset
    in it) over memory on `device` (CPU or CUDA). The caller keeps that memory alive."""
    if len(addresses) == 0:
        return torch.empty(0, dtype=torch.uint8, device=device), np.zeros(0, np.int64)
    addr = np.asarray(addresses, np.int64)
    end = addr + np.asarray(sizes, np.int64)
    base = int(addr.min())
    length = max(int(end.max()) - base, 1)
    if device.type == "cuda":
        with torch.cuda.device(device):
            view = torch.as_tensor(_CudaBytes(base, length), device=device)
    else:
        raw = (ctypes.c_uint8 * length).from_address(base)
        view = torch.from_numpy(np.ctypeslib.as_array(raw))
    return view, addr - base
