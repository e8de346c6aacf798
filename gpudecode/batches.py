"""What passes between a pipeline's stages and to the trainer: the configuration a
Pipeline is built from (`PipelineConfig`), a batch between the two stages (`Prepared`), a
finished one on its way (`Ready`) and the batch the trainer gets (`Batch`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence, overload

import numpy as np
import torch

from .decode import DecodedBatch
from .io.reader import Sample
from .stats import BatchTiming
from .transforms import Compose
from .transforms.draws import Draws

__all__ = ["Batch", "Prepared", "SizeRows", "Ready", "PipelineConfig", "MID_QUEUE", "IN_FLIGHT"]

# The middle queue between the two stages holds MID_QUEUE prepared batches; decoded
# batches alive at once are then one in the kernel, MID_QUEUE queued and one being decoded.
# Every ring a decoded batch lives in (decoders' rings, the upload ring) is sized from this.
MID_QUEUE = 1
IN_FLIGHT = MID_QUEUE + 2


class Batch(tuple):
    """(images, labels), as a DataLoader batch unpacks, with `.images`, `.labels` and
    `.keys` (the samples' keys, in order). With several views (a Loader given a list of
    transforms) `images` is a list: one batch per view, in the transforms' order. A Loader
    given `fields` hands out (images, labels, *fields), or (images, *fields) under
    labels=False: a Batch class of those names (`Batch.named`), `.fields` maps each name to
    its values."""

    keys: list[str]
    # namedtuple's protocol: code that rebuilds collections field by field (Lightning's
    # transfer to the device, torch's pin_memory and collate) makes a Batch again with
    # type(batch)(*values); the keys are then unknown (an empty list), the names kept
    _fields: tuple[str, ...] = ("images", "labels")

    def __new__(cls, *values: Any, keys: list[str] | None = None) -> "Batch":
        if len(values) < len(cls._fields) and cls._fields == ("images", "labels"):
            values = values + (None,) * (2 - len(values))  # (Batch(images): no labels)
        if len(values) != len(cls._fields):
            raise TypeError(f"a Batch of {cls._fields} takes {len(cls._fields)} values, not {len(values)}")
        obj = super().__new__(cls, values)
        obj.keys = [] if keys is None else keys
        return obj

    @staticmethod
    def named(names: tuple[str, ...]) -> type["Batch"]:
        """The Batch class whose elements are `names` (the first is "images")."""
        names = tuple(names)
        if names == Batch._fields:
            return Batch
        made = _NAMED.get(names)
        if made is None:
            made = _NAMED[names] = type("Batch", (Batch,), {"_fields": names, "__slots__": ()})
        return made

    def _asdict(self) -> dict:
        return dict(zip(self._fields, self))

    def __reduce__(self) -> tuple:  # (pickle: a class of names is made again by its names)
        return (_remade, (self._fields, tuple(self), self.keys))

    @property
    def images(self) -> Any:
        """The images [N, 3, h, w] (in the transform's layout), or a list of them per view."""
        return self[0]

    @property
    def labels(self) -> torch.Tensor | None:
        """The labels [N] (int64), [N, num_classes] after MixUp/CutMix, None without labels."""
        return self[1] if self._fields[1] == "labels" else None

    @property
    def fields(self) -> dict[str, Any]:
        """Each field (`Loader(..., fields=)`) by its name, in order."""
        skip = 2 if self._fields[1:2] == ("labels",) else 1
        return dict(zip(self._fields[skip:], self[skip:]))

    def with_(self, images: Any, labels: Any) -> "Batch":
        """This batch with its images and labels replaced (a batch transform's), its
        fields and keys kept."""
        rest = tuple(self[2:]) if self._fields[1:2] == ("labels",) else tuple(self[1:])
        head = (images, labels) if self._fields[1:2] == ("labels",) else (images,)
        return type(self)(*head, *rest, keys=self.keys)


_NAMED: dict[tuple[str, ...], type[Batch]] = {}


def _remade(names: tuple[str, ...], values: tuple, keys: list[str]) -> Batch:
    return Batch.named(names)(*values, keys=keys)


class SizeRows(Sequence[tuple[int, int]]):
    """A batch's image sizes, (height, width) a row of an int64 [N, 2] array, made into
    tuples only where one is read: a resident batch's stages read the array (the draws,
    the kernel's geometry), so a list of tuples made per sample would be read by no one."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, k: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return [(h, w) for h, w in self.array[k].tolist()]
        h, w = self.array[k].tolist()
        return (h, w)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter([(h, w) for h, w in self.array.tolist()])


@dataclass
class Prepared:
    """A batch between the two stages: decoded pixels and everything the kernel needs."""

    samples: list[Sample]
    params: list[Draws]  # [view][image] (transforms.Compose.draw_batch's Draws)
    sizes: Sequence[tuple[int, int]]
    labels: list[int] | np.ndarray  # (an int64 array from a resident store)
    decoded: DecodedBatch | None
    timing: BatchTiming
    position: int = 0
    taken: int = 0  # samples taken from the reader for this batch
    seq: int = 0    # batches decoded by this Loader before this one (the rings' turn)
    ready: Any = None  # CUDA event: decoding (and the upload) done, on the decode stream
    draw: tuple = ()   # (seed, epoch, rank, first sample's position): the batch transform's draws
    windows: Any = None  # int64 [N, 4]: the box decoded of each image
    view_boxes: list = field(default_factory=list)  # [view]: int64 [N, 4], the box each view's kernel reads
    keys: list[str] | None = None  # the samples' keys, where stage A has them as a list already (a resident store)
    fields: list = field(default_factory=list)  # [field][sample]: each field's value (fields.read_fields)
    field_errors: dict = field(default_factory=dict)  # {sample's place: its FieldError}


@dataclass
class Ready:
    """A finished batch on its way to the trainer: the output slot it occupies and the
    CUDA event its pixels are ready at (None on the CPU)."""

    batch: "Batch"
    timing: BatchTiming
    position: int
    slot: int
    ready: Any = None
    draw: tuple = ()  # the batch transform's draws (seed, epoch, rank, first sample's position)



@dataclass(frozen=True)
class PipelineConfig:
    """Everything a Pipeline is built from, fixed once from the user's arguments (the
    Loader checks them and builds this); `Loader.dataset` builds its pipeline from the same
    one with `dataclasses.replace` (one image a batch, on the CPU), so the two cannot
    disagree on the fields read, the label checks or a mixture's label offsets.

    Fields:
        transform: the Compose the kernel runs, or a tuple of them: several views of each
            image (each finished batch then holds one output per view).
        batch_size: images per batch (the output slots' size).
        device: "cpu" or "cuda[:N]" (as check_device gives it).
        decoder: a decoder name ("auto", "cpu", ...), engine names for a split decoder
            (a tuple, or {name: share} to pin the shares: decode.make_decoder), or a
            decoder instance (which Pipeline.close() leaves open: it is the caller's).
        image_exts, label_exts, labels: the fields read, and whether there are labels.
        num_classes, allow_negative_labels: the label checks (see labels.parse_label).
        label_offsets: added to the labels of these shards (a mixture's sources with a
            label_offset: the reader's `label_offsets`).
        ring: output slots (a Loader's prefetch + 3).
        depth: prepared batches queued between the two stages (the Loader's middle queue);
            decoded batches alive at once are then `in_flight` = depth + 2 (one in the
            kernel, `depth` queued, one being decoded), and every ring a decoded batch lives
            in (the decoder's, the upload ring) is made that deep: a deeper queue can
            never overwrite a batch still queued.
        num_threads, max_pixels, fast_decode, pin_memory: as the Loader's.
        batch_transform: a mixing.BatchTransform (MixUp, CutMix, RandomChoice), or a
            callable (images, labels) -> (images, labels), run on each finished batch.
        reuse_held: write an output slot again even when the caller still holds the batch
            it last held (the Loader's reuse_buffers); by default such a slot gets new memory.
        each_size: the images keep their own sizes, not one a batch (a transform without
            geometry); for the sink that sizes each image itself (finish_images: precache's).
        fields: the samples' other members handed out beside images and labels (fields.py's
            FieldSpecs, checked by fields.field_specs).
    """

    transform: Any
    batch_size: int
    device: str
    decoder: Any
    image_exts: tuple[str, ...]
    label_exts: tuple[str, ...]
    labels: bool = True
    num_classes: int | None = None
    allow_negative_labels: bool = False
    label_offsets: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    ring: int = 1
    depth: int = MID_QUEUE
    num_threads: int = 1
    max_pixels: int = 0
    fast_decode: bool = False
    pin_memory: bool = False
    batch_transform: Any = None
    reuse_held: bool = False
    each_size: bool = False
    fields: tuple = ()

    @property
    def batch_names(self) -> tuple[str, ...]:
        """The names of a finished batch's elements: images, labels (where there are
        labels or no fields: a Batch is (images, None) without either), then each field."""
        head = ("images", "labels") if self.labels or not self.fields else ("images",)
        return head + tuple(f.exts[0] for f in self.fields)

    @property
    def masks(self) -> bool:
        """Whether a field is a Mask (moved with its image: fields.follow_masks)."""
        return any(getattr(f, "mask", None) is not None for f in self.fields)

    @property
    def follows(self) -> bool:
        """Whether a field follows its image: a Mask or Boxes (fields.follow_targets)."""
        return self.masks or any(getattr(f, "boxes", None) is not None for f in self.fields)

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, not {self.depth}")
        if self.ring < 1:
            raise ValueError(f"ring must be >= 1, not {self.ring}")
        # frozen all the way down: what a Loader saw at construction is what every pipeline reads
        if isinstance(self.transform, list):
            object.__setattr__(self, "transform", tuple(self.transform))
        if isinstance(self.decoder, list):
            object.__setattr__(self, "decoder", tuple(self.decoder))
        elif isinstance(self.decoder, dict):
            object.__setattr__(self, "decoder", dict(self.decoder))  # (a copy: the caller's may change)
        object.__setattr__(self, "image_exts", tuple(self.image_exts))
        object.__setattr__(self, "label_exts", tuple(self.label_exts))
        object.__setattr__(self, "label_offsets", MappingProxyType(dict(self.label_offsets)))

    # pickled with the Loader's dataset (torch's DataLoader workers under spawn): a
    # MappingProxyType does not pickle, its dict does
    def __getstate__(self) -> dict:
        return {**self.__dict__, "label_offsets": dict(self.label_offsets)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "label_offsets", MappingProxyType(dict(self.label_offsets)))

    @property
    def views(self) -> list[Compose]:
        return list(self.transform) if isinstance(self.transform, tuple) else [self.transform]

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)
