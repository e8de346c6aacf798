"""timm's RandAugment (`timm.data.auto_augment.rand_augment_transform`, what
`create_transform(..., auto_augment="rand-m9-mstd0.5-inc1")` builds) as a step of the
fused kernel's program, with timm's numbers: its op set (SolarizeAdd, Color,
TranslateXRel, the "Increasing" variants, ...), each op applied with its probability,
the magnitude drawn from N(m, mstd) and clipped to [0, mmax], timm's level-to-argument
functions (signs drawn with probability 1/2), its warps as PIL's `Image.transform`
(bilinear or bicubic, one drawn per warp when timm's interpolation is "random"), its
fill (the mean colour).

timm works on PIL uint8 images and truncates each op's result to a level; the kernel
keeps float32 between ops (as torchvision's float path does), so an op's pixels are
within a level of timm's own (tests/test_timm.py measures it on photographs).
"""
from __future__ import annotations

import math
import random
from typing import Any, Sequence

from .base import Transform
from .policies import NO_ARGUMENT, _Policy
from ..errors import TransformError
from ..kernels.ops import (AFFINE, BRIGHTNESS, CONTRAST, MIX_ADD, MIX_END, MIX_SAVE,
                          POSTERIZE, SATURATION, SHARPNESS, SOLARIZE, SOLARIZE_ADD)

PIL_BILINEAR, PIL_BICUBIC = 3.0, 4.0  # AFFINE's interpolation argument for PIL's warps
_DENOM = 10.0  # timm's _LEVEL_DENOM
WARPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")
_ENHANCE = {"Color": SATURATION, "Contrast": CONTRAST, "Brightness": BRIGHTNESS, "Sharpness": SHARPNESS}
OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "PosterizeIncreasing", "PosterizeOriginal",
       "Solarize", "SolarizeIncreasing", "SolarizeAdd", "Color", "ColorIncreasing", "Contrast", "ContrastIncreasing",
       "Brightness", "BrightnessIncreasing", "Sharpness", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateX",
       "TranslateY", "TranslateXRel", "TranslateYRel")


def _negate(rng: random.Random, v: float) -> float:
    return -v if rng.random() > 0.5 else v  # timm's _randomly_negate


def level_arg(name: str, m: float, rng: random.Random, hparams: dict) -> float | None:
    """timm's LEVEL_TO_ARG[name](m): the op's argument at magnitude m (None: none)."""
    if name in ("AutoContrast", "Equalize", "Invert"):
        return None
    if name == "Rotate":
        return _negate(rng, m / _DENOM * 30.0)
    if name in ("ShearX", "ShearY"):
        return _negate(rng, m / _DENOM * 0.3)
    if name in ("TranslateXRel", "TranslateYRel"):
        return _negate(rng, m / _DENOM * float(hparams.get("translate_pct", 0.45)))
    if name in ("TranslateX", "TranslateY"):
        return _negate(rng, m / _DENOM * float(hparams["translate_const"]))
    if name == "Posterize":
        return float(int(m / _DENOM * 4))
    if name == "PosterizeIncreasing":
        return float(4 - int(m / _DENOM * 4))
    if name == "PosterizeOriginal":
        return float(int(m / _DENOM * 4) + 4)
    if name == "Solarize":
        return float(min(256, int(m / _DENOM * 256)))
    if name == "SolarizeIncreasing":
        return float(256 - min(256, int(m / _DENOM * 256)))
    if name == "SolarizeAdd":
        return float(min(128, int(m / _DENOM * 110)))
    if name.endswith("Increasing"):  # Color, Contrast, Brightness, Sharpness
        return max(0.1, 1.0 + _negate(rng, m / _DENOM * 0.9))
    return m / _DENOM * 1.8 + 0.1  # Color, Contrast, Brightness, Sharpness


