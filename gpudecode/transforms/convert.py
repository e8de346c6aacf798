"""torchvision's and timm's transforms as ours: the walk over a Compose (and what holds
one), each step converted by the class that declared it (`converts=` on its class, see
base.CONVERTS), or refused with the reason and the ways out. The conversions
themselves live on the classes, beside the ops they convert."""
from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

from ..errors import TransformError
from .base import CONVERTS, Transform, _refuse


# input conversions (the Loader's images are RGB tensors already) and no-ops: dropped
_DROPPED = ("torchvision.ToImage", "torchvision.PILToTensor", "torchvision.ToPureTensor",
            "torchvision.ToImageTensor", "torchvision.Identity", "timm.MaybePILToTensor")

# the steps that take a PIL image to a tensor: the steps before one ran on PIL images
_FROM_PIL = ("torchvision.ToTensor", "torchvision.PILToTensor", "torchvision.ToImage", "torchvision.ToImageTensor",
             "timm.MaybePILToTensor", "timm.MaybeToTensor", "timm.ToTensor")

# Why an op has no fused form, where there is more to say than that it has none yet.
WHY = {
    "torchvision.JPEG": "it re-encodes each image (an encoder per sample, outside any kernel)",
    "torchvision.Lambda": "a Lambda runs Python per image",
}


def key(t: Any) -> str:
    """"torchvision.<Name>" or "timm.<Name>" for their transforms (whatever submodule
    defines them), else the class's module and name."""
    cls = type(t)
    package = cls.__module__.split(".")[0]
    return f"{package}.{cls.__name__}"


def qualified(t: Any) -> str:
    """The class's own module and name (torchvision's, timm's, the user's), by its public
    path where its package exports it (torchvision.transforms.v2.JPEG, not ._augment.JPEG)."""
    if inspect.isfunction(t) or inspect.ismethod(t):
        return f"function {t.__module__}.{t.__qualname__}"
    cls = type(t)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    parts = cls.__module__.split(".")
    for n in range(1, len(parts) + 1):
        mod = sys.modules.get(".".join(parts[:n]))
        if mod is not None and getattr(mod, cls.__qualname__, None) is cls:
            return f"{mod.__name__}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


_NOT_STEPS = ("RESUME", "PRECALL", "PUSH_NULL", "CACHE", "NOP", "NOT_TAKEN")  # (bookkeeping, no effect)


def converts_to_rgb(t: Any) -> bool:
    """`t` is a function, or torchvision's Lambda of one, whose whole body is
    `return <its one argument>.convert("RGB")` (CLIP's `_convert_image_to_rgb`, open_clip's
    `_convert_to_rgb`, and their copies, under any name), or `.repeat(3, 1, 1)` or
    `.expand(3, -1, -1)` of it (a grey tensor made three channels for an ImageNet model):
    read from its bytecode, not its name, so another body is never taken for it."""
    import dis

    fn = getattr(t, "lambd", None) if key(t) == "torchvision.Lambda" else t
    code = getattr(fn, "__code__", None)
    if not (inspect.isfunction(fn) and code is not None and code.co_argcount == 1 and code.co_kwonlyargcount == 0
            and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)):
        return False
    steps = [(i.opname, i.argval) for i in dis.get_instructions(fn) if i.opname not in _NOT_STEPS]
    if len(steps) < 5 or steps[-1][0] != "RETURN_VALUE" or steps[-2][0] != "CALL":
        return False
    (load, arg), (attr, name), consts, (_, n) = steps[0], steps[1], steps[2:-2], steps[-2]
    if not (load.startswith("LOAD_FAST") and arg == code.co_varnames[0] and attr in ("LOAD_METHOD", "LOAD_ATTR")
            and all(op == "LOAD_CONST" for op, _ in consts) and n == len(consts)):
        return False
    args = tuple(v for _, v in consts)
    return (name, args) in (("convert", ("RGB",)), ("repeat", (3, 1, 1)), ("expand", (3, -1, -1)))


def carries_compose(t: Any) -> bool:
    """An object that is not a Compose but holds one as `.transforms` (torchvision's
    reference ClassificationPresetTrain/Eval, what ImageFolder is given): it converts as
    that Compose."""
    inner = getattr(t, "transforms", None)
    return type(t).__name__ != "Compose" and type(inner).__name__ == "Compose"


def _image_classification(t: Any) -> list[Any]:
    """torchvision's ImageClassification (`weights.transforms()`): resize the shorter side,
    centre crop, to float, normalize; as the torchvision ops that do it."""
    import torchvision.transforms.v2 as tv

    resize = list(t.resize_size) if isinstance(t.resize_size, (list, tuple)) else [t.resize_size]
    crop = list(t.crop_size) if isinstance(t.crop_size, (list, tuple)) else [t.crop_size]
    return [tv.Resize(resize[0] if len(resize) == 1 else resize, t.interpolation, antialias=t.antialias),
            tv.CenterCrop(crop[0] if len(crop) == 1 else crop), tv.ToDtype(torch.float32, scale=True),
            tv.Normalize(list(t.mean), list(t.std))]


