"""The per-pixel ops of a sample's program, with torchvision's names, arguments and draws:
ColorJitter, RandomPhotometricDistort, RandomChannelPermutation, the grayscale, solarize,
invert and posterize ops, autocontrast, equalize, sharpness, the Gaussian blur and noise."""
from __future__ import annotations

import numbers
import random
from typing import Any, Sequence

import numpy as np

from ..errors import TransformError
from ..kernels._pixel import MAX_BLUR
from ..kernels.ops import (AUTOCONTRAST, BLUR_X, BLUR_Y, BRIGHTNESS, CONTRAST, EQUALIZE, GAUSSIAN_NOISE, GRAYSCALE,
                           HUE, INVERT,
                           JITTER_OPS, PERMUTE_CHANNELS, POSTERIZE, SATURATION, SHARPNESS, SOLARIZE)
from .base import Transform, _PixelOp, _refuse, _Step, in_fingerprint


_JITTER_NAMES = ("brightness", "contrast", "saturation", "hue")


def _jitter_range(value: Any, name: str, center: float, bound: tuple[float, float],
                  clip_first_on_zero: bool) -> tuple[float, float] | None:
    if value is None:  # (off, as torchvision v2 takes it)
        return None
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


def _permutation_arg(perm: Sequence[int]) -> float:
    """PERMUTE_CHANNELS' argument: the permutation as p[0] + 3 p[1] + 9 p[2]."""
    return float(perm[0] + 3 * perm[1] + 9 * perm[2])


