"""torchvision.transforms.v2-compatible transforms that run as one fused kernel.

The classes take torchvision's arguments and draw their parameters on the host with
torchvision's algorithms; `Compose` turns a supported sequence into one call of the
fused kernel (numba CUDA for CUDA tensors, the numba CPU twin otherwise). A sequence the
kernel cannot express is refused when the Compose is built, never approximated.

Supported shape of a pipeline:
    geometry    RandomResizedCrop | Resize | CenterCrop | RandomCrop
                | Resize, CenterCrop | Resize, RandomCrop | none
    then, in any order, each sample's program: RandomHorizontalFlip, RandomVerticalFlip
                (before any warp), ColorJitter, RandomGrayscale, Grayscale(3),
                RandomSolarize, RandomInvert, RandomPosterize, and (augment.py)
                RandomAutocontrast, RandomEqualize, RandomAdjustSharpness, GaussianBlur,
                RandomRotation, RandomAffine, TrivialAugmentWide, RandAugment,
                AutoAugment, AugMix; RandomApply, RandomChoice, RandomOrder over them
    then optionally ToDtype(float32 | float16, scale=True), Normalize, ToDtype(float16)
    last, on the kernel's output: RandomErasing
Without Normalize or a float ToDtype the output is uint8, as torchvision's would be.
Without a geometry step the images keep their size (all of a batch must share it: tensor
shards stored at the training size, `gpudecode precache --size 224 --crop center`).
The semantics are torchvision's on float images (the uint8 input converted first).
"""
from __future__ import annotations

import math
import numbers
import random
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
import torch

from . import _native
from ._convert import convert, inner, key, levels, qualified
from ._draws import Draws, native_spec
from .decode._base import DecodedBatch
from ._steps import CONVERTS, PROGRAM_OPS, SUPPORTED, WAY_OUT, Transform, _PixelOp, _refuse, _Step, _Wrapper  # noqa: F401
from .errors import KernelLaunchError, TransformError
from .kernels import fused
from .kernels.workspace import Workspace
from .kernels.ops import ARGS, GRAYSCALE, INVERT, JITTER_OPS, OPS, OPS_ARGS, POSTERIZE, SOLARIZE

Layout = Literal["NCHW", "NHWC"]
BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)
_JITTER_NAMES = ("brightness", "contrast", "saturation", "hue")


def _setup_size(size: Any, name: str = "size") -> tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1 and isinstance(size[0], numbers.Integral):
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2 and all(isinstance(s, numbers.Integral) for s in size):
        return int(size[0]), int(size[1])
    raise TypeError(f"{name} must be an int or a sequence of one or two ints, not {size!r}")


_MODES = ("bilinear", "bicubic")


def _interpolation(interpolation: Any, antialias: bool) -> tuple[str, ...]:
    """The resampling filter(s) of a resize: ("bilinear",), ("bicubic",), or both (a
    list or tuple of modes: one drawn an image, as timm's interpolation="random").
    torchvision's InterpolationMode, its string, or PIL's constant (2, 3) are read."""
    modes = list(interpolation) if isinstance(interpolation, (list, tuple)) else [interpolation]
    names = []
    for m in modes:
        name = getattr(m, "value", m)
        name = {2: "bilinear", 3: "bicubic"}.get(name, name) if isinstance(name, int) else str(name).lower()
        if name not in _MODES:
            raise TransformError(f"{m!r} interpolation cannot be fused: the kernel resamples bilinear or bicubic")
        names.append(name)
    if not names:
        raise TransformError("no interpolation mode given")
    if "bicubic" in names and not antialias:
        raise TransformError("bicubic interpolation with antialias=False cannot be fused: the kernel's bicubic is "
                             "the antialiased one (torchvision's default for tensors, PIL's)")
    return tuple(dict.fromkeys(names))


def _resize_repr(t: Transform, modes: tuple[str, ...]) -> str:
    """The repr with the interpolation named where it is not the default (bilinear): a
    state saved before bicubic existed keeps its transform fingerprint."""
    text = Transform.__repr__(t)
    if modes == ("bilinear",):
        return text
    return f"{text[:-1]}, interpolation={modes[0] if len(modes) == 1 else list(modes)!r})"


