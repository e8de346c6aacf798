"""Steps over steps, with torchvision's names: RandomApply, RandomChoice, RandomOrder."""
from __future__ import annotations

import copy
import random
from typing import Any, Sequence

from .. import mixing
from ..errors import TransformError
from .base import FlipStep, Transform, _refuse, _Step, _Wrapper
from .convert import convert, inner
from .geometry_choice import AppliedGeometry, GeometryChoice


def _flip_step(t: Any) -> Any:
    """`t`, a flip made a FlipStep (an item of a container)."""
    from .geometry import _Flip

    return FlipStep(t) if isinstance(t, _Flip) else t


class RandomApply(_Wrapper, converts="torchvision.RandomApply"):
    """torchvision's RandomApply: its steps with probability p, else none of them. The
    steps are any of the kernel program's (ColorJitter, the per-pixel ops, blur,
    sharpness, autocontrast, equalize, rotations and affine warps, the policies); the coin
    is drawn before the steps' own draws, as torchvision draws it, and a sample that
    loses it runs none of them. Over crops and resizes it is the geometry instead
    (geometry_choice.AppliedGeometry: `__new__` makes that)."""

    in_order = True

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(inner(t, floats), t.p)

    def __new__(cls, transforms: Sequence[Transform] = (), p: float = 0.5) -> Any:
        """Over crops and resizes (`RandomApply([RandomCrop(48)], p=0.4)`), the geometry: a
        choice between its steps and none (geometry_choice.AppliedGeometry)."""
        steps = [x for t in transforms for x in (_option(t) or [t])]
        if any(getattr(x, "group", None) == "geometry" for x in steps):
            if not 0.0 <= p <= 1.0:
                raise ValueError("probability should be between 0 and 1")
            return AppliedGeometry.of(steps, float(p))
        return super().__new__(cls)

    def __init__(self, transforms: Sequence[Transform], p: float = 0.5) -> None:
        steps = [_item(t) for t in transforms]
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

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        return [d for t in self.transforms for d in t.drawn(p, size)]  # type: ignore[attr-defined]


# ---- wrappers over per-sample steps -------------------------------------------------------

class InOrder(_Wrapper):
    """A Compose given as one option of RandomChoice or one item of RandomOrder (or of
    RandomApply): its steps one after the other, as torchvision's Compose runs them there.
    The option stays whole: RandomChoice([Compose([a, b]), c]) runs a then b, or c;
    RandomOrder shuffles it as one item. Its steps are per-sample ones; no steps: the
    image as it is (an option of torchvision's that only converted types)."""

    in_order = True

    def __init__(self, transforms: Sequence[Transform]) -> None:
        steps: list[Any] = [_flip_step(t) for t in transforms]
        if not all(isinstance(t, _Step) for t in steps):
            raise _refuse(f"Compose({[type(t).__name__ for t in steps]}) inside a container cannot be fused: a "
                          "container is fused over the per-sample ops only")
        self.transforms = steps

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        out: dict = {}
        for t in self.transforms:
            out.update(t.draw(rng, size))
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for t in self.transforms:
            t.emit(p, size, prog)

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        return [d for t in self.transforms for d in t.drawn(p, size)]

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


def _item(t: Any) -> Any:
    """One item of a container as given: a Compose (ours: a list of per-sample steps and
    no options of its own) is one InOrder item, not its steps spread out."""
    steps = _option(t)
    return _flip_step(t) if steps is None else InOrder(steps) if len(steps) != 1 else _flip_step(steps[0])


def _option(t: Any) -> list[Any] | None:
    """A Compose's steps, where `t` is one (ours: steps and no options of its own); else None."""
    if isinstance(t, Transform) and type(t).__name__ == "Compose":
        if getattr(t, "layout", "NCHW") != "NCHW" or getattr(t, "ragged", False) or getattr(t, "grey", False):
            raise TransformError(f"a Compose inside a container takes steps only: give layout=, ragged= and grey= "
                                 f"to the outermost Compose, not to {t!r}")
        compose: Any = t  # (a Compose: its module imports this one)
        return list(compose.transforms)
    return None


def converted_items(t: Any, floats: bool) -> list[Any]:
    """A torchvision container's items, converted, each kept whole: a Compose among them
    one InOrder item (convert.inner spreads its steps out, which changes RandomChoice's
    and RandomOrder's meaning)."""
    out: list[Any] = []
    for u in t.transforms:
        steps = convert(u, floats)
        out.append(_flip_step(steps[0]) if len(steps) == 1 else InOrder(steps))
        floats = floats or any(getattr(x, "makes_floats", False) for x in steps)
    return out


def _steps(transforms: Sequence[Transform], wrapper: str, also: str = "") -> list[_Step]:
    steps: list[Any] = [_item(t) for t in transforms]
    if not steps or not all(isinstance(t, _Step) for t in steps):
        raise _refuse(f"{wrapper}({[type(t).__name__ for t in steps]}) cannot be fused: {wrapper} is fused over the "
                      f"per-sample ops{also or ' only'}")
    return steps


def _choice_refused(items: list[Any], other: Any) -> TransformError:
    return TransformError(f"RandomChoice over {', '.join(type(x).__name__ for x in items)} cannot be fused: "
                          f"{type(other).__name__} in a choice would give each image its own plan; a choice among "
                          f"colour steps and warps (one per image), or among MixUp and CutMix (one per batch), fuses")


