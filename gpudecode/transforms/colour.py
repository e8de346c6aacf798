"""The per-pixel ops of a sample's program, with torchvision's names, arguments and draws:
ColorJitter, the grayscale, solarize, invert and posterize ops, autocontrast, equalize,
sharpness and the Gaussian blur."""
from __future__ import annotations

import numbers
import random
from typing import Any, Sequence

from ..errors import TransformError
from ..kernels._pixel import MAX_BLUR
from ..kernels.ops import (AUTOCONTRAST, BLUR_X, BLUR_Y, EQUALIZE, GRAYSCALE, INVERT, JITTER_OPS, POSTERIZE,
                           SHARPNESS, SOLARIZE)
from .base import Transform, _PixelOp, _Step


_JITTER_NAMES = ("brightness", "contrast", "saturation", "hue")


def _jitter_range(value: Any, name: str, center: float, bound: tuple[float, float],
                  clip_first_on_zero: bool) -> tuple[float, float] | None:
    if isinstance(value, numbers.Real):
        if value < 0:
            raise ValueError(f"if {name} is a single number, it must be non negative")
        lo, hi = center - float(value), center + float(value)
        if clip_first_on_zero:
            lo = max(lo, 0.0)
    elif isinstance(value, Sequence) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{name} should be a single number or a sequence of two numbers")
    if not bound[0] <= lo <= hi <= bound[1]:
        raise ValueError(f"{name} values should be between {bound}, but got {value}")
    return None if lo == hi == center else (lo, hi)


class ColorJitter(_Step, converts="torchvision.ColorJitter"):
    """torchvision's ColorJitter: factors uniform in their ranges, the four operations
    in a random order (a permutation per image)."""

    keys = ("order", *_JITTER_NAMES)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(*(0 if r is None else tuple(r)  # (min, max), or None when off
                     for r in (getattr(t, n) for n in _JITTER_NAMES)))

    def __init__(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0) -> None:
        inf = float("inf")
        self.brightness = _jitter_range(brightness, "brightness", 1.0, (0, inf), True)
        self.contrast = _jitter_range(contrast, "contrast", 1.0, (0, inf), True)
        self.saturation = _jitter_range(saturation, "saturation", 1.0, (0, inf), True)
        self.hue = _jitter_range(hue, "hue", 0.0, (-0.5, 0.5), False)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        order = [0, 1, 2, 3]
        rng.shuffle(order)
        out: dict = {"order": order}
        for name in _JITTER_NAMES:
            r = getattr(self, name)
            out[name] = None if r is None else rng.uniform(r[0], r[1])
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for op in p.get("order", ()):
            f = p.get(_JITTER_NAMES[op])
            if f is not None:
                prog.append((JITTER_OPS[op], (f,)))


class RandomGrayscale(_PixelOp, converts="torchvision.RandomGrayscale"):
    """torchvision's RandomGrayscale: with probability p, the image becomes its grey
    value (0.2989 R + 0.587 G + 0.114 B) in all three channels."""

    op, key = GRAYSCALE, "grayscale"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)

    def __init__(self, p: float = 0.1) -> None:
        super().__init__(p)


class Grayscale(RandomGrayscale, converts="torchvision.Grayscale"):
    """torchvision's Grayscale(num_output_channels=3): every image grey, in 3 channels
    (1 channel is not supported: the kernel writes RGB)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.num_output_channels)

    def __init__(self, num_output_channels: int = 3) -> None:
        if num_output_channels != 3:
            raise TransformError("Grayscale(num_output_channels=1) cannot be fused: the kernel writes 3 channels "
                                 "(use num_output_channels=3, or take one channel of the batch)")
        super().__init__(1.0)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {self.key: True}  # no draw: torchvision's Grayscale is not random


class RandomSolarize(_PixelOp, converts="torchvision.RandomSolarize"):
    """torchvision's RandomSolarize: with probability p, values at or over `threshold`
    are inverted. The threshold is in the input's uint8 levels (DINO's 128), as
    torchvision takes it on uint8 and PIL images; from_torchvision converts a threshold
    given after a float conversion (ToTensor, ToDtype(float)) from the [0, 1] scale."""

    op, key = SOLARIZE, "solarize"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.threshold * 255.0 if floats else t.threshold, t.p)

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        if not 0 <= threshold <= 255:
            raise TransformError(f"RandomSolarize threshold {threshold} is outside the uint8 levels 0..255")
        super().__init__(p)
        self.threshold = float(threshold)

    @property
    def factor(self) -> float:
        return self.threshold / 255.0


class RandomInvert(_PixelOp, converts="torchvision.RandomInvert"):
    """torchvision's RandomInvert: with probability p, every value v becomes 1 - v (255 - v
    in uint8 levels)."""

    op, key = INVERT, "invert"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)


class RandomPosterize(_PixelOp, converts="torchvision.RandomPosterize"):
    """torchvision's RandomPosterize: with probability p, each value keeps `bits` bits
    (torchvision's float formula: floor(v * 2**bits) / 2**bits, clamped)."""

    op, key = POSTERIZE, "posterize"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.bits, t.p)

    def __init__(self, bits: int, p: float = 0.5) -> None:
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 8:
            raise TypeError(f"bits must be a positive integer in the range [0, 8], got {bits} instead.")
        super().__init__(p)
        self.bits = bits

    @property
    def factor(self) -> float:
        return float(1 << self.bits)