class RandomResizedCrop(Transform, converts=("torchvision.RandomResizedCrop",
                                             "timm.RandomResizedCropAndInterpolation")):
    """torchvision's RandomResizedCrop: 10 tries of area ~ U(scale)·H·W and log-uniform
    aspect ratio, else the centred fallback; a bilinear or bicubic resize with antialias,
    or a list of modes to draw one an image from (timm's interpolation="random")."""

    group = "geometry"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        if key(t) == "timm.RandomResizedCropAndInterpolation":  # torchvision's draw with its interpolation ("random":
            return cls(list(t.size), tuple(t.scale), tuple(t.ratio), t.interpolation, antialias=True)  # both modes)
        return cls(t.size, t.scale, t.ratio, t.interpolation, antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: Any = "bilinear",
                 antialias: bool = True) -> None:
        self.size = _setup_size(size)
        if not isinstance(scale, Sequence) or len(scale) != 2:
            raise TypeError("scale must be a sequence of two floats")
        if not isinstance(ratio, Sequence) or len(ratio) != 2:
            raise TypeError("ratio must be a sequence of two floats")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("scale and ratio must be (min, max)")
        if scale[0] < 0 or ratio[0] <= 0:
            raise ValueError("scale must be >= 0 and ratio > 0")
        self._modes = _interpolation(interpolation, bool(antialias))
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.antialias = bool(antialias)
        self._log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))

    @property
    def interpolation(self) -> str | tuple[str, ...]:
        return self._modes[0] if len(self._modes) == 1 else self._modes

    def __repr__(self) -> str:
        return _resize_repr(self, self._modes)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        area = height * width
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect_ratio = math.exp(rng.uniform(self._log_ratio[0], self._log_ratio[1]))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = rng.randint(0, height - h)
                j = rng.randint(0, width - w)
                return self._with_mode(rng, {"crop": (i, j, h, w)})
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w = width
            h = int(round(w / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h = height
            w = int(round(h * max(self.ratio)))
        else:
            w, h = width, height
        return self._with_mode(rng, {"crop": ((height - h) // 2, (width - w) // 2, h, w)})

    def _with_mode(self, rng: random.Random, d: dict) -> dict:
        """With several modes, the image's (after its crop, as timm draws it): "cubic"."""
        if len(self._modes) > 1:
            d["cubic"] = self._modes[rng.randrange(len(self._modes))] == "bicubic"
        return d


class Resize(Transform, converts="torchvision.Resize"):
    """torchvision's Resize: an int resizes the shorter side (the longer one keeps the
    aspect ratio, capped by max_size); (h, w) resizes to exactly that."""

    group = "geometry"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.size, t.interpolation, getattr(t, "max_size", None), antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, size: int | Sequence[int], interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool = True) -> None:
        if isinstance(size, numbers.Integral) or (isinstance(size, Sequence) and len(size) == 1):
            self.size: int | tuple[int, int] = int(size if isinstance(size, numbers.Integral) else size[0])
        else:
            self.size = _setup_size(size)
        if max_size is not None and not isinstance(self.size, int):
            raise ValueError("max_size is only allowed when size is an int")
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)
                                     or max_size <= self.size):  # type: ignore[operator]
            # (torchvision's F.resize refuses it so, at the first image)
            raise ValueError(f"max_size = {max_size} must be strictly greater than the requested size for the "
                             f"smaller edge size (size={self.size})")
        self._modes = _interpolation(interpolation, bool(antialias))
        if len(self._modes) > 1:
            raise TransformError("Resize takes one interpolation mode (a mode drawn an image is RandomResizedCrop's)")
        self.max_size = max_size
        self.antialias = bool(antialias)

    @property
    def interpolation(self) -> str:
        return self._modes[0]

    def __repr__(self) -> str:
        return _resize_repr(self, self._modes)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        if not isinstance(self.size, int):
            return self.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.size, int(self.size * long / short)
        if self.max_size is not None and new_long > self.max_size:
            new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"resize": self.output_size(*size)}


def _pad_fill(fill: Any, what: str) -> tuple[int, int, int]:
    """A padding fill (one level or three, RGB, in uint8 levels) as three ints."""
    fills: list[Any] = list(fill) if isinstance(fill, Sequence) else [fill]
    if len(fills) == 1:
        fills *= 3
    if len(fills) != 3 or any(isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0 <= float(f) <= 255
                              or float(f) != int(float(f)) for f in fills):
        raise TransformError(f"{what}(fill={fill!r}) cannot be fused: a fill is one whole level in [0, 255] or three "
                             "(RGB)")
    return int(float(fills[0])), int(float(fills[1])), int(float(fills[2]))


class ResizeKeepRatio(Resize, converts="timm.ResizeKeepRatio"):
    """timm's ResizeKeepRatio (its eval form): each image scaled by one factor, the ratio
    of its size to `size` (h, w) taken between the smaller (longest=0) and the larger
    (longest=1) side's, each side rounded: round(side / ratio)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """Its eval form (no random scale or aspect: timm's rkrc/rkrr train crops are refused)."""
        if getattr(t, "random_scale_prob", 0) > 0 or getattr(t, "random_aspect_prob", 0) > 0:
            raise TransformError("timm.data.ResizeKeepRatio with random_scale_prob or random_aspect_prob cannot be "
                                 "fused: its eval form (no random scale or aspect) is")
        return cls(tuple(t.size), t.longest, t.interpolation)

    def __init__(self, size: Sequence[int], longest: float = 0.0, interpolation: Any = "bilinear") -> None:
        super().__init__(_setup_size(size), interpolation)
        self.longest = float(longest)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        th, tw = self.size  # type: ignore[misc]
        rh, rw = height / th, width / tw
        ratio = max(rh, rw) * self.longest + min(rh, rw) * (1.0 - self.longest)
        return max(1, round(height / ratio)), max(1, round(width / ratio))


class CenterCrop(Transform, converts=("torchvision.CenterCrop", "timm.CenterCropOrPad")):
    """torchvision's CenterCrop, padding where the crop is larger (with zeros, or `fill`:
    timm's CenterCropOrPad with the mean colour)."""

    group = "geometry"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """timm's CenterCropOrPad pads with its `fill` where the crop is larger, then takes the
        centred crop (CenterCrop's offsets)."""
        if key(t) == "timm.CenterCropOrPad":
            if getattr(t, "padding_mode", "constant") != "constant":
                raise TransformError(f"timm.data.CenterCropOrPad(padding_mode={t.padding_mode!r}) cannot be fused: "
                                     "only 'constant'")
            return cls(t.size, levels(t.fill, floats))
        return cls(t.size)

    def __init__(self, size: int | Sequence[int], fill: Any = 0) -> None:
        self.size = _setup_size(size)
        self._fill = _pad_fill(fill, "CenterCrop")

    def __repr__(self) -> str:  # (the fill named only where it is not zeros: saved states keep their fingerprint)
        return f"CenterCrop(size={self.size!r})" if self._fill == (0, 0, 0) else \
            f"CenterCrop(size={self.size!r}, fill={list(self._fill)})"

    def offsets(self, height: int, width: int) -> tuple[int, int]:
        ch, cw = self.size
        top = -((ch - height) // 2) if ch > height else int(round((height - ch) / 2.0))
        left = -((cw - width) // 2) if cw > width else int(round((width - cw) / 2.0))
        return top, left

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"crop": (*self.offsets(*size), *self.size)}


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's padding argument as (left, top, right, bottom)."""
    if padding is None:
        return 0, 0, 0, 0
    if isinstance(padding, numbers.Integral):
        p = int(padding)
        return p, p, p, p
    if isinstance(padding, Sequence) and len(padding) in (1, 2, 4) and all(isinstance(v, numbers.Integral)
                                                                           for v in padding):
        v = [int(x) for x in padding]
        if len(v) == 1:
            return v[0], v[0], v[0], v[0]
        if len(v) == 2:
            return v[0], v[1], v[0], v[1]
        return v[0], v[1], v[2], v[3]
    raise TypeError(f"padding must be an int or a sequence of 1, 2 or 4 ints, not {padding!r}")


class RandomCrop(Transform, converts="torchvision.RandomCrop"):
    """torchvision's RandomCrop: pad (zeros, `padding` as torchvision reads it, then to the
    crop size where pad_if_needed and the image is smaller), and cut a window of `size`
    at a uniformly drawn position, padding with `fill` (levels); padding modes other than
    "constant" are refused."""

    group = "geometry"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        padding = t.padding
        if padding is not None and type(t).__module__.startswith("torchvision.transforms.v2"):
            left, right, top, bottom = padding  # v2 keeps it as (left, right, top, bottom)
            padding = (left, top, right, bottom)
        return cls(t.size, padding, t.pad_if_needed, levels(t.fill, floats), t.padding_mode)

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None,
                 pad_if_needed: bool = False, fill: Any = 0, padding_mode: str = "constant") -> None:
        self.size = _setup_size(size)
        self.padding = _padding(padding)
        if min(self.padding) < 0:
            raise ValueError(f"padding must be >= 0, not {padding!r}")
        if padding_mode != "constant":
            raise TransformError(f"RandomCrop(padding_mode={padding_mode!r}) cannot be fused: only 'constant'")
        self._fill = _pad_fill(fill, "RandomCrop")
        self.pad_if_needed = bool(pad_if_needed)

    def __repr__(self) -> str:
        text = Transform.__repr__(self)
        return text if self._fill == (0, 0, 0) else f"{text[:-1]}, fill={list(self._fill)})"

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        left, top, right, bottom = self.padding
        th, tw = self.size
        pw, ph = width + left + right, height + top + bottom
        if self.pad_if_needed and pw < tw:  # torchvision pads both sides by the difference
            left += tw - pw
            pw += 2 * (tw - pw)
        if self.pad_if_needed and ph < th:
            top += th - ph
            ph += 2 * (th - ph)
        if ph < th or pw < tw:
            raise ValueError(f"RandomCrop{self.size}: the image ({height}x{width}, {ph}x{pw} padded) is smaller "
                             "than the crop (pad_if_needed=True pads it)")
        if ph == th and pw == tw:
            i = j = 0
        else:
            i = rng.randint(0, ph - th)
            j = rng.randint(0, pw - tw)
        return {"crop": (i - top, j - left, th, tw)}  # in the image's own coordinates: zeros outside


class _Flip(Transform):
    """A mirror of the output image with probability p; make_params says it under `key`."""

    group = "flips"

    key = ""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError("p must be in [0, 1]")
        self.p = float(p)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {self.key: rng.random() < self.p}


class RandomHorizontalFlip(_Flip, converts="torchvision.RandomHorizontalFlip"):
    """torchvision's RandomHorizontalFlip: `flip` in make_params."""

    key = "flip"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)


class RandomVerticalFlip(_Flip, converts="torchvision.RandomVerticalFlip"):
    """torchvision's RandomVerticalFlip: with probability p the output image is mirrored
    top to bottom (in the kernel: rows read in reverse); `vflip` in make_params. Drawn
    after RandomHorizontalFlip's coin, wherever it stands among the steps."""

    key = "vflip"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.p)



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


