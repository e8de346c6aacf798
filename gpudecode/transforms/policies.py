"""The auto-augment policies as steps of a sample's program, with torchvision's names,
arguments, magnitudes and draws: TrivialAugmentWide, RandAugment, AutoAugment, AugMix."""
from __future__ import annotations

import functools
import math
import random
from typing import Any

import torch

from ..errors import TransformError
from ..kernels.ops import (AFFINE, AUTOCONTRAST, BRIGHTNESS, CONTRAST, EQUALIZE, INVERT, MIX_ADD, MIX_END, MIX_SAVE,
                           POSTERIZE, SATURATION, SHARPNESS, SOLARIZE)
from .base import Transform, _Step
from .convert import warp_fill
from .args import fill_rgb, warp_interpolation
from .warps import named_repr, rotation_args, warp_args


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
    mirrors = True  # (its warps are torchvision's affine warps: a flip may follow them, mirrors.mirror_ops)
    key = ""
    SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}

    def __init__(self, interpolation: Any, fill: Any) -> None:
        self.interpolation = warp_interpolation(interpolation)
        self.fill = fill
        self._fill = fill_rgb(fill)

    def __repr__(self) -> str:
        return named_repr(self)

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


@functools.lru_cache(maxsize=8192)
def _policy_op(name: str, m: float, size: tuple[int, int], interpolation: float,
               fill: tuple[float, float, float] | None) -> tuple[int, tuple[float, ...]] | None:
    """The kernel op torchvision's _apply_image_or_video_transform applies for (name, m)
    (kept for each (name, m, size, ...): the policies draw from a few bins, and a warp's
    arguments cost microseconds to make)."""
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

# The paper's CIFAR10 and SVHN policies, in the same form
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)
SVHN_POLICY = (
    (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
    (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
    (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
    (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
    (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
    (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
    (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
    (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
    (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
    (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
    (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
    (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
    (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
)
POLICIES = {"imagenet": IMAGENET_POLICY, "cifar10": CIFAR10_POLICY, "svhn": SVHN_POLICY}


class AutoAugment(_Policy, converts="torchvision.AutoAugment"):
    """torchvision's AutoAugment with its ImageNet, CIFAR10 or SVHN policy: one of the
    policy's 25 sub-policies per image, each of its two ops applied with its probability at
    its magnitude bin (of 10), signed ops negated with probability 1/2; make_params:
    "auto_augment": the [(name, magnitude), ...] applied."""

    key = "auto_augment"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(t.policy, t.interpolation, warp_fill(t, floats))

    def __init__(self, policy: Any = "imagenet", interpolation: Any = "nearest", fill: Any = None) -> None:
        name = str(getattr(policy, "value", policy)).lower()
        if name not in POLICIES:
            raise TransformError(f"AutoAugment(policy={policy!r}) cannot be fused: the policies are "
                                 f"{', '.join(POLICIES)} (torchvision's AutoAugmentPolicy)")
        super().__init__(interpolation, fill)
        self.policy = name

    def magnitudes(self, name: str, bins: int, size: tuple[int, int]) -> list[float] | None:
        return _rand_augment_magnitudes(name, bins, size)  # (RandAugment's table)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        table = POLICIES[self.policy]
        sub = table[rng.randrange(len(table))]
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