class RandomChannelPermutation(_Step, converts="torchvision.RandomChannelPermutation"):
    """torchvision's RandomChannelPermutation: the channels of each image in a random order
    (a uniform permutation); make_params: "permutation", output channel i is input channel
    permutation[i]."""

    keys = ("permutation",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls()

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        perm = [0, 1, 2]
        rng.shuffle(perm)
        return {"permutation": perm}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        perm = p.get("permutation")
        if perm is not None and list(perm) != [0, 1, 2]:
            prog.append((PERMUTE_CHANNELS, (_permutation_arg(perm),)))


def _photometric_range(value: Any, name: str, bound: tuple[float, float]) -> tuple[float, float]:
    if not (isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, numbers.Real) for v in value)):
        raise TransformError(f"RandomPhotometricDistort {name} must be (min, max), not {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if not bound[0] <= lo <= hi <= bound[1]:
        raise TransformError(f"RandomPhotometricDistort {name} must have {bound[0]} <= min <= max <= {bound[1]}, "
                             f"not {value!r}")
    return lo, hi


class RandomPhotometricDistort(_Step, converts="torchvision.RandomPhotometricDistort"):
    """torchvision's RandomPhotometricDistort (SSD's): brightness, contrast, saturation and
    hue each applied with probability p with a factor uniform in its range, contrast before
    saturation or after hue (a fair coin), then with probability p a random permutation of
    the channels. make_params: torchvision's keys ("brightness_factor", ...,
    "contrast_before", "channel_permutation"; a factor or the permutation None when not
    applied). The same kernel ops as ColorJitter's, and RandomChannelPermutation's."""

    keys = ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor", "contrast_before",
            "channel_permutation")
    _FACTORS = (("brightness_factor", "brightness"), ("contrast_factor", "contrast"),
                ("saturation_factor", "saturation"), ("hue_factor", "hue"))

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.brightness, t.contrast, t.saturation, t.hue, t.p)

    def __init__(self, brightness: Sequence[float] = (0.875, 1.125), contrast: Sequence[float] = (0.5, 1.5),
                 saturation: Sequence[float] = (0.5, 1.5), hue: Sequence[float] = (-0.05, 0.05),
                 p: float = 0.5) -> None:
        inf = float("inf")
        self.brightness = _photometric_range(brightness, "brightness", (0.0, inf))
        self.contrast = _photometric_range(contrast, "contrast", (0.0, inf))
        self.saturation = _photometric_range(saturation, "saturation", (0.0, inf))
        self.hue = _photometric_range(hue, "hue", (-0.5, 0.5))
        if not 0.0 <= p <= 1.0:
            raise ValueError("probability should be between 0 and 1")
        self.p = float(p)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        # torchvision's make_params: each factor's coin then its value, in this order; the
        # contrast's place; the permutation's coin, then the permutation
        out: dict = {}
        for key, name in self._FACTORS:
            lo, hi = getattr(self, name)
            out[key] = rng.uniform(lo, hi) if rng.random() < self.p else None
        out["contrast_before"] = rng.random() < 0.5
        perm = None
        if rng.random() < self.p:
            perm = [0, 1, 2]
            rng.shuffle(perm)
        out["channel_permutation"] = perm
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        if "contrast_before" not in p:  # (not drawn: a lost coin of what wraps it)
            return
        contrast = p.get("contrast_factor")
        # torchvision's transform: brightness, contrast (before), saturation, hue, contrast (after)
        steps = [(BRIGHTNESS, p.get("brightness_factor")), (CONTRAST, contrast if p["contrast_before"] else None),
                 (SATURATION, p.get("saturation_factor")), (HUE, p.get("hue_factor")),
                 (CONTRAST, None if p["contrast_before"] else contrast)]
        prog.extend((op, (f,)) for op, f in steps if f is not None)
        perm = p.get("channel_permutation")
        if perm is not None and list(perm) != [0, 1, 2]:
            prog.append((PERMUTE_CHANNELS, (_permutation_arg(perm),)))


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
    """torchvision's Grayscale: every image grey, in `num_output_channels` channels (3, or
    1: the output [N, 1, H, W], as torchvision's; torchvision's default is 1). After
    Grayscale(1) the steps act as torchvision's do on one channel: saturation, hue,
    RandomGrayscale and RandomChannelPermutation change nothing, contrast blends with that
    channel's mean; a fill or erasing value after it gives one value (or three equal
    ones); a Normalize of three different means makes three channels, as torchvision v2's
    broadcasts them. The kernel keeps the channel as three equal ones and writes the
    first."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.num_output_channels)

    def __init__(self, num_output_channels: int = 1) -> None:
        if num_output_channels not in (1, 3):
            raise TransformError(f"Grayscale(num_output_channels={num_output_channels!r}): 1 or 3")
        super().__init__(1.0)
        self._channels = int(num_output_channels)

    @property
    def num_output_channels(self) -> int:
        return self._channels

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {self.key: True}  # no draw: torchvision's Grayscale is not random

    def __repr__(self) -> str:
        if in_fingerprint():  # (a 3-channel one as before this option: saved states' fingerprints hold it)
            return super().__repr__() if self._channels == 3 else "Grayscale(p=1.0, num_output_channels=1)"
        return f"Grayscale(num_output_channels={self._channels})"


class RGB(Transform, converts="torchvision.RGB"):
    """torchvision v2's RGB: an image of one channel made three equal ones (a grey set's,
    or one after Grayscale(1)); an image of three channels as it is. It may stand anywhere
    in a Compose, and runs no op: the kernel holds one channel as three equal ones
    already, so it only sets how many the output has. from_torchvision also takes for it a
    function or Lambda that returns `img.convert("RGB")` and does nothing else (CLIP's
    and open_clip's preprocess write it so), or `x.repeat(3, 1, 1)` / `x.expand(3, -1, -1)`
    (a grey tensor made three channels for an ImageNet model; on an image of three
    channels, where torchvision's would make nine, it is taken as RGB too)."""

    group = "channels"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls()


# the grey mean of three equal channels v, v, v (0.2989 v + 0.587 v + 0.114 v in float32) scaled back to v's:
# CONTRAST's second argument after Grayscale(1)
_WEIGHTS = float(np.float32(0.2989)) + float(np.float32(0.587)) + float(np.float32(0.114))
ONE_CHANNEL_MEAN = 1.0 / _WEIGHTS - 1.0
NO_CHANGE_ON_ONE = (SATURATION, HUE, GRAYSCALE, PERMUTE_CHANNELS)  # (the ops one_channel drops)


def one_channel(prog: list) -> list:
    """A program's ops (op id, args) as torchvision's act on an image of one channel (the
    kernel holds it as three equal ones): saturation, hue, grayscale and a channel
    permutation change nothing there (dropped), contrast blends with that channel's own
    mean, the noise is the same in every channel."""
    out = []
    for op, a in prog:
        if op in NO_CHANGE_ON_ONE:
            continue
        if op == CONTRAST:
            a = (a[0], ONE_CHANNEL_MEAN)
        elif op == GAUSSIAN_NOISE:
            a = (*a[:5], 1.0)
        out.append((op, a))
    return out


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


class GaussianNoise(_Step, converts="torchvision.GaussianNoise"):
    """torchvision's GaussianNoise: each value of the float image plus mean + sigma * a
    standard normal value, clamped to [0, 1] when `clip`. make_params: "gaussian_noise",
    the sample's 32-bit noise key: the kernel makes each pixel's normal value from the key,
    its place and channel (a hash and Box-Muller; the same on both targets). torchvision
    draws its noise from torch's global generator, not from its parameters: the values are
    distributed as its (tests/test_photometric.py), not equal to them."""

    keys = ("gaussian_noise",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        if not floats:  # (torchvision 0.29 takes uint8: the noise times 255, truncated to whole levels, clamped)
            raise _refuse("GaussianNoise on uint8 images cannot be fused: torchvision 0.29 adds it to the uint8 "
                          "levels (the noise times 255, truncated to whole levels), the kernel to the float image; "
                          "put ToDtype(torch.float32, scale=True) before it (the same noise, not truncated)")
        return cls(t.mean, t.sigma, t.clip)

    def __init__(self, mean: float = 0.0, sigma: float = 0.1, clip: bool = True) -> None:
        if not (isinstance(sigma, numbers.Real) and isinstance(mean, numbers.Real)):
            raise TransformError(f"GaussianNoise mean and sigma must be numbers, not {mean!r}, {sigma!r}")
        if sigma < 0:
            raise ValueError(f"sigma shouldn't be negative. Got {sigma}")
        self.mean: float = float(mean)
        self.sigma: float = float(sigma)
        self.clip: bool = bool(clip)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"gaussian_noise": rng.getrandbits(32)}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        key = p.get("gaussian_noise")
        if key is not None:
            prog.append((GAUSSIAN_NOISE, (self.mean, self.sigma, 1.0 if self.clip else 0.0, float(key & 0xFFFF),
                                          float(key >> 16))))
