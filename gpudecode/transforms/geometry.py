"""The geometry steps (one, first in a Compose) and the flips, with torchvision's names,
arguments and draws: RandomResizedCrop, Resize, CenterCrop, RandomCrop (timm's
ResizeKeepRatio and CenterCropOrPad), RandomHorizontalFlip, RandomVerticalFlip."""
from __future__ import annotations

import math
import numbers
import random
from typing import Any, Sequence


import numpy as np

from ..errors import TransformError
from .base import Transform, in_fingerprint
from .args import pad_fill
from .convert import key, levels


def _setup_size(size: Any, name: str = "size") -> tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1 and isinstance(size[0], numbers.Integral):
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2 and all(isinstance(s, numbers.Integral) for s in size):
        return int(size[0]), int(size[1])
    raise TypeError(f"{name} must be an int or a sequence of one or two ints, not {size!r}")


_MODES = ("bilinear", "bicubic", "nearest-exact", "nearest", "pil-nearest")
FILTERS = {m: k for k, m in enumerate(_MODES)}  # the kernel's FILTER column: a mode's place here


def _interpolation(interpolation: Any, antialias: bool) -> tuple[str, ...]:
    """The resampling filter(s) of a resize: ("bilinear",), ("bicubic",), ("nearest-exact",),
    ("nearest",), ("pil-nearest",) (PIL's NEAREST, as timm resizes: kernels/_filters.py's
    pil_nearest_index), or bilinear and bicubic both (a list or tuple of modes: one drawn an
    image, as timm's interpolation="random"). torchvision's InterpolationMode, its string,
    or PIL's constant (0, 2, 3) are read. The nearest modes are ATen's (no antialias, as
    torchvision's resize ignores it for them)."""
    modes = list(interpolation) if isinstance(interpolation, (list, tuple)) else [interpolation]
    names = []
    for m in modes:
        name = getattr(m, "value", m)
        name = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(name, name) if isinstance(name, int) \
            else str(name).lower()
        if name not in _MODES:
            raise TransformError(f"{m!r} interpolation cannot be fused: the kernel resamples bilinear, bicubic, "
                                 "nearest, nearest-exact or pil-nearest")
        names.append(name)
    if not names:
        raise TransformError("no interpolation mode given")
    if len(set(names)) > 1 and not set(names) <= {"bilinear", "bicubic"}:
        raise TransformError(f"interpolation {names} cannot be fused: a mode drawn an image is bilinear or bicubic")
    if "bicubic" in names and not antialias:
        raise TransformError("bicubic interpolation with antialias=False cannot be fused: the kernel's bicubic is "
                             "the antialiased one (torchvision's default for tensors, PIL's)")
    return tuple(dict.fromkeys(names))


def _pil_nearest(interpolation: Any) -> Any:
    """timm resizes PIL images: its NEAREST is PIL's ("pil-nearest": the pixel Pillow's
    resize takes, which is torch's "nearest-exact" but where the source position falls on a
    pixel edge), not ATen's legacy "nearest" (which torchvision's NEAREST means on tensors,
    and which took 47-70% of values more than a level off PIL's)."""
    modes = list(interpolation) if isinstance(interpolation, (list, tuple)) else [interpolation]
    out = ["pil-nearest" if str(getattr(m, "value", m)).lower() == "nearest" or m == 0 else m for m in modes]
    return out if isinstance(interpolation, (list, tuple)) else out[0]


def _pil_modes(modes: tuple[str, ...]) -> tuple[str, ...]:
    """A resize's modes where it saw PIL images (Transform.on_pil_images): NEAREST is PIL's."""
    return tuple("pil-nearest" if m == "nearest" else m for m in modes)


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
    aspect ratio, else the centred fallback; a bilinear or bicubic resize with antialias, a
    nearest or nearest-exact one, or a list of modes to draw one an image from (timm's
    interpolation="random")."""

    group = "geometry"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        if key(t) == "timm.RandomResizedCropAndInterpolation":  # torchvision's draw with its interpolation ("random":
            return cls(list(t.size), tuple(t.scale), tuple(t.ratio), _pil_nearest(t.interpolation),  # both modes)
                       antialias=True)
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

    @property
    def filter_modes(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._modes

    def on_pil_images(self) -> Transform:
        self._modes = _pil_modes(self._modes)
        return self

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


def _shorter_side_to(height: int, width: int, size: int, max_size: int | None) -> tuple[int, int]:
    """torchvision's resize to an int: the shorter side to `size`, the longer one keeping
    the aspect ratio (truncated), capped by `max_size`."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