def pil_matrix(name: str, v: float, size: tuple[int, int]) -> list[float] | None:
    """PIL's AFFINE matrix (output pixel centre -> source point) of timm's warp `name`
    with argument v on an image of `size` (h, w); None: the identity (PIL copies)."""
    h, w = size
    if name == "ShearX":
        return [1.0, v, 0.0, 0.0, 1.0, 0.0]
    if name == "ShearY":
        return [1.0, 0.0, 0.0, v, 1.0, 0.0]
    if name in ("TranslateX", "TranslateXRel"):
        return [1.0, 0.0, v * w if name.endswith("Rel") else v, 0.0, 1.0, 0.0]
    if name in ("TranslateY", "TranslateYRel"):
        return [1.0, 0.0, 0.0, 0.0, 1.0, v * h if name.endswith("Rel") else v]
    # Rotate: PIL's Image.rotate(v) about (w / 2, h / 2), its matrix as it builds it
    if v % 360.0 == 0.0:
        return None
    angle = -math.radians(v % 360.0)
    m = [round(math.cos(angle), 15), round(math.sin(angle), 15), 0.0,
         round(-math.sin(angle), 15), round(math.cos(angle), 15), 0.0]
    cx, cy = w / 2.0, h / 2.0
    m[2] = m[0] * -cx + m[1] * -cy + cx
    m[5] = m[3] * -cx + m[4] * -cy + cy
    return m


def timm_op(name: str, v: float | None, mode: str | None, size: tuple[int, int],
            fill: tuple[float, float, float]) -> tuple[int, tuple[float, ...]] | None:
    """The kernel op of timm's op `name` applied with argument v (warps: mode bilinear or
    bicubic); None where it changes nothing."""
    if name in WARPS:
        m = pil_matrix(name, float(v or 0.0), size)
        if m is None:
            return None
        return AFFINE, (*m, PIL_BICUBIC if mode == "bicubic" else PIL_BILINEAR, *fill)
    if name in NO_ARGUMENT:
        return NO_ARGUMENT[name], ()
    if v is None:
        raise TransformError(f"timm's {name} needs a magnitude, and none was given")
    if name.startswith("Posterize"):
        return None if v >= 8 else (POSTERIZE, (float(1 << int(v)),))
    if name in ("Solarize", "SolarizeIncreasing"):
        return SOLARIZE, (v / 255.0,)  # PIL: levels at or over the threshold inverted
    if name == "SolarizeAdd":
        return SOLARIZE_ADD, (v / 255.0,)
    return _ENHANCE[name.replace("Increasing", "")], (v,)


Spec = tuple[str, float, float, dict]  # an AugmentOp: name, probability, magnitude, hparams


def _check(ops: Sequence[Spec], what: str) -> list[Spec]:
    for name, *_ in ops:
        if name not in OPS:
            raise TransformError(f"{what} with op {name!r} cannot be fused: the kernel has timm's {', '.join(OPS)}")
    return [(str(n), float(p), float(m), dict(h)) for n, p, m, h in ops]


class _TimmPolicy(_Policy):
    """What timm's policies share: its AugmentOp's draw, the warps' interpolation modes
    (one drawn a warp when there are two, as timm's "random") and the fill (levels)."""

    mirrors = False  # (PIL's warps, not mirrored here: a flip goes before timm's policies, as in timm's recipes)

    def __init__(self, interpolation: Sequence[str], fill: Sequence[int], what: str) -> None:
        modes = tuple(interpolation)
        if not modes or any(m not in ("bilinear", "bicubic") for m in modes):
            raise TransformError(f"{what} with interpolation {modes} cannot be fused: its warps are bilinear or bicubic")
        if len(tuple(fill)) != 3:
            raise TransformError(f"timm's fill {fill!r}: three levels (RGB)")
        self.modes = modes
        self.fill = tuple(int(v) for v in fill)
        self._fill3 = (self.fill[0] / 255.0, self.fill[1] / 255.0, self.fill[2] / 255.0)
        self.interpolation = 0.0  # (_Policy's; the warps here carry their own)
        self._fill = None

    def draw_op(self, rng: random.Random, spec: Spec) -> tuple[str, float | None, str | None] | None:
        """timm's AugmentOp.__call__: (name, argument, warp mode), or None when its coin
        says no."""
        name, prob, magnitude, hp = spec
        if prob < 1.0 and rng.random() > prob:
            return None
        m = magnitude
        std = float(hp.get("magnitude_std", 0) or 0)
        if std == math.inf:
            m = rng.uniform(0.0, m)
        elif std > 0:
            m = rng.gauss(m, std)
        m = max(0.0, min(m, float(hp.get("magnitude_max") or _DENOM)))
        v = level_arg(name, m, rng, hp)
        mode = self.modes[rng.randrange(len(self.modes))] if name in WARPS else None
        return name, v, mode

    def emit_ops(self, ops: Sequence[tuple], size: tuple[int, int], prog: list) -> None:
        for name, v, mode in ops:
            op = timm_op(name, v, mode, size, self._fill3)
            if op is not None:
                prog.append(op)

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        self.emit_ops(p.get(self.key) or (), size, prog)

    @staticmethod
    def _specs(ops: Sequence[Spec]) -> str:
        return ", ".join(f"{n}(p={p}, m={m}, mstd={h.get('magnitude_std', 0)})" for n, p, m, h in ops)