class RandomAutocontrast(_PixelOp, converts="torchvision.RandomAutocontrast"):
    """torchvision's RandomAutocontrast: with probability p, each channel stretched from
    its [min, max] to [0, 1] (a reduction over the image, then a per-pixel pass)."""

    op, key = AUTOCONTRAST, "autocontrast"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)


class RandomEqualize(_PixelOp, converts="torchvision.RandomEqualize"):
    """torchvision's RandomEqualize: with probability p, each channel's histogram
    equalized (PIL's table, on the uint8 levels of the float image, as torchvision bins
    float images)."""

    op, key = EQUALIZE, "equalize"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)


class RandomAdjustSharpness(_PixelOp, converts="torchvision.RandomAdjustSharpness"):
    """torchvision's RandomAdjustSharpness: with probability p, blended with its 3x3 blur
    (1s around a 5, over 13; borders kept) by `sharpness_factor`."""

    op, key = SHARPNESS, "sharpness"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.sharpness_factor, t.p)

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        if sharpness_factor < 0:
            raise ValueError("sharpness_factor should be non-negative")
        super().__init__(p)
        self.sharpness_factor = float(sharpness_factor)

    @property
    def factor(self) -> float:
        return self.sharpness_factor


class GaussianBlur(_Step, converts="torchvision.GaussianBlur"):
    """torchvision's GaussianBlur: sigma uniform in `sigma` per image (make_params'
    `sigma`: [s, s]), a kernel of `kernel_size` (odd; (width, height) or one int), reflect
    padding. Sizes up to MAX_BLUR (63) are fused."""

    keys = ("sigma",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(list(t.kernel_size), list(t.sigma))

    def __init__(self, kernel_size: int | Sequence[int], sigma: float | Sequence[float] = (0.1, 2.0)) -> None:
        ks = ([int(kernel_size)] * 2 if isinstance(kernel_size, numbers.Integral)
              else [int(k) for k in kernel_size])  # type: ignore[union-attr]
        if len(ks) == 1:
            ks *= 2
        if len(ks) != 2 or any(k <= 0 or k % 2 == 0 for k in ks):
            raise ValueError("Kernel size value should be an odd and positive number.")
        if max(ks) > MAX_BLUR:
            raise TransformError(f"GaussianBlur(kernel_size={kernel_size}) cannot be fused: kernel sides up to "
                                 f"{MAX_BLUR}")
        if isinstance(sigma, numbers.Real):
            if sigma <= 0:
                raise ValueError("If sigma is a single number, it must be positive.")
            lo = hi = float(sigma)
        elif isinstance(sigma, Sequence) and len(sigma) == 2:
            lo, hi = float(sigma[0]), float(sigma[1])
            if not 0.0 < lo <= hi:
                raise ValueError("sigma values should be positive and of the form (min, max).")
        else:
            raise TypeError("sigma should be a single number or a list/tuple with length 2.")
        self.kernel_size = (ks[0], ks[1])
        self.sigma = (lo, hi)

    def check_size(self, size: tuple[int, int]) -> None:
        h, w = size
        if self.kernel_size[0] // 2 >= w or self.kernel_size[1] // 2 >= h:
            raise TransformError(f"GaussianBlur(kernel_size={self.kernel_size}) on {h}x{w} images: reflect padding "
                                 "needs half the kernel under the image size")

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        s = rng.uniform(*self.sigma)
        return {"sigma": [s, s]}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        s = p.get("sigma")
        if s is not None:
            self.check_size(size)
            # separable: along x, then along y (torchvision's 2-D kernel is their outer product)
            prog.append((BLUR_X, (float(self.kernel_size[0]), float(s[0]))))
            prog.append((BLUR_Y, (float(self.kernel_size[1]), float(s[1]))))

