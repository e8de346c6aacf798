"""The steps a Compose may hold before its geometry that the plan takes elsewhere, as
scripts write them: the flips (`[RandomHorizontalFlip(), RandomResizedCrop(224), ...]`:
the crop's window mirrored), a float conversion (`[ToTensor(), Resize((224, 224)),
...]`: the kernel resamples in float), a grey conversion (`[Grayscale(3), Resize(256),
...]`: the program's first step), Normalize (`[ToTensor(), Normalize(...), Resize((224,
224))]`: the output's), each checked where it would make other pixels than torchvision's
order makes; and the other per-sample steps and policies (`[ColorJitter(...),
RandomResizedCrop(224), ...]`: a first pass of the kernel at each image's size)."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Sequence

from ..errors import TransformError
from .args import NEAREST
from .base import PROGRAM_GROUPS, Transform
from .colour import RGB, RandomGrayscale
from .geometry import CenterCrop, RandomCrop, RandomResizedCrop, Resize
from .iou_crop import RandomIoUCrop
from .output import Normalize, ToDtype
from .canvas import Pad, shown
from .geometry_choice import GeometryChoice


def _before_geometry(steps: list[Transform]) -> int | None:
    """Where the first geometry or canvas step stands (None: none)."""
    return next((i for i, t in enumerate(steps) if t.group == "geometry" or getattr(t, "canvas", False)
                 or getattr(t, "canvas_first", False)), None)


def _bicubic(geometry: list[Transform]) -> Transform | None:
    """The geometry step that resizes bicubically (it clamps its overshoot), or None."""
    return next((g for g in geometry if any("cubic" in m for m in g.filter_modes)), None)


def _alone_before_geometry(steps: list[Transform], kind: type) -> list[Transform]:
    """The steps of `kind` before the geometry, where only they and flips stand there
    (none else: another step before the geometry keeps its own refusal)."""
    n = _before_geometry(steps)
    if n is None or any(not isinstance(t, kind) and t.group != "flips" for t in steps[:n]):
        return []
    return [t for t in steps[:n] if isinstance(t, kind)]


def leading_flips(steps: list[Transform], names: str) -> list[Transform]:
    """The flips before the geometry (many scripts flip first, then crop): taken as flips
    of the crop's window mirrored (the same images, exactly); none where no geometry
    follows them (they are the ordinary flips then)."""
    n = next((i for i, t in enumerate(steps) if t.group != "flips"), len(steps))
    if n == 0 or n == len(steps) or (steps[n].group != "geometry" and type(steps[n]) is not Pad):
        return []
    if type(steps[n]) is Pad and not _pad_read_as_window(steps[n:]):  # (a canvas: the mirrored image's canvas is
        check_even(steps[:n], steps[n], steps)  # the mirrored canvas where each flip's axis is padded alike)
    if getattr(steps[n], "reads_boxes", False):
        raise TransformError(f"{type(steps[0]).__name__} before {type(steps[n]).__name__} cannot be fused: its crop "
                             f"is drawn from the boxes where they stand; put the flip after it [{names}]")
    geometry = itertools.takewhile(lambda t: t.group == "geometry", steps[n:])
    nearest = next((t for t in geometry if any("nearest" in m for m in t.filter_modes)), None)
    if nearest is not None:  # (a nearest pick is not mirror-symmetric: flipped first, other pixels are picked)
        raise TransformError(f"{type(steps[0]).__name__} before {type(nearest).__name__} with nearest interpolation "
                             f"cannot be fused: put the flip after it (the same images, drawn alike; nearest picks "
                             f"other pixels of a flipped image) [{names}]")
    return steps[:n]


def _warps_a_canvas(t: Transform, geometry_after: bool) -> bool:
    """`t` warps each whole image into a canvas of its own (`geometry_after`: a geometry step
    follows it; ElasticTransform with none warps the output instead), and does not place
    the image (RandomZoomOut, Pad: a window of the image is read)."""
    if getattr(t, "places", False) or not getattr(t, "moves", False):
        return False
    return bool((getattr(t, "canvas", False) and (geometry_after or not getattr(t, "after_kernel", False))) or
                (getattr(t, "canvas_first", False) and geometry_after))


def canvas_flips(steps: list[Transform]) -> list[Transform]:
    """The flips before a warp that makes each image a canvas (`[RandomHorizontalFlip(),
    RandomRotation(10), Resize((224, 224))]`, as many scripts write it): each flipped
    sample's image is flipped before its canvas is made, as torchvision flips it before
    the warp (the same images, exactly; the kernel does not flip it again). None where no
    such warp follows them."""
    n = next((i for i, t in enumerate(steps) if t.group != "flips"), len(steps))
    if n == 0 or n == len(steps):
        return []
    return steps[:n] if _warps_a_canvas(steps[n], len(steps) > n + 1 and steps[n + 1].group == "geometry") else []


def flips_after_canvas(steps: list[Transform]) -> list[Transform]:
    """The flips between a warp that makes each image a canvas and the geometry after them
    (`[RandomRotation(15), RandomHorizontalFlip(), Resize((224, 224))]`): torchvision flips
    the warped image, then crops or resizes it, so the kernel reads the crop's window
    mirrored in the canvas and flips last, as for flips before the geometry (the same
    images). None where they are not so, or before a nearest resize or a crop drawn from
    the boxes."""
    if not steps or not _warps_a_canvas(steps[0], True):
        return []
    n = next((i for i, t in enumerate(steps[1:], 1) if t.group != "flips"), len(steps))
    if n == 1 or n == len(steps) or steps[n].group != "geometry" or getattr(steps[n], "reads_boxes", False):
        return []
    geometry = itertools.takewhile(lambda t: t.group == "geometry", steps[n:])
    if any("nearest" in m for t in geometry for m in t.filter_modes):
        return []
    return steps[1:n]


def window_flips(steps: list[Transform], every: list[Transform]) -> list[Transform]:
    """The flips between a RandomResizedCrop and a CenterCrop or RandomCrop of its output
    (`[RandomResizedCrop(300), RandomHorizontalFlip(), RandomCrop(96)]`): torchvision crops
    the flipped crop, so the kernel reads the second crop's window mirrored in the first
    one's frame and flips last (the same pixels; the first crop as drawn). None where the
    steps (`every`: with the RGB ones) are not so."""
    n = next((i for i, t in enumerate(steps[1:], 1) if t.group != "flips"), len(steps))
    if n == 1 or n == len(steps) or type(steps[0]) is not RandomResizedCrop or \
            type(steps[n]) not in (CenterCrop, RandomCrop) or every[:n + 1] != steps[:n + 1]:
        return []
    return steps[1:n]


def crop_then_resize(steps: list[Transform], every: list[Transform]) -> tuple[list, list, list] | None:
    """`[RandomCrop(32, padding=4), RandomHorizontalFlip(), Resize((224, 224))]` (CIFAR
    upscaled for an ImageNet model) as `[Pad(4), RandomCrop(32), Resize((224, 224)),
    RandomHorizontalFlip()]`, where `steps` (`every`: with the RGB ones) begin with a
    CenterCrop, a RandomCrop or a choice of geometries (`[RandomApply([RandomCrop(28)]),
    flip, Resize(224)]`), flips, then a Resize: the flips moved after the Resize (a
    resize of a mirrored image is the mirrored resize; a nearest one is not: left so), and
    a RandomCrop's padding by a fill made a Pad's canvas before it (the kernel resizes a
    crop inside its image; the same draws: torchvision draws the crop over the padded size
    either way). After a canvas step (`[RandomRotation(15), RandomApply([RandomCrop(300)]),
    flip, Resize((224, 224))]`) the flips are moved alike, the padding kept. (steps, every,
    the flips moved), or None where nothing is so changed."""
    start = int(bool(steps) and (getattr(steps[0], "canvas", False) or getattr(steps[0], "canvas_first", False)))
    n = next((i for i, t in enumerate(steps[start + 1:], start + 1) if t.group != "flips"), len(steps))
    if n == len(steps) or type(steps[n]) is not Resize or not (
            type(steps[start]) in (CenterCrop, RandomCrop) or isinstance(steps[start], GeometryChoice)):
        return None
    crop: Any = steps[start]
    flips = steps[start + 1:n]
    if flips and any("nearest" in m for m in steps[n].filter_modes):  # (not mirror-symmetric)
        raise TransformError(f"{type(flips[0]).__name__} before {type(steps[n]).__name__} with nearest interpolation "
                             f"cannot be fused: put the flip after it (the same images, drawn alike; nearest picks "
                             f"other pixels of a flipped image) [{', '.join(type(t).__name__ for t in every)}]")
    padded = type(crop) is RandomCrop and any(crop.padding) and crop.padding_mode == "constant" and \
        not crop.pad_if_needed and not start
    if not flips and not padded:
        return None
    made: list[Any] = [crop]
    if padded:
        pad = Pad(list(crop.padding), list(crop.crop_fill))
        vars(pad)["written_as"] = f"{type(crop).__name__}'s padding"  # (messages name the user's step: canvas.shown)
        made = [pad, RandomCrop(crop.size)]
    out = []
    for given in (steps, every):
        rest = [t for t in given if all(t is not f for f in flips)]
        at = next(i for i, t in enumerate(rest) if t is steps[n]) + 1  # (the flips right after the Resize)
        rest[at:at] = flips
        k = next(i for i, t in enumerate(rest) if t is crop)
        out.append(rest[:k] + made + rest[k + 1:])
    return out[0], out[1], flips


def front_of(steps: list[Transform], n: int) -> int:
    """Where the steps after the first `n` that are not RGB begin in `steps`."""
    seen = 0
    for k, t in enumerate(steps):
        if seen == n:
            return k
        seen += not isinstance(t, RGB)
    return len(steps)


def without_front(steps: list[Transform], every: list[Transform], n: int) -> tuple[list[Transform], list[Transform]]:
    """`steps` and `every` (with the RGB ones) without the first `n` steps that are not RGB
    (an RGB among them stays)."""
    if not n:
        return steps, every
    at = front_of(every, n)
    return steps[n:], [t for t in every[:at] if isinstance(t, RGB)] + every[at:]


def _pad_read_as_window(steps: list[Transform]) -> bool:
    """A Pad that the plan reads as a window of the image, not a canvas: with no geometry
    after it (PadWindow), or folded into the RandomCrop after it. A flip before it is then
    a flip of that window mirrored, as for a crop (a canvas is made unflipped)."""
    if type(steps[0]) is not Pad:
        return False
    after = steps[1] if len(steps) > 1 else None
    return after is None or after.group != "geometry" or (steps[0].fold_into(after) is not None and not (
        len(steps) > 2 and steps[2].group == "geometry"))  # (the plan folds it into a crop that is the geometry)


def check_even(flips: Sequence[Transform], pad: Any, steps: Sequence[Transform], where: str = "before",
               name: str | None = None) -> None:
    """Refuses a flip before a Pad's canvas (or moved there) whose axis the Pad pads
    unevenly: the flip would move the image in its canvas. `name`: the Pad's in the
    message (its repr)."""
    left, top, right, bottom = pad.padding
    for flip in flips:
        if (left != right) if flip.key == "flip" else (top != bottom):  # type: ignore[attr-defined]
            sides = "left and right" if flip.key == "flip" else "top and bottom"  # type: ignore[attr-defined]
            names = ", ".join(type(t).__name__ for t in steps)
            raise TransformError(f"{type(flip).__name__} {where} {name or repr(pad)} cannot be fused: the padding differs "
                                 f"{sides}, so the flip moves the image in its canvas; pad both alike, or flip "
                                 f"after the crop (images drawn alike) [{names}]")


def leading_floats(steps: list[Transform]) -> list[Transform]:
    """The float conversions before the geometry (ToTensor first, then the crop, as many
    scripts write it): the kernel resamples in float, as torchvision resizes a float
    image, so the output is float from the start; none where no geometry or canvas step
    follows them (they are the output's dtype then, where they stand)."""
    n = _before_geometry(steps)
    return [] if n is None else [t for t in steps[:n] if isinstance(t, ToDtype) and t.dtype.is_floating_point]


def leading_uint8(steps: list[Transform]) -> list[Transform]:
    """The ToDtype(torch.uint8) steps before the geometry with no float conversion before
    them (torchvision's v2 docs write `[ToImage(), ToDtype(torch.uint8, scale=True),
    RandomResizedCrop(...), ...]`): on the uint8 images a Compose takes, no step at all."""
    n = _before_geometry(steps)
    out: list[Transform] = []
    for t in steps[:n or 0]:
        if isinstance(t, Normalize) or (isinstance(t, ToDtype) and t.dtype.is_floating_point):
            break
        if isinstance(t, ToDtype):
            out.append(t)
    return out


def leading_greys(steps: list[Transform]) -> list[Transform]:
    """The Grayscale (or RandomGrayscale) steps before the geometry where nothing but flips
    comes before it with them (`[Grayscale(3), Resize(256), CenterCrop(224), ...]` for
    X-rays): a weighted sum of the channels, which a linear resample commutes with, taken
    as the program's first steps. Not before a canvas step (`[Grayscale(), RandomRotation(10),
    Resize((48, 48))]`): the first pass makes the image grey there (leading_colours)."""
    n = _before_geometry(steps)
    return [] if n is not None and steps[n].group != "geometry" else _alone_before_geometry(steps, RandomGrayscale)


def check_greys_first(greys: list[Transform], canvas: Any, geometry: list[Transform], names: str) -> None:
    """Refuses what a grey image before the geometry would make otherwise: a canvas, a
    bicubic resize (clamped per channel before the grey), a padding of a colour (torchvision
    pads the grey image with it; the kernel's padding would be made grey)."""
    if not greys:
        return
    what = type(greys[0]).__name__
    cubic = _bicubic(geometry)
    fill = next((g.crop_fill for g in geometry if g.crop_fill is not None and len(set(g.crop_fill)) > 1), None)
    why = (f"{canvas!r} after it" if canvas is not None else f"a bicubic {type(cubic).__name__} after it (clamped "
           f"per channel)" if cubic is not None else f"a padding of colour {fill}" if fill is not None else "")
    if why:
        raise TransformError(f"{what} before the geometry cannot be fused with {why}: put {what} after the "
                             f"geometry [{names}]")


def check_floats_first(floats_first: list[Transform], canvas: Any, geometry: list[Transform], names: str) -> None:
    """Refuses what a float image before the geometry would make otherwise than the kernel
    does: a bicubic resize (torchvision leaves a float image's overshoot past [0, 1]; the
    kernel clamps, as it does for uint8), a canvas interpolated or filled between levels
    (a canvas is made in uint8 levels)."""
    if not floats_first:
        return
    what = "a float conversion (ToTensor, ToDtype)"
    cubic = _bicubic(geometry)
    if cubic is not None:
        raise TransformError(f"{what} before a bicubic {type(cubic).__name__} cannot be fused: torchvision keeps a float "
                             f"image's bicubic overshoot past [0, 1], the kernel clamps it; put the conversion after "
                             f"the geometry, or use bilinear [{names}]")
    if canvas is None:
        return
    fill = getattr(canvas, "fill", None)
    fills = [] if fill is None or isinstance(fill, dict) else list(fill) if isinstance(fill, Sequence) else [fill]
    interpolated = getattr(canvas, "interpolation", NEAREST) != NEAREST
    if interpolated or any(float(f) != round(float(f)) for f in fills):
        raise TransformError(f"{what} before {shown(canvas)} cannot be fused: its canvas is made in uint8 "
                             f"levels, and a float image's {'interpolation' if interpolated else 'fill'} falls "
                             f"between them; put the conversion after the geometry [{names}]")


def leading_colours(steps: list[Transform]) -> list[Transform]:
    """The per-sample steps and policies before the geometry (`[ColorJitter(...),
    RandomResizedCrop(224), ...]`; SSD's RandomPhotometricDistort before RandomZoomOut;
    `[RandAugment(), Resize((224, 224)), ...]`): run first, as torchvision runs them, on
    each whole image at its size (the plan's first pass: transforms.first), whose output
    the canvas or geometry reads; none where no geometry step follows them (they are the
    program's steps then)."""
    n = _before_geometry(steps)
    if n is None or not any(t.group == "geometry" for t in steps[n:]):
        return []
    return [t for t in steps[:n] if t.group in PROGRAM_GROUPS]


def check_colours_first(colours: list[Transform], floats_first: list[Transform], given: list[Transform],
                        names: str) -> None:
    """Refuses what a first pass would make otherwise than torchvision: a float image (a
    conversion before such a step: the first pass writes uint8 levels), a flip before a
    step that moves pixels (the flip is the crop's, after the first pass). `given`: the
    Compose's steps, in order."""
    if not colours:
        return
    what = type(colours[0]).__name__
    at = {id(t): i for i, t in enumerate(given)}
    moving = next((t for t in reversed(colours) if getattr(t, "moves", False)), None)  # (the last: a flip before it)
    flip = None if moving is None else next((t for t in given if t.group == "flips" and at[id(t)] < at[id(moving)]),
                                            None)
    if moving is not None and flip is not None:
        raise TransformError(f"{type(flip).__name__} before {type(moving).__name__} before the geometry cannot be "
                             f"fused: {type(moving).__name__} moves pixels, and the flip is made with the crop, after "
                             f"it; put the flip after {type(moving).__name__} [{names}]")
    if floats_first and min(at[id(t)] for t in floats_first) < max(at[id(t)] for t in colours):
        raise TransformError(f"{what} on a float image before the geometry cannot be fused: it runs first at the "
                             f"image's size and writes uint8 levels; put the float conversion (ToTensor, ToDtype) "
                             f"after the geometry [{names}]")


def leading_normalize(steps: list[Transform]) -> list[Transform]:
    """Normalize before the geometry where nothing but flips comes before it with it (the
    float conversion taken already): a per-channel affine map, which a resample whose
    weights sum to one commutes with; the output's normalization, as after the geometry."""
    return _alone_before_geometry(steps, Normalize)


def check_normalize_first(norms: list[Transform], canvas: Any, geometry: list[Transform], names: str) -> None:
    """Refuses what a normalized image before the geometry would make otherwise: a canvas
    or a padding filled with a value (torchvision fills the normalized image, the kernel
    the image before its Normalize), a bicubic resize (clamped to [0, 1] before it)."""
    if not norms:
        return
    cubic = _bicubic(geometry)
    padding = canvas if canvas is not None else _filled_padding(geometry)
    if cubic is not None or padding is not None:
        why = (f"a bicubic {type(cubic).__name__} after it (the kernel clamps its overshoot)" if cubic is not None else
               f"{shown(padding)} after it, whose padding torchvision fills in normalized values")
        raise TransformError(f"Normalize before the geometry cannot be fused with {why}: put Normalize after the "
                             f"geometry [{names}]")


def _filled_padding(geometry: list[Transform]) -> Transform | None:
    """The geometry step that may pad with a fill value (None: none can): a RandomCrop
    padded with a constant, a CenterCrop that may reach past its image, anything else not
    known not to."""
    for i, g in enumerate(geometry):
        if type(g) in (RandomResizedCrop, Resize, RandomIoUCrop):
            continue
        if type(g) is RandomCrop:
            if getattr(g, "pad_mode", 0) == 0 and (any(g.padding) or g.pad_if_needed):  # type: ignore[attr-defined]
                return g
            continue
        if type(g) is CenterCrop:
            before: Any = geometry[i - 1] if i else None
            after: Any = geometry[i + 1] if i + 1 < len(geometry) else None
            ch, cw = g.size  # type: ignore[attr-defined]
            if type(after) is Resize:  # (the crop resized: it must lie inside the image)
                continue
            if isinstance(before, RandomResizedCrop) and ch <= before.size[0] and cw <= before.size[1]:
                continue  # (a window of the resized crop, inside it)
            if type(before) is Resize and before.max_size is None and (
                    (isinstance(before.size, int) and max(ch, cw) <= before.size)
                    or (isinstance(before.size, tuple) and ch <= before.size[0] and cw <= before.size[1])):
                continue
        return g
    return None


def flips_moved_back(steps: Sequence[Transform], past_resize: list | None = None) -> list[Transform] | None:
    """`[Pad(4), RandomHorizontalFlip(), RandomCrop(32)]` (CIFAR scripts) as `[RandomHorizontalFlip(),
    Pad(4), RandomCrop(32)]`: the flips right after a Pad moved before it, where its padding
    is the same on both ends of each flip's axis; and those right after a Resize
    (`[Resize((256, 128)), RandomHorizontalFlip(), Pad(10), RandomCrop((256, 128))]`, person
    re-identification's recipe) before it. The same images: a padded image mirrored is the
    mirrored image padded alike, in every padding mode, and its boxes move alike; a resize
    of a mirrored image is the mirrored resize (its filter and its grid are symmetric: a
    nearest one is not, and the flips before it stay refused); neither draws, so every draw
    keeps its order. None where no flip follows a Pad or a Resize; refused where a flip's
    axis is padded unevenly (the flip moves the image). `past_resize`: takes the flips
    moved past a Resize (a mask's nearest pick of the resize is made before them)."""
    out, moved = list(steps), False
    for i in range(1, len(out)):
        k = i
        while k > 0 and getattr(out[k], "group", None) == "flips" and type(out[k - 1]) in (Pad, Resize):
            if type(out[k - 1]) is Resize:
                if past_resize is not None:
                    past_resize.append(out[k])
                out[k - 1], out[k] = out[k], out[k - 1]
                k, moved = k - 1, True
                continue
            check_even([out[k]], out[k - 1], steps, "after")
            out[k - 1], out[k] = out[k], out[k - 1]
            k, moved = k - 1, True
    return out if moved else None


def with_flips_moved_back(plan_of: Any, steps: Sequence[Transform], *args: Any) -> Any:
    """`plan_of(steps, *args)`; where that refuses and flips_moved_back moves a flip, the
    plan of the moved steps (its `steps` the given ones), or else the first refusal."""
    try:
        return plan_of(steps, *args)
    except TransformError as refused:
        past: list = []
        moved = flips_moved_back(steps, past)
        if moved is None:
            raise
        try:
            plan = plan_of(moved, *args)
        except TransformError:
            raise refused from None
        return dataclasses.replace(plan, steps=tuple(steps), mask_mirror=tuple(
            on and not any(t is f for t in past) for on, f in zip(plan.masks_mirrored, (plan.flip, plan.vflip))))
