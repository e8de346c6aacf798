"""torchcodec: PyTorch's own image decoders (the successor of torchvision.io's). JPEGs of a
batch are decoded in one call, on the GPU with nvJPEG (device "cuda") or on the CPU
(device "cpu", which tests use); whole images, the crop is the kernel's. PNG (pyspng),
tensor samples (.npy) and the rest (Pillow) go through the host decoders, as with the
CPU decoder, and are then moved to the device (a batch's in one copy from pinned memory).
The decoded tensors are not copied into a packed buffer: the batch's pixels are a view
spanning them (gpudecode.decode._span).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Request, strip_exif
from ._span import span, upload
from .cpu import host_rgb


def _decoders():
    try:
        from torchcodec import decoders
    except Exception as e:  # ImportError, or torchcodec's own error for a torch it was not built for
        raise BackendUnavailableError(f"decoder 'torchcodec' needs torchcodec built for this torch ({e}): "
                                      "pip install 'gpudecode[gpu]'") from e
    why = missing_api(decoders)
    if why:
        raise BackendUnavailableError(f"decoder 'torchcodec': {why}")
    return decoders


def missing_api(decoders: Any) -> str:
    """"" when torchcodec's `decoders` module has what this decoder calls (decode_jpeg of a
    list of sources with device=, torchcodec 0.16 and later), else what is missing."""
    import inspect

    fn = getattr(decoders, "decode_jpeg", None)
    if fn is None:
        return ("this torchcodec has no decoders.decode_jpeg (0.16 and later have it): pip install "
                "'torchcodec>=0.16' built for this torch")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return ""
    if "device" not in params:
        return "this torchcodec's decoders.decode_jpeg takes no device= (GPU decoding): pip install 'torchcodec>=0.16'"
    return ""


class TorchcodecDecoder:
    name = "torchcodec"
    buffers = None  # every batch owns its tensors
    decodes_windows = False  # whole images: the kernel reads each box inside

    def __init__(self, *, device: str = "cuda", max_pixels: int = 0) -> None:
        self._d = _decoders()
        self.device = device
        self.max_pixels = max_pixels
        self._dev = torch.device(device)
        import torchcodec

        where = "nvJPEG on " + device if self._dev.type == "cuda" else "its CPU decoder (libjpeg-turbo)"
        self.backend = (f"torchcodec {getattr(torchcodec, '__version__', '?')}: JPEG by decode_jpeg, {where}, whole "
                        "images; PNG and the rest on the host")

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        d = self._d
        rgb = d.ImageReadMode.RGB
        n = len(requests)
        errors: list[str | None] = [None] * n
        images: dict[int, torch.Tensor] = {}  # CHW uint8 (torchcodec) or HWC (host windows)
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
        jpeg = [k for k, r in enumerate(requests) if r.format == "jpeg" and errors[k] is None]
        if jpeg:
            # torchcodec always applies the EXIF orientation: without the EXIF segment it has none
            data = {k: strip_exif(bytes(requests[k].data)) for k in jpeg}
            try:
                images.update(zip(jpeg, d.decode_jpeg([data[k] for k in jpeg], mode=rgb, device=self.device)))
            except Exception:  # one bad image fails the call: find it
                for k in jpeg:
                    try:
                        images[k] = d.decode_jpeg(data[k], mode=rgb, device=self.device)
                    except Exception as e:
                        errors[k] = f"torchcodec: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        hwc: dict[int, np.ndarray] = {}  # decoded on the host (HWC), uploaded below in one copy
        for k, r in enumerate(requests):
            if errors[k] is not None or k in images:
                continue
            try:
                host = host_rgb(r, self.max_pixels)
                if r.format == "npy":  # only the window travels to the device
                    t, l, bh, bw = r.box
                    host = host[t:t + bh, l:l + bw]
                hwc[k] = host
            except Exception as e:  # this image's error, not the batch's
                errors[k] = f"{type(e).__name__}: {e}"
        if hwc:
            order = sorted(hwc)
            images.update(zip(order, upload([hwc[k] for k in order], self._dev)))
        addresses, sizes, order = [], [], []
        shapes = np.zeros((n, 2), np.int64)
        strides = np.zeros((n, 3), np.int64)
        boxes = np.zeros((n, 4), np.int64)
        for k in range(n):
            img = images.get(k)
            if img is None or errors[k] is not None:
                continue
            if k in hwc:
                h, w, _ = img.shape
                sy, sx, sc = img.stride()
            else:  # torchcodec gives CHW
                _, h, w = img.shape
                sc, sy, sx = img.stride()
            window = requests[k].format == "npy"
            if not window and (h, w) != (requests[k].height, requests[k].width):
                errors[k] = f"decoded size {(h, w)} differs from the header's {(requests[k].height, requests[k].width)}"
                continue
            addresses.append(img.data_ptr())
            sizes.append(sy * (h - 1) + sx * (w - 1) + sc * 2 + 1)  # to its last byte
            order.append(k)
            shapes[k] = h, w
            strides[k] = sy, sx, sc
            # whole images: the requested box inside them; a tensor sample's window is all of it
            boxes[k] = (0, 0, h, w) if window else requests[k].box
        pixels, offs = span(addresses, sizes, self._dev)
        offsets = np.zeros(n, np.int64)
        offsets[order] = offs
        owner: Any = images
        return DecodedBatch(pixels, offsets, shapes, strides, boxes, errors, owner=owner)

    def close(self) -> None:
        pass