class RandomApply(_Wrapper, converts="torchvision.RandomApply"):
    """torchvision's RandomApply: its steps with probability p, else none of them. The
    steps are any of the kernel program's (ColorJitter, the per-pixel ops, blur,
    sharpness, autocontrast, equalize, rotations and affine warps, the policies); the coin
    is drawn before the steps' own draws, as torchvision draws it, and a sample that
    loses it runs none of them."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(inner(t, floats), t.p)

    def __init__(self, transforms: Sequence[Transform], p: float = 0.5) -> None:
        steps = list(transforms)
        if not 0.0 <= p <= 1.0:
            raise ValueError("probability should be between 0 and 1")
        if not steps or not all(isinstance(t, _Step) for t in steps):
            raise _refuse(f"RandomApply({[type(t).__name__ for t in steps]}) cannot be fused: RandomApply is fused "
                          "around the per-sample ops only")
        self.transforms = steps  # type: ignore[assignment]
        self.p = float(p)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        # torchvision: `if self.p < torch.rand(1): return inputs`, then the steps' draws
        if rng.random() > self.p:
            return {}
        out: dict = {}
        for t in self.transforms:
            out.update(t.draw(rng, size))
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for t in self.transforms:  # (a lost coin left their keys out: each emits nothing)
            t.emit(p, size, prog)  # type: ignore[attr-defined]


class Normalize(Transform, converts="torchvision.Normalize"):
    group = "then"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.mean, t.std)

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        if len(mean) != 3 or len(std) != 3:
            raise TransformError("Normalize needs three means and three stds (RGB)")
        if any(s == 0 for s in std):
            raise ValueError("std evaluated to zero, leading to division by zero")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)


class ToDtype(Transform, converts=("torchvision.ToTensor", "torchvision.ConvertImageDtype", "torchvision.ToDtype",
                                   "timm.ToTensor", "timm.MaybeToTensor")):
    """Output dtype: torch.float32 or torch.float16 (scale=True: [0, 1]) or torch.uint8."""

    group = "then"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """ToTensor (torchvision's, timm's, timm's MaybeToTensor): float32 in [0, 1]."""
        name = key(t)
        if name == "torchvision.ToDtype":
            return cls(t.dtype if isinstance(t.dtype, torch.dtype) else t.dtype.get(torch.Tensor, None), scale=t.scale)
        if name == "torchvision.ConvertImageDtype":
            return cls(t.dtype, scale=True)
        return cls(torch.float32, scale=True)

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        if dtype not in (torch.float32, torch.float16, torch.uint8):
            raise TransformError(f"ToDtype({dtype}) is not supported: use float32, float16 or uint8")
        self.dtype = dtype
        self.scale = bool(scale)

    @property
    def makes_floats(self) -> bool:  # type: ignore[override]
        return self.dtype.is_floating_point


class RandomErasing(Transform, converts=("torchvision.RandomErasing", "timm.RandomErasing")):
    """torchvision.transforms.v2.RandomErasing, as the last step (after Normalize or
    ToDtype): with probability p, a rectangle of each output image, of `scale` of its area
    and aspect in `ratio` (10 tries, else nothing), is set to `value`: a number, one per
    channel, or "random" (standard normal noise). Drawn with torchvision's steps from the
    sample's seeded draws, after every other step's; `make_params` gives torchvision's
    names under "erase": {"i", "j", "h", "w"} (None: not erased). Runs on the kernel's
    output, on its device. `noise="box"` (with value="random"): one normal colour a box
    instead of a value a pixel (timm's RandomErasing mode "rand"). `count=(lo, hi)`:
    timm's min_count/max_count, several boxes an image (their number drawn in [lo, hi]
    after the coin, each box's area drawn as a 1/count share, 10 tries each, in turn:
    a later box overwrites an earlier one where they meet); their params are then a list
    under "erase_boxes" (each {"i", "j", "h", "w", "noise"})."""

    group = "last"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """timm's (timm.data.random_erasing): its draw (the coin, the number of boxes in
        [min_count, max_count], then for each box 10 tries of an area uniform in
        [min_area, max_area] of the image over the count, a log-uniform aspect, h and w
        rounded, a uniform corner), in mode "pixel" per-pixel normal noise (torchvision's
        value="random"), in mode "rand" one normal colour a box (noise="box"), and in mode
        "const" zeros (value=0). Refused: aug splits (num_splits: the batch's first part left
        clean, which a per-sample transform cannot know)."""
        if key(t) == "timm.RandomErasing":
            mode = (getattr(t, "mode", "const") or "const").lower()
            lo_c, hi_c = int(getattr(t, "min_count", 1)), int(getattr(t, "max_count", 1) or 1)
            if mode not in ("pixel", "const", "rand") or int(getattr(t, "num_splits", 0)) > 1:
                why = f"mode {mode!r}" if mode not in ("pixel", "const", "rand") else f"num_splits={t.num_splits}"
                raise TransformError(f"timm.data.random_erasing.RandomErasing with {why} cannot be fused: the "
                                     "kernel erases with noise a pixel, a colour a box, or a fixed value (timm's "
                                     "--remode pixel, rand or const), every image of the batch (no --aug-splits)")
            lo, hi = t.log_aspect_ratio
            return cls(float(t.probability), (float(t.min_area), float(t.max_area)), (math.exp(lo), math.exp(hi)),
                       "random" if mode != "const" else 0.0, noise="box" if mode == "rand" else "pixel",
                       count=(lo_c, hi_c))
        value = t.value if t.value is not None else "random"  # v2 keeps a list of floats, or None for "random"
        return cls(t.p, t.scale, t.ratio, value[0] if isinstance(value, list) and len(value) == 1 else value)

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33), ratio: Sequence[float] = (0.3, 3.3),
                 value: Any = 0.0, inplace: bool = False, *, noise: str = "pixel",
                 count: tuple[int, int] = (1, 1)) -> None:
        if noise not in ("pixel", "box"):
            raise ValueError(f"noise must be 'pixel' or 'box', not {noise!r}")
        if not (isinstance(count, (tuple, list)) and len(count) == 2 and all(isinstance(c, int) for c in count)
                and 1 <= count[0] <= count[1]):
            raise ValueError(f"count must be (lo, hi) with 1 <= lo <= hi, not {count!r}")
        self.count = (int(count[0]), int(count[1]))
        if not 0.0 <= p <= 1.0:
            raise ValueError("probability should be between 0 and 1")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(value, (int, float, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, (tuple, list)) and len(value) not in (1, 3):
            raise ValueError("If value is a sequence, it should have either a single value or 3 (number of inpt "
                             "channels)")
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise TransformError("Scale and ratio should be of kind (min, max)")
        if not (ratio[0] > 0 and math.isfinite(ratio[1])):  # its log is drawn from (torchvision fails at the first image)
            raise TransformError(f"RandomErasing ratio must be positive and finite, not {tuple(ratio)!r}")
        self.p = float(p)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value: list[float] | None = (None if isinstance(value, str) else [float(value)]
                                          if isinstance(value, (int, float)) else [float(v) for v in value])
        if noise == "box" and self.value is not None:
            raise ValueError("noise='box' draws the value: give value='random'")
        self.noise = noise

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        # torchvision: the coin (_RandomApplyTransform), then make_params' tries
        several = self.count != (1, 1)
        if not rng.random() < self.p:
            return {"erase": None, "erase_boxes": []} if several else {"erase": None}
        if not several:
            return {"erase": self._box(rng, size, 1)}
        # timm's _erase: the number of boxes, then each box's tries (its area a 1/count share)
        lo_c, hi_c = self.count
        count = lo_c if lo_c == hi_c else rng.randint(lo_c, hi_c)
        boxes = [b for b in (self._box(rng, size, count) for _ in range(count)) if b is not None]
        return {"erase": None, "erase_boxes": boxes}

    def _box(self, rng: random.Random, size: tuple[int, int], count: int) -> dict | None:
        """One box: 10 tries of an area (a 1/count share) and an aspect, else None."""
        img_h, img_w = size
        area = img_h * img_w
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            erase_area = area * rng.uniform(*self.scale) if count == 1 else rng.uniform(*self.scale) * area / count
            aspect = math.exp(rng.uniform(lo, hi))
            h = int(round(math.sqrt(erase_area * aspect)))
            w = int(round(math.sqrt(erase_area / aspect)))
            if not (h < img_h and w < img_w):
                continue
            i, j = rng.randrange(img_h - h + 1), rng.randrange(img_w - w + 1)
            return {"i": i, "j": j, "h": h, "w": w, "noise": rng.getrandbits(63) if self.value is None else None}
        return None

    @staticmethod
    def boxes(p: dict) -> list[dict]:
        """An image's boxes, in the order they are erased (one, or count's list)."""
        if "erase_boxes" in p:
            return p["erase_boxes"]
        return [p["erase"]] if p.get("erase") is not None else []

    def erase(self, view: torch.Tensor, params: Sequence[dict], *, batched: bool | None = None) -> None:
        """Erases in place the rectangles `params` drew, image k of `view` [N, 3, h, w]
        with params[k]. On a CUDA tensor (or with batched=True) in a fixed number of
        operations and one upload for the batch (erase_batch), however many images are
        erased; on the CPU image by image (no host-device traffic to save there, and no
        pass over the whole batch). Both give the same values bit for bit."""
        if batched if batched is not None else view.device.type == "cuda":
            self.erase_batch(view, params)
            return
        fill = None if self.value is None else torch.tensor(self.value, dtype=torch.float32)[:, None, None]
        for k, p in enumerate(params):
            for e in self.boxes(p):
                i, j, h, w = e["i"], e["j"], e["h"], e["w"]
                if fill is None:  # "random": the sample's own noise, torchvision's shape and law
                    v = self._noise(e)
                else:
                    v = fill
                view[k, :, i:i + h, j:j + w] = v.to(view.device, view.dtype)

    def _noise(self, e: dict) -> torch.Tensor:
        g = torch.Generator().manual_seed(e["noise"])
        if self.noise == "box":  # one colour for the box (timm's "rand")
            return torch.empty((3, 1, 1), dtype=torch.float32).normal_(generator=g).expand(3, e["h"], e["w"])
        return torch.empty((3, e["h"], e["w"]), dtype=torch.float32).normal_(generator=g)

    def erase_batch(self, view: torch.Tensor, params: Sequence[dict]) -> None:
        """erase() for a whole batch on its device without a host synchronization: the
        erased images' boxes (and, for value="random", their noise, drawn on the host as
        erase() draws it) go up in one copy from pinned memory, and each erased image is
        rewritten by a fixed number of whole-tensor operations (a mask of its box, the
        fill or its noise gathered into place). Several boxes an image: one round a box
        ordinal (each image's first boxes, then its second...), so an image is written once
        a round and a later box overwrites an earlier one, as erase() does."""
        boxes = [self.boxes(p) for p in params]
        for r in range(max(map(len, boxes), default=0)):
            payload = self.erase_payload([{"erase": b[r] if r < len(b) else None} for b in boxes])
            if payload is not None:
                self.erase_on_device(view, *payload)

    def erase_payload(self, params: Sequence[dict]) -> tuple[int, list[np.ndarray]] | None:
        """The host side of erase_batch: (erased images, [boxes [m, 5] (k, i, j, h, w) int64,
        then noise offsets int64 and the noise float32, or the fill float32 [3]], as bytes),
        None when nothing is erased."""
        erased = [(k, p["erase"]) for k, p in enumerate(params) if p.get("erase") is not None]
        if not erased:
            return None
        boxes = np.array([[k, e["i"], e["j"], e["h"], e["w"]] for k, e in erased], np.int64)
        pieces = [boxes.view(np.uint8).reshape(-1)]
        if self.value is None:
            sizes = boxes[:, 3] * boxes[:, 4] * 3
            pieces.append(np.asarray(np.cumsum(sizes) - sizes, np.int64).view(np.uint8))
            pieces.append(torch.cat([self._noise(e).reshape(-1) for _, e in erased]).numpy().view(np.uint8))
        else:
            pieces.append(np.array(self.value * 3 if len(self.value) == 1 else self.value, np.float32).view(np.uint8))
        return len(erased), pieces

    def erase_on_device(self, view: torch.Tensor, m: int, pieces: list[np.ndarray]) -> None:
        """The device side of erase_batch: one upload, a fixed number of operations."""
        from .decode._span import stage

        n, c, oh, ow = view.shape
        dev = view.device
        moved = stage(pieces, dev)  # one copy: boxes, then noise offsets and noise, or the fill
        boxes_nbytes = 5 * 8 * m
        b = moved[:boxes_nbytes].view(torch.int64).view(m, 5)
        at = boxes_nbytes
        k_, i_, j_, h_, w_ = (b[:, q] for q in range(5))
        ys = torch.arange(oh, device=dev).view(1, oh, 1)
        xs = torch.arange(ow, device=dev).view(1, 1, ow)
        ry = ys - i_.view(m, 1, 1)
        rx = xs - j_.view(m, 1, 1)
        inside = (ry >= 0) & (ry < h_.view(m, 1, 1)) & (rx >= 0) & (rx < w_.view(m, 1, 1))  # [m, oh, ow]
        inside = inside.unsqueeze(1)  # [m, 1, oh, ow]
        if self.value is None:
            starts_t = moved[at:at + 8 * m].view(torch.int64)
            noise = moved[at + 8 * m:].view(torch.float32)
            # image q's noise is [3, h, w] in C order from starts[q]: its pixel (c, y, x) at
            # starts[q] + (c * h + (y - i)) * w + (x - j) for (y, x) inside its box
            cs = torch.arange(c, device=dev).view(1, c, 1, 1)
            hh, ww = h_.view(m, 1, 1, 1), w_.view(m, 1, 1, 1)
            at_ = starts_t.view(m, 1, 1, 1) + (cs * hh + ry.unsqueeze(1)) * ww + rx.unsqueeze(1)
            values = noise[torch.where(inside, at_, 0)].to(view.dtype)
        else:
            values = moved[at:at + 12].view(torch.float32).view(1, c, 1, 1).to(view.dtype)
        imgs = view[k_]  # [m, 3, oh, ow] (a gather: the erased images only)
        view[k_] = torch.where(inside, values, imgs)

    def __repr__(self) -> str:
        value = "random" if self.value is None else self.value
        box = ", noise=box" if self.noise == "box" else ""
        count = f", count={self.count}" if self.count != (1, 1) else ""
        return f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value}{box}{count})"


