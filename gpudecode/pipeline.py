"""The per-batch pipeline of a Loader: one owner of the work between samples read and a
finished batch, and of the buffers that work cycles through.

    prepare(chunk):   probe (header sizes, labels) -> draw the params (seeded) ->
                      decode requests -> decode (only the windows the crops need)
    finish(prepared): the error policy -> the fused kernel into an output slot -> Batch

The Loader keeps the configuration, the epoch and resume state, and the threads that
drive the two stages (loader.py's module doc has the thread and CUDA stream design);
`Pipeline` holds the decoder, the output slots (`ring` of them, used in turn and kept
across epochs), the CUDA side (`_Streams`: streams, upload ring, events), what the error
policy skipped, and the last good batch that `even` padding repeats.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import operator
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ._builtins import import_numba
from .transforms.draws import Draws
from ._probe import Probed, probe_columns
from .decode import DecodedBatch, choose, make_decoder
from .errors import DecodeError, ErrorPolicy, LabelError, Skipped
from .io.reader import Sample
from .kernels import fused
from .kernels.workspace import Workspace
from .labels import parse_label
from .mixing import BatchTransform, batch_rng, seeded_call
from .stats import BatchTiming
from .transforms import CenterCrop, Compose, Normalize, Resize

__all__ = ["Pipeline", "PipelineConfig", "Batch", "Ready", "MID_QUEUE", "IN_FLIGHT"]

# The middle queue between the two stages holds MID_QUEUE prepared batches; decoded
# batches alive at once are then one in the kernel, MID_QUEUE queued and one being decoded.
# Every ring a decoded batch lives in (decoders' rings, the upload ring) is sized from this.
MID_QUEUE = 1
IN_FLIGHT = MID_QUEUE + 2
_KEY = operator.attrgetter("key")


class Batch(tuple):
    """(images, labels), as a DataLoader batch unpacks, with `.images`, `.labels` and
    `.keys` (the samples' keys, in order). With several views (a Loader given a list of
    transforms) `images` is a list: one batch per view, in the transforms' order."""

    keys: list[str]
    # namedtuple's protocol: code that rebuilds collections field by field (Lightning's
    # transfer to the device, torch's pin_memory and collate) makes a Batch again with
    # Batch(images, labels); the keys are then unknown (an empty list)
    _fields = ("images", "labels")

    def __new__(cls, images: Any, labels: torch.Tensor | None = None, keys: list[str] | None = None) -> "Batch":
        obj = super().__new__(cls, (images, labels))
        obj.keys = [] if keys is None else keys
        return obj

    def _asdict(self) -> dict:
        return {"images": self[0], "labels": self[1]}

    def __getnewargs__(self) -> tuple:  # (pickle: a tuple subclass is remade from these)
        return (self[0], self[1], self.keys)

    @property
    def images(self) -> Any:
        """The images [N, 3, h, w] (in the transform's layout), or a list of them per view."""
        return self[0]

    @property
    def labels(self) -> torch.Tensor | None:
        return self[1]


@dataclass
class _Prepared:
    """A batch between the two stages: decoded pixels and everything the kernel needs."""

    samples: list[Sample]
    params: list[Draws]  # [view][image] (transforms.Compose.draw_batch's Draws)
    sizes: list[tuple[int, int]]
    labels: list[int]
    decoded: DecodedBatch | None
    timing: BatchTiming
    position: int = 0
    taken: int = 0  # samples taken from the reader for this batch
    seq: int = 0    # batches decoded by this Loader before this one (the rings' turn)
    ready: Any = None  # CUDA event: decoding (and the upload) done, on the decode stream
    draw: tuple = ()   # (seed, epoch, rank, first sample's position): the batch transform's draws
    windows: Any = None  # int64 [N, 4]: the box decoded of each image
    view_boxes: list = field(default_factory=list)  # [view]: int64 [N, 4], the box each view's kernel reads


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

    @property
    def views(self) -> list[Compose]:
        return list(self.transform) if isinstance(self.transform, tuple) else [self.transform]

    def replace(self, **changes: Any) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)


