"""Decoders: compressed bytes in, packed RGB uint8 pixels out, behind one protocol.

Backends are imported lazily: "cpu" (libjpeg-turbo crop-window decoding in
gpudecode._native, pyspng for PNG, Pillow for the rest), "dali" (nvJPEG through DALI's
"mixed" decoder) and "nvjpeg" (torchvision.io.decode_jpeg on CUDA).
"""
from __future__ import annotations

from typing import Literal

from ..errors import BackendUnavailableError
from ._base import DecodedBatch, Decoder, Request

DecoderName = Literal["auto", "cpu", "dali", "nvjpeg"]


def available(name: str) -> tuple[bool, str]:
    """(usable here, why not)."""
    if name == "cpu":
        return True, ""
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA device (torch.cuda.is_available() is False)"
    if name == "dali":
        try:
            import nvidia.dali  # noqa: F401
        except ImportError as e:
            return False, f"nvidia-dali is not importable: {e}"
        return True, ""
    if name == "nvjpeg":
        return True, ""
    return False, f"unknown decoder {name!r}"


def check_device(device: str) -> str:
    """"auto" -> "cuda" or "cpu"; refuses other names, and a CUDA device that is not there.

    Raises:
        ValueError: not "auto", "cpu" or "cuda[:N]".
        BackendUnavailableError: a CUDA device was asked for and torch sees none.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', not {device!r}")
    if device != "cpu" and not torch.cuda.is_available():
        raise BackendUnavailableError(f"device {device!r} asked for, but torch sees no CUDA device "
                                      "(torch.cuda.is_available() is False)")
    return device


def make_decoder(name: DecoderName, *, device: str, num_threads: int, max_pixels: int, fast: bool = False) -> Decoder:
    """The decoder `name` ("auto": DALI if usable, else torchvision nvJPEG, on a GPU
    device; the CPU decoder otherwise)."""
    if name == "auto":
        if device.startswith("cuda"):
            name = next(n for n in ("dali", "nvjpeg", "cpu") if available(n)[0])
        else:
            name = "cpu"
    ok, why = available(name)
    if not ok:
        raise BackendUnavailableError(f"decoder {name!r} cannot be used here: {why}")
    if name == "cpu":
        from .cpu import CpuDecoder

        return CpuDecoder(num_threads=num_threads, max_pixels=max_pixels, fast=fast)
    if name == "dali":
        from .dali import DaliDecoder

        return DaliDecoder(device=device, num_threads=num_threads, max_pixels=max_pixels)
    from .nvjpeg import NvjpegDecoder

    return NvjpegDecoder(device=device, max_pixels=max_pixels)


__all__ = ["Decoder", "DecodedBatch", "Request", "make_decoder", "available", "check_device", "DecoderName"]