@dataclass(frozen=True)
class _Plan:
    geometry: tuple[Transform, ...]
    out_size: tuple[int, int] | None  # None: no geometry, each image keeps its size
    antialias: bool
    flip: RandomHorizontalFlip | None
    normalize: Normalize | None
    dtype: torch.dtype
    steps: tuple[Transform, ...] = field(repr=False)
    erase: RandomErasing | None = None  # on the kernel's output, last
    vflip: RandomVerticalFlip | None = None
    program: tuple[_Step, ...] = ()  # each sample's kernel program, in the Compose's order
    cubic: bool = False  # the resize is bicubic (one mode; with several, each image's draw says)
    pad_fill: tuple[int, int, int] = (0, 0, 0)  # the crop's padding colour (levels)

    @property
    def jitter(self) -> ColorJitter | None:
        return next((u for t in self.program for u in t.inner() if isinstance(u, ColorJitter)), None)

    @property
    def jitter_draw(self) -> Transform | None:
        """The program step that draws the jitter: the ColorJitter, or what wraps it."""
        return next((t for t in self.program if any(isinstance(u, ColorJitter) for u in t.inner())), None)

    @property
    def pixel_ops(self) -> tuple[_PixelOp, ...]:
        return tuple(t for t in self.program if isinstance(t, _PixelOp))