class TimmRandAugment(_TimmPolicy, converts="timm.RandAugment"):
    """timm's RandAugment: `num_layers` ops an image, uniformly with replacement from
    `ops`, each (name, prob, magnitude, hparams) as timm's AugmentOp: applied with
    probability prob, at magnitude N(magnitude, magnitude_std) (uniform in [0, magnitude]
    when the std is infinite) clipped to [0, magnitude_max or 10]. make_params:
    "timm_rand_augment": [(name, argument, warp interpolation or None), ...] applied."""

    key = "timm_rand_augment"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return from_timm_rand_augment(t)

    def __init__(self, ops: Sequence[Spec], num_layers: int = 2, interpolation: Sequence[str] = ("bilinear", "bicubic"),
                 fill: Sequence[int] = (128, 128, 128)) -> None:
        super().__init__(interpolation, fill, "timm.data.RandAugment")
        self.ops = _check(ops, "timm.data.RandAugment")
        if not self.ops:
            raise TransformError("timm.data.RandAugment with no ops")
        self.num_layers = int(num_layers)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        drawn = (self.draw_op(rng, self.ops[rng.randrange(len(self.ops))]) for _ in range(self.num_layers))
        return {self.key: [d for d in drawn if d is not None]}

    def __repr__(self) -> str:
        return (f"TimmRandAugment(n={self.num_layers}, ops=[{self._specs(self.ops)}], "
                f"interpolation={list(self.modes)}, fill={list(self.fill)})")


class TimmAutoAugment(_TimmPolicy, converts="timm.AutoAugment"):
    """timm's AutoAugment (policies v0, v0r, original, originalr): one sub-policy an
    image, uniformly, its ops each as timm's AugmentOp. make_params: "timm_auto_augment":
    the ops applied, as TimmRandAugment's."""

    key = "timm_auto_augment"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return from_timm_auto_augment(t)

    def __init__(self, policy: Sequence[Sequence[Spec]], interpolation: Sequence[str] = ("bilinear", "bicubic"),
                 fill: Sequence[int] = (128, 128, 128)) -> None:
        super().__init__(interpolation, fill, "timm.data.AutoAugment")
        self.policy = [_check(sub, "timm.data.AutoAugment") for sub in policy]
        if not self.policy:
            raise TransformError("timm.data.AutoAugment with no sub-policies")

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        sub = self.policy[rng.randrange(len(self.policy))]
        drawn = (self.draw_op(rng, spec) for spec in sub)
        return {self.key: [d for d in drawn if d is not None]}

    def __repr__(self) -> str:
        subs = "; ".join(f"[{self._specs(sub)}]" for sub in self.policy)
        return f"TimmAutoAugment(policy=[{subs}], interpolation={list(self.modes)}, fill={list(self.fill)})"


