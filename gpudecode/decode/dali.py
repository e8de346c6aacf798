"""nvJPEG through NVIDIA DALI: the reader's bytes go in through fn.external_source, the
crop windows drawn by our transforms through two more, and fn.decoders.image_slice
decodes only the window (ROI decoding in nvJPEG; the hardware decoder where the GPU has
one). The pipeline is defined once with a device parameter: "mixed" on a GPU (CPU bytes
in, GPU pixels out), "cpu" where there is none (tests)."""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import BackendUnavailableError

from ..tensors import npy_rgb
from ._base import DecodedBatch, Request, hwc_strides
from ._span import stage


def dali_decode_pipeline(*, device: str, batch_size: int, num_threads: int, device_id: int | None,
                         hw_decoder_load: float = 0.65):
    """The DALI pipeline: inputs "encoded" (uint8 bytes), "anchor" (x, y) and "shape"
    (w, h) per sample; output: the RGB uint8 window, HWC. device: "mixed" or "cpu"."""
    from nvidia.dali import fn, pipeline_def, types

    # nvJPEG's chroma upsampling as libjpeg-turbo's (and Pillow's) fancy one, as the other backends
    extra = {"hw_decoder_load": hw_decoder_load, "jpeg_fancy_upsampling": True} if device == "mixed" else {}

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id,  # type: ignore[arg-type]
                  prefetch_queue_depth=1)
    def pipe():
        encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
        anchor = fn.external_source(name="anchor", dtype=types.FLOAT, ndim=1)
        shape = fn.external_source(name="shape", dtype=types.FLOAT, ndim=1)
        # adjust_orientation=False: gpudecode never applies EXIF orientation (DALI's default does,
        # and would then crop the rotated image with boxes drawn for the stored one)
        return fn.decoders.image_slice(encoded, anchor, shape, device=device, output_type=types.RGB,
                                       axis_names="WH", normalized_anchor=False, normalized_shape=False,
                                       adjust_orientation=False, **extra)

    return pipe()