def _flat(t: Any) -> list[Any]:
    """Composes inside Composes (as DINO's recipe writes them), and what holds one."""
    if type(t).__name__ == "Compose":
        return [x for u in t.transforms for x in _flat(u)]
    if carries_compose(t):  # an object around a Compose (torchvision's reference presets)
        return _flat(t.transforms)
    if key(t) == "torchvision.ImageClassification":  # torchvision's weights' eval transforms
        return _image_classification(t)
    return [t]


def convert(tv: Any, floats: bool = False) -> list[Transform]:
    """Our steps for torchvision's or timm's `tv` (a Compose, one transform, or a list of
    them); `floats`: a float conversion came before (thresholds and fills are then on the
    [0, 1] scale). The steps before a PIL-to-tensor step ran on PIL images, and take PIL's
    arithmetic where it picks other pixels (Transform.on_pil_images)."""
    steps = [x for u in tv for x in _flat(u)] if isinstance(tv, list) else _flat(tv)
    on_pil = next((i for i, t in enumerate(steps) if key(t) in _FROM_PIL), 0)
    out: list[Transform] = []
    for i, t in enumerate(steps):
        if isinstance(t, Transform):  # ours, inside a torchvision Compose
            out.append(t)
            continue
        name = key(t)
        if name in _DROPPED:
            continue
        if name == "torchvision.ToPILImage":  # (first: the images are RGB uint8 tensors, made PIL images as they are)
            if out or floats or getattr(t, "mode", None) not in (None, "RGB"):
                raise TransformError(f"{qualified(t)} cannot be fused (step {i + 1} of {len(steps)}): only as the "
                                     "first step, of mode None or 'RGB' (the Loader's images are RGB uint8, and "
                                     "a PIL image of a float one is rounded down)")
            continue
        cls = CONVERTS.get("torchvision.RGB" if converts_to_rgb(t) else name)
        if cls is None:
            where = f" (step {i + 1} of {len(steps)})" if len(steps) > 1 else ""
            why = WHY.get(name, "gpudecode has no fused form of it")
            crops = next((type(u).__name__ for u in steps[:i]
                          if getattr(CONVERTS.get(key(u)), "group", None) == "views"), None)
            if crops is not None and name == "torchvision.Lambda":  # (v1's idiom: a Lambda that stacks the crops)
                why = (f"{crops}'s crops come as a list of batches; put the steps it runs on "
                       "each crop (ToTensor, Normalize) in its place")
            raise _refuse(f"{qualified(t)} cannot be fused{where}: {why}")
        step = cls.convert(t, floats)
        if i < on_pil:
            step = step.on_pil_images()
        out.append(step)
        floats = floats or step.makes_floats
    return out


def inner(t: Any, floats: bool) -> list[Transform]:
    """A container's steps (its `.transforms`), converted."""
    return [x for u in t.transforms for x in convert(u, floats)]


def image_fill(fill: Any) -> Any:
    """The image's fill of torchvision v2's {type: fill} (the value it looks up for an
    image or a plain tensor; a defaultdict's default where neither is named, as SSD's
    preset gives RandomZoomOut `defaultdict(lambda: mean, {tv_tensors.Mask: 0})`), or the
    one value every type has; another dict is returned as it is (refused where a fill is
    read). Not a dict: `fill` itself."""
    if not isinstance(fill, dict):
        return fill
    for k, v in fill.items():
        if getattr(k, "__name__", None) in ("Image", "Tensor") and getattr(k, "__module__", "").startswith(
                ("torchvision", "torch")):
            return v
    factory = getattr(fill, "default_factory", None)
    if factory is not None:
        return factory()
    values = list(fill.values())
    return values[0] if values and all(v == values[0] for v in values) else fill


def levels(fill: Any, floats: bool) -> Any:
    """A torchvision fill as levels: v2's {type: fill} read for the image (image_fill),
    None as zeros, a fill after a float conversion ([0, 1]) times 255."""
    fill = image_fill(fill)
    if fill is None:
        return 0
    if floats and not isinstance(fill, dict):
        fill = [round(v * 255.0, 6) for v in fill] if isinstance(fill, (list, tuple)) else round(fill * 255.0, 6)
    return fill


def warp_fill(t: Any, floats: bool) -> Any:
    """A warp's or policy's fill as ours take it: v2's {type: fill} one value for every
    type; after a float conversion ([0, 1] scale), uint8 levels."""
    fill = image_fill(t.fill)
    if floats and fill is not None and not isinstance(fill, dict):
        fill = [v * 255.0 for v in fill] if isinstance(fill, (list, tuple)) else fill * 255.0
    return fill
