"""nvJPEG through torchvision: torchvision.io.decode_jpeg(list, device="cuda") decodes a
batch of JPEGs on the GPU (whole images: the crop is applied by the fused kernel).
Non-JPEG images are decoded on the CPU and copied over. With device="cpu" the same
code path runs torchvision's CPU decoder (tests)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ._base import DecodedBatch, Request
from .cpu import host_rgb


class NvjpegDecoder:
    name = "nvjpeg"

    def __init__(self, *, device: str = "cuda", max_pixels: int = 0) -> None:
        self.device = device
        self.max_pixels = max_pixels

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        from torchvision.io import ImageReadMode, decode_jpeg

        n = len(requests)
        errors: list[str | None] = [None] * n
        images: dict[int, torch.Tensor] = {}
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
        jpeg = [k for k, r in enumerate(requests) if r.format == "jpeg" and errors[k] is None]
        if jpeg:
            data = [torch.frombuffer(bytearray(requests[k].data), dtype=torch.uint8) for k in jpeg]
            try:
                outs = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
                images.update(zip(jpeg, outs))
            except Exception:  # find the bad one(s)
                for k, d in zip(jpeg, data):
                    try:
                        images[k] = decode_jpeg(d, mode=ImageReadMode.RGB, device=self.device)
                    except Exception as e:
                        errors[k] = f"decode_jpeg: {str(e).splitlines()[0]}"
        for k, r in enumerate(requests):
            if r.format != "jpeg" and errors[k] is None:
                try:
                    a = host_rgb(r, self.max_pixels)
                    images[k] = torch.from_numpy(np.array(a.transpose(2, 0, 1), order="C")).to(self.device)
                except Exception as e:  # this image's error, not the batch's
                    errors[k] = f"{type(e).__name__}: {e}"
        offsets = np.zeros(n, np.int64)
        shapes = np.zeros((n, 2), np.int64)
        total = 0
        for k in range(n):
            offsets[k] = total
            if k in images:
                shapes[k] = images[k].shape[1:]
                total += images[k].numel()
        pixels = torch.empty(max(total, 1), dtype=torch.uint8, device=self.device)
        for k, im in images.items():
            pixels[offsets[k]:offsets[k] + im.numel()].copy_(im.reshape(-1))
        boxes = np.array([r.box for r in requests], np.int64).reshape(n, 4)
        return DecodedBatch(pixels, offsets, shapes, boxes, errors, chw=True)
