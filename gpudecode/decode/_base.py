"""The decoder protocol."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch


@dataclass(slots=True)
class Request:
    """One image to decode: its bytes, format ("jpeg", "png" or "other", from the
    probe), full size, and the box (top, left, height, width) of it that is needed."""

    data: bytes
    format: str
    height: int
    width: int
    box: tuple[int, int, int, int]
    shard: str = ""
    key: str = ""


@dataclass
class DecodedBatch:
    """Pixels of a batch, packed: image k starts at `pixels[offsets[k]]`, RGB uint8 of
    (height, width) `shapes[k]`, HWC (or CHW when `chw`). `boxes[k]` is the requested
    box (top, left, height, width) inside those decoded pixels: the whole of a decoded
    crop window, or the crop inside a full decode. `errors[k]` is None, or why image k
    could not be decoded (its slot is then unused)."""

    pixels: torch.Tensor  # uint8, 1-D, on the decoder's device
    offsets: np.ndarray   # int64 [N]
    shapes: np.ndarray    # int64 [N, 2]
    boxes: np.ndarray     # int64 [N, 4]
    errors: list[str | None]
    chw: bool = False


class Decoder(Protocol):
    name: str
    device: str

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        """Decodes every request (never raises for one bad image: see errors)."""
        ...