class TimmAugMix(_TimmPolicy, converts="timm.AugMixAugment"):
    """timm's AugMixAugment (not blended): `width` chains of `depth` ops (1 to 3 drawn a
    chain when depth <= 0) uniformly from `ops`, mixed with Dirichlet(alpha) weights w,
    the mix blended into the image by m ~ Beta(alpha, alpha): (1 - m) image + m sum_i w_i
    chain_i. make_params: "timm_augmix": {"m": m, "weights": [w_i], "chains": [[op, ...]]}.
    In the kernel: AugMix's MIX ops (the image kept, each chain added to the mix)."""

    key = "timm_augmix"

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return from_timm_augmix(t)

    def __init__(self, ops: Sequence[Spec], alpha: float = 1.0, width: int = 3, depth: int = -1,
                 interpolation: Sequence[str] = ("bilinear", "bicubic"), fill: Sequence[int] = (128, 128, 128)) -> None:
        super().__init__(interpolation, fill, "timm.data.AugMixAugment")
        self.ops = _check(ops, "timm.data.AugMixAugment")
        if not self.ops or width < 1 or alpha <= 0:
            raise TransformError("timm.data.AugMixAugment needs ops, width >= 1 and alpha > 0")
        self.alpha, self.width, self.depth = float(alpha), int(width), int(depth)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        g = [rng.gammavariate(self.alpha, 1.0) for _ in range(self.width)]
        total = sum(g)
        weights = [x / total for x in g] if total > 0 else [1.0 / self.width] * self.width
        m = rng.betavariate(self.alpha, self.alpha)
        chains = []
        for _ in range(self.width):
            depth = self.depth if self.depth > 0 else rng.randint(1, 3)
            drawn = (self.draw_op(rng, self.ops[rng.randrange(len(self.ops))]) for _ in range(depth))
            chains.append([d for d in drawn if d is not None])
        return {self.key: {"m": m, "weights": weights, "chains": chains}}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        a = p.get(self.key)
        if a is None:
            return
        prog.append((MIX_SAVE, (1.0 - a["m"],)))
        for w, chain in zip(a["weights"], a["chains"]):
            self.emit_ops(chain, size, prog)
            prog.append((MIX_ADD, (a["m"] * w,)))
        prog.append((MIX_END, ()))

    def __repr__(self) -> str:
        return (f"TimmAugMix(alpha={self.alpha}, width={self.width}, depth={self.depth}, "
                f"ops=[{self._specs(self.ops)}], interpolation={list(self.modes)}, fill={list(self.fill)})")


def _pil_mode(value: Any, what: str) -> str:
    """A PIL resampling constant (or torchvision's mode) by name."""
    name = getattr(value, "name", None) or getattr(value, "value", None) or value
    name = {2: "bilinear", 3: "bicubic"}.get(name, name) if isinstance(name, int) else str(name).lower()
    if name not in ("bilinear", "bicubic"):
        raise TransformError(f"{what} with resample {value!r} cannot be fused: its warps are bilinear or bicubic")
    return name


def _read_ops(ops: Sequence[Any], what: str) -> tuple[list[Spec], tuple[str, ...], tuple[int, ...]]:
    """timm's AugmentOps as (name, prob, magnitude, hparams) specs, with the one
    interpolation and fill they share."""
    specs: list[Spec] = []
    modes: tuple[str, ...] | None = None
    fill: tuple[int, ...] | None = None
    for op in ops:
        hp = dict(op.hparams)
        specs.append((op.name, op.prob, op.magnitude, {k: hp[k] for k in ("magnitude_std", "magnitude_max",
                                                                          "translate_pct", "translate_const")
                                                       if k in hp}))
        resample = op.kwargs.get("resample")
        these = tuple(_pil_mode(r, what) for r in resample) if isinstance(resample, (list, tuple)) else (
            _pil_mode(resample, what),)
        fc = op.kwargs.get("fillcolor", (128, 128, 128))
        fc = (int(fc),) * 3 if isinstance(fc, (int, float)) else tuple(int(v) for v in fc)
        if modes not in (None, these) or fill not in (None, fc):
            raise TransformError(f"{what} with ops of different interpolations or fills cannot be fused")
        modes, fill = these, fc
    return specs, modes or ("bilinear", "bicubic"), fill or (128, 128, 128)


def from_timm_rand_augment(t: Any) -> TimmRandAugment:
    """timm's RandAugment object as ours, read from its AugmentOps."""
    what = "timm.data.RandAugment"
    if getattr(t, "choice_weights", None) is not None:
        raise TransformError(f"{what} with weighted op choice (a 't' config such as 'tweights') cannot be fused: the "
                             "kernel draws ops uniformly with replacement")
    specs, modes, fill = _read_ops(t.ops, what)
    return TimmRandAugment(specs, t.num_layers, modes, fill)


