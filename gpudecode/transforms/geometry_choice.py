"""torchvision's RandomChoice over geometries that give one output size
(`RandomChoice([RandomResizedCrop(224), Compose([Resize(256), CenterCrop(224)])])`, as
fine-tuning scripts write it): each image draws one option, and the kernel's geometry
columns (the source box, the frame it is resized to, the output's window of that frame,
the filter and the padding) hold that option's. Every option fills the same columns, so
one launch takes the batch, whichever geometry each image drew.

Also the geometry part of one sample's draws (`geometry_draws`) and of its kernel row
(`geometry_row`), for a plan of one geometry: the draws (transforms.draws) use them for
every plan, and a choice for the option each image drew."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import TransformError
from ..kernels import fused
from .base import Transform

if TYPE_CHECKING:
    from .plan import _Plan

__all__ = ["GeometryChoice", "AppliedGeometry", "geometry_draws", "geometry_row", "chosen", "crops_resized"]

KEY = "geometry_choice"  # make_params: the index of the option an image drew


def _shown(option: Sequence[Transform]) -> str:
    return repr(option[0]) if len(option) == 1 else f"Compose({list(option)!r})"


def _named(option: Sequence[Transform]) -> str:
    names = [type(t).__name__ for t in option]
    return names[0] if len(names) == 1 else f"Compose([{', '.join(names)}])"


class GeometryChoice(Transform):
    """torchvision's RandomChoice whose options are geometries (a crop, a resize, a
    Compose of them) that each fuse alone and give one output size: one option an image,
    with probabilities `p` (default equal), then that option's draws (make_params:
    "geometry_choice", the option's index, and the option's own keys). RandomChoice
    builds this where an option holds a geometry step. Not after a flip (each option's
    window would be mirrored); after a canvas step (`[RandomRotation(15), RandomApply(
    [RandomCrop(300)]), Resize((224, 224))]`) each whole canvas is made and the option read
    of it; a Resize before it resizes every image first, as before a RandomResizedCrop."""

    group = "geometry"
    shown_as = "RandomChoice"  # (base.step_name)
    _taken = 1  # the Compose's steps it stands for: itself, and the geometry steps after it that end each option

    size_hint = "give each option the same size, or a crop after the choice (RandomCrop, CenterCrop)"
    takes_none = False  # an option may hold no step (RandomApply's lost coin: AppliedGeometry)

    def __init__(self, options: Sequence[Sequence[Transform]], p: Sequence[float] | None = None) -> None:
        self.options = [tuple(o) for o in options]
        if not self.options or not all(o or self.takes_none for o in self.options) or not any(self.options):
            raise TransformError(f"{self.shown_as} needs at least one option, and an option at least one step")
        if p is None:
            p = [1.0] * len(self.options)
        if len(p) != len(self.options) or any(x < 0 for x in p) or not sum(p) > 0:
            raise ValueError("Length of p doesn't match the number of transforms")
        self.p = [float(x) / sum(p) for x in p]

    def then(self, steps: Sequence[Transform]) -> "GeometryChoice":
        """The choice followed by the geometry `steps` (`[RandomChoice([Resize(256),
        Resize(320)]), RandomCrop(224)]`): each option followed by them, the same draws."""
        out = type(self)([[*o, *steps] for o in self.options], self.p)
        vars(out)["_taken"] = self._taken + len(steps)
        return out

    @property
    def plans(self) -> "tuple[_Plan, ...]":
        """Each option's plan (a geometry alone, all of one output size), which the Compose's
        plan checks and sets (plan.check_choice)."""
        plans = self.__dict__.get("_plans")
        if plans is None:
            raise TransformError(f"{self!r} is planned in a Compose: give it as one of its steps")
        return plans

    def planned(self, plans: "Sequence[_Plan]") -> None:
        """Takes its options' plans, checked (plan.check_choice)."""
        self._plans = tuple(plans)

    def refusal(self, why: str, option: Sequence[Transform] = ()) -> TransformError:
        """The choice's refusal, saying `why` (of `option`, where one cannot stand in it)."""
        return TransformError(f"RandomChoice over {self._names()} cannot be fused: "
                              f"{f'option {_shown(option)} ' if option else ''}{why}")

    @property
    def size(self) -> tuple[int, int]:
        """The options' one output size (h, w) (an option that leaves it to the image, as
        Resize(int) or none does, must give it: `draw` checks)."""
        return next(p.out_size for p in self.plans if p.out_size is not None)  # type: ignore[return-value]

    @property
    def antialias(self) -> bool:
        return all(getattr(g, "antialias", True) for o in self.options for g in o)

    def _names(self) -> str:
        return ", ".join(_named(o) for o in self.options)

    def __repr__(self) -> str:
        return f"RandomChoice([{', '.join(_shown(o) for o in self.options)}], p={self.p})"

    @property
    def filter_modes(self) -> tuple[str, ...]:  # type: ignore[override]
        """Every option's resize filters (one: the plan's; several: each image's row says)."""
        return tuple(dict.fromkeys(m for o in self.options for g in o for m in g.filter_modes))

    @property
    def pad_mode(self) -> int:
        return max(int(getattr(g, "pad_mode", 0)) for o in self.options for g in o)

    def on_pil_images(self) -> Transform:
        return type(self)([[t.on_pil_images() for t in o] for o in self.options], self.p)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        return self.size

    def _through(self, k: int) -> str:
        """Option k, as a message names it."""
        return f"through {_shown(self.options[k])}"

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        for k, plan in enumerate(self.plans):  # (each image, whichever it draws: a batch of one size)
            if plan.out_size is None and plan.image_output(*size) != self.size:
                made = plan.image_output(*size)
                raise ValueError(f"{self!r}: an image of {size[0]}x{size[1]} makes {made[0]}x{made[1]} "
                                 f"{self._through(k)}, not the batch's {self.size[0]}x{self.size[1]} (give "
                                 f"Resize((h, w)) for images of other shapes)")
        k = rng.choices(range(len(self.plans)), weights=self.p)[0]
        d, _ = geometry_draws(self.plans[k], rng, size)
        return {KEY: k, **d}