class Resize(Transform, converts="torchvision.Resize"):
    """torchvision's Resize: an int resizes the shorter side (the longer one keeps the
    aspect ratio, capped by max_size); (h, w) resizes to exactly that; None (v2's, with
    max_size) resizes the longer side to max_size."""

    group = "geometry"
    keys = ("resize",)  # (its make_params key; a first pass's Resize draws "first_resize": draws.python_params)

    def inner(self) -> list["Resize"]:
        """Itself: a first pass reads its steps' keys through inner() (transforms.first)."""
        return [self]

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.size, t.interpolation, getattr(t, "max_size", None), antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, size: int | Sequence[int] | None, interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool = True) -> None:
        if size is None:
            if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
                raise ValueError(f"max_size must be an integer when size is None, but got {max_size} instead.")
            self.size: int | tuple[int, int] | None = None
        elif isinstance(size, numbers.Integral) or (isinstance(size, Sequence) and len(size) == 1):
            self.size = int(size if isinstance(size, numbers.Integral) else size[0])
        else:
            self.size = _setup_size(size)
        if max_size is not None and self.size is not None and not isinstance(self.size, int):
            raise ValueError("max_size is only allowed when size is an int")
        if max_size is not None and self.size is not None and (
                isinstance(max_size, bool) or not isinstance(max_size, int) or max_size <= self.size):  # type: ignore[operator]
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

    @property
    def filter_modes(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._modes

    def on_pil_images(self) -> Transform:
        self._modes = _pil_modes(self._modes)
        return self

    def __repr__(self) -> str:
        return _resize_repr(self, self._modes)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        if self.size is None:  # (the longer side to max_size, the shorter truncated: v2's)
            short, long = (width, height) if width <= height else (height, width)
            new_short = int(self.max_size * short / long)  # type: ignore[operator]
            return (self.max_size, new_short) if width <= height else (new_short, self.max_size)  # type: ignore[return-value]
        if not isinstance(self.size, int):
            return self.size
        return _shorter_side_to(height, width, self.size, self.max_size)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"resize": self.output_size(*size)}


class ResizeKeepRatio(Resize, converts="timm.ResizeKeepRatio"):
    """timm's ResizeKeepRatio (its eval form): each image scaled by one factor, the ratio
    of its size to `size` (h, w) taken between the smaller (longest=0) and the larger
    (longest=1) side's, each side rounded: round(side / ratio)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """Its eval form (no random scale or aspect: timm's rkrc/rkrr train crops are refused)."""
        if getattr(t, "random_scale_prob", 0) > 0 or getattr(t, "random_aspect_prob", 0) > 0:
            raise TransformError("timm.data.ResizeKeepRatio with random_scale_prob or random_aspect_prob (timm's "
                                 "rkrr and rkrc train crops) cannot be fused: its eval form (no random scale or "
                                 "aspect) is; for training, use timm's default crop (RandomResizedCrop)")
        return cls(tuple(t.size), t.longest, t.interpolation)

    def __init__(self, size: Sequence[int], longest: float = 0.0, interpolation: Any = "bilinear") -> None:
        super().__init__(_setup_size(size), interpolation)
        self.longest = float(longest)

    def __repr__(self) -> str:
        if in_fingerprint():  # (saved states' form: Resize's attributes too)
            return super().__repr__()
        mode = "" if self._modes == ("bilinear",) else f", interpolation={self._modes[0]!r}"
        return f"ResizeKeepRatio(size={self.size!r}, longest={self.longest!r}{mode})"

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        th, tw = self.size  # type: ignore[misc]
        rh, rw = height / th, width / tw
        ratio = max(rh, rw) * self.longest + min(rh, rw) * (1.0 - self.longest)
        return max(1, round(height / ratio)), max(1, round(width / ratio))


class _RandomSize(Resize):
    """A Resize whose output size is drawn for each image ("resize" in make_params: (h, w)):
    the images of a batch differ in size, so a crop (CenterCrop or RandomCrop) must follow
    it in the Compose; any one of Resize's modes."""

    def __init__(self, interpolation: Any, antialias: bool) -> None:
        self._modes = _interpolation(interpolation, bool(antialias))
        if len(self._modes) > 1:
            raise TransformError(f"{type(self).__name__} takes one interpolation mode")
        self.antialias = bool(antialias)

    def __repr__(self) -> str:
        return _resize_repr(self, self._modes)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        raise TypeError(f"{type(self).__name__} draws its size for each image (see draw)")

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        raise NotImplementedError


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise TransformError(f"{what} must be a positive int, not {value!r}")
    return int(value)


def _scaled(height: int, width: int, r: float, what: str) -> dict:
    new_h, new_w = int(height * r), int(width * r)
    if new_h < 1 or new_w < 1:
        raise ValueError(f"{what} resizes a {height}x{width} image to {new_h}x{new_w}")
    return {"resize": (new_h, new_w)}


class RandomResize(_RandomSize, converts="torchvision.RandomResize"):
    """torchvision's RandomResize (its segmentation reference's): the shorter side resized
    to a size drawn uniformly in [min_size, max_size) (torch.randint's), the longer one
    keeping the aspect ratio, as Resize(size)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.min_size, t.max_size, t.interpolation, antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, min_size: int, max_size: int, interpolation: Any = "bilinear", antialias: bool = True) -> None:
        self.min_size = _positive_int(min_size, "RandomResize min_size")
        self.max_size = _positive_int(max_size, "RandomResize max_size")  # type: ignore[assignment]
        if self.min_size >= self.max_size:  # (torch.randint(min_size, max_size) draws nothing else)
            raise TransformError(f"RandomResize needs min_size < max_size, not {min_size}, {max_size}")
        super().__init__(interpolation, antialias)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        short = rng.randrange(self.min_size, self.max_size)  # type: ignore[arg-type]
        return {"resize": _shorter_side_to(*size, short, None)}


class RandomShortestSize(_RandomSize, converts="torchvision.RandomShortestSize"):
    """torchvision's RandomShortestSize (its detection reference's): one of `min_size`
    (uniformly) for the shorter side, the ratio capped so that the longer side is at most
    `max_size`; each side int(side * ratio), as torchvision computes them."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(list(t.min_size), t.max_size, t.interpolation, antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None, interpolation: Any = "bilinear",
                 antialias: bool = True) -> None:
        sizes: list = [min_size] if isinstance(min_size, numbers.Integral) else list(min_size)  # type: ignore[arg-type]
        if not sizes:
            raise TransformError("RandomShortestSize needs at least one min_size")
        self.min_size = [_positive_int(v, "RandomShortestSize min_size") for v in sizes]
        self.max_size = None if max_size is None else _positive_int(max_size, "RandomShortestSize max_size")
        super().__init__(interpolation, antialias)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        r = self.min_size[rng.randrange(len(self.min_size))] / min(height, width)
        if self.max_size is not None:
            r = min(r, self.max_size / max(height, width))
        return _scaled(height, width, r, "RandomShortestSize")