def from_timm_auto_augment(t: Any) -> TimmAutoAugment:
    what = "timm.data.AutoAugment"
    subs = [_read_ops(sub, what) for sub in t.policy]
    if any(s[1:] != subs[0][1:] for s in subs):
        raise TransformError(f"{what} with ops of different interpolations or fills cannot be fused")
    return TimmAutoAugment([s[0] for s in subs], *subs[0][1:]) if subs else TimmAutoAugment([])


def from_timm_augmix(t: Any) -> TimmAugMix:
    what = "timm.data.AugMixAugment"
    if getattr(t, "blended", False):
        raise TransformError(f"{what} with blended=True (an augmix config with 'b1') cannot be fused: its chains are "
                             "blended one by one, not mixed")
    specs, modes, fill = _read_ops(t.ops, what)
    return TimmAugMix(specs, t.alpha, t.width, t.depth, modes, fill)


__all__ = ["TimmRandAugment", "TimmAutoAugment", "TimmAugMix", "from_timm_rand_augment", "from_timm_auto_augment",
           "from_timm_augmix", "level_arg", "pil_matrix", "timm_op"]


def prefetcher_transforms(loader: Any, transform: Any, collate_fn: Any = None) -> tuple[Any, Any]:
    """What timm's scripts do with their prefetcher on (their default), for the Loader.

    With `--prefetcher` timm's create_transform stops at uint8 tensors (MaybePILToTensor),
    its PrefetchLoader (`loader`) normalizes them and erases (RandomErasing) on the device,
    and train.py mixes in the collate (FastCollateMixup) instead of calling Mixup in the
    loop. Given the PrefetchLoader, the dataset's transform and the script's collate_fn:
    (the transform as timm builds it without the prefetcher: its steps, then timm's
    MaybeToTensor, Normalize with the loader's mean and std, and the loader's
    RandomErasing; the batch transform: timm's Mixup with the collate's settings, or None).
    The Loader then fuses the transform and runs the Mixup on each batch, so the swapped
    script sees what timm's loader gave it: normalized, erased, mixed batches.

    Raises:
        TransformError: `loader` is not timm's PrefetchLoader (nothing to take from it).
    """
    import torchvision.transforms as tv
    from timm.data.random_erasing import RandomErasing
    from timm.data.transforms import MaybeToTensor

    mean, std = getattr(loader, "mean", None), getattr(loader, "std", None)
    if mean is None or std is None:
        raise TransformError(f"prefetcher_transforms takes timm's PrefetchLoader, not a {type(loader).__name__} "
                             "(with --no-prefetcher the dataset's transform is complete: give it as it is)")
    steps = list(getattr(transform, "transforms", [transform]))
    if steps and type(steps[-1]).__name__ in ("MaybePILToTensor", "PILToTensor", "ToNumpy"):
        steps = steps[:-1]  # (the uint8 tensor the prefetcher took)
    steps += [MaybeToTensor(), tv.Normalize([float(v) / 255 for v in mean.flatten()],
                                            [float(v) / 255 for v in std.flatten()])]
    erase = getattr(loader, "random_erasing", None)
    if erase is not None:
        steps.append(RandomErasing(erase.probability, min_area=erase.min_area, max_area=erase.max_area,
                                   mode=erase.mode, min_count=erase.min_count, max_count=erase.max_count,
                                   num_splits=erase.num_splits, device="cpu"))
    mix = None
    if collate_fn is not None and hasattr(collate_fn, "mixup_alpha"):  # timm's FastCollateMixup (a Mixup)
        from timm.data import Mixup

        mix = Mixup(mixup_alpha=collate_fn.mixup_alpha, cutmix_alpha=collate_fn.cutmix_alpha,
                    cutmix_minmax=collate_fn.cutmix_minmax, prob=collate_fn.mix_prob,
                    switch_prob=collate_fn.switch_prob, mode=collate_fn.mode, correct_lam=collate_fn.correct_lam,
                    label_smoothing=collate_fn.label_smoothing, num_classes=collate_fn.num_classes)
    return tv.Compose(steps), mix
