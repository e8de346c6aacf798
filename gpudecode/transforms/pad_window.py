"""A Pad that ends the geometry, read as a window of the (resized) image: no canvas made
(the plan makes it of a canvas.Pad: Pad.window)."""
from __future__ import annotations

import random

import numpy as np

from .base import Transform
from .geometry import PAD_MODES


class PadWindow(Transform):
    """torchvision's Pad where it ends the geometry: alone (`[Pad(2)]`, LeNet's MNIST
    recipe), or after a Resize or a RandomResizedCrop (`[Resize((28, 28)), Pad(2)]`). The
    output is a window of the (resized) image larger by the padding, read 1:1 from
    (-top, -left): no canvas is made; the kernel reads past the image as the fill, or
    as the image's own pixels (edge, reflect, symmetric) as torch's pad reads them. The
    plan makes it of a Pad (canvas.Pad), whose repr it keeps."""

    group = "geometry"

    def __init__(self, padding: tuple[int, int, int, int], fill: tuple[int, int, int], padding_mode: str,
                 shown: str) -> None:
        self.padding = padding  # (left, top, right, bottom)
        self._fill = fill
        self.padding_mode = padding_mode
        self._shown = shown  # (its Pad's repr)

    def __repr__(self) -> str:
        return self._shown

    @property
    def crop_fill(self) -> tuple[int, int, int]:  # type: ignore[override]
        """The padding colour (levels)."""
        return self._fill

    @property
    def pad_mode(self) -> int:
        """The padding mode as the kernels' PAD column says it (0 constant ... 3 symmetric)."""
        return PAD_MODES[self.padding_mode]

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        left, top, right, bottom = self.padding
        return height + top + bottom, width + left + right

    def padded(self, size: tuple[int, int]) -> tuple[int, int]:
        """The output of an image (or resized image) of `size`."""
        return self.output_size(*size)

    def reflects(self, sizes: np.ndarray) -> np.ndarray:
        """Whether the padding of each image of `sizes` (int64 [N, 2]) is within one
        reflection of it, as torch's pad takes it, bool [N] (RandomCrop.reflects)."""
        h, w = sizes[:, 0], sizes[:, 1]
        if self.pad_mode < 2:
            return np.ones(len(sizes), bool)
        left, top, right, bottom = self.padding
        edge = 1 if self.pad_mode == 2 else 0
        return (max(left, right) <= w - edge) & (max(top, bottom) <= h - edge)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        """{"crop": (-top, -left, padded height, padded width)}: no random number is taken."""
        height, width = size
        if self.pad_mode >= 2 and not self.reflects(np.array([[height, width]]))[0]:
            raise ValueError(f"{self._shown} pads this {height}x{width} image by more than it holds (torch's pad "
                             f"refuses it)")
        left, top, _, _ = self.padding
        return {"crop": (-top, -left, *self.output_size(height, width))}