class ScaleJitter(_RandomSize, converts="torchvision.ScaleJitter"):
    """torchvision's ScaleJitter (Large Scale Jitter): each image scaled by the factor that
    fits it in `target_size` (torchvision's formula: min(target_size[1] / height,
    target_size[0] / width)) times a scale uniform in `scale_range`; each side
    int(side * ratio)."""

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(tuple(t.target_size), tuple(t.scale_range), t.interpolation,
                   antialias=bool(getattr(t, "antialias", True)))

    def __init__(self, target_size: Sequence[int], scale_range: Sequence[float] = (0.1, 2.0),
                 interpolation: Any = "bilinear", antialias: bool = True) -> None:
        self.target_size = _setup_size(target_size, "ScaleJitter target_size")
        lo, hi = (float(v) for v in scale_range)
        if not 0 < lo <= hi:
            raise TransformError(f"ScaleJitter scale_range must be (lo, hi) with 0 < lo <= hi, not {scale_range!r}")
        self.scale_range = (lo, hi)
        super().__init__(interpolation, antialias)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        lo, hi = self.scale_range
        scale = lo + rng.random() * (hi - lo)
        r = min(self.target_size[1] / height, self.target_size[0] / width) * scale
        return _scaled(height, width, r, "ScaleJitter")


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
        self._fill = pad_fill(fill, "CenterCrop")

    def __repr__(self) -> str:  # (the fill named only where it is not zeros: saved states keep their fingerprint)
        return f"CenterCrop(size={self.size!r})" if self._fill == (0, 0, 0) else \
            f"CenterCrop(size={self.size!r}, fill={list(self._fill)})"

    @property
    def crop_fill(self) -> tuple[int, int, int]:  # type: ignore[override]
        """The padding colour (levels) where the crop reaches past the image."""
        return self._fill

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


PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}  # (the kernels' PAD column)