_GEOMETRY = (RandomResizedCrop, Resize, CenterCrop, RandomCrop)


def _names(steps: Sequence[Any], width: int = 60) -> str:
    """The steps' class names for a message, shortened to about `width` characters."""
    names = [type(t).__name__ for t in steps]
    text = ", ".join(names)
    while len(text) > width and len(names) > 3:
        names = names[:1] + names[3:] if names[1] == "..." else names[:1] + ["..."] + names[2:]
        text = ", ".join(names)
    return text


def _plan(transforms: Sequence[Transform]) -> _Plan:
    steps = list(transforms)
    names = _names(steps)
    for i, t in enumerate(steps):
        if not isinstance(t, Transform):
            raise _refuse(f"{qualified(t)} cannot be fused (step {i + 1} of {len(steps)}): a Compose takes "
                          "gpudecode.transforms steps (Compose.from_torchvision converts torchvision's)")
    geometry = _geometry(steps, names)
    rest = _AfterGeometry(names)
    for t in steps[len(geometry):]:
        rest.add(t)
    out_size = geometry[-1].size if geometry else None  # type: ignore[attr-defined]
    plan = _Plan(tuple(geometry), tuple(out_size) if out_size is not None else None,
                 all(getattr(g, "antialias", True) for g in geometry), rest.flip, rest.normalize,
                 rest.dtype or torch.uint8, tuple(steps), rest.erase, rest.vflip, tuple(rest.program),
                 any(getattr(g, "_modes", ()) == ("bicubic",) for g in geometry),
                 next((g._fill for g in geometry if isinstance(g, (CenterCrop, RandomCrop))), (0, 0, 0)))  # noqa: SLF001
    if plan.out_size is not None:
        for t in plan.program:
            for u in t.inner():
                check = getattr(u, "check_size", None)
                if check is not None:
                    check(plan.out_size)
    return plan


def _geometry(steps: list[Transform], names: str) -> list[Transform]:
    """The leading geometry steps, checked to be one of the supported combinations."""
    geometry: list[Transform] = []
    for t in steps:
        if not isinstance(t, _GEOMETRY):
            break
        geometry.append(t)
    kinds = [Resize if isinstance(g, Resize) else type(g) for g in geometry]
    if kinds not in ([], [RandomResizedCrop], [Resize], [CenterCrop], [RandomCrop], [Resize, CenterCrop],
                     [Resize, RandomCrop]):
        raise TransformError(f"unsupported geometry {[k.__name__ for k in kinds]} in [{names}]: use one of "
                             f"RandomResizedCrop, Resize, CenterCrop, RandomCrop, Resize + CenterCrop, "
                             f"Resize + RandomCrop, or none")
    if kinds == [Resize] and (isinstance(geometry[0].size, int) or isinstance(geometry[0], ResizeKeepRatio)):  # type: ignore[attr-defined]
        raise TransformError("Resize(int) alone gives differently sized images; add CenterCrop or give (h, w)")
    return geometry


class _AfterGeometry:
    """The steps after the geometry, taken one at a time and checked where they stand."""

    def __init__(self, names: str) -> None:
        self.names = names
        self.flip: RandomHorizontalFlip | None = None
        self.vflip: RandomVerticalFlip | None = None
        self.program: list[_Step] = []
        self.keys: dict[str, str] = {}  # make_params key -> the class that draws it
        self.normalize: Normalize | None = None
        self.dtype: torch.dtype | None = None
        self.erase: RandomErasing | None = None

    def add(self, t: Transform) -> None:
        what, names = type(t).__name__, self.names
        if self.erase is not None:
            raise TransformError(f"{what} after RandomErasing cannot be fused: it erases the finished image [{names}]")
        if isinstance(t, _GEOMETRY):
            raise TransformError(f"{what} after other steps cannot be fused: geometry comes first [{names}]")
        if self.normalize is not None and not isinstance(t, RandomErasing) and not (
                isinstance(t, ToDtype) and t.dtype in (torch.float16, torch.float32)):
            raise TransformError(f"{what} after Normalize cannot be fused [{names}]")
        if isinstance(t, RandomErasing):
            self.erase = t
        elif isinstance(t, _Flip):
            self._flip(t)
        elif isinstance(t, _Step):
            self._step(t)
        elif isinstance(t, Normalize):
            if self.dtype == torch.uint8:
                raise TransformError("Normalize needs a float dtype, not ToDtype(uint8)")
            self.normalize = t
            self.dtype = self.dtype or torch.float32
        elif isinstance(t, ToDtype):
            if t.dtype != torch.uint8 and self.normalize is None and not t.scale:
                raise TransformError("ToDtype(float) on uint8 images needs scale=True to be fused")
            self.dtype = t.dtype
        else:
            raise _refuse(f"{what} cannot be fused there [{names}]")

    def _flip(self, t: _Flip) -> None:
        what = type(t).__name__
        if (self.vflip if isinstance(t, RandomVerticalFlip) else self.flip) is not None:
            raise TransformError(f"two {what}s [{self.names}]")
        moving = next((type(u).__name__ for u in self.program if u.moves), None)
        if moving is not None:
            raise TransformError(f"{what} after {moving} cannot be fused: the kernel flips while it resamples, "
                                 f"before the program's warps (put the flip before {moving}) [{self.names}]")
        if isinstance(t, RandomVerticalFlip):
            self.vflip = t
        else:
            self.flip = t  # type: ignore[assignment]

    def _step(self, t: _Step) -> None:
        if self.dtype == torch.uint8:
            raise TransformError(f"{type(t).__name__} after ToDtype(uint8) cannot be fused [{self.names}]")
        for u in t.inner():
            for k in u.keys:
                if k in self.keys:
                    raise TransformError(f"two {type(u).__name__}s [{self.names}]" if self.keys[k] == type(u).__name__
                                         else f"{type(u).__name__} and {self.keys[k]} both draw {k!r}: one of them "
                                         f"per Compose [{self.names}]")
                self.keys[k] = type(u).__name__
        self.program.append(t)


