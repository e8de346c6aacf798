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
import hashlib
import itertools
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

import torch

from ._manifest import _read_json
from ._probe import DEFAULT_MAX_PIXELS
from ._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from .decode import NAMES, available, check_device, choose, make_decoder
from .errors import BackendUnavailableError, ConcurrentIterationError, ErrorPolicy, OnError, Skipped, TransformError
from .io import shards as _shards
from .io.files import DEFAULT_IMAGE_EXTS, file_cap
from .io.reader import Sample, ShardReader, split_exts
from .io.remote import RemoteOptions
from .mixing import BatchTransform, CutMix, MixUp, RandomChoice, as_batch_transform
from .pipeline import Batch, Pipeline, Ready
from .stats import LoaderStats
from .transforms import Compose, carries_compose

if TYPE_CHECKING:
    from .dataset import ShardDataset

__all__ = ["Loader", "LoaderIterator", "LoaderSampler"]


class _Epoch:
    """One epoch's two producer threads: "decode" reads, probes, draws and decodes batch
    k+1 while "augment" runs the fused kernel on batch k and fills the queue the trainer
    takes from. Exceptions are handed on to the trainer, which re-raises them."""

    def __init__(self, loader: "Loader", epoch: int, start: int) -> None:
        self.loader = loader
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, loader.prefetch))
        self.mid: queue.Queue = queue.Queue(maxsize=loader._pipe.depth)  # the rings are this deep
        self.group = ThreadGroup("loader")
        self.stop = self.group.stop_event
        # the ranks and the even policy, resolved once an epoch (not again each batch)
        self.rank, self.world = loader.reader.placement()
        self.even = loader.reader.even
        # split="elastic": the epoch's plan from the global position a resumed job stood at
        self.plan = (loader.reader.plan(epoch, start=loader._global_start)
                     if loader.reader.mode() == "elastic" else None)
        if self.plan is not None:
            loader._epoch_total = self.plan.total
        # a decoder that can be interrupted (the CPU one: between rows, on its native
        # threads) is, so close() or Ctrl-C never waits for a huge image to finish
        decoder = loader._pipe.decoder
        # (only a decoder this Loader made: one handed in may serve other Loaders too)
        interrupt = getattr(decoder, "interrupt", None) if loader._pipe.owns_decoder else None
        if interrupt is not None:
            decoder.resume()
            self.group.on_stop(interrupt)
        self.group.start(self._decode_stage, epoch, start, name="decode")
        self.group.start(self._augment_stage, name="augment")

    def _put(self, q: queue.Queue, item: Any) -> bool:
        return put_until_stopped(q, item, self.stop)

    def _decode_stage(self, epoch: int, start: int) -> None:
        ld = self.loader
        samples = ld.reader.iter_epoch(epoch, start=start, stop=self.stop, plan=self.plan)
        elastic = self.plan.chunks if self.plan is not None else None
        names = [src.label for src in ld.reader.sources] if ld.reader.sources is not None else None
        try:
            position = start
            while not self.stop.is_set():
                t0 = time.perf_counter()
                chunk: list[Sample] = list(itertools.islice(samples, ld.batch_size))  # (the loop in C)
                t_read = time.perf_counter() - t0
                if self.stop.is_set():
                    return
                if not chunk or (ld.drop_last and len(chunk) < ld.batch_size):
                    break
                if names is not None:  # the mix, counted as read (loader.stats.sources)
                    for sample in chunk:
                        i = ld.reader.source_of(sample.shard)
                        if i is not None:
                            ld.stats.sources[names[i]] = ld.stats.sources.get(names[i], 0) + 1
                    with ld.reader._read_lock:
                        ld.stats.source_read = {names[i]: (t, n) for i, (t, n) in ld.reader.source_read.items()}
                if elastic is not None:
                    # batch k is chunk k of the global order: its samples draw by their global
                    # positions, as a single process would draw them (any world size alike)
                    k = position // ld.batch_size
                    at = elastic[k] if k < len(elastic) else elastic[-1] + ld.batch_size * (k - len(elastic) + 1)
                    prepared = ld._pipe.prepare(chunk, seed=ld.seed, epoch=epoch, position=at, rank=0, world=1)
                else:
                    prepared = ld._pipe.prepare(chunk, seed=ld.seed, epoch=epoch, position=position,
                                                rank=self.rank, world=self.world)
                prepared.timing.read = t_read
                position += len(chunk)
                prepared.position = position
                if not self._put(self.mid, prepared):
                    return
            self._put(self.mid, None)
        except BaseException as e:  # handed on to the trainer, which re-raises it
            self._put(self.mid, e)
        finally:
            samples.close()  # ends the reader's threads (this thread runs its generator)

    def _augment_stage(self) -> None:
        ld = self.loader
        try:
            while True:
                item = get_until_stopped(self.mid, self.stop)
                if item is STOPPED:
                    return
                if item is None or isinstance(item, BaseException):
                    self._put(self.queue, item)
                    return
                ready = ld._pipe.finish(item, self.even)
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
    included) passes through `__next__`; its threads are joined then."""

    def __init__(self, loader: "Loader", epoch: int, start: int) -> None:
        self._loader = loader
        self.epoch = epoch
        self._done = False
        self._superseded = False  # ended by a newer iter(loader)
        self._pid = os.getpid()
        self._busy = threading.Lock()  # one next() at a time
        self._ep = _Epoch(loader, epoch, start)

    @property
    def active(self) -> bool:
        return not self._done and self._pid == os.getpid()

    def __iter__(self) -> "LoaderIterator":
        return self

    def __len__(self) -> int:
        return self._loader._batches(self.epoch)

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
        ld, ep = self._loader, self._ep
        gpu = ld._pipe.gpu
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
            ld._finished = True
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        r: Ready = item
        ld._yielded += 1
        r.timing.wait = wait
        r.timing.delivered = t0 + wait
        ld.stats.batches.append(r.timing)
        ld._position = r.position
        if gpu is not None and r.ready is not None:
            gpu.hand_over(r)
        # a user's batch callable: here, on the trainer's thread, seeded from the batch's draw
        return ld._pipe.user_step(r.batch, r.draw)

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
        ld = self._loader
        counts = ld.reader.sample_counts()
        base, pos = {}, 0
        for u in ld.reader.urls:
            base[u] = pos
            pos += counts[u]
        epoch = ld._current_epoch()
        if ld.reader.mode() == "elastic":  # the plan's order: its segments are read in another
            files = {u: ld.reader.file_order(u, epoch) for u in ld.reader.files}
            for url, i in ld.reader.plan(epoch).order():
                yield base[url] + (files[url][i] if url in files else i)
            return
        share = ld.reader.share(epoch)
        n = 0
        for seg in share.segments:
            stop = counts[seg.url] if seg.stop is None else seg.stop
            order = ld.reader.file_order(seg.url, epoch) if seg.url in ld.reader.files else None
            for i in range(seg.start, stop):
                if share.target is not None and n >= share.target:
                    return
                yield base[seg.url] + (order[i] if order is not None else i)
                n += 1


class Loader:
    """Batches of augmented images from tar shards, on the GPU when there is one: in place
    of torch.utils.data.DataLoader + torchvision transforms, with DataLoader's argument
    names where they have a meaning here.

    Args:
        urls: shards (see `gpudecode.ShardReader`): a directory, a brace pattern, a list
            file, URLs. Local shards must exist (checked here). Or images as they lie:
            an ImageFolder tree (`Loader("imagenet/train", ...)`: torchvision's classes
            and indices), a list file of `path label` lines, a list of image paths or
            (path, label) pairs. Or a mixture: a list of `gpudecode.Source`, each any of
            those with its weight, repeat or choose (and label_offset); each epoch draws
            exactly its counts from each (`describe()["mix"]`, `loader.stats.sources`),
            split elastically over the ranks.
        batch_size: images per batch.
        transform: a `gpudecode.transforms.Compose` (a torchvision Compose is converted
            with `Compose.from_torchvision`, or refused with the reason).
        batch_transform: run on each finished batch and its labels, on its device:
            `transforms.MixUp`, `CutMix`, `RandomChoice` over them (torchvision v2's, which
            are converted, so their draws are seeded; labels become [N, num_classes]
            float32, num_classes taken from the Loader's when the transform has none), or
            any callable (images [N, 3, h, w], labels) -> (images, labels) (torchvision's
            reference RandomMixUp/RandomCutMix in a v1 RandomChoice, timm's Mixup): run as
            written on the trainer's thread in next(), with Python's, numpy's and torch's
            generators seeded from the batch's draw and restored after.
        device: "auto" (CUDA if available, else CPU), "cpu", "cuda" or "cuda:N", or a
            torch.device of those.
        decoder: "auto" | "cpu" | "nvimgcodec" | "dali" | "torchcodec", or a decoder instance
            (see gpudecode.decode); `describe()` says which one runs.
        shuffle: shard order and a sample shuffle buffer per epoch (DataLoader's meaning;
            on by default here, as a training loader).
        seed: fixes every random choice with (epoch, sample position), whatever the thread
            count. None (default): `torch.initial_seed()`, so `torch.manual_seed(s)`
            fixes the order; with several ranks rank 0's is used (broadcast when
            torch.distributed is initialized; otherwise give every rank the same seed).
        num_workers: CPU threads that decode and run the kernel (DataLoader's worker
            processes become threads here; default: all cores; 0 means 1).
        pin_memory: batches on the CPU come in pinned memory (when CUDA is present), so
            `.to("cuda", non_blocking=True)` overlaps; no effect with device="cuda".
        persistent_workers: accepted for DataLoader's sake; threads start per epoch in
            milliseconds, so there is nothing to keep alive.
        prefetch_factor: batches prepared ahead (DataLoader's meaning per worker; here for
            the whole loader; default 2).
        drop_last: drop the last, smaller batch.
        image_ext, label_ext: extensions tried in order (";"-separated); the default
            image ones are torchvision's (jpg, jpeg, png, webp, bmp, tif, tiff, ppm, pgm)
            and npy, a tensor sample written by `gpudecode precache`; `.cls` holds an
            integer as text, `.json` a {"label": int} (gpudecode.labels). labels=False
            turns labels off.
        num_classes: when given, a label must be below it (a LabelError names the sample).
        allow_negative_labels: take negative labels (refused by default: -1 and -100 are
            CrossEntropyLoss's ignore_index, a sample that would train on nothing).
        on_error: "raise" (default), "warn" or "skip" for bad shards, undecodable images
            and bad labels; what was skipped is in `skipped` (see README "Robustness").
        rank, world_size: this process's part; detected from torch.distributed, torchrun
            or SLURM when None.
        even: "auto", None, "pad" or "drop": every rank yields exactly `len(loader)`
            batches (DDP needs equal step counts): "pad" repeats samples up to ceil(N /
            ranks) per rank, "drop" leaves out the last N mod ranks samples, as
            DistributedSampler does. Images lost to on_error="skip" are made up by repeats
            of others in the same batch. "auto" (default): "pad" with several ranks (as
            DistributedSampler's default), None alone. None: each sample exactly once
            (evaluation); a warning says so before the first batch when ranks' counts differ.
        split: "auto", "shard" or "sample": how an epoch is shared over ranks (see
            gpudecode.ShardReader); "elastic": the epoch's global order of samples depends
            on (seed, epoch, sources) alone and each global batch is a run of it (every
            rank takes batch_size consecutive positions a round), each sample draws its
            augmentations by its global position, and a state_dict() resumes on another
            world size or batch size (gpudecode.io.epoch has the design and its costs).
        max_pixels: images with more pixels are refused (decompression bombs).
        fast_decode: CPU JPEG decoding with the fast IDCT, plain upsampling and DCT
            downscaling (not bit-exact; see the decode docs).
        remote: timeouts and retries for remote shards (`gpudecode.RemoteOptions`).
        cache_dir, cache_limit: keep a local copy of each remote shard in `cache_dir`
            (written atomically, size checked; later epochs read it and make no request),
            evicting the least recently used copies past `cache_limit` bytes (None: no limit).
        num_threads, prefetch: older names of num_workers and prefetch_factor.

    Sizes: `len(loader)` (batches per epoch for this rank), `loader.num_samples` (samples
    per epoch for this rank), `loader.total_samples` (samples in the shards); `loader.dataset`
    (map-style view of every sample) and `loader.sampler` (this rank's share, with
    `set_epoch` and `len`) stand where DataLoader has them.

    Epochs: each new iteration starts the next epoch unless `set_epoch` chose one; the
    README's "Resuming" table says what every order of load_state_dict, set_epoch and
    iteration does.

    A yielded batch is yours, as a DataLoader's is: keep it as long as you like, no
    `.clone()` needed. Batches are made in a ring of `prefetch + 3` output buffers; a
    buffer is written again only when nothing of yours refers to its last batch any more
    (no tensor on its memory: the batch, a view or a slice of it), which in the usual loop
    is always the case, so the ring is reused at full speed; a buffer whose batch you
    still hold becomes yours, and the ring takes new memory in its place (`reuse_buffers
    =True` overwrites it anyway, as FFCV's and DALI's iterators do: no allocation, but a
    batch kept past `prefetch + 3` later ones changes under you). On a GPU a buffer is
    reused only after the work enqueued on your stream for its batch has completed (an
    event recorded there; the module doc has the stream design).

    Args (beyond those above):
        reuse_buffers: see above (default False).
        repeated_augs: k > 1 is repeated augmentation (the `--ra-sampler --ra-reps k` of
            torchvision's reference recipes, DeiT's `--repeated-aug`): each rank reads what
            torchvision's RASampler gives it (the same multiset per epoch and rank, for an
            ImageFolder tree or a file list; see ShardReader), each copy of an image with
            its own draws. Use it in place of the script's RASampler.
        epoch_size: a mixture's epoch: the samples the weighted sources share (an int:
            the epoch less the repeat/choose sources' counts), or torchdata.nodes' stop
            criteria: "all_exhausted" (default: every weighted source's samples at least
            once, the smaller ones cycled) or "first_exhausted" (none repeated).
    """

    def __init__(self, urls: Any, *, batch_size: int, transform: Any, device: "str | torch.device" = "auto",
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
                 repeated_augs: int = 1, epoch_size: int | str | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        if num_workers is not None and num_threads is not None and num_workers != num_threads:
            raise ValueError("give num_workers or num_threads (its older name), not both")
        if prefetch_factor is not None and prefetch is not None and prefetch_factor != prefetch:
            raise ValueError("give prefetch_factor or prefetch (its older name), not both")
        workers = num_workers if num_workers is not None else num_threads
        if workers is not None and workers < 0:
            raise ValueError(f"num_workers must be >= 0, not {workers}")
        ahead = prefetch_factor if prefetch_factor is not None else (prefetch if prefetch is not None else 2)
        if ahead < 1:
            raise ValueError(f"prefetch_factor must be >= 1, not {ahead}")
        transform = _views(transform)
        if isinstance(transform, list) and batch_transform is not None:
            raise TransformError("batch_transform with several views is not supported (MixUp and CutMix mix one "
                                 "view's batch): use one transform, or mix each view's batch in your loop")
        device = check_device(device)
        if isinstance(decoder, str):  # a missing extra is said now, not at the first batch
            if decoder == "nvjpeg" or choose(decoder, device) not in NAMES:
                make_decoder(decoder, device=device, num_threads=1, max_pixels=0)  # raises with the reason
            ok, why = available(choose(decoder, device))
            if not ok:
                raise BackendUnavailableError(f"decoder {decoder!r} cannot be used here: {why}")
        self.transform = transform
        self.batch_transform = (None if isinstance(transform, list)
                                else _batch_step(batch_transform, transform, labels, num_classes))
        self.batch_size = batch_size
        self.device = device
        self.decoder_name = decoder
        self.image_exts = split_exts(image_ext)
        self.label_exts = split_exts(label_ext) if labels else []
        self.labels = labels
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 1):
            raise ValueError(f"num_classes must be a positive int, not {num_classes!r}")
        if num_classes is None and self.batch_transform is not None:
            # MixUp/CutMix's classes bound the labels: one past them is that sample's LabelError, not torch's
            num_classes = _mix_classes(self.batch_transform)
        self.num_classes = num_classes
        self.allow_negative_labels = bool(allow_negative_labels)
        self.num_threads = max(1, workers) if workers is not None else (os.cpu_count() or 1)
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and device == "cpu" and not torch.cuda.is_available():
            warnings.warn("pin_memory=True, but torch sees no CUDA device: batches come in ordinary (pageable) "
                          "memory", UserWarning, stacklevel=2)
        self.persistent_workers = bool(persistent_workers)
        self.prefetch = ahead
        self.drop_last = drop_last
        self.policy = ErrorPolicy(on_error)  # one for every stage: one list of what was skipped
        self.on_error = self.policy.on_error
        self.max_pixels = max_pixels
        self.fast_decode = fast_decode
        self._seed_given = seed is not None
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        # the seed before the reader: the default one is made the same on every rank
        self.seed = int(seed) if seed is not None else _default_seed(
            world_size if world_size is not None else _shards.detect_rank()[1])
        self.reader = ShardReader(urls, shuffle=shuffle, seed=self.seed, buffer_size=buffer_size, rank=rank,
                                  world_size=world_size, num_threads=2, policy=self.policy,
                                  extensions=self.image_exts + self.label_exts, even=even, split=split,
                                  remote=remote, cache_dir=cache_dir, cache_limit=cache_limit,
                                  # tensor samples stay in the mapped shard: the kernel reads them there
                                  map_extensions=[e for e in self.image_exts if e == "npy"],
                                  # the others are read into recycled memory (no page faults a read)
                                  pool_extensions=[e for e in self.image_exts if e != "npy"],
                                  # an image file is read only up to what an image of max_pixels can take
                                  max_file_bytes=file_cap(max_pixels), repeated_augs=repeated_augs,
                                  chunk=batch_size, epoch_size=epoch_size)
        if not isinstance(transform, list) and transform.plan.out_size is None and batch_size > 1:
            _check_stored_sizes(self.reader)
        self.epoch = 0
        self.stats = LoaderStats()
        # the per-batch work and every buffer it cycles through (output slots: prefetch + 3)
        self._pipe = Pipeline(transform, batch_size=batch_size, device=device, decoder=decoder,
                              image_exts=self.image_exts, label_exts=self.label_exts, labels=labels,
                              num_classes=num_classes, allow_negative_labels=self.allow_negative_labels,
                              policy=self.policy, ring=self.prefetch + 3, num_threads=self.num_threads,
                              max_pixels=max_pixels, fast_decode=fast_decode, pin_memory=self.pin_memory,
                              batch_transform=self.batch_transform, reuse_held=bool(reuse_buffers))
        self._pipe.label_offsets = self.reader.label_offsets  # a mixture's sources' (gpudecode.Source)
        self.reuse_buffers = bool(reuse_buffers)
        self._position = 0
        self._yielded = 0        # batches handed over in the current (or last) epoch
        self._finished = False   # the current (or last) epoch ran to its end
        self._resume: int | None = None
        self._global_start = 0   # split="elastic": the global position the running epoch started at
        self._epoch_total: int | None = None  # split="elastic": the running epoch's samples
        self._resume_global: int | None = None
        self._epoch_chosen = True  # set_epoch (or load_state_dict) chose the next epoch
        self._started = False
        self._active: weakref.ref[LoaderIterator] | None = None
        self._iter_lock = threading.Lock()
        self._pid = os.getpid()

    # -- public API ---------------------------------------------------------------------

    @property
    def skipped(self) -> list[Skipped]:
        """Everything skipped under on_error="skip"/"warn": bad shards, images, labels."""
        return self.policy.skipped

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch the next iteration runs (its shard order, shuffle and draws).
        After load_state_dict() of a state saved in the middle of epoch e, set_epoch(e)
        keeps that place (the next iteration continues e exactly), and set_epoch(f) for
        another f starts f from its beginning, with a warning that names both epochs (the
        rest of e is not read): never f from e's place."""
        epoch = int(epoch)
        if self._resume is not None and epoch != self.epoch:
            warnings.warn(f"set_epoch({epoch}) after load_state_dict() of a state saved {self._yielded} batches into "
                          f"epoch {self.epoch}: epoch {epoch} starts from its beginning, and the rest of epoch "
                          f"{self.epoch} is not read (set_epoch({self.epoch}), or no set_epoch, continues it)",
                          RuntimeWarning, stacklevel=2)
            self._resume = None
            self._resume_global = None
            self._yielded = 0
            self._position = 0
            self._finished = False
        self.epoch = epoch
        self.reader.set_epoch(epoch)
        self._epoch_chosen = True

    def _next_epoch(self) -> int:
        """The epoch the next iteration will run."""
        return self.epoch if self._epoch_chosen or not self._started else self.epoch + 1

    def _samples(self, epoch: int) -> int:
        return self.reader.samples_per_epoch(epoch)

    def _batches(self, epoch: int) -> int:
        n = self._samples(epoch)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _current_epoch(self) -> int:
        """The running epoch; the one that just ran to its end (until the next iteration
        starts or set_epoch chooses one); else the one the next iteration will run."""
        active = self._active() if self._active is not None else None
        if active is not None and active.active:
            return active.epoch
        if self._finished and not self._epoch_chosen:
            return self.epoch
        return self._next_epoch()

    @property
    def num_samples(self) -> int:
        """Samples this rank yields per epoch (counts the shards' headers once)."""
        return self._samples(self._current_epoch())

    @property
    def total_samples(self) -> int:
        """Samples in all shards, over all ranks."""
        return self.reader.total_samples

    def __len__(self) -> int:
        """Batches per epoch for this rank: what iteration yields (under on_error="skip"
        with even=None, batches that lose all their images are not yielded). During an
        epoch and after it ends, that epoch's; before the first, or after set_epoch, the
        next one's (the counts differ between epochs only with even=None and several ranks)."""
        return self._batches(self._current_epoch())

    @property
    def dataset(self) -> "ShardDataset":
        """Every sample, by index (the shards' order, unshuffled), as (image, label) with this
        loader's transform applied on the CPU: DataLoader's `.dataset`, e.g. for
        `torch.utils.data.Subset`."""
        from .dataset import ShardDataset

        return ShardDataset(self.reader, self.transform, image_exts=self.image_exts, label_exts=self.label_exts,
                            labels=self.labels, max_pixels=self.max_pixels, seed=self.seed,
                            allow_negative_labels=self.allow_negative_labels, num_classes=self.num_classes)

    @property
    def sampler(self) -> "LoaderSampler":
        """This rank's share of an epoch, as DistributedSampler stands beside a DataLoader:
        `len()` (samples per epoch), `set_epoch()`, and iteration over the dataset indices."""
        return LoaderSampler(self)

    @property
    def pipeline(self) -> Pipeline:
        """The per-batch work of this Loader (read-only: for the profiler and the benches,
        which measure its stages through it)."""
        return self._pipe

    @property
    def batch_sampler(self) -> None:
        """None: the Loader batches its samples itself (DataLoader's attribute, for code
        that looks for it, e.g. Lightning: it then finds `sampler` and its set_epoch)."""
        return None

    _STATE_FORMAT = "gpudecode.Loader/1"

    def state_dict(self) -> dict:
        """Where this rank stands, in the plain-dict form of torchdata's StatefulDataLoader
        (`_num_yielded`, `_iterator_finished`, ...; gpudecode's own in `dataset_state`:
        epoch, position in samples, seed and the split). Picklable; a job restarted with
        the same shards, world size and batch size resumes exactly."""
        rank, world = self.reader.placement()
        elastic = {}
        if self.reader.mode() == "elastic":
            elastic = {"global_position": self._global_position(world), "global_start": self._global_start}
        return {
            "_index_sampler_state": None,
            "_sampler_iter_state": None,
            "_sampler_iter_yielded": self._yielded,
            "_num_yielded": self._yielded,
            "_IterableDataset_len_called": None,
            "_shared_seed": None,
            "fetcher_state": {"dataset_iter_state": None, "fetcher_ended": self._finished},
            "dataset_state": {
                "format": self._STATE_FORMAT, "epoch": self.epoch if self._started else self._next_epoch(),
                "position": self._position, "seed": self.seed, "rank": rank, "world_size": world,
                "split": self.reader.mode(), "even": self.reader.even, "shuffle": self.reader.shuffle,
                "shards": len(self.reader.urls), "batch_size": self.batch_size, "drop_last": self.drop_last,
                "fingerprint": self._fingerprint(), "transform": self._transform_fingerprint(), **elastic,
            },
            "_iterator_finished": self._finished,
        }

    def _global_position(self, world: int) -> int:
        """split="elastic": how many positions of the epoch's global order the job has
        consumed, the same on every rank at a step: this epoch's start, plus whole rounds
        (a batch of every rank's) for the batches this rank has had; the last round, if
        partial, to the epoch's end."""
        if self._finished:
            return 0
        consumers = world * _shards.detect_worker()[1]
        b = self.batch_size
        local = self._position
        done = self._global_start + (local // b) * consumers * b + (local % b) * consumers
        total = self._epoch_total if self._epoch_total is not None else self.reader.plan(self.epoch).total
        return min(done, total or 0)

    def _transform_fingerprint(self) -> str:
        """The transforms (views and batch transform) by their repr: a state saved with
        other transforms is refused."""
        parts = [repr(v) for v in self._pipe.views] + [repr(self.batch_transform)]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]

    def _fingerprint(self) -> str:
        """The shards (or files) read, in their order, by name: the same data wherever it is
        mounted, other data (other shards, another order, a tree with other files) differs."""
        h = hashlib.sha256()
        if self.reader.sources is not None:  # a mixture: its terms are part of what is read
            h.update(repr([(s.weight, s.repeat, s.choose, s.label_offset, len(g)) for s, g in
                           zip(self.reader.sources, self.reader.source_urls)] + [self.reader.epoch_size]).encode())
        for u in self.reader.urls:
            flist = self.reader.files.get(u)
            # (names as the file system gives them: a name that is not UTF-8 keeps its bytes)
            if flist is None:
                h.update(os.fsencode(os.path.basename(u.rstrip("/"))) + b"\0")
            else:
                h.update(f"files:{len(flist)}\0".encode())
                for k in flist.keys:
                    h.update(k.encode("utf-8", "surrogateescape") + b"\0")
        return h.hexdigest()[:16]

    def load_state_dict(self, state: dict) -> None:
        """Resumes from state_dict(): the next iteration continues that epoch where it stood
        (or starts the next one, if it had finished).

        Raises:
            ValueError: a state of another kind, or saved with another seed (when this loader's
                seed was given), world size, split, shard count, batch size, or other shards
                (their names and order: the fingerprint).
        """
        ds = state.get("dataset_state") if isinstance(state, dict) else None
        if not isinstance(ds, dict) or ds.get("format") != self._STATE_FORMAT:
            raise ValueError("not a gpudecode Loader state (expected Loader.state_dict()'s output)")
        active = self._active() if self._active is not None else None
        if active is not None and active.active:
            raise ConcurrentIterationError("load_state_dict() while an iterator of this Loader is active: the state "
                                           "takes effect at the next iteration; close or exhaust this one first")
        rank, world = self.reader.placement()
        elastic = ds.get("split") == "elastic" and self.reader.mode() == "elastic"
        checks = [("split", self.reader.mode()), ("shards", len(self.reader.urls)), ("even", self.reader.even),
                  ("shuffle", self.reader.shuffle)]
        if not elastic:  # an elastic state resumes on another world size and batch size
            checks += [("world_size", world), ("batch_size", self.batch_size)]
        if self._seed_given:
            checks.append(("seed", self.seed))
        if "fingerprint" in ds:  # (states saved before it was kept have none)
            checks.append(("fingerprint", self._fingerprint()))
        if "transform" in ds:
            checks.append(("transform", self._transform_fingerprint()))
        for name, mine in checks:
            if ds.get(name) != mine:
                what = {"fingerprint": "other shards or files (their names and order)",
                        "transform": "other transforms"}.get(name)
                saved = what if what else f"{name}={ds.get(name)!r}"
                here = "" if what else f", this loader has {name}={mine!r}"
                hint = (" (split='elastic' resumes on another world size)" if name == "world_size" else "")
                raise ValueError(f"this state was saved with {saved}{here}: it cannot resume here{hint}")
        self.seed = self.reader.seed = int(ds["seed"])
        self._resume = None  # (a state loaded before this one is replaced, not a reason to warn)
        self._resume_global = None
        same = ds.get("world_size") == world and ds.get("batch_size") == self.batch_size
        if state.get("_iterator_finished"):
            self.set_epoch(int(ds["epoch"]) + 1)
            self._yielded = 0
            self._position = 0
        elif elastic and not same:
            # the job's global position: this rank's part of the rest of the epoch, from 0
            self.set_epoch(int(ds["epoch"]))
            self._resume = 0
            self._resume_global = int(ds["global_position"])
            self._global_start = self._resume_global
            self._yielded = 0
            self._position = 0
        else:
            self.set_epoch(int(ds["epoch"]))
            self._resume = int(ds["position"])
            self._yielded = int(state.get("_num_yielded", 0))
            self._position = self._resume  # state_dict() before the next iteration gives this state back
            if elastic:
                self._resume_global = int(ds.get("global_start", 0))
                self._global_start = self._resume_global
        self._finished = False

    def _sources(self) -> dict:
        """What is read: shards, and image files as they lie (their trees or lists)."""
        files = self.reader.files
        shards = sum(1 for u in self.reader.urls if u not in files)
        out: dict = {"shards": shards}
        if files:
            out["image_files"] = sum(len(f) for f in files.values())
            out["file_sources"] = [f.root or u for u, f in files.items()]
        return out

    def _mix(self) -> list[dict]:
        """A mixture's sources: their samples, what the next (or running) epoch draws of
        each, and what on_error passed over in each this epoch."""
        mix = self.reader.mixture(self._current_epoch())
        for m in mix:
            m["skipped"] = 0
        for sk in self.skipped:
            i = self.reader.source_of(sk.shard) if sk.shard else None
            if i is not None:
                mix[i]["skipped"] += 1
        return mix

    def describe(self) -> dict:
        """What this loader does and with what (the decoder is made on first use)."""
        dec = self._pipe.decoder_name()
        plans = [tf.plan for tf in self._pipe.views]
        multi = self._pipe.multi
        made = self._pipe.decoder
        return {"device": self.device, "decoder": dec,
                # what actually decodes (the library, GPU, hardware or CPU), once the decoder is made
                "decoder_backend": getattr(made, "backend", None) if made is not None else None,
                "num_threads": self.num_threads, "prefetch": self.prefetch,
                "batch_size": self.batch_size, **self._sources(), "split": self.reader.mode(),
                "out_size": [p.out_size for p in plans] if multi else plans[0].out_size,
                "dtype": [str(p.dtype) for p in plans] if multi else str(plans[0].dtype),
                # what runs fused, per view (several views: one list each)
                "transform": ([[type(t).__name__ for t in p.steps] for p in plans] if multi
                              else [type(t).__name__ for t in plans[0].steps]),
                "views": len(plans), "fast_decode": self.fast_decode,
                **({"mix": self._mix()} if self.reader.sources is not None else {}),
                # what runs after the fused kernel, on the finished batch
                "after": [] if self.batch_transform is None else [repr(self.batch_transform)]}

    def __iter__(self) -> LoaderIterator:
        """Starts an epoch (resuming where load_state_dict said, if it was called). An
        older iterator still active is ended first, as if dropped (a DataLoader with
        persistent workers ends it too; Lightning and others start a new one without
        exhausting the last: a sanity check, limit_*_batches, a sized epoch): its next()
        then raises ConcurrentIterationError, never a batch of the new epoch."""
        with self._iter_lock:  # the end and the start are one step: one iterator is active at a time
            self._in_this_process()
            active = self._active() if self._active is not None else None
            if active is not None and active.active:
                active._superseded = True
                active.close()
            return self._start_epoch()

    def _in_this_process(self) -> None:
        """After a fork, the child's copy of this Loader drops what belongs to the parent:
        its iterator, its decoder (threads that are not here), its GPU streams."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._active = None
        self._pipe.after_fork()

    def _start_epoch(self) -> LoaderIterator:
        epoch = self._next_epoch()
        if epoch != self.epoch:
            self.set_epoch(epoch)
        self._epoch_chosen = False
        self._started = True
        self.reader.warn_unequal(self.epoch)  # here, in the caller's thread, before the first batch
        self._pipe.ensure_decoder()
        start = self._resume if self._resume is not None else 0
        if self._resume is None:
            self._yielded = 0
        self._resume = None
        # split="elastic": a state loaded gives the global position; this rank starts its own
        # part of the rest at 0
        self._global_start = self._resume_global or 0
        self._resume_global = None
        self._finished = False
        self._position = start
        self.policy.reset()
        self.stats = LoaderStats()
        it = LoaderIterator(self, self.epoch, start)
        self._active = weakref.ref(it)
        return it

    def close(self) -> None:
        """Ends the active iterator, and releases the decoder (its threads), the output
        buffers and the CUDA stream. The Loader can be iterated again afterwards (they are
        made anew)."""
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
