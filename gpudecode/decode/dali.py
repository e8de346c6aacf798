"""nvJPEG through NVIDIA DALI: the reader's bytes go in through fn.external_source, the
crop windows drawn by our transforms through two more, and fn.decoders.image_slice
decodes only the window (ROI decoding in nvJPEG; the hardware decoder where the GPU has
one). The pipeline is defined once with a device parameter: "mixed" on a GPU (CPU bytes
in, GPU pixels out), "cpu" where there is none (tests)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..tensors import npy_rgb
from ._base import DecodedBatch, Request


def dali_decode_pipeline(*, device: str, batch_size: int, num_threads: int, device_id: int | None,
                         hw_decoder_load: float = 0.65):
    """The DALI pipeline: inputs "encoded" (uint8 bytes), "anchor" (x, y) and "shape"
    (w, h) per sample; output: the RGB uint8 window, HWC. device: "mixed" or "cpu"."""
    from nvidia.dali import fn, pipeline_def, types

    extra = {"hw_decoder_load": hw_decoder_load} if device == "mixed" else {}

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id,  # type: ignore[arg-type]
                  prefetch_queue_depth=1)
    def pipe():
        encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
        anchor = fn.external_source(name="anchor", dtype=types.FLOAT, ndim=1)
        shape = fn.external_source(name="shape", dtype=types.FLOAT, ndim=1)
        return fn.decoders.image_slice(encoded, anchor, shape, device=device, output_type=types.RGB,
                                       axis_names="WH", normalized_anchor=False, normalized_shape=False, **extra)

    return pipe()


class DaliDecoder:
    """Decodes JPEG and PNG (and what else DALI reads) crop windows with DALI; tensor
    samples (.npy) need no decoding: their window is copied."""

    name = "dali"

    def __init__(self, *, device: str = "cuda", num_threads: int = 2, max_pixels: int = 0,
                 max_batch_size: int = 256) -> None:
        self.device = device
        self.max_pixels = max_pixels
        self.max_batch_size = max_batch_size
        on_gpu = device.startswith("cuda")
        device_id = torch.device(device).index if on_gpu else None
        if on_gpu and device_id is None:
            device_id = torch.cuda.current_device()
        self._pipe = dali_decode_pipeline(device="mixed" if on_gpu else "cpu", batch_size=max_batch_size,
                                          num_threads=num_threads, device_id=device_id)
        self._pipe.build()
        self._on_gpu = on_gpu

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        n = len(requests)
        errors: list[str | None] = [None] * n
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
        outs: dict[int, Any] = {}
        for k, r in enumerate(requests):  # tensor samples: nothing to decode, copy the window
            if r.format == "npy" and errors[k] is None:
                try:
                    t, l, h, w = r.box
                    outs[k] = npy_rgb(r.data)[t:t + h, l:l + w].copy()  # writable, contiguous
                except Exception as e:  # this image's error, not the batch's
                    errors[k] = f"{type(e).__name__}: {e}"
        ok = [k for k in range(n) if errors[k] is None and requests[k].format != "npy"]
        for start in range(0, len(ok), self.max_batch_size):
            part = ok[start:start + self.max_batch_size]
            try:
                outs.update(zip(part, self._run(part, requests)))
            except Exception:  # one bad image fails DALI's whole batch: find it
                for k in part:
                    try:
                        outs[k] = self._run([k], requests)[0]
                    except Exception as e:
                        errors[k] = f"DALI: {str(e).splitlines()[0]}"
        shapes = np.zeros((n, 2), np.int64)
        offsets = np.zeros(n, np.int64)
        total = 0
        for k in range(n):
            offsets[k] = total
            if k in outs:
                shapes[k] = outs[k].shape[:2] if isinstance(outs[k], np.ndarray) else outs[k].shape()[:2]
                total += int(shapes[k, 0] * shapes[k, 1] * 3)
        dev = torch.device(self.device if self._on_gpu else "cpu")
        pixels = torch.empty(max(total, 1), dtype=torch.uint8, device=dev)
        for k, t in outs.items():
            h, w = shapes[k]
            dst = pixels[offsets[k]:offsets[k] + h * w * 3].view(int(h), int(w), 3)
            if isinstance(t, np.ndarray):
                dst.copy_(torch.from_numpy(t))
            elif self._on_gpu:
                from nvidia.dali.plugin.pytorch import feed_ndarray

                feed_ndarray(t, dst, cuda_stream=torch.cuda.current_stream(dev).cuda_stream)
            else:
                dst.copy_(torch.from_numpy(np.asarray(t)))
        boxes = np.zeros((n, 4), np.int64)
        boxes[:, 2:] = shapes
        return DecodedBatch(pixels, offsets, shapes, boxes, errors)

    def _run(self, idx: list[int], requests: Sequence[Request]) -> list:
        enc = [np.frombuffer(requests[k].data, np.uint8) for k in idx]
        anchor = [np.array([requests[k].box[1], requests[k].box[0]], np.float32) for k in idx]
        shape = [np.array([requests[k].box[3], requests[k].box[2]], np.float32) for k in idx]
        self._pipe.feed_input("encoded", enc)
        self._pipe.feed_input("anchor", anchor)
        self._pipe.feed_input("shape", shape)
        (out,) = self._pipe.run()
        return [out[i] for i in range(len(idx))]