class Pipeline:
    """Prepares read batches and finishes them into output slots (see the module doc),
    built from a PipelineConfig; `policy` says what happens to images and labels that fail
    (errors.ErrorPolicy: a Loader shares its one with its reader, so one list holds all
    that was skipped)."""

    def __init__(self, config: PipelineConfig, *, policy: ErrorPolicy) -> None:
        import_numba()  # (now: a script may have replaced builtins.print by the first batch, _builtins.py)
        self.config = config
        # several views of each image (a tuple of Composes): each image is decoded once, over
        # the union of the views' windows, and each view's kernel reads its own part of it
        self.multi = isinstance(config.transform, tuple)
        self.views: list[Compose] = config.views
        if not self.views:
            raise ValueError("transform: a Compose, or a non-empty list of them (one per view)")
        self.transform = self.views[0]
        self.policy = policy
        ring = config.ring
        self._decoder: Any = None  # made on first use: no CUDA context before workers fork
        self._size: tuple[int, int] | None = None  # the images' one size, for a transform without geometry
        self.outputs: list[list[tuple[torch.Tensor, torch.Tensor]] | None] = [None] * ring  # [slot][view]
        self._own_refs: list[list[int] | None] = [None] * ring  # [slot][view]: the slot's own tensors on its memory
        self.fresh_slots = 0  # slots given new memory because the caller kept their last batch
        self.slot = 0   # the output slot the next batch goes to (kept across epochs)
        self.seq = 0    # batches decoded so far (the rings' turn; kept across epochs)
        self.gpu: _Streams | None = None
        # what the kernel works in, one per view, made at the first batch and reused (kernels.workspace:
        # its launches are one at a time, on this pipeline's augment thread and stream)
        self.workspaces = [Workspace() for _ in self.views]
        self._images: HostImages | None = None  # finish_images' sink, made on first use
        # the last batch handed on, as handed: (images, n, keys, labels), for `even` to repeat
        self._last_good: tuple[Any, int, list[str], torch.Tensor | None] | None = None

    @property
    def in_flight(self) -> int:
        """Decoded batches alive at once: one in the kernel, `depth` queued, one being decoded."""
        return self.config.depth + 2

    @property
    def owns_decoder(self) -> bool:
        """The decoder is made here (from a name, names or shares), not handed in."""
        return isinstance(self.config.decoder, (str, tuple, dict))

    @property
    def decoder(self) -> Any:
        """The decoder; None before ensure_decoder()."""
        return self._decoder

    def decoder_name(self) -> str:
        """The decoder's name, without making it."""
        if self._decoder is not None:
            return self._decoder.name
        if not self.owns_decoder:
            return self.config.decoder.name
        return choose(self.config.decoder, self.config.device)

    def ensure_decoder(self) -> None:
        """The decoder (made on first use, by decode.make_decoder: no CUDA context before
        workers fork) and, on a GPU, the streams."""
        if self._decoder is None:
            if self.owns_decoder:
                c = self.config
                self._decoder = make_decoder(c.decoder, device=c.device, num_threads=c.num_threads,
                                             max_pixels=c.max_pixels, fast=c.fast_decode, buffers=self.in_flight,
                                             # (no DCT scaling with several views: they share a window)
                                             out_size=None if self.multi else self.transform.out_size)
            else:
                self._decoder = self.config.decoder  # a decoder instance (e.g. DaliDecoder(device="cpu"))
        buffers = getattr(self._decoder, "buffers", None)
        if buffers is not None and buffers < self.in_flight:  # a decoder handed in: it says how many it keeps
            raise ValueError(f"decoder {getattr(self._decoder, 'name', '?')!r} keeps {buffers} results valid at once; the Loader "
                             f"holds {self.in_flight} (give it buffers={self.in_flight} or more)")
        if self.gpu is None and self.config.device.startswith("cuda"):
            self.gpu = _Streams(self.config.device, self.config.ring, self.in_flight)

    def after_fork(self) -> None:
        """In a forked child: the decoder's threads and the CUDA streams stayed in the parent."""
        if self.owns_decoder:
            self._decoder = None
        self.gpu = None
        self._last_good = None
        self.workspaces = [Workspace() for _ in self.views]

    def close(self) -> None:
        """Releases the decoder (when made here), the output slots and the CUDA side; they
        are made anew when needed. On a GPU it first waits for the work already enqueued on
        the pipeline's own streams (the last decodes and kernels still read the decoder's
        buffers); the trainer's stream is not waited for."""
        if self.gpu is not None:
            self.gpu.wait_idle()
        if self._decoder is not None and self.owns_decoder and hasattr(self._decoder, "close"):
            self._decoder.close()
        if self.owns_decoder:
            self._decoder = None
        if self.gpu is not None:  # what the trainer may still read is done before its buffers go
            self.gpu.release_handed(keep=0)
        self.outputs = [None] * self.config.ring
        self._own_refs = [None] * self.config.ring
        self._last_good = None
        self.gpu = None  # (after wait_idle: no kernel still works in the workspaces)
        self.workspaces = [Workspace() for _ in self.views]
        self.slot = 0

    @property
    def skipped(self) -> list[Skipped]:
        """What the error policy passed over (its list: shared with the reader's)."""
        return self.policy.skipped

    def probe(self, chunk: list[Sample]) -> Probed:
        """Samples with a readable image header (and label, in `extras`), in one native
        call for the batch (see probe_columns); a label that call does not parse, or that
        fails the checks (sign, num_classes), is parse_label's, which says why."""
        exts, negative, classes = self.config.label_exts, self.config.allow_negative_labels, self.config.num_classes
        offsets = self.config.label_offsets
        shifts = set(offsets.values()) | {0}  # (a shard without an offset: 0)

        def ok(v: int) -> bool:
            return (v >= 0 or negative) and (classes is None or v < classes) and -(1 << 63) <= v < (1 << 63)

        def label(s: Sample) -> int:
            """The label as stored (its source's offset is added below), checked as it will be
            trained on: with the offset (a label_offset that moves it out of range is named)."""
            shift = offsets.get(s.shard, 0)
            if not shift:
                return parse_label(s.fields, exts, shard=s.shard, key=s.key, allow_negative=negative,
                                   num_classes=classes)
            v = parse_label(s.fields, exts, shard=s.shard, key=s.key, allow_negative=True)
            if not ok(v + shift):
                bound = "negative" if v + shift < 0 else f"not below num_classes={classes}"
                raise LabelError(f"label {v} + its source's label_offset {shift} = {v + shift} is {bound}",
                                 shard=s.shard, key=s.key)
            return v

        def fits(v: int) -> bool:  # (native labels: in range with every offset, else label() decides)
            return all(ok(v + shift) for shift in shifts)

        if not self.config.labels:
            return probe_columns(chunk, self.config.image_exts, self.config.max_pixels, self.policy)
        probed = probe_columns(chunk, self.config.image_exts, self.config.max_pixels, self.policy, label, label_exts=exts,
                               fits=fits)
        if offsets:  # a mixture's sources with label offsets (gpudecode.Source)
            probed.extras = [v + offsets.get(s.shard, 0) for v, s in zip(probed.extras, probed.samples)]
        return probed

    def _one_size(self, probed: Probed) -> Probed:
        """A transform without geometry: the images of the one size (see _same_size)."""
        if self._size is not None and probed.heights.count(self._size[0]) == len(probed) \
                and probed.widths.count(self._size[1]) == len(probed):
            return probed
        keep = self._same_size(list(zip(probed.samples, probed.heights, probed.widths)))
        return probed if len(keep) == len(probed) else probed.keep(keep)

    def _output(self, slot: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(output, its [N, 3, h, w] view) of each view, for the first n images of `slot`.
        A slot whose last batch the caller still holds (any tensor on its memory, a view
        or a slice of it included) is not written again: that memory is the caller's now,
        and the slot gets new memory (a DataLoader's promise: a yielded batch is yours).
        `reuse_held` turns that off (FFCV's and DALI's way: the ring overwrites)."""
        pairs = self.outputs[slot]
        if pairs is not None and not self.config.reuse_held and self._held(slot):
            pairs = None
            self.fresh_slots += 1
        if pairs is None:
            pairs = self.outputs[slot] = [tf.new_output(self.config.batch_size, self.config.device, pin_memory=self.config.pin_memory,
                                                        size=self._size) for tf in self.views]
            self._own_refs[slot] = [_tensors_on(out) for out, _ in pairs]
        if n == self.config.batch_size:  # (a full batch: the slot as it is, without slicing)
            return pairs
        return [(out[:n], view[:n]) for out, view in pairs]

    def _held(self, slot: int) -> bool:
        """Whether a tensor other than the slot's own (out and its view) still uses the
        memory of `slot`: the batch handed out from it, or a view of it, kept by the caller."""
        own = self._own_refs[slot]
        pairs = self.outputs[slot]
        if own is None or pairs is None:
            return False
        return any(mine < 0 or _tensors_on(out) > mine for (out, _), mine in zip(pairs, own))

    def prepare(self, chunk: list[Sample], *, seed: int, epoch: int, position: int, rank: int = 0,
                world: int = 1) -> _Prepared:
        """Stage A: probe, draw the params, decode (only the windows the crops need).
        `position` is the epoch index of chunk[0]; with rank and world it makes each
        sample's global index, which with `seed` and `epoch` fixes its draws."""
        timing = BatchTiming(size=0)
        t0 = time.perf_counter()
        probed = self.probe(chunk)
        if self.transform.out_size is None and len(probed) and not self.config.each_size:
            probed = self._one_size(probed)
        samples = probed.samples
        sizes = list(zip(probed.heights, probed.widths))
        labels = probed.extras
        # unique over ranks: (seed, epoch, global index) fixes each sample's draws; each view
        # draws from its own seed (view 0 from `seed` itself)
        if len(probed) == len(chunk):  # (none failed: probed[i] is chunk[i])
            indices: Any = np.arange(position, position + len(chunk), dtype=np.int64) * world + rank
        else:
            index = {id(s): position + i for i, s in enumerate(chunk)}
            indices = [index[id(s)] * world + rank for s in samples]
        keep, params, view_boxes, boxes = self._draw(samples, sizes, indices, seed, epoch)
        if keep is not None:  # (images the transform cannot take: each its sample's error)
            probed = probed.keep(keep)
            samples, sizes, labels = probed.samples, [sizes[i] for i in keep], probed.extras
        requests = probed.requests(boxes)
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        decoded = None
        ready = None
        timing.encoded_bytes = sum(map(len, probed.datas))
        seq = self.seq
        if requests:
            self.seq += 1
            gpu = self.gpu
            if gpu is not None:
                gpu.before_decode(seq)  # the rings' turn of batch seq - in_flight is free
            with torch.cuda.stream(gpu.decode) if gpu is not None else contextlib.nullcontext():
                ev = [_event(gpu.decode)] if gpu is not None else []
                decoded = self._decoder.decode(requests)  # type: ignore[union-attr]
                if decoded.engines:
                    timing.engines = decoded.engines
                if gpu is not None:
                    ev.append(_event(gpu.decode))
                    if decoded.pixels.device.type != "cuda":  # host pixels (the CPU decoder): upload
                        timing.h2d_bytes = decoded.pixels.numel()
                        decoded = gpu.upload(decoded, seq)
                    ev.append(_event(gpu.decode))
                    timing.gpu["decode"] = (ev[0], ev[1])
                    timing.gpu["h2d"] = (ev[1], ev[2])
                    ready = ev[2]  # the augment stream waits for this
        timing.decode = time.perf_counter() - t1
        return _Prepared(samples, params, sizes, labels, decoded, timing, taken=len(chunk), seq=seq, ready=ready,
                         draw=(seed, epoch, rank, position), windows=boxes, view_boxes=view_boxes)

    def prepare_resident(self, rows: np.ndarray, store: Any, *, seed: int, epoch: int, position: int, rank: int = 0,
                         world: int = 1, places: np.ndarray | None = None, taken: int | None = None) -> _Prepared:
        """Stage A for samples kept resident (gpudecode.resident): rows `rows` of `store`,
        drawn as prepare() draws them (the same positions, the same seeds), read in place:
        no read, probe or decode. `places`: each row's place in the chunk of the epoch's
        order it came from (default 0, 1, ...: a chunk whose samples all decoded), `taken`:
        that chunk's length. A store in RAM feeding a GPU uploads the batch's crop windows,
        packed, in one copy."""
        timing = BatchTiming(size=0)
        t0 = time.perf_counter()
        samples: list[Any] = [store.samples[r] for r in rows.tolist()]
        sizes = list(zip(store.heights[rows].tolist(), store.widths[rows].tolist()))
        labels = store.labels[rows].tolist() if store.labels is not None else [0] * len(rows)
        at = np.arange(len(rows), dtype=np.int64) if places is None else np.asarray(places, np.int64)
        if self.transform.out_size is None and len(rows) and not self.config.each_size:
            same = self._same_size([(s, h, w) for s, (h, w) in zip(samples, sizes)])
            if len(same) < len(rows):
                rows, samples, at = rows[same], [samples[k] for k in same], at[same]
                sizes, labels = [sizes[k] for k in same], [labels[k] for k in same]
        indices: Any = (position + at) * world + rank
        drawn, params, view_boxes, boxes = self._draw(samples, sizes, indices, seed, epoch)
        if drawn is not None:  # (images the transform cannot take: each its sample's error)
            rows, samples = rows[drawn], [samples[k] for k in drawn]
            sizes, labels = [sizes[k] for k in drawn], [labels[k] for k in drawn]
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        seq = self.seq
        decoded = None
        ready = None
        if len(rows):
            self.seq += 1
            gpu = self.gpu
            on_host = store.pixels.device.type != "cuda"
            if gpu is not None:
                gpu.before_decode(seq)  # the rings' turn of batch seq - in_flight is free
            decoded = store.gathered(rows, boxes) if gpu is not None and on_host else store.batch(rows, boxes)
            if gpu is not None:
                with torch.cuda.stream(gpu.decode):
                    ev = [_event(gpu.decode)]
                    if on_host:  # a RAM store feeding a GPU: the windows, packed, in one upload
                        timing.h2d_bytes = decoded.pixels.numel()
                        decoded = gpu.upload(decoded, seq)
                    ev.append(_event(gpu.decode))
                    timing.gpu["h2d"] = (ev[0], ev[1])
                    ready = ev[1]
        timing.decode = time.perf_counter() - t1
        return _Prepared(samples, params, sizes, labels, decoded, timing, taken=len(rows) if taken is None else taken,
                         seq=seq, ready=ready, draw=(seed, epoch, rank, position), windows=boxes, view_boxes=view_boxes)

    def _same_size(self, items: list[tuple[Any, int, int]]) -> list[int]:
        """A transform without geometry keeps each image's size, and a batch has one: the
        first image seen fixes it, an image of another size is a bad sample (named)."""
        if self._size is None:
            self._size = (items[0][1], items[0][2])
        sh, sw = self._size
        keep = []
        for k, (s, h, w) in enumerate(items):
            if (h, w) == self._size:
                keep.append(k)
            else:
                self.policy(DecodeError(f"image is {h}x{w}, the others {sh}x{sw}: the transform has no geometry "
                                        "step, so every image keeps its size and all must have one (add "
                                        "CenterCrop, RandomCrop or Resize)", shard=s.shard, key=s.key))
        return keep

    def _draw(self, samples: list[Any], sizes: list[tuple[int, int]], indices: Any, seed: int,
              epoch: int) -> tuple[list[int] | None, list[Draws], list[np.ndarray], np.ndarray]:
        """Each view's draws for a batch (the common plans natively, as columns: see
        transforms.draws), each view's boxes and the boxes decoded (their union over the
        views): (the images kept, or None when all are, params, view boxes, boxes). An image
        the transform cannot take (a crop larger than it, ...) is its sample's DecodeError
        under the policy and the rest are drawn again, as they would be in a batch alone."""
        keep = None
        try:
            params = [tf.draw_batch(sizes, view_seed(seed, v), epoch=epoch, indices=indices)
                      for v, tf in enumerate(self.views)]
        except (ValueError, ArithmeticError):
            keep = self._drawable(samples, sizes, indices, seed, epoch)
            if len(keep) == len(samples):
                raise  # not one image's: the batch's own failure
            sizes = [sizes[i] for i in keep]
            indices = np.asarray([int(indices[i]) for i in keep], np.int64)
            params = [tf.draw_batch(sizes, view_seed(seed, v), epoch=epoch, indices=indices)
                      for v, tf in enumerate(self.views)]
        view_boxes = [pv.boxes() for pv in params]  # [view]: int64 [N, 4] (top, left, height, width)
        return keep, params, view_boxes, view_boxes[0] if not self.multi else _union(view_boxes)

    def _drawable(self, samples: list[Sample], sizes: list[tuple[int, int]], indices: Any, seed: int,
                  epoch: int) -> list[int]:
        """The images of a batch whose draws can be made, each drawn alone (the same draws
        as in a batch); each one that cannot is its sample's DecodeError under the policy."""
        keep = []
        for i, (s, hw) in enumerate(zip(samples, sizes)):
            try:
                for v, tf in enumerate(self.views):
                    tf.draw_batch([hw], view_seed(seed, v), epoch=epoch, indices=np.asarray([int(indices[i])]))
                keep.append(i)
            except (ValueError, ArithmeticError) as e:
                self.policy(DecodeError(f"the transform cannot take this image of {hw[0]}x{hw[1]}: {e}",
                                        shard=s.shard, key=s.key))
        return keep

    def finish(self, p: _Prepared, even: str | None = None) -> Ready | None:
        """Stage B: the error policy, the fused kernel into the next output slot, and the
        labels; None when no image of the batch is left (and `even` does not make it up)."""
        slot = self.slot
        ready = self._finish(p, slot, even)
        if ready is not None:
            self.slot = (slot + 1) % self.config.ring  # kept across epochs (see the loader's module doc)
        return ready

    def _finish(self, p: _Prepared, slot: int, even: str | None) -> Ready | None:
        t0 = time.perf_counter()
        decoded = p.decoded
        ok, whole = self._decoded(p)
        if even is not None and ok and len(ok) < p.taken:
            # equal steps are promised: images lost to on_error="skip" are made up by
            # repeats of the batch's others, so every rank's batches stay full
            ok = [ok[i % len(ok)] for i in range(p.taken)]
            whole = False
        if not ok or decoded is None:
            if even is not None and p.taken:
                if self._last_good is not None:
                    return self._made_up(p, slot, t0)
                last = self.skipped[-1] if self.skipped else None  # the batch's last failure, named
                raise DecodeError(f"all {p.taken} images of this Loader's first batch failed (they are in "
                                  f"loader.skipped): with even={even!r} there is no image of this rank "
                                  "yet to make it up from, and leaving it out would give this rank fewer steps "
                                  "than the others", shard=last.shard if last else None,
                                  key=last.key if last else None)
            return None
        ready = None
        gpu = self.gpu
        stream = gpu.augment if gpu is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None:
                stream.wait_event(p.ready)  # type: ignore[union-attr]  # decoded (and uploaded)
                if gpu.slot_free[slot] is not None:
                    stream.wait_event(gpu.slot_free[slot])  # type: ignore[union-attr]  # the trainer is done
            outs = self._output(slot, len(ok))
            start = _event(stream) if stream is not None else None
            # the CPU twin's work rows, declared for the batch's widest image (no crop it draws is
            # wider) and its filter weights for its largest side: a run of images of one size
            # never makes them again, whatever the crops
            widest = max((w for _, w in p.sizes), default=1) if stream is None else 0
            largest = max((max(h, w) for h, w in p.sizes), default=1) if widest else 0
            for v, (tf, (_, view)) in enumerate(zip(self.views, outs)):
                if widest:
                    fused.reserve_cpu(self.workspaces[v], self.config.num_threads, widest, tuple(view.shape), largest)
                part = decoded if not self.multi else self._view_part(decoded, p, v)
                tf.apply(part, p.params[v], p.sizes, view, rows=None if whole else ok, stream=stream,
                         num_threads=self.config.num_threads, workspace=self.workspaces[v])
            if start is not None:
                p.timing.gpu["augment"] = (start, _event(stream))
            # (from a numpy array: torch.tensor over a list of ints costs ~0.7 us an element)
            lab = None
            if self.config.labels:
                lab = torch.from_numpy(np.array(p.labels if whole else [p.labels[k] for k in ok], np.int64))
            if lab is not None and self.config.device != "cpu":
                lab = lab.pin_memory().to(self.config.device, non_blocking=True)
            images: Any = [_handed(out) for out, _ in outs] if self.multi else _handed(outs[0][0])
            if isinstance(self.config.batch_transform, BatchTransform):  # ours: on the finished batch, on its stream
                _, lab = self.config.batch_transform(outs[0][1], lab, rng=batch_rng(*p.draw))  # type: ignore[arg-type]
            # (a user's callable runs on the trainer's thread, seeded: Pipeline.user_step)
            if gpu is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
                gpu.retire(p.seq, ready, decoded)  # its buffers live until the kernel is done
        p.timing.augment = time.perf_counter() - t0
        p.timing.size = len(ok)
        batch = Batch(images, lab, list(map(_KEY, p.samples)) if whole else [p.samples[k].key for k in ok])
        self._last_good = (images, len(ok), batch.keys, lab)
        return Ready(batch, p.timing, p.position, slot, ready, p.draw)

    @staticmethod
    def _view_part(decoded: DecodedBatch, p: _Prepared, v: int) -> DecodedBatch:
        """The decoded batch as view v's kernel reads it: each image's box moved from the
        window decoded (the union of the views') to view v's own box inside it."""
        boxes = decoded.boxes.copy()
        for k, (window, mine) in enumerate(zip(p.windows, p.view_boxes[v])):
            t0, l0, h0, w0 = window
            if (int(boxes[k][2]), int(boxes[k][3])) != (h0, w0):
                raise ValueError(f"decoder gave a {boxes[k][2]}x{boxes[k][3]} window for one of {h0}x{w0}: several "
                                 "views need windows decoded at full scale")
            boxes[k] = (boxes[k][0] + mine[0] - t0, boxes[k][1] + mine[1] - l0, mine[2], mine[3])
        return dataclasses.replace(decoded, boxes=boxes)

    def user_step(self, batch: "Batch", draw: tuple) -> "Batch":
        """A user's batch callable (not one of ours) on a batch handed over: on the caller's
        thread, its generators seeded from the batch's draw (mixing.seeded_call)."""
        step = self.config.batch_transform
        if step is None or isinstance(step, BatchTransform):
            return batch
        images, labels = seeded_call(step, batch.images, batch.labels, draw)
        return Batch(images, labels, batch.keys)

    def _decoded(self, p: _Prepared) -> tuple[list[int], bool]:
        """The images of a prepared batch that decoded (each one that did not is its
        sample's DecodeError under the policy), and whether that is all of them, in order."""
        if p.decoded is None:
            return [], False
        errors = p.decoded.settle().errors  # (the decoder's deferred checks: an image never written is an error)
        if errors.count(None) == len(errors):
            return list(range(len(errors))), True
        for k, err in enumerate(errors):
            if err is not None:
                self.policy(DecodeError(err, shard=p.samples[k].shard, key=p.samples[k].key))
        return [k for k, err in enumerate(errors) if err is None], False

    def finish_images(self, p: _Prepared, plan: Any) -> list[tuple[Sample, np.ndarray]]:
        """Stage B for a sink of host images at their own sizes (precache's), in place of
        the output ring: the error policy as finish() applies it, then each decoded image
        brought to what `plan(h, w)` says (resize to (h, w), then centre crop to (h, w); None:
        that step not taken) by the transforms' kernel, one launch a plan (HostImages), as
        uint8 HWC arrays, with their samples, in order."""
        ok, _ = self._decoded(p)
        decoded = p.decoded
        if not ok or decoded is None:
            return []
        if self._images is None:
            self._images = HostImages(self.config.num_threads)
        plans = [plan(int(decoded.boxes[k][2]), int(decoded.boxes[k][3])) for k in ok]
        gpu = self.gpu
        stream = gpu.augment if gpu is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None:
                stream.wait_event(p.ready)  # type: ignore[union-attr]  # decoded (and uploaded)
            images = self._images(decoded, ok, plans, stream=stream)  # (host arrays: synchronized)
        return [(p.samples[k], img) for k, img in zip(ok, images)]

    def _made_up(self, p: _Prepared, slot: int, t0: float) -> Ready:
        """A batch whose every image failed, under an even policy: made up of the rank's
        images of the batch before (repeated to the batch's size), so every rank keeps
        its step count; the failures are in `skipped` and the repeats keep their keys."""
        src, n, keys, labels = self._last_good  # type: ignore[misc]
        idx = [i % n for i in range(p.taken)]
        gpu = self.gpu
        stream = gpu.augment if gpu is not None else None
        ready = None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if gpu is not None and gpu.slot_free[slot] is not None:
                stream.wait_event(gpu.slot_free[slot])  # type: ignore[union-attr]
            outs = [o for o, _ in self._output(slot, p.taken)]
            made = []
            for out, img in zip(outs, src if self.multi else [src]):
                pick = torch.tensor(idx, device=img.device)
                out.copy_(img[:n][pick])  # (the batch before came from this Pipeline's slots: the same image shape)
                made.append(_handed(out))
            lab = labels[pick.to(labels.device)] if labels is not None else None
            if gpu is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
        p.timing.augment = time.perf_counter() - t0
        p.timing.size = p.taken
        images: Any = made if self.multi else made[0]
        batch = Batch(images, lab, [keys[i] for i in idx])
        self._last_good = (images, p.taken, batch.keys, lab)
        return Ready(batch, p.timing, p.position, slot, ready, p.draw)


class HostImages:
    """finish_images' sink: decoded images to host uint8 HWC arrays, each at its own size,
    straight from the decoder's memory (any layout, CPU or CUDA) with the transforms'
    kernel (Compose.apply), one launch a plan (resize to, centre crop to), rounded to
    nearest. An image neither resized nor cropped is copied out as it is."""

    # Normalize with mean -0.5/255 and std 1/255 turns the kernel's [0, 1] result v into
    # 255 * v + 0.5, so truncating to uint8 rounds to nearest, as torchvision's Resize on
    # uint8 images does: one float pass and one cast, no separate scale and round passes.
    _ROUND = Normalize([-0.5 / 255] * 3, [1 / 255] * 3)

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self._tfs: dict[tuple, Compose] = {}
        self.workspace = Workspace()  # (one launch at a time: the pipeline's finishing thread, its stream)

    def _compose(self, resize: tuple[int, int] | None, crop: tuple[int, int] | None) -> Compose:
        key = (resize, crop)
        tf = self._tfs.get(key)
        if tf is None:
            steps: list[Any] = []
            if resize is not None:
                steps.append(Resize(resize))
            if crop is not None:
                steps.append(CenterCrop(crop))
            tf = self._tfs[key] = Compose([*steps, self._ROUND], layout="NHWC")
        return tf

    def __call__(self, decoded: DecodedBatch, ks: Sequence[int],
                 plans: Sequence[tuple[tuple[int, int] | None, tuple[int, int] | None]],
                 stream: Any = None) -> list[np.ndarray]:
        """Images ks of `decoded`, each by its plan, as host uint8 HWC arrays."""
        out: list[np.ndarray | None] = [None] * len(ks)
        groups: dict[tuple, list[int]] = {}
        for j, (k, plan) in enumerate(zip(ks, plans)):
            if plan == (None, None):  # kept as it is
                out[j] = self._host_window(decoded, k)
            else:
                groups.setdefault(plan, []).append(j)
        n = len(decoded.boxes)
        for (resize, crop), idx in groups.items():
            tf = self._compose(resize, crop)
            rows = [ks[j] for j in idx]
            sizes: list = [None] * n  # the box (the whole image) is what is resized
            params: list = [None] * n
            boxes = [(int(decoded.boxes[k][2]), int(decoded.boxes[k][3])) for k in rows]
            for k, box, prm in zip(rows, boxes, tf.make_params(boxes, 0)):
                sizes[k], params[k] = box, prm
            res, view = tf.new_output(len(idx), decoded.pixels.device)
            tf.apply(decoded, params, sizes, view, rows=rows, stream=stream, num_threads=self.num_threads,
                     workspace=self.workspace)
            u8 = res.to(torch.uint8).cpu().numpy()  # values in [0.5, 255.5]: truncation rounds
            for i, j in enumerate(idx):
                out[j] = u8[i]
        return out  # type: ignore[return-value]

    @staticmethod
    def _host_window(decoded: DecodedBatch, k: int) -> np.ndarray:
        t, l, bh, bw = (int(v) for v in decoded.boxes[k])
        sy, sx, sc = (int(v) for v in decoded.strides[k])
        start = int(decoded.offsets[k]) + t * sy + l * sx
        img = decoded.pixels[start:].as_strided((bh, bw, 3), (sy, sx, sc))  # any layout the decoder gave
        return img.cpu().numpy().copy()


def _handed(out: torch.Tensor) -> torch.Tensor:
    """The tensor the caller gets for an output slot's `out`: a tensor of its own over the
    same memory (so that whether the caller still holds it can be told, _tensors_on)."""
    return out.view(out.shape)


def _tensors_on(t: torch.Tensor) -> int:
    """How many tensors use t's memory (views and slices of it included); -1 where this
    torch cannot tell (the slot then always gets new memory: never a batch overwritten)."""
    try:
        # (less the storage object made here; torch has no public count)
        return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata)) - 1  # noqa: SLF001
    except (AttributeError, RuntimeError, TypeError):
        return -1


