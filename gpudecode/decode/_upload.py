"""Host pixels onto a CUDA device through a ring of buffers (`UploadRing`): the one upload
path of the split decoder's host engines and of the Loader's pipeline (a CPU decoder on a
GPU machine)."""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["UploadRing"]


class UploadRing:
    """`depth` turns of device buffers (and page-locked staging buffers): the upload of turn
    k lands in device buffer k, valid until turn k comes round again (the caller sizes
    `depth` so that no result it still uses is written). Buffers grow by a quarter past
    the largest upload seen, so a run of like batches never allocates again. On a CPU
    device (tests) the same turns, with plain memory and synchronous copies."""

    def __init__(self, device: torch.device, depth: int) -> None:
        self.device, self.depth = device, depth
        self.cuda = device.type == "cuda"
        self.uploads: list[torch.Tensor | None] = [None] * depth  # device buffers, one a turn
        self.staging: list[torch.Tensor | None] = [None] * depth  # page-locked host buffers
        self.staged: list[Any] = [None] * depth  # the copy out of staging[k] is done at this event

    def staging_buffer(self, turn: int, n: int) -> torch.Tensor:
        """Turn's page-locked staging buffer, `n` bytes, once the last copy out of it is done:
        a caller that writes a batch there and then upload()s that very tensor saves
        upload's copy into it (a resident store's windows are gathered straight into it)."""
        k = turn % self.depth
        if self.staged[k] is not None:
            self.staged[k].synchronize()  # (the last copy out of this staging buffer is done)
            self.staged[k] = None
        buf = self.staging[k]
        if buf is None or buf.numel() < n:
            buf = self.staging[k] = torch.empty(int(n * 1.25) + 1, dtype=torch.uint8, pin_memory=self.cuda)
        return buf[:n]

    def upload(self, pixels: torch.Tensor, turn: int, *, stage: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(the pixels on the device, the host tensor copied from), on the current stream,
        without blocking the host: copied first into turn's page-locked staging buffer when
        `stage` (pageable memory cannot be copied asynchronously; pixels that are that
        buffer already, from staging_buffer(), are not copied), then uploaded."""
        k = turn % self.depth
        host = pixels.reshape(-1)
        n = host.numel()
        if stage:
            buf = self.staging[k]
            if buf is None or host.data_ptr() != buf.data_ptr() or buf.numel() < n:  # (not written there)
                buf = self.staging_buffer(turn, n)
                buf.copy_(host)
            host = buf[:n]
        dev = self.uploads[k]
        if dev is None or dev.numel() < n:
            dev = self.uploads[k] = torch.empty(int(n * 1.25) + 1, dtype=torch.uint8, device=self.device)
        dev[:n].copy_(host, non_blocking=True)
        if stage and self.cuda:
            self.staged[k] = torch.cuda.Event()
            self.staged[k].record(torch.cuda.current_stream(self.device))
        return dev[:n], host