_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio)


def _mix64(z: int) -> int:
    """SplitMix64's finalizer (Stafford's variant 13): a bijection of 64-bit words."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class _SampleRandom(random.Random):
    """random.Random's methods (uniform, randint, shuffle, ...) over a SplitMix64 stream
    keyed by one sample's (seed, epoch, index). random.Random seeds a 624-word Mersenne
    Twister state, about 5-6 µs a sample, longer than all the sample's draws together;
    this one starts in a fraction of a microsecond. SplitMix64 passes BigCrush; each
    sample's stream starts at its own key (seed, epoch and index mixed), so two samples'
    streams meet only with probability ~2^-64 per draw."""

    def __init__(self, key: int, index: int, *, native: bool = True) -> None:  # no super(): nothing to seed
        self.gauss_next = None  # (what random.Random's seeding sets, and gauss() reads)
        if native:
            # the stream runs natively (a draw costs ~0.1 us there, ~1 us in Python's big
            # ints): its two primitives are bound on the instance, where random.Random's
            # methods (uniform, randint, shuffle, ...) look them up. native=False keeps the
            # methods below, the same stream in Python: the reference the tests compare.
            g = _native.SplitMix(key, index)
            self.random = g.random  # type: ignore[method-assign]
            self.getrandbits = g.getrandbits  # type: ignore[method-assign]
        else:
            self._state = _mix64(key ^ ((index & _M64) * 0xD1B54A32D192ED03 & _M64))

    def seed(self, *args: Any, **kwargs: Any) -> None:  # random.Random's own seeding is not used
        raise TypeError("a sample's generator is fixed by (seed, epoch, index)")

    def _next64(self) -> int:
        self._state = (self._state + _GAMMA) & _M64
        return _mix64(self._state)

    def random(self) -> float:
        return (self._next64() >> 11) * (1.0 / 9007199254740992.0)

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        bits = got = 0
        while got < k:
            bits |= self._next64() << got
            got += 64
        return bits & ((1 << k) - 1)


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The generator of one sample's random choices, fixed by (seed, epoch, index): a
    random.Random (uniform, randint, shuffle, ... as usual) over a SplitMix64 stream."""
    return _SampleRandom(_epoch_key(seed, epoch), index)


def _epoch_key(seed: int, epoch: int) -> int:
    return _mix64(_mix64((seed & _M64) ^ _GAMMA) ^ ((epoch & _M64) * _GAMMA & _M64))


MAX_CUDA_BATCH = 65535  # the kernels' grid is (columns, rows, images): gridDim.z's limit


def launch_failure(err: BaseException, shape: tuple[int, ...], device: str) -> KernelLaunchError | None:
    """`err`, raised launching the fused CUDA kernel, as a KernelLaunchError when it is
    the driver's, the compiler's or numba's (a bad launch, an unsupported GPU or PTX, a
    typing error), naming the output shape and device; None for anything else (out of
    memory, a bug), which stays what it is."""
    from numba.core.errors import NumbaError
    from numba.cuda.cudadrv import driver, error

    names = ("CudaAPIError", "CudaDriverError", "CudaSupportError", "LinkerError", "CudaRuntimeError", "NvvmError",
             "NvrtcError")  # (the simulator's driver module has only some of them)
    kinds = (NumbaError, *{k for m in (driver, error) for n in names if isinstance(k := getattr(m, n, None), type)})
    if not isinstance(err, kinds):
        return None
    detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return KernelLaunchError(f"the fused CUDA kernel could not be launched on {device} for an output of "
                             f"{list(shape)}: {type(err).__name__}{': ' + detail if detail else ''}")