def view_seed(seed: int, view: int) -> int:
    """The seed view `view` draws from: `seed` itself for view 0 (one view draws as a
    plain transform does), an independent one for each other view."""
    if view == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"gpudecode-view:{seed}:{view}".encode()).digest()[:8], "little") >> 1


def _union(boxes: Sequence[np.ndarray]) -> np.ndarray:
    """Row k: the smallest box (top, left, height, width) holding row k of every [N, 4]
    array of boxes given."""
    b = np.stack(boxes)  # [views, N, 4]
    top, left = b[:, :, 0].min(0), b[:, :, 1].min(0)
    bottom, right = (b[:, :, 0] + b[:, :, 2]).max(0), (b[:, :, 1] + b[:, :, 3]).max(0)
    return np.stack([top, left, bottom - top, right - left], axis=1)


def _event(stream: Any) -> Any:
    """A timing CUDA event recorded on `stream` now."""
    e = torch.cuda.Event(enable_timing=True)
    e.record(stream)
    return e


class _Streams:
    """The CUDA side of one Loader, kept from one epoch to the next: the decode and augment
    streams, the upload ring (device buffers and their pinned staging), the output slots'
    release events and the slots handed to the trainer, and the decoded batches kept alive
    until their kernels are done (see the module doc for the protocol)."""

    def __init__(self, device: str, ring: int, in_flight: int = IN_FLIGHT) -> None:
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.decode = torch.cuda.Stream(device=self.device)
        self.augment = torch.cuda.Stream(device=self.device)
        self.slot_free: list[Any] = [None] * ring  # recorded on the trainer's stream when done with a slot
        self.handed: list[int] = []                # slots handed over whose release is not recorded yet
        self.in_flight = in_flight  # decoded batches alive at once (Pipeline.in_flight)
        self.uploads: list[torch.Tensor | None] = [None] * in_flight
        self.staging: list[torch.Tensor | None] = [None] * in_flight  # pinned host buffers
        self.staged: list[Any] = [None] * in_flight  # the copy out of staging[k] is done at this event
        self._lock = threading.Lock()
        self._retired: list[tuple[int, Any, Any]] = []  # (seq, consumed event, what it keeps alive)

    def wait_idle(self) -> None:
        """Waits (on the host) for everything enqueued on the decode and augment streams:
        nothing of ours reads a buffer after this."""
        self.decode.synchronize()
        self.augment.synchronize()
        with self._lock:
            self._retired = []

    def before_decode(self, seq: int) -> None:
        """Batch `seq` is about to reuse the rings' turn of batch seq - in_flight: wait (on
        the host) for that batch's kernel, and let go of the batches whose kernels are done."""
        with self._lock:
            keep = []
            for item in self._retired:
                s, consumed, _ = item
                if s <= seq - self.in_flight:
                    consumed.synchronize()
                elif not consumed.query():
                    keep.append(item)
            self._retired = keep

    def retire(self, seq: int, consumed: Any, owner: Any) -> None:
        """`owner` (a DecodedBatch) stays alive until `consumed` has completed."""
        with self._lock:
            self._retired.append((seq, consumed, owner))

    def upload(self, decoded: DecodedBatch, seq: int) -> DecodedBatch:
        """Host pixels onto the device on the decode stream (current here): copied into this
        turn's pinned staging buffer, then uploaded without blocking the host."""
        pixels = decoded.pixels
        n = pixels.numel()
        k = seq % self.in_flight
        if self.staged[k] is not None:
            self.staged[k].synchronize()  # the previous upload out of this staging buffer
        host, dev = self.staging[k], self.uploads[k]
        if host is None or host.numel() < n:
            host = self.staging[k] = torch.empty(int(n * 1.25) + 1, dtype=torch.uint8, pin_memory=True)
        if dev is None or dev.numel() < n:
            dev = self.uploads[k] = torch.empty(int(n * 1.25) + 1, dtype=torch.uint8, device=self.device)
        host[:n].copy_(pixels.reshape(-1))
        dev[:n].copy_(host[:n], non_blocking=True)
        self.staged[k] = torch.cuda.Event()
        self.staged[k].record(self.decode)
        return dataclasses.replace(decoded, pixels=dev[:n], owner=(decoded.owner, dev))

    def release_handed(self, *, keep: int) -> None:
        """The trainer is done with every handed slot but the last `keep`: events on its
        stream guard their reuse."""
        if len(self.handed) <= keep:
            return
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        for slot in self.handed[:len(self.handed) - keep]:
            self.slot_free[slot] = done
        del self.handed[:len(self.handed) - keep]

    def hand_over(self, r: "Ready") -> None:
        """Batch `r` to the trainer's stream: it waits for the kernel; the images and labels
        are kept from the caching allocator until the trainer's work on them is done."""
        trainer = torch.cuda.current_stream(self.device)
        trainer.wait_event(r.ready)
        # made on the augment stream, used on the trainer's: the caching allocator must not hand
        # their memory to the augment stream again before the trainer's work on them is done
        # (the labels are new each batch; an output slot's memory is freed by close())
        for images in r.batch.images if isinstance(r.batch.images, list) else [r.batch.images]:
            images.record_stream(trainer)
        if r.batch.labels is not None and r.batch.labels.device.type == "cuda":
            r.batch.labels.record_stream(trainer)
        self.handed.append(r.slot)
