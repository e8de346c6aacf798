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
import hashlib
from typing import Any, Sequence

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


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` (a 1-D tensor, pinned when `device` is CUDA) on `device`: one copy, not
    blocking the host, on the current stream (the pinned block is not reused by torch's
    host allocator before that copy is done); `host` itself on the CPU. Every upload of a
    decoder's host pixels goes through here (tests count the calls)."""
    if device.type != "cuda":
        return host
    return host.to(device, non_blocking=True)


def stage(arrays: Sequence[np.ndarray], device: torch.device) -> torch.Tensor:
    """Host arrays (uint8, any layout) packed one after the other, C order, into one 1-D
    tensor on `device`: on a CUDA device through one pinned staging buffer and one copy
    (to_device), however many arrays there are."""
    sizes = [int(a.size) for a in arrays]
    host = torch.empty(max(sum(sizes), 1), dtype=torch.uint8, pin_memory=device.type == "cuda")
    flat = host.numpy()
    at = 0
    for a, n in zip(arrays, sizes):
        flat[at:at + n].reshape(a.shape)[...] = a
        at += n
    return to_device(host, device)


def upload(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Host arrays (uint8, any layout) on `device`, each C-contiguous with its shape: on a
    CUDA device views of one stage() (one copy for them all); on the CPU tensors over the
    arrays themselves (a copy only where one is not writable or contiguous: torch takes
    no read-only arrays)."""
    if device.type != "cuda":
        return [torch.from_numpy(np.require(a, requirements=["C", "W"])) for a in arrays]
    dev = stage(arrays, device)
    out, at = [], 0
    for a in arrays:
        out.append(dev[at:at + a.size].view(a.shape))
        at += a.size
    return out


# A decoder that reuses its output buffers (nvImageCodec's ring of Images) and then, for one
# image of a batch, reports success without writing it would hand the kernel the pixels of
# an image decoded turns before: a wrong image under a right label, silently (seen with
# Blackwell's hardware JPEG decoder, LichtFeld-Studio#1924). So the first bytes of each
# reused buffer are set to this pattern before the decode, and an image whose first
# CANARY_BYTES (or its first row, if shorter) still hold it afterwards was not written. A
# decoded row of 16 pixels equal to these 48 bytes by chance: 2^-384 (a 1-pixel-wide
# image's 3 bytes: 2^-24, and that image is then refused, never trained on wrongly).
CANARY = np.frombuffer(hashlib.sha512(b"gpudecode: not written by the decoder").digest()[:48], np.uint8)
CANARY_BYTES = len(CANARY)


def _runs(offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(byte index in the span, index into CANARY, which entry) of every canary byte."""
    lengths = np.asarray(lengths, np.int64)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = np.arange(int(lengths.sum()), dtype=np.int64) - starts
    return np.asarray(offsets, np.int64)[owner] + pos, pos, owner


def poison(addresses: Sequence[int], lengths: Sequence[int], device: torch.device) -> None:
    """Writes CANARY's first lengths[k] bytes at addresses[k] (memory on `device` that the
    caller owns), in a fixed number of operations on the current stream, on any device."""
    if len(addresses) == 0:
        return
    view, offs = span(addresses, lengths, device)
    idx, pos, _ = _runs(offs, np.asarray(lengths))
    if device.type != "cuda":
        view.numpy()[idx] = CANARY[pos]
        return
    moved = to_device(_pinned(np.stack([idx, pos])), device)
    view[moved[0]] = _device_canary(device)[moved[1]]


class Untouched:
    """Which of the images checked by `unwritten()` still hold the canary: on a CUDA device
    the comparison runs on the current stream and its answer comes back without blocking;
    `result()` waits for it (the caller asks when the pixels are about to be used)."""

    def __init__(self, flags: torch.Tensor, event: Any, which: list[int]) -> None:
        self._flags, self._event, self.which = flags, event, which

    def result(self) -> list[int]:
        """The entries of `which` whose canary is intact (their image was not written)."""
        if self._event is not None:
            self._event.synchronize()
        hit = self._flags.numpy()
        return [k for k, untouched in zip(self.which, hit) if untouched]


def unwritten(addresses: Sequence[int], lengths: Sequence[int], which: list[int], device: torch.device) -> Untouched:
    """Checks whether the first lengths[k] bytes at addresses[k] still hold the canary that
    poison() wrote (entry k stands for image which[k])."""
    if len(addresses) == 0:
        return Untouched(torch.zeros(0, dtype=torch.bool), None, [])
    view, offs = span(addresses, lengths, device)
    idx, pos, owner = _runs(offs, np.asarray(lengths))
    if device.type != "cuda":
        same = view.numpy()[idx] == CANARY[pos]
        differ = np.bincount(owner, weights=~same, minlength=len(addresses))
        return Untouched(torch.from_numpy(differ == 0), None, which)
    moved = to_device(_pinned(np.stack([idx, pos, owner])), device)
    mismatches = torch.zeros(len(addresses), dtype=torch.int32, device=device)
    mismatches.index_add_(0, moved[2], (view[moved[0]] != _device_canary(device)[moved[1]]).to(torch.int32))
    host = torch.empty(len(addresses), dtype=torch.bool, pin_memory=True)
    host.copy_(mismatches == 0, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return Untouched(host, event, which)


def _pinned(a: np.ndarray) -> torch.Tensor:
    host = torch.empty(a.shape, dtype=torch.from_numpy(a[:0]).dtype, pin_memory=True)
    host.numpy()[...] = a
    return host


_CANARY_ON: dict[torch.device, torch.Tensor] = {}


def _device_canary(device: torch.device) -> torch.Tensor:
    t = _CANARY_ON.get(device)
    if t is None:
        t = _CANARY_ON[device] = torch.from_numpy(CANARY.copy()).to(device)
    return t
