"""The per-sample ops beyond ColorJitter, with torchvision v2's names, arguments, defaults
and draws, as steps of the fused kernel's program: RandomAutocontrast, RandomEqualize,
RandomAdjustSharpness, GaussianBlur, RandomRotation, RandomAffine; the policies
TrivialAugmentWide, RandAugment, AutoAugment and AugMix; and RandomChoice and RandomOrder
over per-sample steps. Import them from gpudecode.transforms.

Semantics are torchvision's on float images in [0, 1] (the kernel converts the uint8
input first, as ToDtype(float32, scale=True) before the transforms would): equalize
bins the image to uint8 levels and back, as torchvision does for float images. Values
given in pixel levels (a `fill`) are in the input's uint8 levels, as torchvision takes
them for uint8 and PIL images; from_torchvision converts those given after a float
conversion.
"""
from __future__ import annotations

import functools
import math
import numbers
import random
from typing import Any, Sequence

import numpy as np
import torch

from .errors import TransformError
from .kernels._pixel import MAX_BLUR
from .kernels.ops import (AFFINE, AUTOCONTRAST, BLUR_X, BLUR_Y, BRIGHTNESS, CONTRAST, EQUALIZE, INVERT, MIX_ADD,
                          MIX_END, MIX_SAVE, PERSPECTIVE, POSTERIZE, SATURATION, SHARPNESS, SOLARIZE)
from . import mixing
from ._convert import inner, warp_fill
from ._steps import Transform, _PixelOp, _refuse, _Step, _Wrapper

NEAREST, BILINEAR, INTEGER_MAP = 0.0, 1.0, 2.0  # AFFINE's interpolation argument


def _interpolation(value: Any) -> float:
    name = str(getattr(value, "value", value)).lower()
    if name in ("nearest", "0"):
        return NEAREST
    if name in ("bilinear", "2"):
        return BILINEAR
    raise TransformError(f"interpolation {value!r} cannot be fused for warps: nearest or bilinear (torchvision's "
                         "tensor warps take only these)")


def _fill(fill: Any) -> tuple[float, float, float] | None:
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


def inverse_affine(center: Sequence[float], angle: float, translate: Sequence[float], scale: float,
                   shear: Sequence[float]) -> list[float]:
    """The matrix mapping output to input coordinates (centred on the image) of a warp
    rotating by `angle` degrees, scaling, shearing (degrees) and translating about
    `center`: rotation-shear RSS = R(angle) Sh(shear); inverse = C RSS^-1 / scale C^-1 T^-1.
    The same formula and order of operations as torchvision's, so the same float32 theta."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    m[2] += m[0] * (-(cx + tx)) + m[1] * (-(cy + ty))
    m[5] += m[3] * (-(cx + tx)) + m[4] * (-(cy + ty))
    m[2] += cx
    m[5] += cy
    return m


def affine_args(matrix: Sequence[float], size: tuple[int, int], interpolation: float,
                fill: tuple[float, float, float] | None) -> tuple[float, ...]:
    """AFFINE's kernel arguments: theta's rows divided by (w/2, h/2) in float32, as
    torchvision's _affine_grid divides them, then the interpolation and the fill (NaN:
    none)."""
    h, w = size
    theta = torch.tensor(matrix, dtype=torch.float32)
    half = torch.tensor([0.5 * w] * 3 + [0.5 * h] * 3, dtype=torch.float32)
    scaled = (theta / half).tolist()
    return (*scaled, interpolation, *(fill if fill is not None else (math.nan,) * 3))


def rotation_args(angle: float, size: tuple[int, int], interpolation: float, fill: Any,
                  center: Sequence[float] | None = None) -> tuple[float, ...] | None:
    """F.rotate's warp as AFFINE args (None: the identity). Where torchvision takes its
    exact fast paths (no center; 0 and 180 degrees; 90 and 270 on square images) the
    kernel maps integer pixels instead, so the result is the same exact permutation."""
    h, w = size
    angle = angle % 360
    if center is None:
        if angle == 0:
            return None
        if angle == 180 or (h == w and angle in (90, 270)):
            # source (x, y) = (a0 x + a1 y + a2, a3 x + a4 y + a5), in pixels
            maps = {180: (-1, 0, w - 1, 0, -1, h - 1), 90: (0, -1, w - 1, 1, 0, 0), 270: (0, 1, 0, -1, 0, h - 1)}
            return (*map(float, maps[int(angle)]), INTEGER_MAP, math.nan, math.nan, math.nan)
    cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    return affine_args(inverse_affine(cf, -angle, (0.0, 0.0), 1.0, (0.0, 0.0)), size, interpolation, fill)


def warp_args(size: tuple[int, int], angle: float, translate: Sequence[float], scale: float, shear: Sequence[float],
              interpolation: float, fill: Any, center: Sequence[float] | None = None) -> tuple[float, ...]:
    """F.affine's warp as AFFINE args."""
    h, w = size
    cf = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    return affine_args(inverse_affine(cf, angle, [float(t) for t in translate], scale, shear), size, interpolation,
                       fill)


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


