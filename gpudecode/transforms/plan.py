"""A Compose's steps checked and sorted into the kernel's plan: the geometry, the
flips, each sample's program, the output's dtype and normalization, the erasing."""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Sequence, cast

import torch

from ..errors import TransformError
from .after import _AfterGeometry
from .base import FlipStep, Transform, _PixelOp, _refuse, _Step, step_name
from .colour import RGB, ColorJitter
from .canvas import CanvasStep, Pad, shown
from .convert import qualified
from .geometry import (FILTERS, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip,
                       Resize, ResizeKeepRatio, _RandomSize)
from .draws import native_spec
from .geometry_choice import GeometryChoice, may_make
from .iou_crop import RandomIoUCrop
from .nested_crops import CropOfCrop, nested
from .leading import (canvas_flips, check_colours_first, check_even, check_floats_first, check_greys_first,
                      check_normalize_first, crop_then_resize, flips_after_canvas, front_of, leading_colours,
                      leading_flips, leading_floats, leading_greys, leading_normalize, leading_uint8, window_flips,
                      without_front)
from .output import LinearTransformation, Normalize, RandomErasing
from .pad_window import PadWindow
from .targets import box_settings
from .warp_chain import chain_warps


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
    resample: int = 0  # the resize's filter, FILTERS[mode] (one mode; with several, each image's draw says)
    pad_fill: tuple[int, int, int] = (0, 0, 0)  # the crop's padding colour (levels)
    canvas: CanvasStep | None = None  # first, before the geometry: each image made a canvas of its own (canvas.py)
    post: Transform | None = None  # last, after the program: a warp of the kernel's float output (ElasticTransform)
    post_levels: bool = False  # the image is uint8 at the post step (no float conversion before it)
    # ConvertBoundingBoxFormat's format and SanitizeBoundingBoxes' (min_size, min_area): what a Boxes field hands
    # out (targets.py); out of the repr, which saved states' fingerprints hold (their steps are in the Compose's)
    box_format: str | None = field(default=None, repr=False)
    box_sizes: tuple[float, float] | None = field(default=None, repr=False)
    # each image at its own size (Compose(ragged=True)): the output is each image's, at the top-left of the batch's
    # padded one (RaggedBatch); out_size None where the geometry leaves sizes to the images and their draws
    ragged: bool = field(default=False, repr=False)
    # what the crop's padding reads (kernels' PAD column: 0 the fill, 1 the edge, 2 reflect, 3 symmetric)
    pad_mode: int = field(default=0, repr=False)
    # last, after the erasing: a matrix product of each flattened output image (output.LinearTransformation)
    linear: LinearTransformation | None = field(default=None, repr=False)
    # the output's channels: 1 after a Grayscale(num_output_channels=1), or from the start for images of one channel
    # (Compose(grey=True): MNIST's; then a is -1), unless a Grayscale(3) makes three. `one_channel` (a, b): the
    # program steps a < i <= b act on one channel (colour.one_channel); the kernel holds it as three equal ones and
    # writes the first
    channels: int = field(default=3, repr=False)
    one_channel: tuple[int, int] | None = field(default=None, repr=False)
    # (horizontal, vertical): that flip comes before the geometry (flip, then crop: the crop's window is of the flipped
    # image). The kernel flips last, so a flipped sample reads the window mirrored in its frame (mirrors.mirror_first)
    mirror: tuple[bool, bool] = field(default=(False, False), repr=False)
    # (horizontal, vertical): that flip comes between a RandomResizedCrop and the crop of its output (rrc_window): the
    # window is of the flipped frame, so a flipped sample reads it mirrored in the frame (mirrors.mirror_first)
    window_mirror: tuple[bool, bool] = field(default=(False, False), repr=False)
    # (horizontal, vertical): the program steps before that index come before that flip (a warp, then the flip: the
    # kernel flips first, and those warps' ops are mirrored on flipped samples: mirrored_at, mirrors.mirror_ops)
    flip_at: tuple[int, int] = field(default=(0, 0), repr=False)
    # (horizontal, vertical): that flip comes before a warp's canvas (`[flip, RandomRotation(10), Resize(...)]`): a
    # flipped sample's image is flipped before its canvas is made (canvas.build), and the kernel does not flip it again
    canvas_flip: tuple[bool, bool] = field(default=(False, False), repr=False)
    # (horizontal, vertical): a mask's nearest picks are of the flipped mask (plan.mirror's flips), or, for a flip
    # written after a Resize and taken before it (leading.flips_moved_back), of the unflipped one; None: the mirror's
    mask_mirror: tuple[bool, bool] | None = field(default=None, repr=False)
    # the per-sample steps and policies before the geometry (ColorJitter, then the crop): a first pass of the kernel on
    # each whole image at its size, whose uint8 output the canvas or the geometry reads (transforms.first)
    first: tuple[_Step, ...] = field(default=(), repr=False)

    @property
    def masks_mirrored(self) -> tuple[bool, bool]:
        """(h, v): a flip before the geometry whose mask is picked from the flipped mask
        (masks.mask_indices' `mirror`)."""
        return self.mirror if self.mask_mirror is None else self.mask_mirror

    @property
    def rrc(self) -> bool:
        """The geometry is a crop resized to the output (the window the kernel reads is its
        crop): RandomResizedCrop, or RandomIoUCrop + Resize((h, w)), whose first step alone
        draws."""
        return bool(self.geometry) and (isinstance(self.geometry[0], (RandomResizedCrop, RandomIoUCrop))
                                        or self.crop_resized)

    @property
    def rrc_window(self) -> bool:
        """A RandomResizedCrop, then a CenterCrop or RandomCrop of its output
        (`[RandomResizedCrop(256), CenterCrop(224)]`): the kernel resizes the first crop to
        a frame of RandomResizedCrop's size (VH, VW) and reads the second one's window of it
        (OY, OX: its draw's "window"), padding it where the window reaches past the frame."""
        return len(self.geometry) == 2 and isinstance(self.geometry[0], RandomResizedCrop)

    @property
    def decode_frame(self) -> tuple[int, int] | None:
        """The least size (h, w) the kernel resizes every decoded box to: a JPEG decoder may
        scale a decode down (fast_decode's DCT scaling) only while the box stays at least
        this large, so that the resample still shrinks it. RandomResizedCrop's output (its
        own size where a crop of it follows); a Resize's size (the shorter side's, both
        ways); None where a box is read 1:1 (a crop or a Pad alone, no geometry), the size
        is drawn an image, or the kernel reads images made before it."""
        if self.makes_images or not self.geometry:
            return None
        first: Any = self.geometry[0]
        if self.rrc_window:
            return int(first.size[0]), int(first.size[1])
        if self.rrc:
            return self.out_size
        if type(first) is Resize and first.size is not None:
            return (first.size, first.size) if isinstance(first.size, int) else (int(first.size[0]), int(first.size[1]))
        return None

    @property
    def first_resize(self) -> Resize | None:
        """The first pass's Resize (`[Resize(256), RandomResizedCrop(224)]`), which resizes
        each whole image after its other steps (transforms.first.resized_images)."""
        return next((t for t in self.first if isinstance(t, Resize)), None)  # type: ignore[return-value]

    @property
    def makes_images(self) -> bool:
        """The kernel reads images made from the decoded ones before it (a canvas step's, a
        first pass's): made of whole images at their sizes, so decoders decode them whole
        (no crop window, no DCT scaling), and apply() makes them."""
        return self.canvas is not None or bool(self.first)

    @property
    def crop_resized(self) -> bool:
        """CenterCrop or RandomCrop, then a Resize (CelebA's recipes; a crop of a fixed size
        at a random place, resized): the crop, which must fit in the image, resized to the
        output as a RandomResizedCrop's crop is."""
        return _crop_then_resize(self.geometry)

    @property
    def reads_boxes(self) -> bool:
        """A step draws from the sample's boxes (RandomIoUCrop): the draws need them."""
        return bool(self.geometry) and getattr(self.geometry[0], "reads_boxes", False)

    def output_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The output (h, w) for images of `sizes`.

        Raises:
            ValueError: no geometry step and the images differ in size; a ragged plan whose
                sizes come from the draws (Draws.out_sizes says each image's).
        """
        if self.out_size is not None:
            return self.out_size
        if self.ragged:
            if self.geometry or self.canvas is not None:
                raise ValueError("each image's output size comes from its draws here (Draws.out_sizes)")
            return (max([1, *(int(h) for h, _ in sizes)]), max([1, *(int(w) for _, w in sizes)]))
        distinct = sorted({self.image_output(int(h), int(w)) for h, w in sizes})
        if len(distinct) > 1:
            raise ValueError(f"images of {len(distinct)} {'output ' if self.geometry else ''}sizes ({distinct[0]}, "
                             f"{distinct[1]}, ...): {self.one_size_why}, so a batch needs one size ({self.one_size_fix})")
        return distinct[0] if distinct else (1, 1)

    def image_output(self, h: int, w: int) -> tuple[int, int]:
        """The output (h, w) of an image of (h, w) where the plan leaves sizes to the images
        (out_size None): itself, without geometry; a Resize of its shorter side's, alone.
        A batch takes images of one output size (torchvision's collate stacks them)."""
        if self.out_size is not None:
            return self.out_size
        oh, ow = h, w
        if self.first_resize is not None:  # (`[Resize(300), Resize(224)]`: the first pass's, then the geometry's)
            oh, ow = self.first_resize.output_size(oh, ow)
        for g in self.geometry:  # (a Resize of the shorter side's; a Pad's after it, PadWindow)
            oh, ow = g.output_size(oh, ow)  # type: ignore[attr-defined]
        return int(oh), int(ow)

    def over_limit(self, limit: int, size: tuple[int, int] | None = None) -> str | None:
        """Why outputs of the plan's one size (or of `size`, where the images give it) are
        refused: over `limit` pixels an image, a bomb of the transform's making
        (`CenterCrop(60000)` asks for 10 GiB of uint8 an image); None where they fit."""
        oh, ow = self.out_size or size or (0, 0)
        if not limit or oh * ow <= limit:
            return None
        made = ", ".join(repr(g) for g in self.geometry) or "the images"
        nbytes = oh * ow * self.channels * self.dtype.itemsize
        held = f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"
        return (f"{made} make{'s' if len(self.geometry) == 1 else ''} outputs of {oh}x{ow} pixels ({oh * ow:,} an "
                f"image, {held}), over the limit of {limit:,} pixels")

    @property
    def one_size_why(self) -> str:
        """Why images of other sizes cannot share a batch here (for a message)."""
        if not self.geometry:
            return "without a geometry step each image keeps its size"
        if isinstance(self.geometry[-1], PadWindow):
            return f"{self.geometry[-1]!r} keeps each {'resized ' if len(self.geometry) > 1 else ''}image's shape, padded"
        return f"{type(self.geometry[0]).__name__} alone keeps each image's shape"

    @property
    def one_size_fix(self) -> str:
        return ("give Resize((h, w)), or add CenterCrop or RandomCrop" if self.geometry else
                "add CenterCrop, RandomCrop or Resize") + "; or Compose(..., ragged=True): a list of images of " \
            "their own sizes, as detection models take them"

    @functools.cached_property
    def native_spec(self) -> tuple | None:
        """The plan as _native.draw_batch reads it; None: the Python path draws it."""
        return native_spec(self)

    @property
    def cubic(self) -> bool:
        """The resize is bicubic (its one mode)."""
        return self.resample == FILTERS["bicubic"]

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

    def mirrored_at(self, i: int, p: dict) -> tuple[bool, bool]:
        """(h, v): whether program step i's warps are mirrored along each axis for a sample
        of draws `p`: they come before a flip (flip_at) that the sample drew, and the kernel
        flips first (mirrors.mirror_ops; warped.Mirrored for its masks and boxes)."""
        return i < self.flip_at[0] and bool(p.get("flip")), i < self.flip_at[1] and bool(p.get("vflip"))


def _names(steps: Sequence[Any], width: int = 60) -> str:
    """The steps' class names for a message, shortened to about `width` characters."""
    names = [step_name(t) for t in steps]
    text = ", ".join(names)
    while len(text) > width and len(names) > 3:
        names = names[:2] + names[3:] if names[1] == "..." else names[:1] + ["..."] + names[2:]
        text = ", ".join(names)
    return text


def _plan(transforms: Sequence[Transform], ragged: bool = False, grey: bool = False, inner: bool = False) -> _Plan:
    """The plan of a Compose's steps (`inner`: a first pass's, whose one channel is handed on
    as three, not a user's ragged output)."""
    given = list(transforms)
    names = _names(given)
    for i, t in enumerate(given):
        if not isinstance(t, Transform):
            raise _refuse(f"{qualified(t)} cannot be fused (step {i + 1} of {len(given)}): a Compose takes "
                          "gpudecode.transforms steps (Compose.from_torchvision converts torchvision's)")
    crops = next((t for t in given if t.group == "views"), None)
    if crops is not None:
        raise TransformError(f"{crops!r} makes several images of each, and a Compose makes one: give the steps to "
                             f"the Loader as its transform (a list of the crops' batches), or\n"
                             f"  gpudecode.transforms.Views.from_torchvision(steps) (a tuple of crops a call)")
    box_format, box_sizes = box_settings(given, names)
    steps = [t for t in given if t.group != "targets"]  # (they change no pixel: what a Boxes field hands out)
    every, steps = steps, [t for t in steps if not isinstance(t, RGB)]  # (RGB: where the channels become three)
    # taken out of both lists, in turn: the float conversions (the float image is the kernel's from the start), the
    # greys (the program's first steps: a grey image resampled is the resampled image made grey), Normalize (the
    # output's, as after the geometry), the other per-sample steps and policies (a first pass at each image's size)
    taken = []  # (and first, a ToDtype(uint8) there, before any float conversion: no step on uint8 images)
    for leading in (leading_uint8, leading_floats, leading_greys, leading_normalize, leading_colours):
        taken.append(leading(steps))
        steps, every = [t for t in steps if t not in taken[-1]], [t for t in every if t not in taken[-1]]
    _, floats_first, greys_first, norms_first, colours_first = taken
    steps, every = chain_warps(steps, every)  # (`[RandomRotation(15), RandomAffine(...), RandomCrop(28), ...]`)
    check_colours_first(colours_first, floats_first, given, names)
    lead = leading_flips(steps, names)
    flipped = [] if lead else canvas_flips(steps)  # (`[flip, RandomRotation(10), Resize((224, 224))]`: the image
    lead = lead or flipped  # flipped before its canvas is made)
    steps, every = without_front(steps, every, len(lead))
    alike = _resized_alike(steps)  # (`[RandomCrop((600, 300)), Resize((768, 384)), Resize((768, 384))]`: the second
    steps, every = ([t for t in s if all(t is not u for u in alike)] for s in (steps, every))  # returns its input)
    if len(steps) > 1 and isinstance(steps[0], Resize) and steps[0].filter_modes[0] != "pil-nearest" and \
            not ragged and (isinstance(steps[1], (RandomResizedCrop, GeometryChoice)) or _crop_then_resize(steps[1:3]) or
                            type(steps[1]) is Resize or (not lead and _canvas_then_geometry(steps[1:]) and
                                                         _folds(steps[1:]) is None)):
        # (`[Resize(256), RandomResizedCrop(224)]`, `[Resize(300), RandomCrop(256), Resize(224)]`, `[Resize(300),
        # Resize(224)]`, `[Resize(256), RandomRotation(15), CenterCrop(224)]`: each image resized first, as
        # torchvision's Resize of a uint8 image by torch's ops, transforms.first.resized_images; the crop, the second
        # resize, or the canvas step, drawn in it; a flip first: not before a warp's canvas)
        colours_first = [*colours_first, steps[0]]
        steps, every = steps[1:], [t for t in every if t is not steps[0]]
        check_colours_first(colours_first, floats_first, given, names)
        flipped = [] if lead else canvas_flips(steps)  # (`[Resize(256), flip, RandomRotation(15), CenterCrop(224)]`:
        lead = lead or flipped  # the resized image flipped before its canvas is made)
        steps, every = without_front(steps, every, len(flipped))
    moved = crop_then_resize(steps, every)  # (`[RandomCrop(32, padding=4), flip, Resize((224, 224))]`: a Pad's canvas,
    steps, every, forward = moved if moved is not None else (steps, every, [])  # the crop, the Resize, the flip)
    if moved is not None and lead and type(steps[0]) is Pad:  # (flips first: the crop's window mirrored in the canvas)
        check_even(lead, steps[0], given, name=f"a RandomCrop padded by {list(steps[0].padding)}")
    between = window_flips(steps, every)  # (`[RandomResizedCrop(300), flip, RandomCrop(96)]`: the flip's window)
    if between:  # (the crop moved up beside the first: the flips after it, as the plan takes them)
        n = len(between)
        steps, every = ([s[0], s[n + 1], *s[1:n + 1], *s[n + 2:]] for s in (steps, every))
    warped = [] if lead or between else flips_after_canvas(steps)  # (`[RandomRotation(15), flip, Resize((224,
    if warped:  # 224))]`: the flips of the canvas, the crop's window mirrored in it, as for flips first)
        steps, every = [steps[0], *steps[1 + len(warped):]], [t for t in every if all(t is not f for f in warped)]
        lead = warped
    canvas: Any = steps[0] if steps and (getattr(steps[0], "canvas", False) or (  # (a warp that keeps the size:
        getattr(steps[0], "canvas_first", False) and len(steps) > 1 and steps[1].group == "geometry")) else None  # a
    # canvas where a geometry step follows it, as torchvision warps the whole image before the crop)
    if canvas is not None and getattr(canvas, "after_kernel", False) and not (
            len(steps) > 1 and steps[1].group == "geometry"):  # no geometry after it: it warps the output
        canvas = None
    geometry = _geometry(steps[1:] if canvas else steps, names, ragged)
    if canvas is not None and geometry and _fixed_size(geometry) is None and not ragged and \
            not getattr(canvas, "keeps_size", False):  # (a warp at the image's size: the image's output size)
        raise TransformError(f"{canvas!r} before {type(geometry[0]).__name__} alone cannot be fused: each canvas "
                             f"would give its own output size; give Resize((h, w)) or add a crop [{names}]")
    if type(canvas) is Pad and not geometry:  # (`[Pad(2)]`: the padded window of each image, no canvas made)
        canvas, geometry = None, [canvas.window()]
    if canvas is not None and not geometry:
        raise TransformError(f"{canvas!r} gives each image a canvas of its own size: a geometry step "
                             f"(RandomResizedCrop, Resize((h, w)), CenterCrop, RandomCrop) must follow it [{names}]")
    rest = _AfterGeometry(names, None if ragged else _fixed_size(geometry))
    first, first_channels = _first_pass(colours_first, rest, names, grey)
    grey = first_channels == 1 if first else grey  # (a first pass's one channel: images of one channel from there)
    for t in [*floats_first, *norms_first]:
        rest.add(t)
    check_floats_first(floats_first, canvas, geometry, names)
    check_normalize_first(norms_first, canvas, geometry, names)
    for t in lead:
        rest.add_flip(t)  # type: ignore[arg-type]
    made_of = sum(getattr(g, "_taken", 1) for g in geometry)  # (the steps the geometry is made of: a choice holds
    front = front_of(every, made_of + (canvas is not None))  # those after it) (the canvas and geometry, with RGBs)
    if grey:  # (the images have one channel from the start: what fills them must be one value)
        for t in itertools.takewhile(lambda t: not isinstance(t, RGB), every[:front]):
            rest.one_channel(t, "on images of one channel")
        rest.one_at = -1
        if any(isinstance(t, RGB) for t in every[:front]):
            rest.one_end = -1  # (three channels from the start: the kernel reads one as three already)
    check_greys_first(greys_first, canvas, geometry, names)
    for t in [*greys_first, *every[front:]]:
        rest.add(t)
    _one_draw_a_key(canvas, rest, names)
    folded = canvas.fold_into(geometry[0]) if len(geometry) == 1 and hasattr(canvas, "fold_into") else None
    if folded is not None:  # (a Pad before a RandomCrop: the crop's own padding, no canvas)
        canvas, geometry = None, [folded]
    elif getattr(canvas, "padding_mode", "constant") != "constant":
        raise TransformError(f"{canvas!r} cannot be fused here: a Pad that reads the image's own pixels "
                             f"(padding_mode={canvas.padding_mode!r}) fuses only before a RandomCrop that pads no "
                             f"more (it becomes that crop's padding) [{names}]")
    out_size = _fixed_size(geometry)
    window = geometry[1] if len(geometry) == 2 and type(geometry[0]) is RandomResizedCrop else None
    if type(window) is RandomCrop and not window.pad_if_needed:  # (of a frame of one size: it fits or it never does)
        (fh, fw), (left, top, right, bottom) = geometry[0].size, window.padding  # type: ignore[attr-defined]
        if fh + top + bottom < window.size[0] or fw + left + right < window.size[1]:
            raise TransformError(f"{window!r} after RandomResizedCrop({fh}, {fw}) cannot take any image: its crop is "
                                 f"larger than the {fh}x{fw} output, padded; give pad_if_needed=True, or a smaller "
                                 f"crop [{names}]")
    drawn = next((t for t in first if isinstance(t, _RandomSize)), None)
    if out_size is None and drawn is not None:  # (its size drawn an image, then a size of the image's)
        raise TransformError(f"{type(drawn).__name__} before {type(geometry[0]).__name__ if geometry else 'no crop'} "
                             f"gives differently sized images: add CenterCrop or RandomCrop after it, or give "
                             f"Resize((h, w)) [{names}]")
    if ragged and rest.post is not None:
        raise TransformError(f"{type(rest.post).__name__} with ragged=True cannot be fused: it warps the padded batch, "
                             f"not each image at its size [{names}]")
    plan = _Plan(tuple(geometry), out_size,
                 all(getattr(g, "antialias", True) for g in geometry), rest.flip, rest.normalize,
                 rest.dtype or torch.uint8, tuple(given), rest.erase, rest.vflip, tuple(rest.program),
                 next((FILTERS[g.filter_modes[0]] for g in geometry if len(g.filter_modes) == 1), 0),
                 next((g.crop_fill for g in geometry if g.crop_fill is not None), (0, 0, 0)),
                 canvas, rest.post, rest.post_levels, box_format, box_sizes, bool(ragged),
                 max([0, *(int(getattr(g, "pad_mode", 0)) for g in geometry)]), rest.linear,
                 channels=1 if rest.one_at is not None and rest.one_end is None else 3,
                 one_channel=None if rest.one_at is None else (rest.one_at, len(rest.program) if rest.one_end is None
                                                               else rest.one_end),
                 mirror=(any(t is rest.flip for t in lead) and not flipped, any(t is rest.vflip for t in lead) and not
                         flipped), flip_at=rest.flip_at,
                 canvas_flip=(any(t is rest.flip for t in flipped), any(t is rest.vflip for t in flipped)),
                 window_mirror=(any(t is rest.flip for t in between), any(t is rest.vflip for t in between)),
                 first=first)
    if forward:  # (moved past the Resize: a mask's nearest pick made of the flipped mask, as torchvision's)
        h, v = (m or any(f is t for f in forward) for m, t in zip(plan.mirror, (plan.flip, plan.vflip)))
        plan = replace(plan, mask_mirror=(h, v))
    if isinstance(plan.geometry[:1] and plan.geometry[0], GeometryChoice) and any(plan.mirror):  # (each option's
        raise TransformError(f"{plan.geometry[0]!r} after a flip cannot be fused: a choice of geometries comes first "
                             f"(or after a Resize or a canvas step); put the flips after it [{names}]")  # window mirrored:
        # not taken yet; of a canvas, each whole canvas made and read as the option says)
    if ragged and plan.channels == 1 and not inner:
        raise TransformError(f"an output of one channel with ragged=True cannot be fused: give "
                             f"Grayscale(num_output_channels=3) and take images[:, :1] [{names}]")
    if ragged and plan.linear is not None:
        raise TransformError(f"LinearTransformation with ragged=True cannot be fused: its matrix takes images of one "
                             f"size [{names}]")
    if plan.out_size is not None:
        for t in plan.program:
            for u in t.inner():
                check = getattr(u, "check_size", None)
                if check is not None:
                    check(plan.out_size)
        if plan.post is not None and hasattr(plan.post, "check_size"):  # (a warp of the output: its size is known)
            plan.post.check_size(plan.out_size)
        if plan.linear is not None:
            plan.linear.check_size(plan.out_size, plan.channels)
    return plan


def check_choice(choice: GeometryChoice) -> None:
    """Plans each option of a choice of geometries, and checks them: a geometry alone (no
    flip, colour step, canvas or first pass; no padding by reflection), all of one output
    size and antialias; sets the choice's plans.

    Raises:
        TransformError: the option that cannot stand in the choice, or why they differ."""
    plans = []
    for option in choice.options:
        try:
            plan = _plan(list(option))
        except TransformError as e:  # (named by its steps, which the whole Compose's replace)
            said, own = str(e), f" [{_names(option)}]"
            raise choice.refusal(f"does not fuse alone: {said[:-len(own)] if said.endswith(own) else said}",
                                 option) from None
        if (not plan.geometry and option) or plan.program or plan.flip or plan.vflip or plan.normalize or plan.erase or \
                plan.canvas is not None or plan.first or plan.post or plan.linear is not None or plan.reads_boxes \
                or plan.channels != 3 or plan.dtype != torch.uint8:
            raise choice.refusal("is not a geometry; a choice of geometries takes crops and resizes only "
                                 "(RandomResizedCrop, Resize, CenterCrop, RandomCrop, and a Compose of them that fuses "
                                 "alone); flips and colour steps go after the choice", option)
        if plan.pad_mode >= 2:
            raise choice.refusal("pads by reflection: a choice takes crops padded with a fill or the edge", option)
        plans.append(plan)
    made = list(dict.fromkeys(f"{p.out_size[0]}x{p.out_size[1]}" if p.out_size else "each image's own size"
                              for p in plans))  # (an image's own: where it gives the others' size, checked as drawn)
    fixed = {p.out_size for p in plans if p.out_size is not None}
    if len(fixed) != 1 or not all(p.out_size is not None or may_make(p, *fixed) for p in plans):
        raise choice.refusal(f"its options make outputs of {' and '.join(made)}, and a batch has one size; "
                             f"{choice.size_hint}")
    if len({plan.antialias for plan in plans}) > 1:
        raise choice.refusal("its options' resizes differ in antialias, which the kernel takes for the batch")
    choice.planned(plans)


def _first_pass(colours: list[Transform], rest: "_AfterGeometry", names: str,
                grey: bool) -> tuple[tuple[_Step, ...], int]:
    """The first pass's steps (leading_colours'), checked as a Compose of their own (`grey`:
    on images of one channel), and the channels it writes (1: after a Grayscale(1), or of a
    grey set with no RGB step; transforms.first then hands its one channel on as three):
    their draws' keys held in `rest`'s, so that a later step drawing one of them is refused."""
    if not colours:
        return (), 3
    held = next(((t, u) for t in colours for u in getattr(t, "inner", list)() if isinstance(u, FlipStep)), None)
    if held is not None:  # (the first pass would flip the image, and the kernel's columns again)
        raise TransformError(f"{held[1]!r} inside {step_name(held[0])} before the geometry cannot be fused: put "
                             f"{step_name(held[0])} after the geometry [{names}]")
    try:  # (with a Resize among them, images of their own sizes: RandomShortestSize's too)
        plan = _plan(colours, ragged=any(t.group == "geometry" for t in colours), grey=grey, inner=True)
    except TransformError as e:  # (named in the whole Compose)
        raise TransformError(f"{str(e).rsplit(' [', 1)[0]} [{names}]") from None
    steps = cast(tuple[_Step, ...], tuple(colours))  # (the program's groups' classes are steps; and a Resize)
    for t in steps:
        for u in t.inner():
            for k in u.keys:
                rest.keys.setdefault(k, type(u).__name__)
    return steps, plan.channels


def _one_draw_a_key(canvas: Any, rest: "_AfterGeometry", names: str) -> None:
    """Refuses a canvas step and a later step that draw under one make_params key (an
    expanded RandomRotation and a RandomRotation; ElasticTransform first and last): one
    sample's params hold one draw a key, so the two would share it."""
    later = {**rest.keys, **{k: type(rest.post).__name__ for k in getattr(rest.post, "keys", ())}}
    for k in getattr(canvas, "keys", ()) if canvas is not None else ():
        if k in later:
            raise TransformError(f"{shown(canvas)} first and {later[k]} after the geometry both draw {k!r}: "
                                 f"one of them per Compose [{names}]")


def _resized_alike(steps: Sequence[Transform]) -> list[Transform]:
    """The Resizes among the leading geometry steps whose input already has their size
    (of a fixed size: `[RandomCrop((600, 300)), Resize((768, 384)), Resize((768, 384))]`'s
    second): torchvision returns such an image as it is (v2's resize and PIL's resize do
    nothing there, and a filter at scale 1 is the identity)."""
    out: list[Transform] = []
    run: list[Transform] = []
    for t in itertools.takewhile(lambda u: u.group == "geometry" and not isinstance(u, GeometryChoice), steps):
        size: Any = getattr(t, "size", None)
        want = (size, size) if isinstance(size, int) and t.max_size is None else size  # type: ignore[attr-defined]
        if type(t) is Resize and run and want is not None and _fixed_size(run) == tuple(want):
            out.append(t)
        else:
            run.append(t)
    return out


def _crop_then_resize(geometry: Sequence[Transform]) -> bool:
    """A crop of a fixed size (CenterCrop's, or RandomCrop's without padding), then a Resize."""
    return len(geometry) == 2 and type(geometry[1]) is Resize and (
        isinstance(geometry[0], CenterCrop) or (type(geometry[0]) is RandomCrop and not any(geometry[0].padding)))


def _folds(steps: Sequence[Transform]) -> Transform | None:
    """The RandomCrop a Pad and the RandomCrop after it make (canvas.Pad.fold_into), where
    `steps` begin so; else None."""
    return steps[0].fold_into(steps[1]) if type(steps[0]) is Pad and len(steps) > 1 else None  # type: ignore[attr-defined]


def _canvas_then_geometry(steps: Sequence[Transform]) -> bool:
    """A canvas step (one of its own, or a warp at the image's size) and a geometry step
    after it, flips before or after a warp's canvas taken as the plan takes them
    (canvas_flips, flips_after_canvas): what follows a Resize that runs in the first pass."""
    steps = steps[len(canvas_flips(list(steps))):]
    steps = [steps[0], *steps[1 + len(flips_after_canvas(list(steps))):]] if steps else []
    return len(steps) > 1 and (getattr(steps[0], "canvas", False) or getattr(steps[0], "canvas_first", False)) \
        and steps[1].group == "geometry"


def _fixed_size(geometry: Sequence[Transform]) -> tuple[int, int] | None:
    """The one output size of the geometry; None where each image has its own (no geometry,
    a Resize of the shorter side, a RandomIoUCrop alone: under ragged=True)."""
    if not geometry:
        return None
    last: Any = geometry[-1]
    if isinstance(last, PadWindow):  # (padded: the size before it, where there is one)
        before = _fixed_size(geometry[:-1]) if len(geometry) > 1 else None
        return None if before is None else last.output_size(*before)
    if _crop_then_resize(geometry):  # (the crop's, resized)
        out = last.output_size(*geometry[0].size)  # type: ignore[attr-defined]
        return int(out[0]), int(out[1])
    if isinstance(last, (_RandomSize, ResizeKeepRatio, RandomIoUCrop)) or not isinstance(last.size, tuple):
        return None
    return int(last.size[0]), int(last.size[1])


def _geometry(steps: list[Transform], names: str, ragged: bool = False) -> list[Transform]:
    """The leading geometry steps, checked to be one of the supported combinations (with
    `ragged`, also those that leave each image a size of its own: a Resize of the shorter
    side, RandomShortestSize, RandomResize, ScaleJitter, RandomIoUCrop alone)."""
    geometry: list[Transform] = []
    for i, t in enumerate(steps):
        if t.group != "geometry":
            folded = _folds(steps[i:]) if [type(g) for g in geometry] == [Resize] else None
            if folded is not None:  # (`[Resize((256, 128)), Pad(10), RandomCrop((256, 128))]`: the crop's padding)
                vars(folded)["_taken"] = 2  # (the Pad and the crop; private: out of its repr, a fingerprint)
                geometry.append(folded)
                geometry.extend(itertools.takewhile(lambda u: u.group == "geometry", steps[i + 2:]))
                break
            if type(t) is Pad and len(geometry) == 1 and (type(geometry[0]) is RandomResizedCrop or
                                                         isinstance(geometry[0], Resize)):
                geometry.append(t.window())  # (`[Resize((28, 28)), Pad(2)]`: a window of the resized image)
            break
        geometry.append(t)
    if geometry and isinstance(geometry[0], GeometryChoice):  # (the crops after it in each option; its options checked)
        geometry = [geometry[0].then(geometry[1:]) if len(geometry) > 1 else geometry[0]]
        try:
            check_choice(geometry[0])  # type: ignore[arg-type]
        except TransformError as e:
            raise TransformError(f"{e} [{names}]") from None
    geometry = nested(geometry)  # (`[CenterCrop(256), RandomCrop(224)]`: one crop, the offsets added)
    kinds = [Resize if isinstance(g, Resize) else RandomCrop if isinstance(g, (RandomCrop, CropOfCrop)) else
             CenterCrop if isinstance(g, CenterCrop) else GeometryChoice if isinstance(g, GeometryChoice) else type(g)
             for g in geometry]
    if ragged and kinds in ([Resize], [RandomIoUCrop]):
        return geometry
    if kinds and kinds[0] is RandomIoUCrop and not (kinds == [RandomIoUCrop, Resize] and type(geometry[1]) is Resize
                                                    and isinstance(geometry[1].size, tuple)):  # type: ignore[attr-defined]
        raise TransformError(f"RandomIoUCrop gives differently sized images: a Resize((h, w)) follows it, so that a "
                             f"batch has one size (SSD trains at 300x300), or Compose(..., ragged=True) keeps each "
                             f"image's own [{names}]")
    if kinds in ([CenterCrop, Resize], [RandomCrop, Resize]) and not _crop_then_resize(geometry):
        crop: Any = geometry[0]
        raise TransformError(f"{type(geometry[1]).__name__} after {type(crop).__name__} cannot be fused: a Resize of "
                             f"the crop only" + (", and a crop padded with a fill alone, and by no pad_if_needed (padding "
                                                  "with the edge or a reflection, or by the image's size)"
                                                  if isinstance(crop, RandomCrop) else "") + f" [{names}]")
    if kinds not in ([], [RandomResizedCrop], [GeometryChoice], [Resize], [CenterCrop], [RandomCrop], [Resize, CenterCrop],
                     [Resize, RandomCrop], [RandomIoUCrop, Resize], [CenterCrop, Resize], [RandomCrop, Resize],
                     [RandomResizedCrop, CenterCrop], [RandomResizedCrop, RandomCrop], [PadWindow],
                     [Resize, PadWindow], [RandomResizedCrop, PadWindow]):
        raise TransformError(f"unsupported geometry {[k.__name__ for k in kinds]} in [{names}]: use one crop or "
                             f"resize, or Resize + a crop, a crop + Resize, RandomResizedCrop + a crop, a crop of a "
                             f"crop (unpadded, inside it), Pad after Resize or RandomResizedCrop, RandomIoUCrop + "
                             f"Resize((h, w)), a RandomChoice of those of one size, or none (`gpudecode ops`)")
    if kinds in ([Resize], [Resize, PadWindow]) and isinstance(geometry[0], _RandomSize) and not ragged:
        raise TransformError(f"{type(geometry[0]).__name__} alone gives differently sized images: add CenterCrop or "
                             f"RandomCrop after it (torchvision's references: RandomResize or RandomShortestSize, "
                             f"then RandomCrop), or Compose(..., ragged=True) for images of their own sizes "
                             f"[{names}]")
    return geometry
