"""Argument helpers the transform classes share (fills, a warp's interpolation, small
tensors on the device): the bottom of the transforms package, imported by the op modules,
so no op module reaches into another's private helpers."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import torch

from ..errors import TransformError

# a warp's interpolation, as the kernel takes it (AFFINE's and PERSPECTIVE's argument)
NEAREST, BILINEAR = 0.0, 1.0

__all__ = ["pad_fill", "fill_rgb", "warp_interpolation", "on_device", "NEAREST", "BILINEAR"]


def pad_fill(fill: Any, what: str) -> tuple[int, int, int]:
    """A padding fill (one level or three, RGB, in uint8 levels) as three ints."""
    fills: list[Any] = list(fill) if isinstance(fill, Sequence) else [fill]
    if len(fills) == 1:
        fills *= 3
    if len(fills) != 3 or any(isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0 <= float(f) <= 255
                              or float(f) != int(float(f)) for f in fills):
        raise TransformError(f"{what}(fill={fill!r}) cannot be fused: a fill is one whole level in [0, 255] or three "
                             "(RGB)")
    return int(float(fills[0])), int(float(fills[1])), int(float(fills[2]))


def warp_interpolation(value: Any) -> float:
    """A warp's interpolation (torchvision's enum or name) as the kernel's code."""
    name = str(getattr(value, "value", value)).lower()
    if name in ("nearest", "0"):
        return NEAREST
    if name in ("bilinear", "2"):
        return BILINEAR
    raise TransformError(f"interpolation {value!r} cannot be fused for warps: nearest or bilinear (torchvision's "
                         "tensor warps take only these)")


def fill_rgb(fill: Any) -> tuple[float, float, float] | None:
    """A fill in uint8 levels as the kernel's float RGB (None: no fill, zeros outside)."""
    if fill is None:
        return None
    if isinstance(fill, dict):
        raise TransformError("a fill per input type (dict) cannot be fused: give a number or an RGB sequence")
    values = [float(fill)] if isinstance(fill, numbers.Real) else [float(v) for v in fill]
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise TransformError(f"fill {fill!r}: one value or three (RGB)")
    return values[0] / 255.0, values[1] / 255.0, values[2] / 255.0


def on_device(host: torch.Tensor, device: Any) -> torch.Tensor:
    """A small host tensor on `device`: itself on the CPU; on a CUDA device one contiguous
    copy from pinned memory that does not wait (a tensor made there from Python values or
    from pageable memory waits for the stream's earlier work: each image's warp would wait
    for the image before it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return host
    return host.contiguous().pin_memory().to(device, non_blocking=True)
