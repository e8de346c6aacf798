"""Decoders: compressed bytes in, RGB uint8 pixels out, behind one protocol (_base.py).

- "cpu": libjpeg-turbo decoding only each crop's window (gpudecode._native, native
  threads), libpng for PNG (pyspng without it), Pillow for the rest; bit-exact with Pillow. Always there.
- "nvimgcodec": NVIDIA nvImageCodec, batched ROI decoding (nvJPEG, the hardware JPEG
  decoder) into Images the kernel reads in place (extra `gpudecode[gpu]`).
- "dali": NVIDIA DALI's decoders.image_slice ("mixed" on a GPU) (extra `gpudecode[dali]`).
- "torchcodec": PyTorch's torchcodec decode_jpeg, batched, whole images (extra `gpudecode[gpu]`).

Every backend also runs on the CPU (nvImageCodec's and torchcodec's CPU codecs, DALI's
"cpu" pipeline), which is how this repository tests them without a GPU.

"auto" picks, on a CUDA device, the first of nvimgcodec, dali, torchcodec that imports,
else cpu; on the CPU, cpu, the fastest measured there (one core, 500x375 JPEGs: whole
images 1,410 img/s against nvImageCodec's 1,300 and torchcodec's 1,310; RandomResizedCrop
windows 1,690-1,810 against 1,690-1,700 and 1,190-1,330; bench/RESULTS.md). The GPU order is
by design (ROI decoding and the hardware decoder, the lightest install), not yet by
measurement: no GPU has run it.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Literal

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Decoder, Request, Requests, hwc_strides

DecoderName = Literal["auto", "cpu", "nvimgcodec", "dali", "torchcodec"]
NAMES = ("cpu", "nvimgcodec", "dali", "torchcodec")
GPU_ORDER = ("nvimgcodec", "dali", "torchcodec")
_MODULES = {"nvimgcodec": ("nvidia.nvimgcodec", "gpu"), "dali": ("nvidia.dali", "dali"),
            "torchcodec": ("torchcodec.decoders", "gpu")}


def available(name: str) -> tuple[bool, str]:
    """(usable here, why not): the backend's package imports (any device; a CUDA device
    is checked by check_device)."""
    if name == "cpu":
        return True, ""
    if name not in _MODULES:
        return False, f"unknown decoder {name!r} (one of {', '.join(NAMES)}, or 'auto')"
    module, extra = _MODULES[name]
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # ImportError, or a library built for another torch/CUDA
        return False, f"{module} is not importable ({type(e).__name__}: {e}); pip install 'gpudecode[{extra}]'"
    if name == "torchcodec":  # an older torchcodec (one that matches an older torch) may lack the batch API
        from .torchcodec import missing_api

        why = missing_api(mod)
        if why:
            return False, why
    return True, ""


def check_device(device: Any) -> str:
    """"auto" -> "cuda" or "cpu"; a torch.device as its name ("cuda:1"); refuses other
    names, and a CUDA device that is not there.

    Raises:
        ValueError: not "auto", "cpu", "cuda[:N]" or a torch.device of those.
        BackendUnavailableError: a CUDA device was asked for and torch sees none.
    """
    import torch

    if isinstance(device, torch.device):  # PyTorch users pass devices as objects
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda[:N]' or a torch.device, not {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', not {device!r}")
    if device != "cpu" and not torch.cuda.is_available():
        raise BackendUnavailableError(f"device {device!r} asked for, but torch sees no CUDA device "
                                      "(torch.cuda.is_available() is False)")
    if device != "cpu" and importlib.util.find_spec("numba_cuda") is None:
        # numba's own CUDA target is deprecated and lacks CUDA 13's NVVM: the kernels need numba-cuda
        raise BackendUnavailableError(f"device {device!r} needs numba-cuda for its kernels: "
                                      "pip install 'gpudecode[gpu]'")
    return device


def choose(name: str, device: str) -> str:
    """The backend "auto" (or `name`) means on `device`."""
    if name != "auto":
        return name
    if device.startswith("cuda"):
        return next((n for n in GPU_ORDER if available(n)[0]), "cpu")
    return "cpu"


def make_decoder(name: DecoderName | str, *, device: str, num_threads: int, max_pixels: int,
                 fast: bool = False, hw_load: float = 0.65, buffers: int = 3) -> Decoder:
    """The decoder `name` for `device` (see the module doc); `buffers`: how many of its
    results stay valid at once (Decoder.buffers), for those that keep a ring. "auto" on a
    CUDA device takes the first GPU decoder that can be made there (one whose GPU
    backend does not work, e.g. nvImageCodec without libnvjpeg, is passed over with a
    warning saying why), else the CPU one; `decoder.backend` says what decodes.

    Raises:
        ValueError: an unknown name.
        BackendUnavailableError: its package is missing (names the extra to install), or
            it cannot decode on `device` (says why).
    """
    if name == "nvjpeg":
        raise ValueError("decoder 'nvjpeg' (torchvision.io's, deprecated there) is gone: use 'torchcodec' "
                         "(the same nvJPEG through PyTorch's torchcodec) or 'nvimgcodec'")
    if name == "auto" and device.startswith("cuda"):
        passed = []
        for candidate in GPU_ORDER:
            if not available(candidate)[0]:
                continue
            try:
                return _make(candidate, device=device, num_threads=num_threads, max_pixels=max_pixels, fast=fast,
                             hw_load=hw_load, buffers=buffers)
            except BackendUnavailableError as e:
                passed.append(str(e))
        if passed:
            import warnings

            warnings.warn("decoder='auto' decodes on the CPU: " + "; ".join(passed), RuntimeWarning, stacklevel=2)
        return _make("cpu", device=device, num_threads=num_threads, max_pixels=max_pixels, fast=fast,
                     hw_load=hw_load, buffers=buffers)
    return _make(choose(name, device), device=device, num_threads=num_threads, max_pixels=max_pixels, fast=fast,
                 hw_load=hw_load, buffers=buffers)


def _make(name: str, *, device: str, num_threads: int, max_pixels: int, fast: bool, hw_load: float,
          buffers: int) -> Decoder:
    if name not in NAMES:
        raise ValueError(f"unknown decoder {name!r} (one of {', '.join(NAMES)}, or 'auto')")
    ok, why = available(name)
    if not ok:
        raise BackendUnavailableError(f"decoder {name!r} cannot be used here: {why}")
    if name == "cpu":
        from .cpu import CpuDecoder

        return CpuDecoder(num_threads=num_threads, max_pixels=max_pixels, fast=fast, buffers=buffers)
    if name == "nvimgcodec":
        from .nvimgcodec import NvImageCodecDecoder

        return NvImageCodecDecoder(device=device, num_threads=num_threads, max_pixels=max_pixels, hw_load=hw_load,
                                   buffers=buffers)
    if name == "dali":
        from .dali import DaliDecoder

        return DaliDecoder(device=device, num_threads=num_threads, max_pixels=max_pixels, hw_load=hw_load,
                           buffers=buffers)
    from .torchcodec import TorchcodecDecoder

    return TorchcodecDecoder(device=device, max_pixels=max_pixels)


__all__ = ["Decoder", "DecodedBatch", "Request", "Requests", "hwc_strides", "make_decoder", "available", "check_device",
           "choose", "DecoderName", "NAMES"]