class Compose(Transform):
    """A fused pipeline. Call it on a uint8 image [3, H, W] (or [1, H, W]: grey, read
    as RGB), a list of such images of any sizes, or a batch [N, 3, H, W], on the CPU or
    a CUDA device; it returns [N, 3, h, w] ([3, h, w] for one image; NHWC with
    layout="NHWC") on the same device.

    Args:
        transforms: the steps (see the module docstring for what can be fused).
        layout: "NCHW" (default) or "NHWC".
    """

    def __init__(self, transforms: Sequence[Transform], *, layout: Layout = "NCHW") -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError("layout must be 'NCHW' or 'NHWC'")
        self.transforms = list(transforms)
        self.layout = layout
        self.plan = _plan(self.transforms)
        self._rng = random.Random()
        self.native_spec = native_spec(self.plan)  # None: the Python path draws (see _draws)

    @property
    def rrc(self) -> bool:
        """The geometry is a RandomResizedCrop (the window the kernel reads is its crop)."""
        return bool(self.plan.geometry) and isinstance(self.plan.geometry[0], RandomResizedCrop)

    @property
    def out_size(self) -> tuple[int, int] | None:
        """(h, w) of every output; None without a geometry step (images keep their size)."""
        return self.plan.out_size

    def output_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The output (h, w) for images of `sizes`.

        Raises:
            ValueError: no geometry step and the images differ in size.
        """
        if self.plan.out_size is not None:
            return self.plan.out_size
        distinct = sorted(set(map(tuple, sizes)))
        if len(distinct) > 1:
            raise ValueError(f"images of {len(distinct)} sizes ({distinct[0]}, {distinct[1]}, ...): without a "
                             "geometry step each image keeps its size, so a batch needs one size (add "
                             "CenterCrop, RandomCrop or Resize)")
        return (int(distinct[0][0]), int(distinct[0][1])) if distinct else (1, 1)

    @property
    def dtype(self) -> torch.dtype:
        return self.plan.dtype

    def make_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                    indices: Sequence[int] | None = None) -> list[dict]:
        """One dict per image of size (height, width), with torchvision's names: `crop`
        (top, left, height, width) (for Resize + CenterCrop: in the resized image, whose
        size is `resize`), `flip`, `brightness`, `contrast`, `saturation`, `hue` (None
        when off), `order` (torchvision's fn_idx). (seed, epoch, index) fixes each draw."""
        return self.draw_batch(sizes, seed, epoch=epoch, indices=indices).dicts()

    def draw_batch(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                   indices: Sequence[int] | np.ndarray | None = None) -> Draws:
        """make_params' draws as a `Draws` (a sequence of its dicts, made when read; the
        kernel's arrays made without them): for the common plans in one native call for
        the batch, else by the Python path (see gpudecode._draws)."""
        if self.native_spec is not None and len(sizes):
            idx = np.arange(len(sizes), dtype=np.int64) if indices is None else np.asarray(indices)
            if idx.dtype == np.int64 and idx.shape == (len(sizes),):  # (Python ints beyond int64: the Python path)
                size_array = np.asarray(sizes, np.int64).reshape(-1, 2)
                cols = _native.draw_batch(self.native_spec, size_array, idx, _epoch_key(seed, epoch))
                if cols is not None:  # (None: a sample it cannot draw; the Python path names why)
                    return Draws(self, sizes, columns=cols, size_array=size_array)
        return Draws(self, sizes, dicts=self._python_params(sizes, seed, epoch=epoch, indices=indices))

    def _python_params(self, sizes: Sequence[tuple[int, int]], seed: int, *, epoch: int = 0,
                       indices: Sequence[int] | np.ndarray | None = None) -> list[dict]:
        """make_params drawn in Python, a sample at a time: every plan (the reference of
        the native draws)."""
        if indices is None:
            indices = range(len(sizes))
        elif isinstance(indices, np.ndarray):
            indices = indices.tolist()
        out = []
        key = _epoch_key(seed, epoch)
        for (h, w), idx in zip(sizes, indices):
            if h <= 0 or w <= 0:
                raise ValueError(f"image size must be positive, got {(h, w)}")
            rng = _SampleRandom(key, idx)  # sample_rng(seed, epoch, idx)
            p: dict = {"flip": False, "brightness": None, "contrast": None, "saturation": None, "hue": None,
                       "order": [0, 1, 2, 3]}
            size = (h, w)
            for t in self.plan.geometry:
                d = t.draw(rng, size)
                if "resize" in d:
                    size = d["resize"]
                p.update(d)
            if self.plan.flip is not None:
                p.update(self.plan.flip.draw(rng, size))
            if self.plan.vflip is not None:
                p.update(self.plan.vflip.draw(rng, size))
            osize = self.plan.out_size or (h, w)  # the image the program's steps see
            for step in self.plan.program:  # in the Compose's order
                p.update(step.draw(rng, osize))
            if self.plan.erase is not None:  # drawn last: the other steps' draws are unchanged
                p.update(self.plan.erase.draw(rng, self.plan.out_size or (h, w)))
            out.append(p)
        return out

    def encode(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        """Kernel arrays for `params`: geom int64 [N, GEOM] (the box, resize and window
        columns and FLIP; OFFSET, H, W and strides are the caller's), args float32
        [N, K, ARGS] and order int32 [N, K] (each sample's program: the ops its steps
        drew, in order, K the longest program of the batch)."""
        n = len(params)
        oh, ow = self.output_size(sizes)
        rrc = self.rrc
        program = self.plan.program
        G, H, W, VH, VW, OY, OX = fused.GEOM, fused.H, fused.W, fused.VH, fused.VW, fused.OY, fused.OX
        box, FLIP, VFLIP, CUBIC = slice(fused.TOP, fused.BW + 1), fused.FLIP, fused.VFLIP, fused.CUBIC
        cubic = self.plan.cubic
        FILL, fill = slice(fused.FILLR, fused.FILLB + 1), self.plan.pad_fill
        rows: list[list[int]] = []  # (built as lists: a numpy item assignment costs more than the list's)
        progs: list[list] = []
        for p, (h, w) in zip(params, sizes):
            g = [0] * G
            g[H], g[W] = h, w
            if rrc:
                t, l, bh, bw = p["crop"]
                if t < 0 or l < 0 or bh <= 0 or bw <= 0 or t + bh > h or l + bw > w:
                    raise ValueError(f"crop {p['crop']} is outside the {h}x{w} image")
                g[box] = (t, l, bh, bw)
                g[VH], g[VW] = oh, ow
            else:
                g[box] = (0, 0, h, w)
                g[VH], g[VW] = p.get("resize", (h, w))
                if "crop" in p:
                    g[OY], g[OX] = p["crop"][0], p["crop"][1]
            g[FLIP] = 1 if p.get("flip", False) else 0
            g[VFLIP] = 1 if p.get("vflip", False) else 0
            g[CUBIC] = 1 if p.get("cubic", cubic) else 0
            g[FILL] = fill
            rows.append(g)
            if program:
                prog: list = []
                for step in program:
                    step.emit(p, (oh, ow), prog)
                progs.append(prog)
        geom = np.array(rows, np.int64).reshape(n, G)
        width = max([1, *map(len, progs)])
        order = np.full((n, width), -1, np.int32)
        args = np.zeros((n, width, ARGS), np.float32)
        for k, prog in enumerate(progs):
            for j, (op, a) in enumerate(prog):
                if len(a) > OPS_ARGS[op]:  # (a step whose emit and the op table disagree: a bug, named)
                    raise TransformError(f"{OPS[op].name} reads {OPS_ARGS[op]} argument(s), a step emitted {len(a)}")
                order[k, j] = op
                args[k, j, :len(a)] = a
        return geom, args, order

    def decode_boxes(self, params: Sequence[dict], sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """The window (top, left, height, width) of each image the kernel reads, for a
        decoder to decode no more than that: RandomResizedCrop's crop; the whole image for
        Resize/CenterCrop (every source pixel can reach the output through the filter)."""
        if isinstance(params, Draws) and params.columns is not None:
            return [tuple(b) for b in params.boxes().tolist()]
        if self.rrc:
            return [tuple(p["crop"]) for p in params]  # type: ignore[misc]
        return [(0, 0, h, w) for h, w in sizes]

    def apply(self, decoded: "DecodedBatch", params: Sequence[dict], sizes: Sequence[tuple[int, int]],
              view: torch.Tensor, *, rows: Sequence[int] | None = None, stream: Any = None,
              num_threads: int | None = None, workspace: Workspace | None = None) -> None:
        """The fused kernel on decoded images: output i of `view` ([N, 3, h, w], any
        strides) is image rows[i] of `decoded` (default: every image, in order; a row may
        come more than once) transformed with params[rows[i]]; `sizes` are the full images'
        sizes (what the params were drawn for). The geometry the kernel reads is built here,
        once, from the decoder's offsets, strides and boxes. `workspace`: see run().

        Raises:
            ValueError: params that do not fit their image (a crop outside it).
            KernelLaunchError: the CUDA kernel could not be compiled or launched (names the
                batch shape and device; the driver's error as __cause__).
        """
        idx = np.arange(len(params)) if rows is None else np.asarray(rows, np.int64)
        if len(idx) != view.shape[0]:
            raise ValueError(f"{len(idx)} images for an output of {view.shape[0]}")
        if len(idx) == 0:
            return
        if isinstance(params, Draws):
            geom, args, order = params.encode(idx)
        else:
            geom, args, order = self.encode([params[k] for k in idx], [sizes[k] for k in idx])
        geom[:, fused.OFFSET] = decoded.offsets[idx]
        geom[:, fused.H:fused.W + 1] = decoded.shapes[idx]
        geom[:, fused.SY:fused.SC + 1] = decoded.strides[idx]
        geom[:, fused.TOP:fused.BW + 1] = decoded.boxes[idx]
        self.run(decoded.pixels, geom, args, order, view, stream=stream, num_threads=num_threads,
                 workspace=workspace)
        if self.plan.erase is not None:  # after the kernel, on its output (and its stream)
            self.plan.erase.erase(view, [params[k] for k in idx])

    def _norm_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        nz = self.plan.normalize
        mean = np.asarray(nz.mean if nz else (0.0, 0.0, 0.0), np.float32)
        std = np.asarray(nz.std if nz else (1.0, 1.0, 1.0), np.float32)
        return mean, std

    def new_output(self, n: int, device: torch.device | str = "cpu", *, pin_memory: bool = False,
                   size: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(output tensor in `layout`, its [N, 3, h, w] view that the kernel writes);
        pinned host memory with `pin_memory` on the CPU (where CUDA is present). `size`:
        the images' size, for a Compose without geometry."""
        if self.plan.out_size is None and size is None:
            raise ValueError("a Compose without a geometry step needs the images' size for its output")
        oh, ow = self.plan.out_size or size  # type: ignore[misc]
        pin = pin_memory and torch.device(device).type == "cpu" and torch.cuda.is_available()
        if self.layout == "NHWC":
            out = torch.empty((n, oh, ow, 3), dtype=self.plan.dtype, device=device, pin_memory=pin)
            return out, out.permute(0, 3, 1, 2)
        out = torch.empty((n, 3, oh, ow), dtype=self.plan.dtype, device=device, pin_memory=pin)
        return out, out

    def run(self, src: torch.Tensor, geom: np.ndarray, args: np.ndarray, order: np.ndarray,
            view: torch.Tensor, *, stream: Any = None, num_threads: int | None = None,
            workspace: Workspace | None = None) -> None:
        """Runs the fused kernel on a packed uint8 buffer `src` (1-D, CPU or CUDA) with
        complete geom rows, writing the [N, 3, h, w] view of the output (on the CPU with
        `num_threads` threads, default all cores; on CUDA on `stream`). `workspace`
        (kernels.workspace.Workspace): the buffers the kernel works in, kept by the caller
        between launches (a Pipeline holds one per view); without one they are made for
        this call."""
        mean, std = self._norm_arrays()
        normalize = self.plan.normalize is not None
        if src.is_cuda:
            from .kernels import cuda_launch

            if view.shape[0] > MAX_CUDA_BATCH:
                raise KernelLaunchError(f"a batch of {view.shape[0]} images is over the {MAX_CUDA_BATCH} one CUDA "
                                        "grid holds (its z dimension): use a smaller batch_size")
            try:
                cuda_launch.run(src, geom, args, order, mean, std, view, normalize=normalize,
                                antialias=self.plan.antialias, stream=stream, workspace=workspace)
            except Exception as e:
                failed = launch_failure(e, tuple(view.shape), str(src.device))
                if failed is None:
                    raise
                raise failed from e
            return
        out_np = view.numpy() if view.dtype != torch.float16 else None
        if out_np is None:  # numba CPU has no float16 stores: compute float32, cast
            tmp = torch.from_numpy(workspace.array("float16-staging", tuple(view.shape)) if workspace is not None
                                   else np.empty(tuple(view.shape), np.float32))
            fused.fused_cpu(src.numpy(), geom, args, order, mean, std, tmp.numpy(), normalize=normalize,
                            antialias=self.plan.antialias, num_threads=num_threads, workspace=workspace)
            view.copy_(tmp)
            return
        fused.fused_cpu(src.numpy(), geom, args, order, mean, std, out_np, normalize=normalize,
                        antialias=self.plan.antialias, num_threads=num_threads, workspace=workspace)

    def __call__(self, images: torch.Tensor | Sequence[torch.Tensor], params: Sequence[dict] | None = None,
                 *, seed: int | None = None) -> torch.Tensor:
        single = isinstance(images, torch.Tensor) and images.ndim == 3
        if isinstance(images, torch.Tensor):
            batch = [images] if images.ndim == 3 else list(images.unbind(0))
            if images.ndim not in (3, 4):
                raise ValueError(f"expected an image [C, H, W] or a batch [N, C, H, W], got shape {tuple(images.shape)}")
        else:
            batch = list(images)
        for k, im in enumerate(batch):
            if not isinstance(im, torch.Tensor) or im.dtype != torch.uint8 or im.ndim != 3 or im.shape[0] not in (1, 3):
                raise TypeError(f"image {k}: expected a uint8 tensor [3, H, W] or [1, H, W], got "
                                f"{getattr(im, 'dtype', type(im))} {tuple(getattr(im, 'shape', ()))}")
        devices = {im.device for im in batch}
        if len(devices) > 1:
            raise ValueError(f"images are on several devices: {devices}")
        device = batch[0].device if batch else torch.device("cpu")
        sizes = [(int(im.shape[1]), int(im.shape[2])) for im in batch]
        if params is None:
            params = self.make_params(sizes, self._rng.getrandbits(63) if seed is None else seed)
        elif len(params) != len(batch):
            raise ValueError(f"{len(params)} params for {len(batch)} images")
        flat = [im.contiguous().reshape(-1) for im in batch]
        n = len(batch)
        offsets = np.zeros(n, np.int64)
        strides = np.zeros((n, 3), np.int64)
        offset = 0
        for k, (im, f) in enumerate(zip(batch, flat)):
            c, h, w = im.shape
            offsets[k] = offset
            strides[k] = (w, 1, h * w if c == 3 else 0)  # CHW; one grey channel read as RGB
            offset += f.numel()
        if len(flat) == 1:
            src = flat[0]
        elif flat:
            src = torch.cat(flat)
        else:
            src = torch.empty(0, dtype=torch.uint8, device=device)
        shapes = np.asarray(sizes, np.int64).reshape(n, 2)
        # whole images: the box of each is the window the transform needs, inside it
        boxes = np.asarray(self.decode_boxes(params, sizes), np.int64).reshape(n, 4)
        decoded = DecodedBatch(src, offsets, shapes, strides, boxes, [None] * n)
        out, view = self.new_output(n, device, size=self.output_size(sizes))
        self.apply(decoded, params, sizes, view)
        return out[0] if single else out

    @classmethod
    def from_torchvision(cls, tv: Any, *, layout: Layout = "NCHW") -> "Compose":
        """The fused equivalent of a torchvision (v1 or v2) Compose, or a clear refusal.
        ToImage/PILToTensor/ToTensor-style input conversions are dropped (the loader
        feeds uint8 tensors); ToTensor becomes ToDtype(float32, scale=True)."""
        return cls(convert(tv), layout=layout)


from . import _timm, mixing  # noqa: E402, F401  (_timm: its classes declare the timm transforms they convert)
# (re-exported: __all__ below is derived from the classes' declarations)
from .augment import (AugMix, AutoAugment, GaussianBlur, RandAugment, RandomAdjustSharpness,  # noqa: E402, F401
                      RandomAffine, RandomAutocontrast, RandomEqualize, RandomOrder, RandomPerspective,
                      RandomRotation, SampleRandomChoice,
                      TrivialAugmentWide)
from .mixing import CutMix, MixUp  # noqa: E402, F401  (batch transforms: torchvision's names, here)



class RandomChoice:
    """torchvision's RandomChoice: one of `transforms` with probabilities `p`. Over
    per-sample steps (ops, policies) it is a step of each sample's program
    (augment.SampleRandomChoice); over MixUp and CutMix, a batch transform
    (mixing.RandomChoice, for Loader(batch_transform=))."""

    def __new__(cls, transforms: Sequence[Any], p: Sequence[float] | None = None) -> Any:  # type: ignore[misc]
        items = list(transforms)
        if items and all(isinstance(t, _Step) for t in items):
            return SampleRandomChoice(items, p)
        return mixing.RandomChoice(items, p)

# the ops under torchvision's names: each class that converts torchvision's namesake (its
# `converts=`), as they are defined; then what is not one op of a Compose
__all__ = [*(cls.__name__ for name, cls in CONVERTS.items() if name == f"torchvision.{cls.__name__}"),
           "Compose", "Transform", "RandomChoice", "MixUp", "CutMix", "sample_rng"]