class _Warp(_Step):
    moves = True

    def _setup(self, interpolation: Any, fill: Any, center: Sequence[float] | None) -> None:
        self.interpolation = _interpolation(interpolation)
        self.fill = fill
        self._fill = _fill(fill)
        if center is not None and len(center) != 2:
            raise ValueError("center should be a sequence of length 2")
        self.center = None if center is None else (float(center[0]), float(center[1]))


def _degrees(degrees: Any, name: str = "degrees") -> tuple[float, float]:
    if isinstance(degrees, numbers.Real):
        if degrees < 0:
            raise ValueError(f"If {name} is a single number, it must be positive.")
        return -float(degrees), float(degrees)
    if isinstance(degrees, Sequence) and len(degrees) == 2:
        return float(degrees[0]), float(degrees[1])
    raise TypeError(f"{name} should be a single number or a sequence with length 2.")


class RandomRotation(_Warp, converts="torchvision.RandomRotation"):
    """torchvision's RandomRotation: the output image rotated by an angle uniform in
    `degrees` (make_params: "rotation": {"angle"}), nearest or bilinear, `fill` (uint8
    levels; torchvision's default 0) outside, about `center`; expand=False only (the
    output keeps its size)."""

    keys = ("rotation",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        if t.expand:
            raise TransformError("RandomRotation(expand=True) cannot be fused: the output would change size")
        return cls(t.degrees, t.interpolation, False, t.center, warp_fill(t, floats))

    def __init__(self, degrees: Any, interpolation: Any = "nearest", expand: bool = False,
                 center: Sequence[float] | None = None, fill: Any = 0) -> None:
        if expand:
            raise TransformError("RandomRotation(expand=True) cannot be fused: the output would change size")
        self.degrees = _degrees(degrees)
        self._setup(interpolation, fill, center)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {"rotation": {"angle": rng.uniform(*self.degrees)}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        r = p.get("rotation")
        if r is not None:
            a = rotation_args(r["angle"], size, self.interpolation, self._fill, self.center)
            if a is not None:
                prog.append((AFFINE, a))


class RandomAffine(_Warp, converts="torchvision.RandomAffine"):
    """torchvision's RandomAffine: angle, translation (fractions of the size, rounded to
    pixels), scale and shear drawn as torchvision draws them (make_params: "affine":
    {"angle", "translate", "scale", "shear"}), nearest or bilinear, `fill` outside."""

    keys = ("affine",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.degrees, t.translate, t.scale, t.shear, t.interpolation, warp_fill(t, floats), t.center)

    def __init__(self, degrees: Any, translate: Sequence[float] | None = None, scale: Sequence[float] | None = None,
                 shear: Any = None, interpolation: Any = "nearest", fill: Any = 0,
                 center: Sequence[float] | None = None) -> None:
        self.degrees = _degrees(degrees)
        if translate is not None:
            if len(translate) != 2 or not all(0.0 <= t <= 1.0 for t in translate):
                raise ValueError("translate should be a sequence of length 2 with values between 0 and 1")
            translate = (float(translate[0]), float(translate[1]))
        if scale is not None:
            if len(scale) != 2 or any(s <= 0 for s in scale):
                raise ValueError("scale values should be positive")
            scale = (float(scale[0]), float(scale[1]))
        shears: tuple[float, ...] | None = None
        if shear is not None:
            if isinstance(shear, numbers.Real):
                shears = _degrees(shear, "shear")
            elif len(shear) in (2, 4):
                shears = tuple(float(v) for v in shear)
            else:
                raise TypeError("shear should be a single number or a sequence of 2 or 4 numbers")
        self.translate = translate
        self.scale = scale
        self.shear = shears
        self._setup(interpolation, fill, center)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        height, width = size
        angle = rng.uniform(*self.degrees)
        tx = ty = 0
        if self.translate is not None:
            max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
            tx, ty = int(round(rng.uniform(-max_dx, max_dx))), int(round(rng.uniform(-max_dy, max_dy)))
        scale = rng.uniform(*self.scale) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = rng.uniform(self.shear[0], self.shear[1])
            if len(self.shear) == 4:
                shear_y = rng.uniform(self.shear[2], self.shear[3])
        return {"affine": {"angle": angle, "translate": (tx, ty), "scale": scale, "shear": (shear_x, shear_y)}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        a = p.get("affine")
        if a is not None:
            prog.append((AFFINE, warp_args(size, a["angle"], a["translate"], a["scale"], a["shear"],
                                           self.interpolation, self._fill, self.center)))



def perspective_coefficients(startpoints: Sequence[Sequence[int]],
                             endpoints: Sequence[Sequence[int]]) -> list[float]:
    """torchvision's _get_perspective_coeffs: the 8 coefficients mapping output to input
    pixels, (x, y) -> ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1)),
    solved in float64 from the four corners (startpoints: the input's, endpoints: where
    they go), then rounded to float32 as torchvision rounds them."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(endpoints, startpoints):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    solution = np.linalg.lstsq(np.asarray(rows, np.float64), np.asarray(rhs, np.float64), rcond=None)[0]
    return solution.astype(np.float32).tolist()


class RandomPerspective(_Warp, converts="torchvision.RandomPerspective"):
    """torchvision's RandomPerspective: with probability p, the four corners each moved
    inwards by up to distortion_scale of half the size (whole pixels, drawn as torchvision
    draws them), the image warped so (make_params: "perspective": {"coefficients"}),
    nearest or bilinear, `fill` outside (torchvision's default 0)."""

    keys = ("perspective",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.distortion_scale, t.p, t.interpolation, warp_fill(t, floats))

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5, interpolation: Any = "bilinear",
                 fill: Any = 0) -> None:
        if not 0 <= distortion_scale <= 1:
            raise ValueError("Argument distortion_scale value should be between 0 and 1")
        if not 0.0 <= p <= 1.0:
            raise ValueError("p should be a probability between 0 and 1")
        self.distortion_scale = float(distortion_scale)
        self.p = float(p)
        self._setup(interpolation, fill, None)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        if not rng.random() < self.p:  # torchvision's coin: applied when a uniform draw is under p
            return {}
        height, width = size
        bh = int(self.distortion_scale * (height // 2)) + 1
        bw = int(self.distortion_scale * (width // 2)) + 1
        topleft = [rng.randrange(0, bw), rng.randrange(0, bh)]
        topright = [rng.randrange(width - bw, width), rng.randrange(0, bh)]
        botright = [rng.randrange(width - bw, width), rng.randrange(height - bh, height)]
        botleft = [rng.randrange(0, bw), rng.randrange(height - bh, height)]
        start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        return {"perspective": {"coefficients": perspective_coefficients(start,
                                                                        [topleft, topright, botright, botleft])}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        d = p.get("perspective")
        if d is not None:
            c = [float(v) for v in d["coefficients"]]
            fill = self._fill if self._fill is not None else (math.nan, math.nan, math.nan)
            prog.append((PERSPECTIVE, (*c[:6], float(self.interpolation), *fill, c[6], c[7])))

# ---- the policies: (op name, magnitude) lists, emitted as kernel ops -----------------------

def _linspace(lo: float, hi: float, n: int) -> list[float]:
    return torch.linspace(lo, hi, n).tolist()  # torchvision's magnitudes: float32 values


def _posterize_bits(n: int, span: int, top: int = 8) -> list[float]:
    return (top - (torch.arange(n) / ((n - 1) / span))).round().int().tolist()


def _bins(n: Any) -> int:
    """num_magnitude_bins, checked: an int of at least 2 (its magnitudes are spaced over
    n - 1 steps; torchvision takes 1 and divides by zero at the first image)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise TransformError(f"num_magnitude_bins must be an int >= 2, not {n!r}")
    return n


class _Policy(_Step):
    """An auto-augment policy: each sample's ops as [(name, magnitude), ...] under `key`."""

    group = "policies"

    moves = True  # (Rotate, Shear, Translate)
    key = ""
    SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}

    def __init__(self, interpolation: Any, fill: Any) -> None:
        self.interpolation = _interpolation(interpolation)
        self.fill = fill
        self._fill = _fill(fill)

    @property
    def keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.key,)

    def magnitudes(self, name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
        raise NotImplementedError

    def _magnitude(self, rng: random.Random, name: str, values: list[float] | None, index: int) -> float:
        if values is None:
            return 0.0
        m = float(values[index])
        if name in self.SIGNED and rng.random() <= 0.5:
            m = -m
        return m

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for name, m in p.get(self.key) or ():
            op = _policy_op(name, m, size, self.interpolation, self._fill)
            if op is not None:
                prog.append(op)


# the policies' ops that take no argument (torchvision's and timm's names alike)
NO_ARGUMENT = {"AutoContrast": AUTOCONTRAST, "Equalize": EQUALIZE, "Invert": INVERT}


def _policy_op(name: str, m: float, size: tuple[int, int], interpolation: float,
               fill: tuple[float, float, float] | None) -> tuple[int, tuple[float, ...]] | None:
    """The kernel op torchvision's _apply_image_or_video_transform applies for (name, m)."""
    zero = (0.0, 0.0)
    if name == "Identity":
        return None
    if name in ("ShearX", "ShearY"):
        shear = (math.degrees(math.atan(m)), 0.0) if name == "ShearX" else (0.0, math.degrees(math.atan(m)))
        return AFFINE, warp_args(size, 0.0, zero, 1.0, shear, interpolation, fill, center=(0.0, 0.0))
    if name in ("TranslateX", "TranslateY"):
        t = (int(m), 0) if name == "TranslateX" else (0, int(m))
        return AFFINE, warp_args(size, 0.0, t, 1.0, zero, interpolation, fill)
    if name == "Rotate":
        a = rotation_args(m, size, interpolation, fill)
        return None if a is None else (AFFINE, a)
    simple = {"Brightness": BRIGHTNESS, "Color": SATURATION, "Contrast": CONTRAST, "Sharpness": SHARPNESS}
    if name in simple:
        return simple[name], (1.0 + m,)
    if name == "Posterize":
        return POSTERIZE, (float(1 << int(m)),)
    if name == "Solarize":
        return SOLARIZE, (m,)  # the float bound (1.0) times the magnitude
    if name in NO_ARGUMENT:
        return NO_ARGUMENT[name], ()
    raise ValueError(f"No transform available for {name}")


class TrivialAugmentWide(_Policy, converts="torchvision.TrivialAugmentWide"):
    """torchvision's TrivialAugmentWide: one op of 14 per image, uniformly, at one of
    `num_magnitude_bins` magnitudes, signed ops negated with probability 1/2; make_params:
    "trivial_augment": [(name, magnitude)]."""

    key = "trivial_augment"
    SPACE = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
             "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.num_magnitude_bins, t.interpolation, warp_fill(t, floats))

    def __init__(self, num_magnitude_bins: int = 31, interpolation: Any = "nearest", fill: Any = None) -> None:
        super().__init__(interpolation, fill)
        self.num_magnitude_bins = _bins(num_magnitude_bins)
        self._tables = {name: self.magnitudes(name, self.num_magnitude_bins, (0, 0)) for name in self.SPACE}

    def magnitudes(self, name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
        if name in ("ShearX", "ShearY", "Brightness", "Color", "Contrast", "Sharpness"):
            return _linspace(0.0, 0.99, bins)
        if name in ("TranslateX", "TranslateY"):
            return _linspace(0.0, 32.0, bins)
        if name == "Rotate":
            return _linspace(0.0, 135.0, bins)
        if name == "Posterize":
            return _posterize_bits(bins, 6)
        if name == "Solarize":
            return _linspace(1.0, 0.0, bins)
        return None

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        name = self.SPACE[rng.randrange(len(self.SPACE))]
        values = self._tables[name]
        index = rng.randrange(self.num_magnitude_bins) if values is not None else 0
        return {self.key: [(name, self._magnitude(rng, name, values, index))]}


@functools.lru_cache(maxsize=4096)
def _rand_augment_magnitudes(name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
    """RandAugment's and AutoAugment's magnitudes of `name` (translations scale with the
    image's size)."""
    h, w = size
    if name in ("ShearX", "ShearY"):
        return _linspace(0.0, 0.3, bins)
    if name == "TranslateX":
        return _linspace(0.0, 150.0 / 331.0 * w, bins)
    if name == "TranslateY":
        return _linspace(0.0, 150.0 / 331.0 * h, bins)
    if name == "Rotate":
        return _linspace(0.0, 30.0, bins)
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return _linspace(0.0, 0.9, bins)
    if name == "Posterize":
        return _posterize_bits(bins, 4)
    if name == "Solarize":
        return _linspace(1.0, 0.0, bins)
    return None


class RandAugment(_Policy, converts="torchvision.RandAugment"):
    """torchvision's RandAugment: `num_ops` ops per image, each uniformly of 14 (with
    replacement), at bin `magnitude` of `num_magnitude_bins`, signed ops negated with
    probability 1/2; make_params: "rand_augment": [(name, magnitude), ...]."""

    key = "rand_augment"
    SPACE = TrivialAugmentWide.SPACE

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.num_ops, t.magnitude, t.num_magnitude_bins, t.interpolation, warp_fill(t, floats))

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Any = "nearest", fill: Any = None) -> None:
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops should be a non-negative integer, but got {num_ops} instead.")
        super().__init__(interpolation, fill)
        self.num_ops = num_ops
        self.num_magnitude_bins = _bins(num_magnitude_bins)
        if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < self.num_magnitude_bins:
            # (torchvision takes it and fails at the first image: an IndexError, or a magnitude from the end)
            raise TransformError(f"RandAugment magnitude must be an int in [0, num_magnitude_bins - 1] = "
                                 f"[0, {self.num_magnitude_bins - 1}], not {magnitude!r}")
        self.magnitude = int(magnitude)

    def magnitudes(self, name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
        return _rand_augment_magnitudes(name, bins, size)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        ops = []
        for _ in range(self.num_ops):
            name = self.SPACE[rng.randrange(len(self.SPACE))]
            ops.append((name, self._magnitude(rng, name, self.magnitudes(name, self.num_magnitude_bins, size),
                                              self.magnitude)))
        return {self.key: ops}


# AutoAugment's ImageNet policy (Cubuk et al., 2019, as torchvision lists it): 25 sub-policies
# of two (op, probability, magnitude bin of 10)
IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)


class AutoAugment(_Policy, converts="torchvision.AutoAugment"):
    """torchvision's AutoAugment with the ImageNet policy: one of 25 sub-policies per
    image, each of its two ops applied with its probability at its magnitude bin (of
    10), signed ops negated with probability 1/2; make_params: "auto_augment": the
    [(name, magnitude), ...] applied. Other policies (CIFAR10, SVHN) are refused."""

    key = "auto_augment"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.policy, t.interpolation, warp_fill(t, floats))

    def __init__(self, policy: Any = "imagenet", interpolation: Any = "nearest", fill: Any = None) -> None:
        name = str(getattr(policy, "value", policy)).lower()
        if name != "imagenet":
            raise TransformError(f"AutoAugment(policy={policy!r}) cannot be fused: the ImageNet policy is")
        super().__init__(interpolation, fill)
        self.policy = "imagenet"

    def magnitudes(self, name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
        return _rand_augment_magnitudes(name, bins, size)  # (RandAugment's table)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        sub = IMAGENET_POLICY[rng.randrange(len(IMAGENET_POLICY))]
        ops = []
        for name, probability, index in sub:
            if not rng.random() <= probability:
                continue
            values = self.magnitudes(name, 10, size) if index is not None else None
            ops.append((name, self._magnitude(rng, name, values, index or 0)))
        return {self.key: ops}


@functools.lru_cache(maxsize=4096)
def _augmix_magnitudes(name: str, size: tuple[int, int]) -> list[float] | None:
    """AugMix's 10 magnitudes of `name` (translations: a third of the size)."""
    h, w = size
    if name in ("ShearX", "ShearY"):
        return _linspace(0.0, 0.3, 10)
    if name == "TranslateX":
        return _linspace(0.0, w / 3.0, 10)
    if name == "TranslateY":
        return _linspace(0.0, h / 3.0, 10)
    if name == "Rotate":
        return _linspace(0.0, 30.0, 10)
    if name == "Posterize":
        return _posterize_bits(10, 4, top=4)
    if name == "Solarize":
        return _linspace(1.0, 0.0, 10)
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return _linspace(0.0, 0.9, 10)
    return None


class AugMix(_Policy, converts="torchvision.AugMix"):
    """torchvision's AugMix: `mixture_width` chains of `chain_depth` ops (1 to 3 drawn
    per chain when negative) from AugMix's space at magnitude bins below `severity`,
    mixed by Dirichlet(alpha) weights, the mix blended with the image by a Beta(alpha,
    alpha) draw: mix = m0 * image + sum_i w_i * chain_i(image). make_params: "augmix":
    {"m": m0, "weights": [w_i], "chains": [[(name, magnitude), ...], ...]}. In the
    kernel: the image is kept, each chain runs on it and is added to the mix (two image
    buffers a sample)."""

    key = "augmix"
    PARTIAL = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Posterize", "Solarize", "AutoContrast",
               "Equalize")
    SPACE = PARTIAL + ("Brightness", "Color", "Contrast", "Sharpness")

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.severity, t.mixture_width, t.chain_depth, t.alpha, t.all_ops, t.interpolation, warp_fill(t, floats))

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0,
                 all_ops: bool = True, interpolation: Any = "bilinear", fill: Any = None) -> None:
        if not 1 <= severity <= 10:
            raise ValueError(f"The severity must be between [1, 10]. Got {severity} instead.")
        if mixture_width < 1 or alpha <= 0:
            raise ValueError("mixture_width must be >= 1 and alpha > 0")
        super().__init__(interpolation, fill)
        self.severity = int(severity)
        self.mixture_width = int(mixture_width)
        self.chain_depth = int(chain_depth)
        self.alpha = float(alpha)
        self.all_ops = bool(all_ops)
        self._space = self.SPACE if all_ops else self.PARTIAL

    def _dirichlet(self, rng: random.Random, k: int) -> list[float]:
        g = [rng.gammavariate(self.alpha, 1.0) for _ in range(k)]
        total = sum(g)
        return [x / total for x in g] if total > 0 else [1.0 / k] * k

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        m0, m1 = self._dirichlet(rng, 2)
        weights = [w * m1 for w in self._dirichlet(rng, self.mixture_width)]
        chains = []
        for _ in range(self.mixture_width):
            depth = self.chain_depth if self.chain_depth > 0 else rng.randint(1, 3)
            ops = []
            for _ in range(depth):
                name = self._space[rng.randrange(len(self._space))]
                values = _augmix_magnitudes(name, size)
                ops.append((name, self._magnitude(rng, name, values, rng.randrange(self.severity)
                                                  if values is not None else 0)))
            chains.append(ops)
        return {self.key: {"m": m0, "weights": weights, "chains": chains}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        a = p.get(self.key)
        if a is None:
            return
        prog.append((MIX_SAVE, (a["m"],)))
        for w, chain in zip(a["weights"], a["chains"]):
            for name, m in chain:
                op = _policy_op(name, m, size, self.interpolation, self._fill)
                if op is not None:
                    prog.append(op)
            prog.append((MIX_ADD, (w,)))
        prog.append((MIX_END, ()))


# ---- wrappers over per-sample steps -------------------------------------------------------

def _steps(transforms: Sequence[Transform], wrapper: str) -> list[_Step]:
    steps: list[Any] = list(transforms)
    if not steps or not all(isinstance(t, _Step) for t in steps):
        raise _refuse(f"{wrapper}({[type(t).__name__ for t in steps]}) cannot be fused: {wrapper} is fused over the "
                      "per-sample ops only")
    return steps


class SampleRandomChoice(_Wrapper, converts="torchvision.RandomChoice"):
    """torchvision's RandomChoice over per-sample steps: one of them per image, with
    probabilities `p` (default equal); make_params: "choice": its index (and its draws).
    gpudecode.transforms.RandomChoice builds this, or the batch transform over MixUp and
    CutMix, from what it is given."""

    keys = ("choice",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """Over per-sample steps, a step of each sample's program; over MixUp and CutMix, a
        batch transform (mixing.RandomChoice, for Loader(batch_transform=))."""
        items = inner(t, floats)
        if items and all(isinstance(x, _Step) for x in items):
            return cls(items, t.p)
        batch: list[Any] = list(items)  # (MixUp, CutMix: a batch transform, refused inside a Compose)
        return mixing.RandomChoice(batch, t.p)  # type: ignore[return-value]

    def __init__(self, transforms: Sequence[Transform], p: Sequence[float] | None = None) -> None:
        self.transforms = _steps(transforms, "RandomChoice")
        if p is None:
            p = [1.0] * len(self.transforms)
        if len(p) != len(self.transforms) or any(x < 0 for x in p) or not sum(p) > 0:
            raise ValueError("Length of p doesn't match the number of transforms")
        self.p = [float(x) / sum(p) for x in p]

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        k = rng.choices(range(len(self.transforms)), weights=self.p)[0]
        return {"choice": k, **self.transforms[k].draw(rng, size)}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        k = p.get("choice")
        if k is not None:
            self.transforms[k].emit(p, size, prog)

    def __repr__(self) -> str:
        return f"RandomChoice({self.transforms}, p={self.p})"


class RandomOrder(_Wrapper, converts="torchvision.RandomOrder"):
    """torchvision's RandomOrder: its steps in a random order per image (drawn as they
    run); make_params: "permutation"."""

    keys = ("permutation",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(inner(t, floats))

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = _steps(transforms, "RandomOrder")

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        perm = list(range(len(self.transforms)))
        rng.shuffle(perm)
        out: dict = {"permutation": perm}
        for k in perm:
            out.update(self.transforms[k].draw(rng, size))
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for k in p.get("permutation", ()):
            self.transforms[k].emit(p, size, prog)


__all__ = ["RandomAutocontrast", "RandomEqualize", "RandomAdjustSharpness", "GaussianBlur", "RandomRotation",
           "RandomAffine", "RandomPerspective", "TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix", "RandomOrder",
           "SampleRandomChoice", "IMAGENET_POLICY", "inverse_affine"]
