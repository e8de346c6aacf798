"""Loader: shards in, augmented batches out, in place of DataLoader + torchvision transforms.

    reader threads (bytes) -> probe (header sizes) -> params (host, seeded) ->
    decode (GPU: nvImageCodec / DALI / torchcodec; CPU: crop-window libjpeg-turbo) ->
    fused kernel (Compose.apply) -> Batch

Two producer threads prepare batches ahead (up to `prefetch`) while the trainer works on
batch k: the "decode" thread reads, probes and decodes batch k+2 while the "augment"
thread runs the kernel on k+1.

The per-batch work and its buffers belong to the Loader's `pipeline.Pipeline`; the two
threads here drive it. On a GPU (the design, one owner: the pipeline's `_Streams`, made
once per Loader and kept across epochs):
- Decoding (and the upload of host-decoded pixels, from pinned staging, non-blocking)
  runs on a decode stream; the kernel on an augment stream; each batch's "decoded" event
  joins them, so decoding batch k+1 overlaps the kernel of batch k, and each stage's CUDA
  events time its own work only.
- Every buffer a decoded batch lives in (a decoder's ring, the upload ring, memory a
  decoder's allocator hands out) is kept until the batch's "consumed" event, recorded
  after its kernel, has completed: before decoding batch j the decode thread waits on
  the host for batch j - in_flight's (the middle queue's depth + 2: every ring is that
  deep; the hardware JPEG decoder does not follow stream
  order, so a stream wait would not do), and drops older batches' buffers only once their
  events have completed.
- The trainer gets batch k from output slot k mod (prefetch + 3); its stream waits on the
  batch's "ready" event; the labels carry `record_stream` for the trainer's stream. When
  the trainer asks for batch k+1 it is done with batch k-1: an event recorded on its
  stream then guards that slot's reuse. Slots, their events and the slot counter carry
  over from one epoch to the next, so a new epoch never writes into the pixels of the
  last batches the trainer still reads.
- Launches happen inside the device's context (cuda:N need not be the current device).

Lifecycle: one iterator at a time per Loader (a second one while the first is active
raises ConcurrentIterationError: they would share the output buffers). An iterator
ends when exhausted, on `close()`, when it is garbage-collected, or when an exception
(Ctrl-C included) passes through it; every thread it started is joined then.
`Loader.close()` (or `with Loader(...) as loader:`) also releases the decoder's threads
and the output buffers.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Sequence

import numpy as np
import torch

from ._manifest import _read_json
from ._probe import DEFAULT_MAX_PIXELS
from .cursor import Cursor, Start
from ._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from .decode import check_device, check_spec
from .errors import ConcurrentIterationError, ErrorPolicy, OnError, Skipped, TransformError
from .io import shards as _shards
from .io.files import DEFAULT_IMAGE_EXTS, file_cap
from .io.reader import ShardReader, split_exts
from .io.remote import RemoteOptions
from .transforms.base import fingerprint_text
from .mixing import BatchTransform, CutMix, MixUp, RandomChoice, as_batch_transform
from .pipeline import Batch, Pipeline, PipelineConfig, Ready
from .resident import Keep, Keeper, epoch_chunks
from .stats import LoaderStats
from .transforms.convert import carries_compose
from .transforms import Compose

if TYPE_CHECKING:
    from .dataset import ShardDataset

__all__ = ["Loader", "LoaderIterator", "LoaderSampler"]


class _Epoch:
    """One epoch's two producer threads: "decode" reads, probes, draws and decodes batch
    k+1 while "augment" runs the fused kernel on batch k and fills the queue the trainer
    takes from. Exceptions are handed on to the trainer, which re-raises them."""

    def __init__(self, loader: "Loader", start: Start) -> None:
        self.loader = loader
        self.pipe = pipe = loader.pipeline
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, loader.prefetch))
        self.mid: queue.Queue = queue.Queue(maxsize=pipe.config.depth)  # the rings are this deep
        self.group = ThreadGroup("loader")
        self.stop = self.group.stop_event
        reader = loader.reader
        # the ranks and the even policy, resolved once an epoch (not again each batch)
        self.rank, self.world = reader.placement()
        self.even = reader.even
        # split="elastic": the epoch's plan from the global position a resumed job stood at
        self.plan = reader.resumable_plan(start.epoch, start.global_start)
        if self.plan is not None:
            loader.cursor.planned(start.run, self.plan.total)
        # a decoder that can be interrupted (the CPU one: between rows, on its native
        # threads) is, so close() or Ctrl-C never waits for a huge image to finish
        # (only a decoder this Loader made: one handed in may serve other Loaders too)
        interrupt = getattr(pipe.decoder, "interrupt", None) if pipe.owns_decoder else None
        if interrupt is not None:
            pipe.decoder.resume()
            self.group.on_stop(interrupt)

    def start(self, epoch: int, position: int) -> None:
        """Starts the two threads (apart from __init__: the iterator holds this epoch before
        any thread runs, so a Ctrl-C that lands while they start still stops them)."""
        self.group.start(self._decode_stage, epoch, position, name="decode")
        self.group.start(self._augment_stage, name="augment")

    def _put(self, q: queue.Queue, item: Any) -> bool:
        return put_until_stopped(q, item, self.stop)

    def _decode_stage(self, epoch: int, start: int) -> None:
        ld, pipe, reader = self.loader, self.pipe, self.loader.reader
        samples: Any = iter(())
        elastic = self.plan.chunks if self.plan is not None else None
        names = [src.label for src in reader.sources] if reader.sources is not None else None
        try:
            store = ld.keeper.store(pipe, reader, self.stop)  # (filled once, at the first epoch; None: streaming)
            if self.stop.is_set():
                return
            if store is not None:  # the epoch's order as rows of the store: nothing read, probed or decoded
                samples = epoch_chunks(reader, store, epoch, start=start, plan=self.plan, batch_size=ld.batch_size,
                                       policy=pipe.policy)
            else:
                samples = reader.iter_epoch(epoch, start=start, stop=self.stop, plan=self.plan)
            position = start
            while not self.stop.is_set():
                t0 = time.perf_counter()
                chunk: Any
                if store is not None:  # rows of the store, their places in the chunk, the chunk's length
                    chunk, places, taken = next(samples, (np.zeros(0, np.int64), None, 0))
                else:
                    chunk = list(itertools.islice(samples, ld.batch_size))  # (the loop in C)
                    taken = len(chunk)
                t_read = time.perf_counter() - t0
                if self.stop.is_set():
                    return
                if not taken or (ld.drop_last and taken < ld.batch_size):
                    break
                if names is not None:  # the mix, counted as read (loader.stats.sources)
                    read: list[Any] = chunk if store is None else [store.samples[r] for r in chunk.tolist()]
                    for sample in read:
                        i = reader.source_of(sample.shard)
                        if i is not None:
                            ld.stats.sources[names[i]] = ld.stats.sources.get(names[i], 0) + 1
                    ld.stats.source_read = reader.read_times()
                prepare = (pipe.prepare if store is None
                           else functools.partial(pipe.prepare_resident, store=store, places=places, taken=taken))
                if elastic is not None:
                    # batch k is chunk k of the global order: its samples draw by their global
                    # positions, as a single process would draw them (any world size alike)
                    k = position // ld.batch_size
                    at = elastic[k] if k < len(elastic) else elastic[-1] + ld.batch_size * (k - len(elastic) + 1)
                    prepared = prepare(chunk, seed=ld.seed, epoch=epoch, position=at, rank=0, world=1)
                else:
                    prepared = prepare(chunk, seed=ld.seed, epoch=epoch, position=position, rank=self.rank,
                                       world=self.world)
                prepared.timing.read = t_read
                position += taken
                prepared.position = position
                if not self._put(self.mid, prepared):
                    return
            self._put(self.mid, None)
        except BaseException as e:  # handed on to the trainer, which re-raises it
            self._put(self.mid, e)
        finally:
            if hasattr(samples, "close"):
                samples.close()  # ends the reader's threads (this thread runs its generator)

    def _augment_stage(self) -> None:
        try:
            while True:
                item = get_until_stopped(self.mid, self.stop)
                if item is STOPPED:
                    return
                if item is None or isinstance(item, BaseException):
                    self._put(self.queue, item)
                    return
                ready = self.pipe.finish(item, self.even)
                if ready is not None:
                    if not self._put(self.queue, ready):
                        return
        except BaseException as e:
            self._put(self.queue, e)

    def close(self) -> None:
        self.group.stop()


_SUPERSEDED = ("this iterator was ended when iter(loader) started a newer one (they would share output buffers; "
               "DataLoader's persistent workers end the older one too): use the newest")


class LoaderIterator:
    """An epoch of batches from a Loader (what `iter(loader)` returns). Ends when
    exhausted, on close(), when garbage-collected, or when an exception (Ctrl-C
    included) passes through `__next__`; its threads are joined then. It reports each
    batch handed over and the epoch's end to the Loader's cursor, for its own run."""

    def __init__(self, loader: "Loader", start: Start, length: Callable[[], int]) -> None:
        self.epoch = start.epoch
        self._cursor = loader.cursor
        self._stats = loader.stats
        self._run = start.run
        self._length = length
        self._done = False
        self._superseded = False  # ended by a newer iter(loader)
        self._pid = os.getpid()
        self._busy = threading.Lock()  # one next() at a time
        self._ep = _Epoch(loader, start)
        try:
            self._ep.start(start.epoch, start.position)
        except BaseException:  # Ctrl-C while the threads start: stop what started, now (a traceback
            self.close()       # held by the caller's handler keeps this object alive: no __del__ yet)
            raise

    @property
    def active(self) -> bool:
        return not self._done and self._pid == os.getpid()

    def __iter__(self) -> "LoaderIterator":
        return self

    def __len__(self) -> int:
        return self._length()

    def __next__(self) -> "Batch":
        held = False
        try:  # everything inside: Ctrl-C lands wherever the main thread is when it comes
            if self._pid != os.getpid():
                raise ConcurrentIterationError(
                    f"this iterator was started in process {self._pid}; a forked child cannot continue it (its "
                    "threads and buffers stayed in the parent): start one in the child with iter(loader)")
            if self._done:
                raise ConcurrentIterationError(_SUPERSEDED) if self._superseded else StopIteration
            held = self._busy.acquire(blocking=False)
            if not held:
                raise ConcurrentIterationError(
                    "next() was called on one Loader iterator from two threads at once: an iterator serves one "
                    "thread (give each thread its own Loader)")
            return self._next()
        except ConcurrentIterationError:  # a refused caller changes nothing
            raise
        except BaseException:  # the end, an error, Ctrl-C: nothing keeps running behind the trainer
            self.close()
            raise
        finally:
            if held:
                self._busy.release()

    def _next(self) -> "Batch":
        ep = self._ep
        gpu = ep.pipe.gpu
        if gpu is not None:
            # asking for batch k: the trainer's work on batch k-2 (and before) is enqueued on its
            # stream; those slots may be reused once that work is done (the augment stage waits)
            gpu.release_handed(keep=1)
        t0 = time.perf_counter()
        item = get_until_stopped(ep.queue, threading.Event(), alive=ep.group.alive)
        wait = time.perf_counter() - t0
        if item is STOPPED:
            if self._done:  # close() from another thread while this one waited: the loop ends
                raise ConcurrentIterationError(_SUPERSEDED) if self._superseded else StopIteration
            raise RuntimeError("gpudecode loader threads ended without a result (this is a bug)")
        if item is None:
            self._cursor.on_end(self._run)
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        r: Ready = item
        self._cursor.on_batch(self._run, r.position)
        r.timing.wait = wait
        r.timing.delivered = t0 + wait
        self._stats.batches.append(r.timing)
        if gpu is not None and r.ready is not None:
            gpu.hand_over(r)
        # a user's batch callable: here, on the trainer's thread, seeded from the batch's draw
        return ep.pipe.user_step(r.batch, r.draw)

    def supersede(self) -> None:
        """Ends this iterator because a newer one started: its next() then says so."""
        self._superseded = True
        self.close()

    def close(self) -> None:
        """Stops the epoch and joins its threads (idempotent; in a forked child it only
        marks the parent's iterator done: its threads are not there)."""
        if not self._done:
            self._done = True
            if self._pid == os.getpid():
                self._ep.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


def _views(transform: Any) -> Compose | list[Compose]:
    """A Compose (converted from torchvision's), or a list of them: several views of each
    image, each with its own fixed output size (the views' batches are stacked apart).
    None: no augmentation (images decoded as they are: uint8, each at its own size)."""
    if transform is None:
        return Compose([])
    if isinstance(transform, (list, tuple)):
        whole = [isinstance(t, Compose) or type(t).__name__ == "Compose" or carries_compose(t) for t in transform]
        if transform and not any(whole):  # a list of steps (a Compose's .transforms): one transform
            return Compose.from_torchvision(list(transform))
        if not all(whole):
            raise TransformError(
                "transform=[...] mixes whole transforms and single steps: give one Compose (a list of steps is "
                "read as one), or one Compose per view for several views of each image")
        views = [t if isinstance(t, Compose) else Compose.from_torchvision(t) for t in transform]
        if not views:
            raise TransformError("transform=[]: give one transform, or one per view")
        for v, tf in enumerate(views):
            if tf.plan.out_size is None:
                raise TransformError(f"view {v} has no size of its own (no RandomResizedCrop, CenterCrop, RandomCrop "
                                     "or Resize to a fixed size): with several views each needs one")
        return views
    return transform if isinstance(transform, Compose) else Compose.from_torchvision(transform)


# DataLoader's arguments the Loader does not take, and what it does in their place
_DATALOADER_ONLY = {
    "sampler": "the Loader orders and splits an epoch itself: shuffle= and seed= (each rank's share from "
               "rank=/world_size= or torchrun's), repeated_augs= for RASampler, split='elastic' to resume on "
               "another world size; for an order of your own, give the samples in that order (a list of paths)",
    "batch_sampler": "the Loader makes batches of batch_size itself (drop_last= for the last one)",
    "collate_fn": "the fused kernel writes each batch as one tensor; a step on each finished batch (MixUp, "
                  "CutMix, a callable of yours) is batch_transform=",
    "worker_init_fn": "the Loader's workers are threads of this process: nothing to initialise; seed= fixes "
                      "every draw",
    "generator": "seed= fixes every draw (with the epoch and the sample's position)",
    "multiprocessing_context": "the Loader's workers are threads, not processes",
    "timeout": "a read that stalls is the remote= options' (timeouts and retries of remote shards)",
    "pin_memory_device": "batches are made on device= itself",
    "in_order": "batches always come in order (the same for any number of threads)",
}


def _dataset_source(urls: Any, transform: Any) -> tuple[Any, Any]:
    """A torch Dataset given as the source: torchvision's ImageFolder or DatasetFolder is
    read as it lies, its `samples` ((path, label) pairs: its classes, extensions and
    is_valid_file already applied) on the reader threads, with its `transform` when none is
    given; FakeData's images are made; a Hugging Face `datasets.Dataset`'s rows are read
    from its Arrow table (io/parquet.hf_dataset); any other Dataset is refused with what the
    Loader reads instead. Anything else passes as it is."""
    import torch.utils.data

    if type(urls).__name__ == "Dataset" and type(urls).__module__.startswith("datasets"):  # Hugging Face's
        from .io.parquet import hf_dataset

        return hf_dataset(urls), transform
    if not isinstance(urls, torch.utils.data.Dataset) or isinstance(urls, ShardReader):
        return urls, transform
    samples = getattr(urls, "samples", None)
    name = type(urls).__name__
    if name == "FakeData" and type(urls).__module__.startswith("torchvision"):  # `--dummy`
        return _fake_data(urls), transform if transform is not None else getattr(urls, "transform", None)
    if not isinstance(samples, list) or not all(isinstance(s, tuple) and len(s) == 2 for s in samples[:1]):
        raise TypeError(f"Loader() reads files and shards, not a {name}: give its image folder, a list of paths or "
                        "(path, label) pairs, or shards (for a synthetic set, `gpudecode bench make-data DIR` "
                        "writes one).")
    if getattr(urls, "target_transform", None) is not None:
        raise TypeError(f"Loader() cannot apply this {name}'s target_transform (labels are read as the folder "
                        "gives them): map the labels in your loop, or give the (path, label) pairs yourself.")
    own = getattr(urls, "loader", None)
    if own is not None and not str(getattr(own, "__module__", "")).startswith("torchvision"):
        raise TypeError(f"Loader() decodes the files itself, not with this {name}'s own loader=: give the "
                        "folder (or the (path, label) pairs) if its files are images.")
    return [(str(p), int(y)) for p, y in samples], transform if transform is not None else getattr(urls, "transform",
                                                                                                   None)


def _fake_data(ds: Any) -> Any:
    """torchvision's FakeData as a made file list: sample i is FakeData's image i (its own
    draws: the seed index + random_offset), as uint8 HWC .npy bytes, with its label."""
    import copy

    from .io.files import made
    from .tensors import encode_npy

    plain = copy.copy(ds)
    plain.transform = plain.target_transform = None
    if getattr(ds, "target_transform", None) is not None:
        raise TypeError("Loader() cannot apply this FakeData's target_transform: map the labels in your loop.")

    def make(i: int) -> tuple[bytes, int]:
        img, label = plain[i]
        return encode_npy(np.ascontiguousarray(np.asarray(img.convert("RGB")))), int(label)

    size = tuple(getattr(ds, "image_size", ()))
    return made(f"FakeData({len(ds)}, {size}, seed offset {getattr(ds, 'random_offset', 0)})", len(ds), make, "npy")


def _refuse_dataloader_only(given: dict) -> None:
    """DataLoader's arguments the Loader does not take are refused with what it does
    instead; any other unknown argument as Python refuses it."""
    for name in given:
        if name in _DATALOADER_ONLY:
            raise TypeError(f"Loader() takes no {name}= (a DataLoader argument): {_DATALOADER_ONLY[name]}.")
        raise TypeError(f"Loader() got an unexpected keyword argument {name!r}")


def _resume_keys(reader: ShardReader, config: PipelineConfig, ds: dict, batch_size: int, seed: int | None,
                 strict: bool) -> tuple[list[tuple[str, object]], bool]:
    """What a saved state must agree on to resume on this Loader, and whether an elastic
    state is regridded (another world size or batch size: split="elastic" allows it)."""
    rank, world = reader.placement()
    elastic = reader.resumes_anywhere and ds.get("split") == reader.mode()
    mine: list[tuple[str, object]] = [("split", reader.mode()), ("shards", len(reader.urls)), ("shuffle", reader.shuffle)]
    if not elastic:  # an elastic state resumes on another world size and batch size (and the even policy that
        mine += [("world_size", world), ("batch_size", batch_size), ("even", reader.even)]  # goes with its own)
    if seed is not None:
        mine.append(("seed", seed))
    if "fingerprint" in ds:  # (states saved before it was kept have none)
        mine.append(("fingerprint", shards_fingerprint(reader)))
    if "transform" in ds and strict:
        mine.append(("transform", transforms_fingerprint(config)))
    return mine, elastic and (ds.get("world_size"), ds.get("batch_size")) != (world, batch_size)


def _check_sources(reader: Any, config: PipelineConfig) -> None:
    """What can be told of the data before reading it, refused now: precached images of
    several sizes for a transform without one; a mixture's sources whose class names
    collide (two trees without label_offset); tree labels a label_offset moves out of range
    (taken later for bad data, a whole source would be skipped under on_error="skip").

    Raises:
        ValueError, TransformError: the reason, naming the source and label_offset."""
    if isinstance(config.transform, Compose) and config.transform.plan.out_size is None and config.batch_size > 1:
        _check_stored_sizes(reader)
    if reader.sources is None or not config.labels:
        return
    reader.classes  # noqa: B018  (a label two sources' trees name differently: refused, naming label_offset)
    for src, urls in zip(reader.sources, reader.source_urls):
        labels = [v for u in urls if u in reader.files for v in reader.files[u].labels if v is not None]
        if not src.label_offset or not labels:
            continue
        lo, hi = min(labels), max(labels)  # (a tree's labels carry their offset)
        if (lo < 0 and not config.allow_negative_labels) or (config.num_classes is not None and hi >= config.num_classes):
            bound = "negative" if lo < 0 and not config.allow_negative_labels else f"not below num_classes={config.num_classes}"
            raise ValueError(f"Source {src.label}: label_offset={src.label_offset} makes its labels {lo}..{hi}, "
                             f"{bound}: every one of its samples would be a LabelError")


def _check_stored_sizes(reader: Any) -> None:
    """A transform without a size batches images only of one size: precached shards whose
    manifest says their images differ (crop none) are refused now, not at the first batch."""

    names = {os.path.basename(v) for v in reader.urls}
    seen: set[str] = set()
    for u in reader.urls:
        if u in reader.files or not _shards.is_local(u):
            continue
        folder = os.path.dirname(os.path.abspath(_shards.local_path(u)))
        if folder in seen or len(seen) >= 16:
            continue
        seen.add(folder)
        try:
            manifests = [n for n in sorted(os.listdir(folder)) if n.endswith("manifest.json")]
        except OSError:
            continue
        for name in manifests:
            doc = _read_json(os.path.join(folder, name))
            if doc is None:  # not JSON, or not an object: says nothing here
                continue
            try:  # a manifest that is not one of precache's (or a damaged one) says nothing here
                varied = doc["pixels"].get("shape") is None
                size = doc["transform"]["size"]
                ours = any(os.path.basename(x.get("path", "")) in names for x in doc["shards"])
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
            if varied and ours:
                raise TransformError(
                    f"these shards were precached with crop none ({os.path.join(folder, name)}): their images "
                    f"differ in size (shorter side at most {size}), and this transform gives them no size to "
                    "batch at: add a RandomResizedCrop, CenterCrop or RandomCrop, or precache with --crop center")


def _batch_step(step: Any, transform: Compose, labels: bool, num_classes: int | None) -> Any:
    """The batch transform, checked against the rest now (not at the first batch)."""
    if step is None:
        return None
    step = as_batch_transform(step)
    if isinstance(step, BatchTransform):
        step = copy.deepcopy(step)  # num_classes may be filled in below: the caller's object stays as given
        if not labels:
            raise TransformError(f"{step!r} mixes labels too: it needs labels=True")
        if not transform.plan.dtype.is_floating_point:
            raise TransformError(f"{step!r} mixes float images, and this transform ends in {transform.plan.dtype}: "
                                 "end it with Normalize or ToDtype(torch.float32, scale=True)")
        def mixes(s: BatchTransform) -> list[BatchTransform]:
            return [m for t in s.transforms for m in mixes(t)] if isinstance(s, RandomChoice) else [s]

        mixers = [m for m in mixes(step) if isinstance(m, (MixUp, CutMix))]
        given = {m.num_classes for m in mixers if m.num_classes is not None}
        if num_classes is not None:
            given.add(num_classes)
        if len(given) > 1:  # (torch's one_hot would fail at the first batch, naming no sample)
            said = ", ".join(f"{m!r}" for m in mixers) + (f", Loader(num_classes={num_classes})" if num_classes else "")
            raise TransformError(f"the batch transform and the Loader disagree on the number of classes ({said}): "
                                 "give them one num_classes")
        for m in mixers:
            if m.num_classes is None:
                if num_classes is None:
                    raise TransformError(f"{m!r} turns labels into [N, num_classes]: give it num_classes= (or the "
                                         "Loader's num_classes=)")
                m.num_classes = num_classes
    return step


def _mix_classes(step: Any) -> int | None:
    """The num_classes a batch transform (ours, checked by _batch_step) mixes labels into."""
    if isinstance(step, RandomChoice):
        return next((c for c in map(_mix_classes, step.transforms) if c is not None), None)
    return step.num_classes if isinstance(step, (MixUp, CutMix)) else None


def _default_seed(world_size: int) -> int:
    """torch.initial_seed(), made the same on every rank: rank 0's is broadcast when
    torch.distributed is initialized (every rank builds its Loader, as it must to read
    its part); otherwise each rank's own is used, and a warning says they must agree."""
    seed = int(torch.initial_seed()) % (1 << 63)
    if world_size <= 1:
        return seed
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    warnings.warn("gpudecode.Loader(seed=None) with several ranks and torch.distributed not initialized: every "
                  "rank must call torch.manual_seed with the same seed (or pass seed=), or ranks disagree on the "
                  "split", RuntimeWarning, stacklevel=3)
    return seed


class LoaderSampler:
    """A Loader's share for this rank, where DistributedSampler stands beside a DataLoader:
    `len()` is the samples this rank yields per epoch, `set_epoch(e)` sets the Loader's
    epoch, and iteration gives this rank's dataset indices (the shards' unshuffled order)
    for the current epoch, before the sample shuffle."""

    def __init__(self, loader: "Loader") -> None:
        self._loader = loader

    def __len__(self) -> int:
        return self._loader.num_samples

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        reader = self._loader.reader
        counts = reader.sample_counts()
        base, pos = {}, 0
        for u in reader.urls:
            base[u] = pos
            pos += counts[u]
        epoch = self._loader.current_epoch
        files = {u: reader.file_order(u, epoch) for u in reader.files}
        for url, i in reader.plan(epoch).read_order(counts):  # (elastic: the plan's interleaved order)
            yield base[url] + (files[url][i] if url in files else i)


def shards_fingerprint(reader: ShardReader) -> str:
    """The shards (or files) read, in their order, by name: the same data wherever it is
    mounted, other data (other shards, another order, a tree with other files) differs."""
    h = hashlib.sha256()
    if reader.sources is not None:  # a mixture: its terms are part of what is read
        h.update(repr([(s.weight, s.repeat, s.choose, s.label_offset, len(g)) for s, g in
                       zip(reader.sources, reader.source_urls)] + [reader.epoch_size]).encode())
    for u in reader.urls:
        flist = reader.files.get(u)
        # (names as the file system gives them: a name that is not UTF-8 keeps its bytes)
        if flist is None:
            h.update(os.fsencode(os.path.basename(u.rstrip("/"))) + b"\0")
        else:
            h.update(f"files:{len(flist)}\0".encode())
            for k in flist.keys:
                h.update(k.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()[:16]


def transforms_fingerprint(config: PipelineConfig) -> str:
    """The transforms (views and batch transform) by their repr: a state saved with other
    transforms is refused."""
    parts = [fingerprint_text(v) for v in config.views] + [fingerprint_text(config.batch_transform)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _what_is_read(reader: ShardReader) -> dict:
    """What is read: shards, and image files as they lie (their trees or lists)."""
    files = reader.files
    out: dict = {"shards": sum(1 for u in reader.urls if u not in files)}
    if files:
        out["image_files"] = sum(len(f) for f in files.values())
        out["file_sources"] = [f.root or u for u, f in files.items()]
    return out


def _mix(reader: ShardReader, epoch: int, skipped: list[Skipped]) -> list[dict]:
    """A mixture's sources: their samples, what `epoch` draws of each, and what on_error
    passed over in each this epoch."""
    mix = reader.mixture(epoch)
    for m in mix:
        m["skipped"] = 0
    for sk in skipped:
        i = reader.source_of(sk.shard) if sk.shard else None
        if i is not None:
            mix[i]["skipped"] += 1
    return mix


def _pipeline_config(transform: Any, batch_transform: Any, *, batch_size: int, device: Any, decoder: Any,
                     image_ext: Any, label_ext: Any, labels: bool, num_classes: int | None,
                     allow_negative_labels: bool, workers: tuple[int | None, int | None],
                     ahead: tuple[int | None, int | None], max_pixels: int, fast_decode: bool, pin_memory: bool,
                     reuse_buffers: bool) -> PipelineConfig:
    """The Loader's arguments for its pipeline, checked (a missing decoder extra, a batch
    transform that cannot mix this transform's output: said now, not at the first batch).
    `workers`: (num_workers, num_threads), `ahead`: (prefetch_factor, prefetch), each pair
    a name and its older one."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    if None not in workers and workers[0] != workers[1]:
        raise ValueError("give num_workers or num_threads (its older name), not both")
    if None not in ahead and ahead[0] != ahead[1]:
        raise ValueError("give prefetch_factor or prefetch (its older name), not both")
    threads = workers[0] if workers[0] is not None else workers[1]
    if threads is not None and threads < 0:
        raise ValueError(f"num_workers must be >= 0, not {threads}")
    prefetch = ahead[0] if ahead[0] is not None else (ahead[1] if ahead[1] is not None else 2)
    if prefetch < 1:
        raise ValueError(f"prefetch_factor must be >= 1, not {prefetch}")
    device = check_device(device)
    transform = _views(transform)
    if isinstance(transform, list) and batch_transform is not None:
        raise TransformError("batch_transform with several views is not supported (MixUp and CutMix mix one "
                             "view's batch): use one transform, or mix each view's batch in your loop")
    check_spec(decoder, device)  # (a name, names or shares: refused now, with the reason; nothing made yet)
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ValueError(f"num_classes must be a positive int, not {num_classes!r}")
    step = None if isinstance(transform, list) else _batch_step(batch_transform, transform, labels, num_classes)
    if num_classes is None and step is not None:
        # MixUp/CutMix's classes bound the labels: one past them is that sample's LabelError, not torch's
        num_classes = _mix_classes(step)
    if pin_memory and device == "cpu" and not torch.cuda.is_available():
        warnings.warn("pin_memory=True, but torch sees no CUDA device: batches come in ordinary (pageable) "
                      "memory", UserWarning, stacklevel=3)
    return PipelineConfig(transform, batch_size=batch_size, device=device, decoder=decoder,
                          image_exts=tuple(split_exts(image_ext)),
                          label_exts=tuple(split_exts(label_ext)) if labels else (), labels=labels,
                          num_classes=num_classes, allow_negative_labels=bool(allow_negative_labels),
                          ring=prefetch + 3, num_threads=max(1, threads) if threads is not None else (os.cpu_count() or 1),
                          max_pixels=max_pixels, fast_decode=fast_decode, pin_memory=bool(pin_memory),
                          batch_transform=step, reuse_held=bool(reuse_buffers))


def _describe(loader: "Loader") -> dict:
    """Loader.describe(), from the Loader's public attributes."""
    pipe, reader = loader.pipeline, loader.reader
    plans, multi = [tf.plan for tf in pipe.views], pipe.multi
    return {"device": loader.device, "decoder": pipe.decoder_name(),
            # what actually decodes (the library, GPU, hardware or CPU), once the decoder is made
            "decoder_backend": getattr(pipe.decoder, "backend", None) if pipe.decoder is not None else None,
            # a split decoder's engines: each one's images, share, rate and idle time so far
            **({"decoder_engines": pipe.decoder.engine_stats()} if hasattr(pipe.decoder, "engine_stats") else {}),
            # a tuned split (decoder="auto" on CUDA): the engines decoding now, each subset's measured rate
            **({"decoder_tuning": pipe.decoder.tuning()} if getattr(pipe.decoder, "tuning", lambda: None)() else {}),
            "num_threads": loader.num_threads, "prefetch": loader.prefetch,
            "batch_size": loader.batch_size, **_what_is_read(reader), "split": reader.mode(),
            "out_size": [p.out_size for p in plans] if multi else plans[0].out_size,
            "dtype": [str(p.dtype) for p in plans] if multi else str(plans[0].dtype),
            # what runs fused, per view (several views: one list each)
            "transform": ([[type(t).__name__ for t in p.steps] for p in plans] if multi
                          else [type(t).__name__ for t in plans[0].steps]),
            "views": len(plans), "fast_decode": pipe.config.fast_decode,
            **({"mix": _mix(reader, loader.current_epoch, loader.skipped)} if reader.sources is not None else {}),
            # what runs after the fused kernel, on the finished batch
            "after": [] if loader.batch_transform is None else [repr(loader.batch_transform)],
            # where the set lives between epochs (keep=): the store's tier and bytes, or why it streams
            "keep": loader.keeper.describe()}


class Loader:
    """Batches of augmented images from tar shards, on the GPU when there is one: in place
    of torch.utils.data.DataLoader + torchvision transforms, with DataLoader's argument
    names where they have a meaning here (docs/guide.md says more of each).

    Args:
        urls: shards (see `gpudecode.ShardReader`): a directory, a brace pattern, a list
            file, URLs (local ones must exist). Or images as they lie: an ImageFolder tree
            (torchvision's classes and indices), a list file of `path label` lines, a list
            of paths or (path, label) pairs, Parquet files (gpudecode.io.parquet). Or a
            Dataset as a script builds it: torchvision's ImageFolder (or DatasetFolder)
            with its transform, FakeData, a Hugging Face `datasets.Dataset` (its rows
            read from its Arrow table). Or a mixture: a list of `gpudecode.Source`,
            each with its weight, repeat or choose (and label_offset), drawn in exact
            counts each epoch (`describe()["mix"]`, `loader.stats.sources`).
        batch_size: images per batch.
        transform: a `gpudecode.transforms.Compose` (torchvision's and timm's are converted
            by `Compose.from_torchvision`, or refused with the reason); a list of them
            gives several views of each image.
        batch_transform: run on each finished batch and its labels, on its device: MixUp,
            CutMix, RandomChoice over them (torchvision v2's converted, drawn seeded; labels
            become [N, num_classes] float32), or any callable (images, labels) -> (images,
            labels), run on the trainer's thread with Python's, numpy's and torch's
            generators seeded from the batch's draw (and restored after).
        device: "auto" (CUDA if available, else CPU), "cpu", "cuda", "cuda:N" or a torch.device.
        decoder: "auto" (on a GPU every engine at once), "cpu", "nvimgcodec", "dali", "torchcodec",
            engine names, {engine: share} or a decoder (gpudecode.decode.make_decoder).
        shuffle: shard order and a sample shuffle buffer per epoch (on by default).
        seed: fixes every random choice with (epoch, sample position), whatever the thread
            count. None: `torch.initial_seed()`, rank 0's broadcast when torch.distributed
            is initialized (otherwise give every rank the same seed).
        num_workers: CPU threads that decode and run the kernel (DataLoader's worker
            processes become threads; default: all cores; 0 means 1).
        pin_memory: CPU batches in pinned memory (when CUDA is present).
        persistent_workers: accepted for DataLoader's sake (threads start per epoch).
        prefetch_factor: batches prepared ahead, for the whole loader (default 2).
        drop_last: drop the last, smaller batch.
        image_ext, label_ext: extensions tried in order (";"-separated); images default to
            torchvision's (jpg, jpeg, png, webp, bmp, tif, tiff, ppm, pgm) and npy (a tensor
            sample from `gpudecode precache`); `.cls` holds an integer as text, `.json` a
            {"label": int}. labels=False turns labels off.
        num_classes: when given, a label must be below it (a LabelError names the sample).
        allow_negative_labels: take negative labels (refused by default: -1 and -100 are
            CrossEntropyLoss's ignore_index).
        on_error: "raise" (default), "warn" or "skip" for bad shards, images and labels;
            what was skipped is in `skipped`.
        rank, world_size: this process's part; from torch.distributed, torchrun or SLURM
            when None.
        even: every rank yields exactly `len(loader)` batches (DDP's equal steps): "pad"
            repeats samples up to ceil(N / ranks), "drop" leaves out N mod ranks, as
            DistributedSampler; images lost to on_error="skip" are made up by repeats in
            their batch. "auto": "pad" with several ranks. None: each sample exactly once
            (evaluation; a warning when ranks' counts differ).
        split: "auto", "shard" or "sample" (see gpudecode.ShardReader); "elastic": the
            epoch's global order depends on (seed, epoch, sources) alone, each sample draws
            by its global position, and a state resumes on another world size or batch
            size (gpudecode.io.epoch has the design and its costs).
        max_pixels: images with more pixels are refused (decompression bombs).
        fast_decode: CPU JPEG decoding with the fast IDCT (not bit-exact).
        remote: timeouts and retries for remote shards (`gpudecode.RemoteOptions`).
        cache_dir, cache_limit: a local copy of each remote shard in `cache_dir` (later
            epochs make no request), least recently used ones evicted past `cache_limit` bytes.
        reuse_buffers: overwrite an output buffer whose batch you still hold (see below).
        repeated_augs: k > 1 is repeated augmentation (torchvision's `--ra-reps k`, DeiT's
            `--repeated-aug`): each rank reads what torchvision's RASampler gives it, each
            copy with its own draws (in place of the script's RASampler).
        epoch_size: a mixture's epoch: an int, or "all_exhausted" (default: every weighted
            source at least once) or "first_exhausted" (none repeated).
        keep, keep_budget, keep_size: the set kept decoded in "ram"/"gpu"/"auto" (gpudecode.resident).
        num_threads, prefetch: older names of num_workers and prefetch_factor.

    Sizes: `len(loader)` (batches per epoch for this rank), `num_samples` (this rank's
    samples per epoch), `total_samples`; `dataset` (every sample by index) and `sampler`
    (this rank's share, with `set_epoch` and `len`) stand where DataLoader has them.

    Epochs: each iteration starts the next epoch unless `set_epoch` chose one; `cursor`
    (gpudecode.cursor) holds where the Loader stands, in one phase; the guide's
    "Resuming" table says what every order of load_state_dict, set_epoch and iteration does.

    A yielded batch is yours, as a DataLoader's is: keep it, no `.clone()` needed. Batches
    are made in a ring of `prefetch + 3` buffers; one you still hold a tensor of is not
    written again (the ring takes new memory in its place) unless `reuse_buffers=True`
    (FFCV's and DALI's way: no allocation, but a batch kept past `prefetch + 3` later ones
    changes under you). The module doc has the GPU streams.
    """

    def __init__(self, urls: Any, *, batch_size: int, transform: Any = None, device: "str | torch.device" = "auto",
                 decoder: Any = "auto", shuffle: bool = True, seed: int | None = None,
                 image_ext: str | Sequence[str] = DEFAULT_IMAGE_EXTS, label_ext: str | Sequence[str] = "cls",
                 labels: bool = True, num_classes: int | None = None, allow_negative_labels: bool = False,
                 num_workers: int | None = None, pin_memory: bool = False,
                 persistent_workers: bool = False, prefetch_factor: int | None = None, drop_last: bool = False,
                 on_error: OnError = "raise", rank: int | None = None, world_size: int | None = None,
                 even: Literal["auto", "pad", "drop"] | None = "auto", split: Literal["auto", "shard", "sample", "elastic"] = "auto",
                 buffer_size: int = 1000, max_pixels: int = DEFAULT_MAX_PIXELS, fast_decode: bool = False,
                 remote: RemoteOptions | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_limit: int | None = None, num_threads: int | None = None,
                 prefetch: int | None = None, batch_transform: Any = None, reuse_buffers: bool = False,
                 repeated_augs: int = 1, epoch_size: int | str | None = None, keep: Keep | None = None,
                 keep_budget: int | None = None, keep_size: int | None = None, **dataloader_only: Any) -> None:
        _refuse_dataloader_only(dataloader_only)  # (DataLoader's other arguments: what the Loader does instead)
        urls, transform = _dataset_source(urls, transform)  # (torchvision's ImageFolder as it is: its samples)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        config = _pipeline_config(transform, batch_transform, batch_size=batch_size, device=device, decoder=decoder,
                                  image_ext=image_ext, label_ext=label_ext, labels=labels, num_classes=num_classes,
                                  allow_negative_labels=allow_negative_labels, workers=(num_workers, num_threads),
                                  ahead=(prefetch_factor, prefetch), max_pixels=max_pixels, fast_decode=fast_decode,
                                  pin_memory=pin_memory, reuse_buffers=reuse_buffers)
        self.keeper = Keeper(keep, keep_budget, config.device, keep_size)  # where the set lives between epochs
        self.batch_size, self.device, self.drop_last = batch_size, config.device, drop_last
        self.prefetch, self.num_threads = config.ring - 3, config.num_threads
        self.persistent_workers = bool(persistent_workers)  # (threads start per epoch: nothing to keep alive)
        self.transform = config.transform if isinstance(config.transform, Compose) else list(config.transform)
        self.batch_transform = config.batch_transform
        self.policy = ErrorPolicy(on_error)  # one for every stage: one list of what was skipped
        self._seed_given = seed is not None
        # the seed before the reader: the default one is made the same on every rank
        self.seed = int(seed) if seed is not None else _default_seed(
            world_size if world_size is not None else _shards.detect_rank()[1])
        self.reader = ShardReader(urls, shuffle=shuffle, seed=self.seed, buffer_size=buffer_size, rank=rank,
                                  world_size=world_size, num_threads=2, policy=self.policy,
                                  extensions=list(config.image_exts + config.label_exts), even=even, split=split,
                                  remote=remote, cache_dir=cache_dir, cache_limit=cache_limit,
                                  # tensor samples stay in the mapped shard: the kernel reads them there
                                  map_extensions=[e for e in config.image_exts if e == "npy"],
                                  # the others are read into recycled memory (no page faults a read)
                                  pool_extensions=[e for e in config.image_exts if e != "npy"],
                                  # an image file is read only up to what an image of max_pixels can take
                                  max_file_bytes=file_cap(max_pixels), repeated_augs=repeated_augs,
                                  chunk=batch_size, epoch_size=epoch_size)
        _check_sources(self.reader, config)  # (what the data's metadata tells now, not at the first batch)
        self.stats = LoaderStats()
        self.cursor = Cursor()  # where this Loader stands in its epochs (one phase value)
        # the per-batch work and every buffer it cycles through (output slots: prefetch + 3)
        self._pipe = Pipeline(config.replace(label_offsets=self.reader.label_offsets), policy=self.policy)
        self._active: weakref.ref[LoaderIterator] | None = None
        self._iter_lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def skipped(self) -> list[Skipped]:
        """Everything skipped under on_error="skip"/"warn": bad shards, images, labels."""
        return self.policy.skipped

    @property
    def epoch(self) -> int:
        """The epoch this Loader's record is about (see `current_epoch`)."""
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch the next iteration runs (its shard order, shuffle and draws).
        After load_state_dict() of a state saved in the middle of epoch e, set_epoch(e)
        keeps that place (the next iteration continues e exactly), and set_epoch(f) for
        another f starts f from its beginning, with a warning that names both epochs (the
        rest of e is not read): never f from e's place."""
        self.cursor.choose(int(epoch))
        self.reader.set_epoch(self.cursor.epoch)

    def _batches(self, epoch: int) -> int:
        n = self.reader.samples_per_epoch(epoch)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def current_epoch(self) -> int:
        """The running epoch; the one that just ran to its end (until the next iteration
        starts or set_epoch chooses one); else the one the next iteration will run."""
        active = self._active() if self._active is not None else None
        if active is not None and active.active:
            return active.epoch
        return self.cursor.epoch if self.cursor.finished else self.cursor.next_epoch()

    @property
    def num_samples(self) -> int:
        """Samples this rank yields per epoch (counts the shards' headers once)."""
        return self.reader.samples_per_epoch(self.current_epoch)

    @property
    def total_samples(self) -> int:
        """Samples in all shards, over all ranks."""
        return self.reader.total_samples

    def __len__(self) -> int:
        """Batches per epoch for this rank (`current_epoch`'s), as iteration yields them (with
        on_error="skip" and even=None, a batch that loses every image is not yielded)."""
        return self._batches(self.current_epoch)

    @property
    def dataset(self) -> "ShardDataset":
        """Every sample, by index (the shards' order, unshuffled), as (image, label) with this
        loader's transform applied on the CPU: DataLoader's `.dataset`, e.g. for
        `torch.utils.data.Subset`."""
        from .dataset import ShardDataset

        return ShardDataset(self.reader, self._pipe.config, seed=self.seed)

    @property
    def sampler(self) -> "LoaderSampler":
        """This rank's share of an epoch, as DistributedSampler stands beside a DataLoader:
        `len()` (samples per epoch), `set_epoch()`, and iteration over the dataset indices."""
        return LoaderSampler(self)

    @property
    def pipeline(self) -> Pipeline:
        """The per-batch work of this Loader (read-only: the profiler and benches measure it)."""
        return self._pipe

    batch_sampler = None  # the Loader batches itself (for code that looks, e.g. Lightning: it uses `sampler`)

    def state_dict(self) -> dict:
        """Where this rank stands, in torchdata's StatefulDataLoader form (gpudecode's own in
        `dataset_state`: epoch, position, seed, split...); picklable. A job restarted with the
        same shards, world size and batch size resumes exactly (split="elastic": any)."""
        rank, world = self.reader.placement()
        c, elastic = self.cursor, {}
        if self.reader.resumes_anywhere:
            total = c.epoch_total if c.epoch_total is not None else self.reader.plan(c.epoch).total
            elastic = {"global_start": c.global_start, "global_position": c.global_position(
                batch_size=self.batch_size, consumers=world * _shards.detect_worker()[1], total=total or 0)}
        return c.to_state({"seed": self.seed, "rank": rank, "world_size": world, "split": self.reader.mode(),
                           "even": self.reader.even, "shuffle": self.reader.shuffle, "shards": len(self.reader.urls),
                           "batch_size": self.batch_size, "drop_last": self.drop_last,
                           "fingerprint": shards_fingerprint(self.reader),
                           "transform": transforms_fingerprint(self._pipe.config), **elastic})

    def load_state_dict(self, state: dict, *, strict: bool = True) -> None:
        """Resumes from state_dict(): the next iteration continues that epoch where it stood
        (or starts the next one, if it had finished). strict=False takes a state saved with
        other transforms (a fixed bug, a new augmentation schedule): what is read is the same.

        Raises:
            ValueError: a state of another kind, truncated or out of range, or saved with another
                seed (when this loader's seed was given), world size, split, shard count, batch
                size, other shards (their names and order: the fingerprint) or, strictly, transforms.
        """
        ds = Cursor.saved(state)
        active = self._active() if self._active is not None else None
        if active is not None and active.active:
            raise ConcurrentIterationError("load_state_dict() while an iterator of this Loader is active: the state "
                                           "takes effect at the next iteration; close or exhaust this one first")
        mine, regrid = _resume_keys(self.reader, self._pipe.config, ds, self.batch_size,
                                    self.seed if self._seed_given else None, strict)
        self.cursor.from_state(state, mine, regrid=regrid, size=self.reader.samples_per_epoch)
        self.seed = self.reader.seed = int(ds["seed"])
        self.reader.set_epoch(self.cursor.epoch)

    def describe(self) -> dict:
        """What this loader does and with what (the decoder is made on first use)."""
        return _describe(self)

    def __iter__(self) -> LoaderIterator:
        """Starts an epoch (resuming where load_state_dict said, if it was called). An
        older iterator still active is ended first, as if dropped (a DataLoader with
        persistent workers ends it too; Lightning and others start a new one without
        exhausting the last: a sanity check, limit_*_batches, a sized epoch): its next()
        then raises ConcurrentIterationError, never a batch of the new epoch."""
        with self._iter_lock:  # the end and the start are one step: one iterator is active at a time
            if self._pid != os.getpid():
                # after a fork, the child's copy drops what belongs to the parent: its iterator,
                # its decoder (threads that are not here), its GPU streams
                self._pid, self._active = os.getpid(), None
                self._pipe.after_fork()
            active = self._active() if self._active is not None else None
            if active is not None and active.active:
                active.supersede()
            start = self.cursor.start()
            self.reader.set_epoch(start.epoch)
            self.reader.warn_unequal(start.epoch)  # here, in the caller's thread, before the first batch
            self._pipe.ensure_decoder()
            self.policy.reset()
            self.stats = LoaderStats()
            it = LoaderIterator(self, start, functools.partial(self._batches, start.epoch))
            try:
                self._active = weakref.ref(it)
                return it
            except BaseException:  # Ctrl-C here: the iterator's threads stop before the handler runs
                it.close()
                raise

    def close(self) -> None:
        """Ends the active iterator, releases the decoder's threads, the output buffers and
        the CUDA streams; iterating again afterwards makes them anew."""
        active = self._active() if self._active is not None else None
        if active is not None:
            active.close()
        self._active = None
        self._pipe.close()
        self.reader.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
