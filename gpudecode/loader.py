"""Loader: shards in, augmented batches out, in place of DataLoader + torchvision transforms.

    reader threads (bytes) -> probe (header sizes) -> params (host, seeded) ->
    decode (GPU: nvImageCodec / DALI / torchcodec; CPU: crop-window libjpeg-turbo) ->
    fused kernel (Compose.apply) -> Batch

Two producer threads prepare batches ahead (up to `prefetch`) while the trainer works on
batch k: the "decode" thread reads, probes and decodes batch k+2 while the "augment"
thread runs the kernel on k+1 (a resident store's epoch runs both on one: EpochRun says why).

The per-batch work and its buffers belong to the Loader's `pipeline.Pipeline`; the two
threads here drive it (epoch_run.py). On a GPU (the design, one owner: the pipeline's `Streams`, made
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

import functools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Literal, Sequence

import torch

from ._probe import DEFAULT_MAX_PIXELS
from .cursor import Cursor
from .dataset import LoaderSampler
from .epoch_run import LoaderIterator
from .errors import ConcurrentIterationError, ErrorPolicy, OnError, Skipped
from .io import shards as _shards
from .io.files import DEFAULT_IMAGE_EXTS
from .io.remote import RemoteOptions
from .loader_setup import (check_sources, dataset_source, default_seed, describe, grey_output, loader_reader,
                           pipeline_config, refuse_dataloader_only, resume_keys, transforms_fingerprint)
from .pipeline import Pipeline
from .resident import Keep, Keeper
from .stats import LoaderStats
from .transforms import Compose

if TYPE_CHECKING:
    from .dataset import ShardDataset

__all__ = ["Loader", "LoaderIterator", "LoaderSampler"]


class Loader:
    """Batches of augmented images from tar shards, on the GPU when there is one: in place
    of torch.utils.data.DataLoader + torchvision transforms, with DataLoader's argument
    names where they have a meaning here (docs/guide.md says more of each).

    Args:
        urls: shards (see `gpudecode.ShardReader`): a directory, a brace pattern, a list
            file, URLs (local ones must exist). Or images as they lie: an ImageFolder tree
            (torchvision's classes and indices), a list file of `path label` lines, a list
            of paths or (path, label) pairs, Parquet files (gpudecode.io.parquet). Or a
            Dataset as a script builds it, with its transform: torchvision's ImageFolder
            (or DatasetFolder), its in-memory sets (CIFAR10, MNIST, ...: read from their
            arrays), its sets of files (Food101, Flowers102, ...), FakeData; torch's
            TensorDataset, Subset, ConcatDataset (or a list of datasets); timm's; a
            Hugging Face `datasets.Dataset`; any other (a script's own: from its files
            where it lists them, else through its `__getitem__`). Or a mixture: a list of
            `gpudecode.Source`, each with its weight, repeat or choose (and label_offset),
            drawn in exact counts each epoch (`describe()["mix"]`, `loader.stats.sources`).
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
            processes become threads; default: all cores; 0 means 1). Torch's CPU ops
            in the Loader's threads run on one thread each, as in a DataLoader worker.
        pin_memory: CPU batches in pinned memory (when CUDA is present).
        persistent_workers: accepted for DataLoader's sake (threads start per epoch).
        prefetch_factor: batches prepared ahead, for the whole loader (default 2).
        drop_last: drop the last, smaller batch.
        image_ext, label_ext: extensions tried in order (";"-separated); images default to
            torchvision's (jpg, jpeg, png, webp, bmp, tif, tiff, ppm, pgm) and npy (a tensor
            sample from `gpudecode precache`); `.cls` holds an integer as text, `.json` a
            {"label": int}. labels=False turns labels off.
        fields: a sample's other members (or Parquet / Hugging Face columns), each one more
            element of a batch, after the labels (fields="txt" gives (images, labels,
            captions)); {ext: fn} runs fn on each value (gpudecode.fields says more).
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
        max_pixels: images with more pixels are refused (decompression bombs), as is a transform making more.
        fast_decode: CPU JPEG decoding with the fast IDCT, and DCT scaling where the kernel
            shrinks the part it reads 2x or more (not bit-exact; docs/guide.md).
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
                 keep_budget: int | None = None, keep_size: int | None = None, fields: Any = None,
                 **dataloader_only: Any) -> None:
        refuse_dataloader_only(dataloader_only)  # (DataLoader's other arguments: what the Loader does instead)
        urls, transform = dataset_source(urls, transform)  # (torchvision's ImageFolder as it is: its samples)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        config = pipeline_config(transform, batch_transform, batch_size=batch_size, device=device, decoder=decoder,
                                  image_ext=image_ext, label_ext=label_ext, labels=labels, num_classes=num_classes,
                                  allow_negative_labels=allow_negative_labels, workers=(num_workers, num_threads),
                                  ahead=(prefetch_factor, prefetch), max_pixels=max_pixels, fast_decode=fast_decode,
                                  pin_memory=pin_memory, reuse_buffers=reuse_buffers, fields=fields)
        self.keeper = Keeper(keep, keep_budget, config.device, keep_size)  # where the set lives between epochs
        self.batch_size, self.device, self.drop_last = batch_size, config.device, drop_last
        self.prefetch, self.num_threads = config.ring - 3, config.num_threads
        self.persistent_workers = bool(persistent_workers)  # (threads start per epoch: nothing to keep alive)
        self.batch_transform = config.batch_transform
        self.policy = ErrorPolicy(on_error)  # one for every stage: one list of what was skipped
        self._seed_given = seed is not None
        # the seed before the reader: the default one is made the same on every rank
        seed = int(seed) if seed is not None else default_seed(
            world_size if world_size is not None else _shards.detect_rank()[1])
        self.reader = loader_reader(urls, config, self.policy, shuffle=shuffle, seed=seed, buffer_size=buffer_size,
                                    rank=rank, world_size=world_size, even=even, split=split, remote=remote,
                                    cache_dir=cache_dir, cache_limit=cache_limit, repeated_augs=repeated_augs,
                                    epoch_size=epoch_size)
        config = grey_output(self.reader, config)  # (a grey set's images: one channel, as torchvision's)
        self.transform = config.transform if isinstance(config.transform, Compose) else list(config.transform)
        check_sources(self.reader, config)  # (what the data's metadata tells now, not at the first batch)
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
    def seed(self) -> int:
        """Fixes every draw with the epoch and the sample's position: the reader's (one owner)."""
        return self.reader.seed

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
                           "fingerprint": self.reader.inputs.fingerprint(),
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
        mine, regrid = resume_keys(self.reader, self._pipe.config, ds, self.batch_size,
                                    self.seed if self._seed_given else None, strict)
        self.cursor.from_state(state, mine, regrid=regrid, size=self.reader.samples_per_epoch)
        self.reader.seed = int(ds["seed"])

    def describe(self) -> dict:
        """What this loader does and with what (the decoder is made on first use)."""
        return describe(self)  # (loader_setup.describe)

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
