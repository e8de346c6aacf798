"""The base of every fused step: Transform, the program step (_Step) and the op with a
coin (_PixelOp), and the refusal message that names what can be fused. Every module of
the package builds on these."""
from __future__ import annotations

import random
import threading
from typing import Any

from ..errors import TransformError
from ..kernels.ops import OPS_ARGS


# Where a step may stand in a Compose, in order, and what `gpudecode ops` says of each
# place beside the names of the classes that declare it (ops_table.listing).
GROUPS = {
    "canvas": ("canvas (first, before the geometry)", "{tv}, RandomRotation (expand=True, or any where a geometry "
               "step follows it: the whole image rotated, then cropped; an exact quarter turn expanded, "
               "RandomRotation((90, 90), expand=True), also after a geometry that makes squares, as the turn it is "
               "there, and an exact half turn anywhere), RandomAffine, RandomPerspective (where a geometry step follows them; several in a row, each "
               "made of the one before, as torchvision warps a warped image: [RandomRotation(15), RandomAffine(0, "
               "translate=(0.1, 0.1)), RandomCrop(28, padding=2)]): each image made anew "
               "from the decoded one (a canvas), which a geometry step must follow (Pad before a RandomCrop "
               "folds into the crop's padding, and Pad with no geometry after it, or after Resize or "
               "RandomResizedCrop, is a window of the image padded: no canvas; its edge, reflect and symmetric "
               "modes only so); "
               "ElasticTransform also "
               "last, after the geometry and the per-sample ops (then only Normalize, ToDtype, RandomErasing), "
               "on the kernel's output"),
    "geometry": ("geometry (one, first or after the canvas)", "{tv}, FixedSizeCrop (the detection reference's), Resize + CenterCrop, CenterCrop or RandomCrop + Resize (the "
                 "crop inside the image, or padded by a fill: RandomCrop(32, padding=4) + Resize(224), a Pad's canvas), RandomResizedCrop + CenterCrop or RandomCrop (a window of the resized crop, "
                 "padded where it reaches past it), Pad alone, or after Resize or RandomResizedCrop, Resize + RandomResizedCrop or Resize (each image resized first, as "
                 "torchvision resizes a uint8 image), Resize + RandomCrop or FixedSizeCrop (RandomResize, "
                 "RandomShortestSize and ScaleJitter only so), RandomIoUCrop + Resize((h, w)) (its crop drawn from a "
                 "Boxes field's boxes), Resize(int) alone (a batch of one output size), a crop of a crop (CenterCrop "
                 "or RandomCrop, then an unpadded one no larger: one crop, the offsets added; a Resize before them), "
                 "RandomChoice (or RandomApply) over those that give "
                 "one size (each image its option's; a Resize or a canvas step before it, or crops after it that end each option: "
                 "RandomChoice([Resize(256), Resize(320)]) + RandomCrop(224)), or none (a Resize to the size its input "
                 "already has does nothing, as torchvision's); with Compose(ragged=True), "
                 "images of their own sizes: also Resize(int), RandomResize, RandomShortestSize, ScaleJitter or RandomIoUCrop alone (bilinear or bicubic, "
                 "antialiased, or nearest, nearest-exact, pil-nearest; a RandomCrop pads with a fill, the edge, or a "
                 "reflection: every padding_mode); timm's {timm}"),
    "flips": ("flips (any order; after the geometry, or first, before it)", "{tv} (first: flipped, then cropped, as "
              "torchvision's; not before a nearest resize; between an even Pad and a RandomCrop: before the Pad; between a Resize and the crop: before the Resize (a resize of a mirrored image is the mirrored resize); between a crop and its Resize: after the Resize; before an evenly padded Pad's canvas: the crop's window mirrored in it; before a warp's canvas ([flip, RandomRotation(10), Resize((224, 224))]): each flipped image flipped before its canvas is made; between a warp's canvas and the geometry: the crop's window mirrored in the canvas; between a RandomResizedCrop and a crop of its output: that crop's window mirrored; after torchvision's warps and policies: each warp mirrored "
              "where the sample is flipped, the same image)"),
    "per-sample": ("per-sample ops (any order; also before the geometry)", "{tv} (written before the geometry, they "
                   "run first, on each whole image at its size, as torchvision runs them, and so do the policies and "
                   "containers, on one channel after a Grayscale(1) or of a grey set's images; the warps there are "
                   "canvas steps)"),
    "policies": ("policies", "{tv}; timm's {timm} (create_transform's rand-m9-mstd0.5-inc1, v0, augmix-m5-w3 "
                 "and the like)"),
    "containers": ("containers", "{tv} over the per-sample ops (a Compose among their items: one item, its steps "
                   "in order, as torchvision runs it; a Compose inside a Compose: its steps in its place); "
                   "RandomChoice's options may draw alike (one of them draws an image: RandomChoice([RandomRotation("
                   "(a, a)) for a in (0, 90, 180, 270)])); several RandomChoices in a Compose (the second draws "
                   "under \"choice2\", the third \"choice3\"); RandomChoice over geometries: the geometry (above); RandomApply over crops and resizes: the "
                   "geometry, its steps or none ([RandomApply([RandomCrop(48)], p=0.4), Resize((64, 64))]: the steps "
                   "after it end both); "
                   "RandomOrder over flips alone: the flips, which commute; a flip among their items (RandomChoice(["
                   "RandomHorizontalFlip(), RandomRotation(30), ColorJitter(...)])): drawn where the container runs "
                   "it, the kernel's flip, the warps before the container mirrored (not before the geometry; in "
                   "RandomOrder not with a warp)"),
    "then": ("then", "{tv} (a float ToDtype without scale: floats of 0 to 255, a Normalize after it in levels; "
             "after Normalize, flips and nearest warps filling 0, as MNIST scripts write them, [ToTensor(), "
             "Normalize(...), RandomRotation(10)]: the image warped before it, filled with its mean); "
             "then {last} (last, in this order; RandomErasing also just before the Normalize, as scripts write it: "
             "the values it writes normalized; LinearTransformation on a float output of one size); "
             "timm's {timm}, {timm_last}"),
    "last": None,  # (listed in "then"'s line)
    "channels": ("channels (anywhere)", "{tv}: an image of one channel (a grey set's, or after Grayscale(1)) made "
                 "three equal ones, an RGB one as it is; so is a function or Lambda that returns img.convert(\"RGB\") "
                 "and nothing else (CLIP's preprocess)"),
    "views": ("several crops of each image (one such step)", "{tv}: each crop a view of its own (a Resize before it; "
              "Normalize, ToDtype, Grayscale after it): the Loader's `images` a list of the crops' batches, as "
              "DataLoader collates torchvision's tuple; gpudecode.transforms.Views calls them"),
    "targets": ("detection boxes (anywhere; SanitizeBoundingBoxes after what moves them)", "{tv}: what a "
                "gpudecode.Boxes field hands out (the format; the boxes dropped after the last step, with their "
                "labels); the boxes are clamped at every step already"),
}