class SampleRandomChoice(_Wrapper, converts="torchvision.RandomChoice"):
    """torchvision's RandomChoice over per-sample steps: one of them per image, with
    probabilities `p` (default equal); make_params: "choice": its index (and its draws;
    a Compose's second RandomChoice draws under "choice2", its third "choice3": `keyed`).
    gpudecode.transforms.RandomChoice builds this, or the batch transform over MixUp and
    CutMix, from what it is given."""

    key = "choice"
    shown_as = "RandomChoice"  # (base.step_name)
    exclusive = True  # (one option draws an image: options may draw under one key; after._AfterGeometry._claim)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        """Over per-sample steps, a step of each sample's program; over geometries, the
        geometry (GeometryChoice); over MixUp and CutMix, a batch transform
        (mixing.RandomChoice, for Loader(batch_transform=))."""
        options = [convert(u, floats) for u in t.transforms]
        if any(x.group == "geometry" for o in options for x in o):
            return GeometryChoice(options, t.p)
        items = converted_items(t, floats)
        if items and all(isinstance(x, _Step) for x in items):
            return cls(items, t.p)
        other = next((x for x in items if not isinstance(x, (_Step, mixing.BatchTransform))), None)
        if other is not None:  # (a geometry step, a Compose of them, Normalize: one image's size or output)
            raise _choice_refused(items, other)
        batch: list[Any] = list(items)  # (MixUp, CutMix: a batch transform, refused inside a Compose)
        return mixing.RandomChoice(batch, t.p)  # type: ignore[return-value]

    def __init__(self, transforms: Sequence[Transform], p: Sequence[float] | None = None) -> None:
        self.transforms = _steps(transforms, "RandomChoice")
        if p is None:
            p = [1.0] * len(self.transforms)
        if len(p) != len(self.transforms) or any(x < 0 for x in p) or not sum(p) > 0:
            raise ValueError("Length of p doesn't match the number of transforms")
        self.p = [float(x) / sum(p) for x in p]

    @property
    def keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.key,)

    def keyed(self, key: str) -> "SampleRandomChoice":
        """This choice drawing its index under `key` (a Compose's later RandomChoices: each
        its own key in a sample's make_params)."""
        out = copy.copy(self)
        out.key = key
        return out

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        k = rng.choices(range(len(self.transforms)), weights=self.p)[0]
        return {self.key: k, **self.transforms[k].draw(rng, size)}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        k = p.get(self.key)
        if k is not None:
            self.transforms[k].emit(p, size, prog)

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        k = p.get(self.key)
        return [] if k is None else self.transforms[k].drawn(p, size)

    def __repr__(self) -> str:
        return f"RandomChoice({self.transforms}, p={self.p})"


class RandomOrder(_Wrapper, converts="torchvision.RandomOrder"):
    """torchvision's RandomOrder: its steps in a random order per image (drawn as they
    run); make_params: "random_order" (torchvision has no name for it; "permutation" is
    RandomChannelPermutation's). Over flips alone (`RandomOrder([RandomHorizontalFlip(),
    RandomVerticalFlip()])`) it is those flips in a Compose: mirrors commute, so every
    order gives the same image, and each flip keeps its own coin and probability."""

    keys = ("random_order",)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> Transform:
        return cls(converted_items(t, floats))

    def __new__(cls, transforms: Sequence[Transform] = ()) -> Any:  # type: ignore[misc]
        # (no argument: pickle and deepcopy making the instance, whose state they then set)
        from .compose import Compose  # (its module imports this one)
        from .geometry import RandomHorizontalFlip, RandomVerticalFlip

        items = [_item(t) for t in transforms]
        if items and all(isinstance(t, FlipStep) and isinstance(t.flip, (RandomHorizontalFlip, RandomVerticalFlip))
                         for t in items):
            return Compose([t.flip for t in items])
        return super().__new__(cls)

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = _steps(transforms, "RandomOrder", ", or over flips alone (they commute)")
        if any(isinstance(t, FlipStep) for t in self.transforms) and self.moves:  # (a warp before or after the flip
            raise _refuse(f"RandomOrder({[type(getattr(t, 'flip', t)).__name__ for t in self.transforms]}) cannot be "
                          f"fused: a flip "  # as
                          f"and a warp in a random order (the warp mirrored or not, by the order drawn)")  # drawn)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        perm = list(range(len(self.transforms)))
        rng.shuffle(perm)
        out: dict = {"random_order": perm}
        for k in perm:
            out.update(self.transforms[k].draw(rng, size))
        return out

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        for k in p.get("random_order", ()):
            self.transforms[k].emit(p, size, prog)

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        return [d for k in p.get("random_order", ()) for d in self.transforms[k].drawn(p, size)]


class RandomChoice:
    """torchvision's RandomChoice: one of `transforms` with probabilities `p`. Over
    per-sample steps (ops, policies) it is a step of each sample's program
    (containers.SampleRandomChoice); over crops and resizes that give one size (an option
    a Compose of them), the geometry (geometry_choice.GeometryChoice); over MixUp and
    CutMix, a batch transform (mixing.RandomChoice, for Loader(batch_transform=))."""

    def __new__(cls, transforms: Sequence[Any], p: Sequence[float] | None = None) -> Any:  # type: ignore[misc]
        options = [_option(t) or [t] for t in transforms]
        if any(getattr(x, "group", None) == "geometry" for o in options for x in o):  # (crops, resizes: the geometry)
            return GeometryChoice(options, p)
        items = [_item(t) for t in transforms]
        if items and all(isinstance(t, _Step) for t in items):
            return SampleRandomChoice(items, p)
        other = next((t for t in items if isinstance(t, Transform) and not isinstance(t, _Step)), None)
        if other is not None:
            raise _choice_refused(items, other)
        return mixing.RandomChoice(items, p)