class RandomCrop(Transform, converts="torchvision.RandomCrop"):
    """torchvision's RandomCrop: pad (zeros, `padding` as torchvision reads it, then to the
    crop size where pad_if_needed and the image is smaller), and cut a window of `size`
    at a uniformly drawn position, padding with `fill` (levels), or with `padding_mode`
    "edge", "reflect" or "symmetric" the image's own pixels there, as torch's pad reads
    them (the kernel reads the frame at the reflected place: no padded copy is made)."""

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
        if padding_mode not in PAD_MODES:
            raise TransformError(f"RandomCrop(padding_mode={padding_mode!r}) cannot be fused: one of "
                                 f"{', '.join(PAD_MODES)}")
        if padding_mode in ("reflect", "symmetric") and pad_if_needed and any(self.padding):
            raise TransformError(f"RandomCrop(padding={padding!r}, pad_if_needed=True, padding_mode={padding_mode!r}) "
                                 "cannot be fused: torchvision's v1 reflects twice there (the padding, then the "
                                 "rest) and v2 once; give the padding or pad_if_needed")
        self._fill = pad_fill(fill, "RandomCrop")
        self.pad_if_needed = bool(pad_if_needed)
        self._padding_mode = padding_mode  # (private: a constant crop's repr, and fingerprint, as before)

    @property
    def padding_mode(self) -> str:
        """torch's pad mode of the padding: constant (the fill), edge, reflect, symmetric."""
        return self._padding_mode

    @property
    def pad_mode(self) -> int:
        """The padding mode as the kernels' PAD column says it (0 constant ... 3 symmetric)."""
        return PAD_MODES[self._padding_mode]

    def __repr__(self) -> str:
        text = Transform.__repr__(self)
        if self._fill != (0, 0, 0):
            text = f"{text[:-1]}, fill={list(self._fill)})"
        return text if self.pad_mode == 0 else f"{text[:-1]}, padding_mode={self.padding_mode!r})"

    def reflects(self, sizes: np.ndarray) -> np.ndarray:
        """Whether the padding of each image of `sizes` (int64 [N, 2], what the crop reads:
        the image, or its resize) is within one reflection of it, as torch's pad takes it
        (reflect: less than the side; symmetric: up to it), bool [N]; every one for the
        other modes."""
        h, w = sizes[:, 0], sizes[:, 1]
        if self.pad_mode < 2:
            return np.ones(len(sizes), bool)
        left, top, right, bottom = (np.full(len(sizes), v, np.int64) for v in self.padding)
        th, tw = self.size
        if self.pad_if_needed:  # (draw's: both sides by the difference)
            grow_w, grow_h = np.maximum(tw - (w + left + right), 0), np.maximum(th - (h + top + bottom), 0)
            left, right, top, bottom = left + grow_w, right + grow_w, top + grow_h, bottom + grow_h
        edge = 1 if self.pad_mode == 2 else 0  # (reflect does not repeat the edge: one pixel less)
        return (np.maximum(left, right) <= w - edge) & (np.maximum(top, bottom) <= h - edge)

    @property
    def crop_fill(self) -> tuple[int, int, int]:  # type: ignore[override]
        """The padding colour (levels) where the crop reaches past the image."""
        return self._fill

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
        if self.pad_mode >= 2 and not self.reflects(np.array([[height, width]]))[0]:
            raise ValueError(f"RandomCrop{self.size}: padding_mode={self.padding_mode!r} pads this {height}x{width} "
                             f"image by more than it holds (torch's pad refuses it)")
        if ph == th and pw == tw:
            i = j = 0
        else:
            i = rng.randint(0, ph - th)
            j = rng.randint(0, pw - tw)
        return {"crop": (i - top, j - left, th, tw)}  # in the image's own coordinates: zeros outside


class FixedSizeCrop(RandomCrop):
    """The FixedSizeCrop of torchvision's detection reference (references/detection/
    transforms.py; its "lsj" preset: ScaleJitter, then this): a window of `size` at
    offsets int((h - th) * r) and int((w - tw) * r), one r = torch.rand(1) for both (no
    draw where the image fits inside), the part past the image filled with `fill` at the
    bottom and right: the image stays at the top-left where it is smaller. A crop, as
    RandomCrop is, for what may stand before it and for the boxes and masks that follow."""

    def __init__(self, size: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant") -> None:
        if padding_mode != "constant":
            raise TransformError(f"FixedSizeCrop(padding_mode={padding_mode!r}) cannot be fused: only 'constant'")
        super().__init__(size, None, False, fill, padding_mode)

    def __repr__(self) -> str:
        fill = "" if self._fill == (0, 0, 0) else f", fill={list(self._fill)}"
        return f"FixedSizeCrop(size={self.size!r}{fill})"

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        th, tw = self.size
        if min(height, th) == height and min(width, tw) == width:
            return {"crop": (0, 0, th, tw)}
        r = np.float32(rng.random())  # (torch.rand(1): float32, and int() of float32 products)
        top, left = int(np.float32(max(height - th, 0)) * r), int(np.float32(max(width - tw, 0)) * r)
        return {"crop": (top, left, th, tw)}


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