# The groups whose steps make up each sample's kernel program (plan.py's `_AfterGeometry`).
PROGRAM_GROUPS = ("per-sample", "policies", "containers")

# The torchvision and timm transforms that convert, by "torchvision.<Name>" or
# "timm.<Name>": the class of ours that declared it (`class X(Transform,
# converts="torchvision.X")`), whose `convert(t, floats)` makes one from theirs. Filled as
# the classes are defined; convert.py reads it.
CONVERTS: dict[str, type["Transform"]] = {}


_SAVED = threading.local()


def fingerprint_text(obj: Any) -> str:
    """`repr(obj)` in the forms saved states were fingerprinted with (Loader.state_dict's
    transform fingerprint): a repr made clearer since keeps its earlier form here
    (`in_fingerprint`), so a state saved before it still resumes."""
    _SAVED.depth = getattr(_SAVED, "depth", 0) + 1
    try:
        return repr(obj)
    finally:
        _SAVED.depth -= 1


def in_fingerprint() -> bool:
    """Whether a repr is being made for fingerprint_text (then: the earlier form)."""
    return getattr(_SAVED, "depth", 0) > 0


class Transform:
    """Base class: a step of a Compose. `draw` returns this step's parameters for one
    image of size (height, width), from `rng` (a random.Random).

    A class that stands for torchvision's or timm's transforms says so where it is
    defined, `converts="torchvision.Name"` (or a tuple of names), and defines
    `convert(cls, t, floats)`: ours from their object `t`, `floats` telling whether a
    float conversion came before it (fills and thresholds are then on the [0, 1] scale)."""

    makes_floats = False  # the steps after it see float images (ToDtype to a float type)
    group = ""  # where it may stand in a Compose: one of GROUPS (what `gpudecode ops` lists it under)
    filter_modes: tuple[str, ...] = ()  # a geometry step's resize filters (several: one drawn an image)
    crop_fill: tuple[int, int, int] | None = None  # a crop's padding colour (levels), where it pads

    def __init_subclass__(cls, converts: str | tuple[str, ...] = (), **kw: Any) -> None:
        super().__init_subclass__(**kw)
        names = (converts,) if isinstance(converts, str) else tuple(converts)
        if names and "convert" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} declares converts={converts!r} but defines no convert(cls, t, floats)")
        if names and cls.group not in GROUPS:
            raise TypeError(f"{cls.__name__} declares converts={converts!r} but its group {cls.group!r} is not one "
                            f"of {list(GROUPS)}")
        for name in names:
            if not name.startswith(("torchvision.", "timm.")) or name in CONVERTS:
                raise TypeError(f"{cls.__name__}: {name!r} is not torchvision.<Name> or timm.<Name>, or is "
                                f"converted already (by {getattr(CONVERTS.get(name), '__name__', None)})")
        CONVERTS.update(dict.fromkeys(names, cls))  # (all checked first: a refused class registers nothing)

    @classmethod
    def convert(cls, t: Any, floats: bool) -> "Transform":
        raise NotImplementedError

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {}

    def on_pil_images(self) -> "Transform":
        """This step, converted from one that ran on PIL images (before the pipeline's
        ToTensor), with PIL's arithmetic where it picks other pixels than the tensor form's
        (the resizes' NEAREST: convert.py). The default: the step as it is."""
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def step_name(t: Any) -> str:
    """A step's name as torchvision's user wrote it: its class's, or the one it stands for
    (`shown_as`: RandomChoice, whichever of our forms it took)."""
    return getattr(type(t), "shown_as", None) or type(t).__name__