class AppliedGeometry(GeometryChoice):
    """torchvision's RandomApply over geometries (`[RandomApply([RandomCrop(48)], p=0.4),
    Resize(64)]`, as scripts write it): a choice of two options, its steps with
    probability p or none of them (an image that loses the coin keeps its size, so a
    Resize((h, w)) or a crop after it must give the batch its one size: they end both
    options). make_params: "geometry_choice" 0 where the steps ran, 1 where they did not."""

    shown_as = "RandomApply"
    takes_none = True
    size_hint = "an image that loses the coin keeps its own size; give a Resize((h, w)) or a crop after it"

    @classmethod
    def of(cls, steps: Sequence[Transform], p: float) -> "AppliedGeometry":
        return cls([steps, ()], [p, 1.0 - p])

    @property
    def applied(self) -> tuple[Transform, ...]:
        """The steps the coin applies (the first option, less the steps after it that end both)."""
        return self.options[0][:len(self.options[0]) - len(self.options[1])]

    def refusal(self, why: str, option: Sequence[Transform] = ()) -> TransformError:
        return TransformError(f"RandomApply([{', '.join(type(t).__name__ for t in self.applied)}]) cannot be fused: "
                              f"{f'applied, {_shown(option)} ' if option else ''}{why}")

    def __repr__(self) -> str:
        return f"RandomApply({list(self.applied)!r}, p={self.p[0]})"

    def _through(self, k: int) -> str:
        return "where it loses the coin" if k else "where it wins the coin"


def may_make(plan: "_Plan", size: tuple[int, int]) -> bool:
    """An option of a choice that leaves its output's size to the image (`plan`) may give
    `size` (draws check each image): none at all (RandomApply's lost coin), or a Resize of
    the shorter side to min(size)."""
    from .geometry import Resize

    if not plan.geometry:
        return True
    g: Any = plan.geometry[0]
    return len(plan.geometry) == 1 and type(g) is Resize and isinstance(g.size, int) and g.max_size is None and \
        g.size == min(size)


