"""nvImageCodec: NVIDIA's batched decoder front end (nvJPEG, the A100/H100 hardware JPEG
decoder, nvJPEG2000, nvTIFF, and CPU codecs), the decoder DALI itself uses.

Each batch's crop windows are decoded as regions of interest in one call: JPEG, PNG,
WebP, TIFF, BMP, JPEG 2000 ... come out RGB, HWC, one Image per window, on the GPU
(device "cuda") or the host (device "cpu", which tests use). The Images are not copied
into a packed buffer: the batch's pixels are a view spanning them (gpudecode.decode._span)
and the DecodedBatch keeps them alive. Tensor samples (.npy) are windows copied from
their bytes (and uploaded, on a GPU). What nvImageCodec cannot decode is tried by the
host decoders (Pillow, pyspng), and if they fail too the image's error says why.

hw_load: the share of each batch given to the hardware JPEG decoder where the GPU has
one (A100, H100, ...; default 0.65 as DALI's default suggests, unmeasured here); the rest
goes to the CUDA nvJPEG decoder.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Request
from ._span import span
from .cpu import host_rgb


def _module():
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise BackendUnavailableError(f"decoder 'nvimgcodec' needs NVIDIA nvImageCodec ({e}): "
                                      "pip install 'gpudecode[gpu]'") from e
    return nvimgcodec


class NvImageCodecDecoder:
    """Decodes into a ring of `buffers` sets of Images, reused turn by turn (nvImageCodec
    resizes an Image's buffer in place): no allocation per image once the ring is warm. A
    batch's Images are valid until the decoder's turn comes round to them again (the
    Loader keeps that many batches in flight, and waits for a batch's kernel before
    its turn is reused)."""

    name = "nvimgcodec"

    def __init__(self, *, device: str = "cuda", num_threads: int = 0, max_pixels: int = 0,
                 hw_load: float = 0.65, buffers: int = 3) -> None:
        if not 0.0 <= hw_load <= 1.0:
            raise ValueError(f"hw_load must be in [0, 1], not {hw_load}")
        if buffers < 1:
            raise ValueError("buffers must be >= 1")
        self.buffers = buffers
        self._ring: list[list[Any]] = [[] for _ in range(buffers)]
        self._turn = 0
        n = _module()
        self._n = n
        self.device = device
        self.max_pixels = max_pixels
        self.hw_load = hw_load
        self._dev = torch.device(device)
        # Pillow-exact JPEG: fancy upsampling (libjpeg's default, and nvImageCodec's CPU codec's)
        options = ":fancy_upsampling=1"
        if self._dev.type == "cpu":
            self._decoder = n.Decoder(device_id=n.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=num_threads,
                                      backends=[n.Backend(n.BackendKind.CPU_ONLY)], options=options)
        else:
            index = self._dev.index if self._dev.index is not None else torch.cuda.current_device()
            backends = [n.Backend(n.BackendKind.GPU_ONLY, load_hint=1.0),
                        n.Backend(n.BackendKind.HYBRID_CPU_GPU), n.Backend(n.BackendKind.CPU_ONLY)]
            if hw_load > 0:
                backends.insert(0, n.Backend(n.BackendKind.HW_GPU_ONLY, load_hint=hw_load))
            self._decoder = n.Decoder(device_id=index, max_num_cpu_threads=num_threads, backends=backends,
                                      options=options)
        self._params = n.DecodeParams(apply_exif_orientation=False, color_spec=n.ColorSpec.SRGB,
                                      sample_format=n.SampleFormat.I_RGB)

    def _stream(self) -> int:
        return torch.cuda.current_stream(self._dev).cuda_stream if self._dev.type == "cuda" else 0

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        n = self._n
        count = len(requests)
        errors: list[str | None] = [None] * count
        images: dict[int, Any] = {}  # k -> an nvImageCodec Image, or a tensor (HWC uint8)
        streams, ks = [], []
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
            elif r.format == "npy":
                images[k] = self._host_window(r, errors, k)
            else:
                try:
                    cs = n.CodeStream(r.data)
                    t, l, h, w = r.box
                    if (t, l, h, w) != (0, 0, r.height, r.width):
                        cs = cs.get_sub_code_stream(region=n.Region(t, l, t + h, l + w))
                    streams.append(cs)
                    ks.append(k)
                except Exception as e:  # an unreadable stream: this image's error
                    images[k] = self._host_window(r, errors, k, why=f"nvImageCodec: {e}")
        if streams:
            self._turn = (self._turn + 1) % self.buffers
            reuse = self._ring[self._turn]
            if len(reuse) >= len(streams):
                out = self._decoder.decode(streams, images=reuse[:len(streams)], params=self._params,
                                           cuda_stream=self._stream())
            else:  # the ring's turn is smaller than this batch: new Images, kept for next time
                out = self._decoder.decode(streams, params=self._params, cuda_stream=self._stream())
                self._ring[self._turn] = [img for img in out if img is not None]
            for k, img in zip(ks, out):
                if img is None:  # not decodable here: the host decoders have a go, and say why not
                    images[k] = self._host_window(requests[k], errors, k, why="nvImageCodec could not decode it")
                else:
                    images[k] = img
        addresses, sizes, shapes, strides, order = [], [], [], [], []
        for k in range(count):
            img = images.get(k)
            if img is None or errors[k] is not None:
                continue
            addr, shape, st = _layout(img)
            addresses.append(addr)
            sizes.append(st[0] * (shape[0] - 1) + st[1] * (shape[1] - 1) + st[2] * 2 + 1)  # to its last byte
            shapes.append(shape)
            strides.append(st)
            order.append(k)
        pixels, offs = span(addresses, sizes, self._dev)
        offsets = np.zeros(count, np.int64)
        shape_arr = np.zeros((count, 2), np.int64)
        stride_arr = np.zeros((count, 3), np.int64)
        for k, o, sh, st in zip(order, offs, shapes, strides):
            offsets[k], shape_arr[k], stride_arr[k] = o, sh, st
        boxes = np.zeros((count, 4), np.int64)
        boxes[:, 2:] = shape_arr  # every image is decoded to its window exactly
        return DecodedBatch(pixels, offsets, shape_arr, stride_arr, boxes, errors, owner=images)

    def _host_window(self, r: Request, errors: list, k: int, why: str | None = None) -> torch.Tensor | None:
        """The request's window decoded on the host (tensor samples; what nvImageCodec cannot
        read), on the decoder's device; None (and errors[k] set) if it cannot be."""
        try:
            img = host_rgb(r, self.max_pixels)
            if img.shape[:2] != (r.height, r.width):
                raise ValueError(f"decoded size {img.shape[:2]} differs from the header's {(r.height, r.width)}")
            t, l, h, w = r.box
            window = np.require(img[t:t + h, l:l + w], requirements=["C", "W"])  # a copy only if needed
            return torch.from_numpy(window).to(self._dev)
        except Exception as e:  # this image's error, not the batch's
            errors[k] = (f"{why}; " if why else "") + f"{type(e).__name__}: {e}"
            return None

    def close(self) -> None:
        self._decoder = None


def _layout(img: Any) -> tuple[int, tuple[int, int], tuple[int, int, int]]:
    """(address, (height, width), byte strides (row, column, channel)) of an HWC uint8
    image: an nvImageCodec Image or a torch tensor."""
    if isinstance(img, torch.Tensor):
        h, w = int(img.shape[0]), int(img.shape[1])
        sy, sx, sc = (int(s) for s in img.stride())
        return img.data_ptr(), (h, w), (sy, sx, sc)
    on_device = img.buffer_kind == img.buffer_kind.STRIDED_DEVICE
    iface = img.__cuda_array_interface__ if on_device else img.__array_interface__
    h, w = int(iface["shape"][0]), int(iface["shape"][1])
    st = iface.get("strides")
    sy, sx, sc = (int(s) for s in st) if st else (3 * w, 3, 1)
    return int(iface["data"][0]), (h, w), (sy, sx, sc)