class _Step(Transform):
    """A step of each sample's kernel program (after the geometry and the flips): `draw`
    gives its parameters under its `keys` in make_params (a key left out means the step
    did not apply; a wrapper's keys are its own, its steps have theirs); `emit` appends
    the kernel ops they call for, (op id, args), given the image's size at that point
    (the output's). `moves` marks a step that moves pixels (a flip may not follow it)."""

    group = "per-sample"

    keys: tuple[str, ...] = ()
    moves = False
    follows = False  # (a step that moves pixels: whether boxes and masks follow it, by `drawn`)

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        raise NotImplementedError

    def drawn(self, p: dict, size: tuple[int, int]) -> list:
        """The warps these params draw for an image of `size`, in order (transforms.warped.
        Drawn: how its boxes and mask follow them); none for a step that moves no pixel."""
        return []

    def inner(self) -> list["_Step"]:
        """The steps it is made of (wrappers), itself included."""
        return [self]


class _Wrapper(_Step):
    """A step over other steps (RandomApply, RandomChoice, RandomOrder): it moves pixels
    if one of them does, and is made of them."""

    group = "containers"
    in_order = False  # its steps run one after another, all of them (RandomApply's, a Compose among items)

    transforms: list[_Step]

    @property
    def moves(self) -> bool:  # type: ignore[override]
        return any(t.moves for t in self.transforms)

    @property
    def follows(self) -> bool:  # type: ignore[override]
        return all(t.follows or not t.moves for t in self.transforms)

    def inner(self) -> list[_Step]:
        return [self, *(u for t in self.transforms for u in t.inner())]


class FlipStep(_Step):
    """A flip inside a container (`RandomChoice([RandomHorizontalFlip(), RandomRotation(30),
    ColorJitter(...)])`, `RandomApply([RandomVerticalFlip(p=1.0)])`): a step of the program
    that draws the flip's coin under its key ("flip", "vflip") where the container runs it,
    and emits no op: the kernel flips the output of a sample that drew it, as it does for
    the flips after the geometry, the warps before the container mirrored
    (after._AfterGeometry._step sets the plan's flip_at to the container's place)."""

    def __init__(self, flip: Any) -> None:
        self.flip = flip
        self.keys = (flip.key,)

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return self.flip.draw(rng, size)

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        pass  # (the kernel's flip columns say it)

    def __repr__(self) -> str:
        return repr(self.flip)


class _PixelOp(_Step):
    """A kernel op applied with probability p (its coin: applied when a uniform draw is
    under p, as torchvision's _RandomApplyTransform); `make_params` says whether it
    applies under `key`."""

    op = -1
    key = ""

    def __init__(self, p: float) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError("probability should be between 0 and 1")
        self.p = float(p)

    @property
    def keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.key,)

    @property
    def factor(self) -> float:
        return 0.0

    def draw(self, rng: random.Random, size: tuple[int, int]) -> dict:
        return {self.key: rng.random() < self.p}

    def emit(self, p: dict, size: tuple[int, int], prog: list) -> None:
        if p.get(self.key):  # (its one factor where the op table says it reads one)
            prog.append((self.op, (self.factor,) if OPS_ARGS[self.op] else ()))


# What fuses, as `gpudecode ops` prints it (the README's "What fuses" section says the same):
# generated from the classes' declarations (`make ops-table` rewrites it;
# tests/test_registry.py fails when it is stale), kept as a module of its own so that the
# CLI answers without importing torch.
from .._ops_table import OPS  # noqa: E402


PROGRAM_OPS = f"{OPS[2][1]}, {OPS[3][1]}"
SUPPORTED = "; ".join(f"{k}: {v}" for k, v in OPS)

# The ways out, as short as a terminal line: what the Loader yields, and that an op run on a
# batch draws once for the whole batch.
WAY_OUT = ("ways out: run it yourself on each batch (`for images, labels in loader`: a torchvision op\n"
           "  on a batch draws one set of parameters for all its images), or keep DataLoader for it\n"
           "what fuses, and in which order: `gpudecode ops`")


def _refuse(what: str) -> TransformError:
    """A refusal of an op that has no fused form: what, why (in `what`), the ways out."""
    return TransformError(f"{what}\n{WAY_OUT}")