def chosen(plan: "_Plan", p: dict) -> "_Plan":
    """The plan whose geometry an image of draws `p` takes: the option it drew, where the
    geometry is a choice; else `plan`."""
    first = plan.geometry[0] if plan.geometry else None
    return first.plans[p[KEY]] if isinstance(first, GeometryChoice) else plan


def crops_resized(plan: "_Plan", params: Sequence[dict] | None) -> Any:
    """Whether each image's geometry is a crop resized (the plan's rrc; boxes are clamped
    to it: boxes.box_moves): one bool, or with a choice one an image."""
    if not (plan.geometry and isinstance(plan.geometry[0], GeometryChoice)):
        return plan.rrc
    return np.array([chosen(plan, p).rrc for p in params or ()], bool)


def geometry_draws(plan: "_Plan", rng: random.Random, size: tuple[int, int]) -> tuple[dict, tuple[int, int]]:
    """One image's geometry draws (of `size`, after any canvas) under a plan whose
    geometry reads no boxes, in the Compose's order, and the size after them: a crop
    resized draws its crop alone; a RandomResizedCrop's window ("window") of its output,
    under a key of its own."""
    geometry = plan.geometry[:1] if plan.rrc else plan.geometry  # (a crop resized: its crop alone draws)
    p: dict = {}
    frame = size  # (what the geometry's first step crops)
    for t in geometry:
        d = t.draw(rng, size)
        if "resize" in d:
            size = d["resize"]
        p.update(d)
    if plan.rrc_window:  # (the second crop, of the first one's output)
        p["window"] = plan.geometry[1].draw(rng, tuple(plan.geometry[0].size))["crop"]  # type: ignore[attr-defined]
    if plan.crop_resized and not (0 <= p["crop"][0] <= frame[0] - p["crop"][2] and
                                  0 <= p["crop"][1] <= frame[1] - p["crop"][3]):  # (the crop resized: in the image)
        raise ValueError(f"{type(geometry[0]).__name__}'s {p['crop'][2]}x{p['crop'][3]} crop is larger than the "
                         f"{frame[0]}x{frame[1]} image, and a Resize of it follows: only a crop inside the image is "
                         f"resized here (torchvision pads it first)")
    return p, size


def geometry_row(plan: "_Plan", g: list[int], p: dict, h: int, w: int, out: tuple[int, int]) -> None:
    """Fills one image's geometry columns of its kernel row `g` (the source box, the frame
    VH x VW it is resized to, the output's window OY, OX of the frame, the filter, the
    padding's fill and mode) from its draws `p`; (h, w): what the geometry reads (the
    image, or its canvas); `out`: its output size. With a choice, the option it drew."""
    plan = chosen(plan, p)
    if plan.rrc:
        t, l, bh, bw = p["crop"]
        if t < 0 or l < 0 or bh <= 0 or bw <= 0 or t + bh > h or l + bw > w:
            raise ValueError(f"crop {p['crop']} is outside the {h}x{w} image")
        g[fused.TOP:fused.BW + 1] = (t, l, bh, bw)
        if plan.rrc_window:  # (resized to RandomResizedCrop's size; the output, the second crop's window of it)
            first: Any = plan.geometry[0]
            g[fused.VH], g[fused.VW] = first.size
            g[fused.OY], g[fused.OX] = p["window"][0], p["window"][1]
        else:
            g[fused.VH], g[fused.VW] = out
    else:
        g[fused.TOP:fused.BW + 1] = (0, 0, h, w)
        g[fused.VH], g[fused.VW] = p.get("resize", (h, w))
        if "crop" in p:
            g[fused.OY], g[fused.OX] = p["crop"][0], p["crop"][1]
    g[fused.FILTER] = (1 if p["cubic"] else 0) if "cubic" in p else plan.resample
    g[fused.FILLR:fused.FILLB + 1] = plan.pad_fill
    g[fused.PAD] = plan.pad_mode