class DaliDecoder:
    """Decodes JPEG and PNG (and what else DALI reads) crop windows with DALI; tensor
    samples (.npy) need no decoding: their window is copied. Each batch DALI returns is
    copied in one call (`copy_to_external`, no per-image work) into a ring of `buffers`
    buffers of ours, since DALI reuses its own output memory at its next run."""

    name = "dali"

    def __init__(self, *, device: str = "cuda", num_threads: int = 2, max_pixels: int = 0,
                 max_batch_size: int = 256, buffers: int = 3, hw_load: float = 0.65) -> None:
        try:
            import nvidia.dali
        except ImportError as e:
            raise BackendUnavailableError(f"decoder 'dali' needs NVIDIA DALI ({e}): pip install 'gpudecode[dali]'") from e
        if buffers < 1:
            raise ValueError("buffers must be >= 1")
        self.device = device
        self.max_pixels = max_pixels
        self.max_batch_size = max_batch_size
        self.buffers = buffers
        on_gpu = device.startswith("cuda")
        self._dev = torch.device(device if on_gpu else "cpu")
        device_id = self._dev.index if on_gpu else None
        if on_gpu and device_id is None:
            device_id = torch.cuda.current_device()
        self._make = lambda: dali_decode_pipeline(device="mixed" if on_gpu else "cpu", batch_size=max_batch_size,
                                                  num_threads=num_threads, device_id=device_id,
                                                  hw_decoder_load=hw_load)
        self._pipe = self._make()
        self._pipe.build()
        self.backend = (f"DALI {getattr(nvidia.dali, '__version__', '?')}: decoders.image_slice "
                        + ("'mixed' (nvJPEG and the hardware JPEG decoder, regions of interest)" if on_gpu
                           else "'cpu' (libjpeg-turbo)"))
        self.builds = 1  # pipelines built: a run() that raised leaves the pipeline in an unknown state
        self._on_gpu = on_gpu
        self._ring = [torch.empty(0, dtype=torch.uint8, device=self._dev) for _ in range(buffers)]
        self._turn = 0

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        n = len(requests)
        errors: list[str | None] = [None] * n
        for k, r in enumerate(requests):
            if self.max_pixels and r.height * r.width > self.max_pixels:
                errors[k] = f"image of {r.width}x{r.height} pixels is over the limit of {self.max_pixels} pixels"
        windows: dict[int, np.ndarray] = {}
        for k, r in enumerate(requests):  # tensor samples: nothing to decode, copy the window
            if r.format == "npy" and errors[k] is None:
                try:
                    t, l, h, w = r.box
                    windows[k] = np.ascontiguousarray(npy_rgb(r.data)[t:t + h, l:l + w])
                except Exception as e:  # this image's error, not the batch's
                    errors[k] = f"{type(e).__name__}: {e}"
        ok = [k for k in range(n) if errors[k] is None and requests[k].format != "npy"]
        # (request indices, DALI TensorList in that order, or its pixels copied out, shapes)
        pieces: list[list[Any]] = []
        for start in range(0, len(ok), self.max_batch_size):
            part = ok[start:start + self.max_batch_size]
            try:
                self._hold(pieces)
                pieces.append([part, self._run(part, requests)])
            except Exception:  # one bad image fails DALI's whole batch: find it
                for k in part:
                    try:
                        self._hold(pieces)
                        pieces.append([[k], self._run([k], requests)])
                    except Exception as e:
                        errors[k] = f"DALI: {str(e).splitlines()[0]}"
        shapes = np.zeros((n, 2), np.int64)
        offsets = np.zeros(n, np.int64)
        total = 0
        for part, out in pieces:
            piece_shapes = out[1] if isinstance(out, tuple) else out.shape()
            for k, shape in zip(part, piece_shapes):
                shapes[k] = shape[:2]
                offsets[k] = total
                total += int(shape[0] * shape[1] * 3)
        for k, win in windows.items():
            shapes[k] = win.shape[:2]
            offsets[k] = total
            total += win.size
        self._turn = (self._turn + 1) % len(self._ring)
        if self._ring[self._turn].numel() < total:
            self._ring[self._turn] = torch.empty(int(total * 1.25) + 1, dtype=torch.uint8, device=self._dev)
        buf = self._ring[self._turn]
        stream = torch.cuda.current_stream(self._dev).cuda_stream if self._on_gpu else None
        for part, out in pieces:  # one copy per DALI batch, packed in sample order
            if isinstance(out, tuple):  # copied out before a later run
                at = int(offsets[part[0]])
                buf[at:at + out[0].numel()].copy_(out[0])
                continue
            dst = ctypes.c_void_p(buf.data_ptr() + int(offsets[part[0]]))
            if self._on_gpu:
                # blocking: DALI may write this output memory again at its next run, which we
                # cannot order after an asynchronous copy (this is the decode thread, not the trainer's)
                out.copy_to_external(dst, cuda_stream=ctypes.c_void_p(stream), non_blocking=False)
            else:
                out.copy_to_external(dst)
        if windows:  # tensor samples: their windows follow DALI's pixels, in one upload for the batch
            order = sorted(windows, key=lambda k: int(offsets[k]))
            first = int(offsets[order[0]])
            end = first + sum(windows[k].size for k in order)
            if self._on_gpu:
                buf[first:end].copy_(stage([windows[k] for k in order], self._dev)[:end - first])
            else:
                for k in order:
                    buf[int(offsets[k]):int(offsets[k]) + windows[k].size].numpy()[:] = windows[k].reshape(-1)
        boxes = np.zeros((n, 4), np.int64)
        boxes[:, 2:] = shapes  # every image is decoded to its window exactly
        return DecodedBatch(buf[:max(total, 1)], offsets, shapes, hwc_strides(shapes), boxes, errors)

    def _hold(self, pieces: list[list[Any]]) -> None:
        """DALI writes its output memory again at its next run (and a rebuilt pipeline frees
        it): the last piece's pixels are copied out before another run."""
        if not pieces or isinstance(pieces[-1][1], tuple):
            return
        out = pieces[-1][1]
        shapes = [tuple(int(v) for v in sh) for sh in out.shape()]
        held = torch.empty(sum(h * w * 3 for h, w, *_ in shapes), dtype=torch.uint8, device=self._dev)
        if self._on_gpu:
            stream = torch.cuda.current_stream(self._dev).cuda_stream
            out.copy_to_external(ctypes.c_void_p(held.data_ptr()), cuda_stream=ctypes.c_void_p(stream),
                                 non_blocking=False)
        else:
            out.copy_to_external(ctypes.c_void_p(held.data_ptr()))
        pieces[-1][1] = (held, shapes)

    def _run(self, idx: list[int], requests: Sequence[Request]) -> Any:
        enc = [np.frombuffer(requests[k].data, np.uint8) for k in idx]
        anchor = [np.array([requests[k].box[1], requests[k].box[0]], np.float32) for k in idx]
        shape = [np.array([requests[k].box[3], requests[k].box[2]], np.float32) for k in idx]
        try:
            self._pipe.feed_input("encoded", enc)
            self._pipe.feed_input("anchor", anchor)
            self._pipe.feed_input("shape", shape)
            (out,) = self._pipe.run()
        except Exception:
            # older DALI releases leave a pipeline unusable after a failed run: never rely on it
            self._pipe = self._make()
            self._pipe.build()
            self.builds += 1
            raise
        return out

    def close(self) -> None:
        self._pipe = None
        self._ring = []
