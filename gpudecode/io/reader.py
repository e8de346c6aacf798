"""ShardReader: tar shards in, samples of compressed bytes out. No pixel is decoded here.

Reader threads parse shards (local ones with pread, others as streams) and hand the
consumer chunks of samples. The consumer takes the shards' samples in the epoch's shard
order, so the order is the same whatever the number of threads, then runs an optional
shuffle buffer seeded from (seed, epoch, rank, worker).

How a shard's members become samples (the same for every way a shard is read):
- members are grouped by key (webdataset's rule, see tario.split_key); a sample is
  complete when a member of another key or the end of the archive follows it;
- a sample with a repeated extension or a link among its members is bad: under
  on_error="raise" reading stops there, otherwise it is listed in `skipped` and reading
  goes on with the next sample;
- a fault of the tar itself (truncation, bad header, a read error) ends the shard: every
  complete sample before it is delivered; the sample it cut off is named in the error
  (and in `skipped`); nothing after it can be read. A sample is known complete when a
  member of another key follows it, or the end-of-archive block: a refused header whose
  checksum holds names its own member (so the sample before, of another key, is whole
  and delivered); a header that cannot be trusted at all (bad checksum) names the sample
  before it (it may be missing fields); a fault after the end block
  names no sample (every one before it was delivered).
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Container, Generator, Iterator, Literal, Sequence

from ..errors import ErrorPolicy, OnError, Skipped
from . import epoch as _epoch
from . import shards as _shards
from .assembly import iter_shard
from .cache import ShardCache
from .counts import count_samples, forget_counts, shard_counts
from .files import MAX_FILE_BYTES
from .index import SampleIndex
from .members import Failure, Grouper, Sample, split_exts
from .members import iter_members, stream_members  # noqa: F401  (gpudecode.io.reader's names, as before)
from .planner import EpochPlanner, SampleCounts, _shuffled, ra_indices  # noqa: F401  (as before)
from .remote import RemoteOptions
from .segments import SegmentReader
from .sources import Sources

Even = Literal["pad", "drop"]

__all__ = ["Sample", "Failure", "BaseShardReader", "ShardReader", "iter_shard", "count_samples", "shard_counts",
           "forget_counts", "split_exts", "Grouper"]


class _Of:
    """A read-only attribute that is a part's (`part`.`name`): the reader's settings have one
    owner each, the part that uses them."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.name)


class BaseShardReader:
    """ShardReader without torch's IterableDataset base: the same reader, for tools that
    must start without importing torch (the CLI's `inspect`). Use ShardReader.

    ShardReader: iterates over the samples of WebDataset-style tar shards.

    Args:
        urls: shards, in any form `gpudecode.io.shards.expand_urls` accepts. Local ones
            must exist (checked here, naming what is missing). Image files as they lie
            too (gpudecode.io.files): an ImageFolder tree, a list file of `path label`
            lines, image paths or (path, label) pairs; each file is a sample (its image
            field named by its extension, `cls` its label), `classes` names the tree's.
        shuffle: shuffle the shard order per epoch and samples in a buffer.
        seed: fixes every random choice together with the epoch.
        buffer_size: samples held by the shuffle buffer (used when shuffle is on). It
            starts giving samples out once it holds 100 (or buffer_size, if smaller) and
            fills to buffer_size on the way, as webdataset's shuffle does.
        rank, world_size: this process's part; detected (torch.distributed, torchrun,
            SLURM) when None. Inside DataLoader workers each rank's part is split again
            by worker: the consumers are world_size x workers.
        num_threads: reader threads (default 2).
        on_error: "raise" stops at the first bad shard or sample; "warn" and "skip"
            pass over it, count it in `skipped` ("warn" also warns). `policy` (an
            errors.ErrorPolicy) instead shares one policy and `skipped` list with other
            stages (a Loader's).
        extensions: if given, only these extensions' bytes are read (others are left
            in the shard, and absent from `fields`).
        even: "auto", None, "pad" or "drop": make every consumer yield the same number of
            samples (DDP needs equal step counts): "pad" repeats samples up to ceil(N /
            consumers), "drop" leaves out the last N mod consumers samples of the epoch;
            samples lost to on_error="skip" are made up by repeats, so the count always
            holds. "auto" (default): "pad" when more than one rank reads (as
            DistributedSampler pads by default), None for a single process. None: every
            sample exactly once (evaluation); with several ranks whose counts differ, a
            warning says so before the first sample.
        split: how an epoch is shared (see gpudecode.io.shards.choose_mode): "auto" (whole
            shards when there are at least as many shards as consumers and no `even`;
            otherwise contiguous runs of samples, exact to one sample), "shard", "sample",
            or "elastic" (gpudecode.io.epoch): the epoch's global order of samples depends
            on (seed, epoch, sources) alone, every consumer reads `chunk` consecutive
            positions of it at a time, in rounds; a job resumes it on another world size.
            "shard" and "sample" are not elastic (their order depends on the world size).
        chunk: split="elastic": the consecutive positions of the global order a consumer
            takes at a time (the Loader gives its batch size: a global batch is then a run
            of the global order).
        remote: timeouts and retries for remote shards (`gpudecode.io.remote.RemoteOptions`).
        cache_dir, cache_limit: keep local copies of remote shards (gpudecode.io.cache).
        map_extensions: these fields come as read-only memoryviews over the memory-mapped
            shard (local, cached or gunzipped ones; no copy) instead of bytes: the Loader
            maps tensor samples (.npy) so that its kernel reads their pixels in place.
            Shard files stay mapped from one epoch to the next (up to half the machine's
            memory, least recently used out first; close() drops them). A
            shard truncated in place while its views are in use faults (SIGBUS); files
            replaced by a rename (as every gpudecode writer does) are safe.
        max_file_bytes: an image file as it lies (not a shard) over this many bytes, or one
            that is not a regular file (a FIFO, a device, a socket), is its sample's error
            and is not read (gpudecode.io.files.read_file); the Loader sets it from its
            max_pixels (file_cap).
        pool_extensions, pool_limit: these fields of local (and cached, gunzipped) shards
            come as read-only memoryviews over memory the reader recycles instead of bytes:
            a block goes back to the reader's pool when the last view of it is gone, and
            the pool keeps up to `pool_limit` bytes of free blocks for the next reads
            (members of at most 4 KiB that came in with the reads of their headers stay
            bytes). The
            Loader pools its images (a fresh allocation an image is memory the C library
            hands back to the system when freed, faulted in again by the next read).

        repeated_augs: k > 1 is repeated augmentation, as torchvision's and DeiT's RASampler
            (one image source, read by index): the epoch's permutation (torch.randperm
            seeded with seed + epoch) with each index repeated k times, padded, strided
            over the ranks, and cut to floor(N / 256) * 256 / ranks samples a rank; the
            same multiset per rank and epoch as RASampler(shuffle=shuffle, seed=seed,
            repetitions=k). The copies of an image draw their augmentations apart.

    Over one epoch with even=None every sample is yielded exactly once across consumers.
    Splitting by sample and `even` need each shard's sample count: a header scan of local
    shards (kept on disk, see shard_counts); remote shards are read through once for it.
    """

    urls = _Of("inputs", "urls")
    files = _Of("inputs", "files")
    sources = _Of("inputs", "mixture")
    source_urls = _Of("inputs", "source_urls")
    label_offsets = _Of("inputs", "label_offsets")
    epoch_size = _Of("inputs", "epoch_size")
    remote = _Of("segments", "remote")
    extensions = _Of("segments", "extensions")
    map_extensions = _Of("segments", "map_extensions")
    pool_extensions = _Of("segments", "pool_extensions")
    pool_limit = _Of("segments", "pool_limit")
    num_threads = _Of("segments", "num_threads")
    max_file_bytes = _Of("segments", "max_file_bytes")
    shuffle = _Of("planner", "shuffle")
    buffer_size = _Of("planner", "buffer_size")
    rank = _Of("planner", "rank")
    world_size = _Of("planner", "world_size")
    even_policy = _Of("planner", "even_policy")
    split = _Of("planner", "split")
    chunk = _Of("planner", "chunk")
    repeated_augs = _Of("planner", "repeated_augs")

    def __init__(self, urls, *, shuffle: bool = False, seed: int = 0, buffer_size: int = 1000,
                 rank: int | None = None, world_size: int | None = None, num_threads: int | None = None,
                 on_error: OnError = "raise", extensions: Sequence[str] | None = None,
                 even: Even | Literal["auto"] | None = "auto", split: Literal["auto", "shard", "sample", "elastic"] = "auto",
                 remote: RemoteOptions | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_limit: int | None = None, map_extensions: Sequence[str] = (),
                 pool_extensions: Sequence[str] = (), pool_limit: int = 128 << 20,
                 policy: ErrorPolicy | None = None, max_file_bytes: int = MAX_FILE_BYTES,
                 repeated_augs: int = 1, chunk: int = 1, epoch_size: int | str | None = None) -> None:
        super().__init__()
        # the parts: what is read (fixed), its counts, the epoch planner, the reader threads, random access
        self.inputs = Sources.build(urls, epoch_size)
        # what happens to bad data; shared with a Loader's other stages when it passes its own
        self.policy = policy if policy is not None else ErrorPolicy(on_error)
        self.counts = SampleCounts(self.inputs, remote=remote, policy=self.policy)
        self.planner = EpochPlanner(self.inputs, self.counts, shuffle=shuffle, seed=seed, buffer_size=buffer_size,
                                    rank=rank, world_size=world_size, even=even, split=split, chunk=chunk,
                                    repeated_augs=repeated_augs)
        self.cache = self.counts.cache = (ShardCache(cache_dir, limit=cache_limit, remote=remote,
                                                     on_change=self.counts.changed)
                                          if cache_dir is not None else None)
        exts = frozenset(e.lower().lstrip(".") for e in extensions) if extensions is not None else None
        mapped = frozenset(e.lstrip(".") for e in map_extensions)
        self.segments = SegmentReader(self.inputs, policy=self.policy, num_threads=num_threads or 2, extensions=exts,
                                      map_extensions=mapped, pool_extensions=frozenset(
                                          e.lstrip(".") for e in pool_extensions) - mapped, pool_limit=pool_limit,
                                      remote=remote, cache=self.cache, max_file_bytes=int(max_file_bytes))
        self.index = SampleIndex(self.inputs, extensions=exts, max_file_bytes=int(max_file_bytes), remote=remote,
                                 cache=self.cache)
        self.epoch = 0

    @property
    def seed(self) -> int:
        """Fixes every random choice together with the epoch (a resumed Loader sets its own)."""
        return self.planner.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self.planner.seed = int(value)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose shard order and shuffle the next iteration uses."""
        self.epoch = int(epoch)

    def close(self) -> None:
        """Drops the shard mappings kept between epochs (see map_extensions) and the free
        blocks of its pool (see pool_extensions); the reader can still be iterated (shards
        are mapped again, blocks allocated again)."""
        self.segments.close()

    # -- what is read -----------------------------------------------------------------------

    @property
    def classes(self) -> list[str]:
        """The class names of the ImageFolder trees read (see Sources.classes)."""
        return self.inputs.classes

    def source_of(self, shard: str) -> int | None:
        """Which source of a mixture a sample's shard (or image file) belongs to."""
        return self.inputs.source_of(shard)

    def sample_counts(self) -> dict[str, int]:
        """Samples per shard (counted once; see shard_counts); a local shard whose size or
        modification time changed is counted again at the next epoch."""
        return self.counts.get(self.epoch)

    @property
    def total_samples(self) -> int:
        """Samples in all shards, over all consumers."""
        return sum(self.sample_counts().values())

    def mixture(self, epoch: int | None = None) -> list[dict]:
        """A mixture's epoch (default: the current one): per source, its samples and how many
        the epoch draws (EpochPlanner.mixture); [] when the sources are not a mixture."""
        return self.planner.mixture(self.epoch if epoch is None else int(epoch))

    # -- how an epoch is shared out (gpudecode.io.planner) ------------------------------------

    def placement(self) -> tuple[int, int]:
        """(this process's rank, the world size): as given, else detected now."""
        return self.planner.placement()

    def consumer(self) -> tuple[int, int]:
        """(this consumer's index, consumers): ranks x DataLoader workers."""
        return self.planner.consumer()

    @property
    def even(self) -> Even | None:
        """The even policy in force: "auto" resolved for this process's ranks."""
        return self.planner.even

    def mode(self) -> str:
        """"shard", "sample" or "elastic": how this reader splits an epoch (see `split`)."""
        return self.planner.mode()

    @property
    def resumes_anywhere(self) -> bool:
        """Whether an epoch is one global order that a job resumes on any world size and
        batch size (split="elastic"): the Loader asks this, not the mode."""
        return self.planner.resumes_anywhere

    def resumable_plan(self, epoch: int, start: int = 0) -> _epoch.EpochPlan | None:
        """The epoch's plan from global position `start` where it is one global order
        (resumes_anywhere), else None (the reader plans the epoch as it reads it)."""
        return self.planner.plan(epoch, start=start) if self.resumes_anywhere else None

    def plan(self, epoch: int | None = None, *, start: int = 0, consumer: int | None = None) -> _epoch.EpochPlan:
        """What this consumer (or `consumer`) reads in `epoch` (default: the current one),
        in what order (gpudecode.io.epoch.EpochPlan). `start`: with split="elastic", the
        global position to start from (a resumed job's place)."""
        return self.planner.plan(self.epoch if epoch is None else int(epoch), start=start, consumer=consumer)

    def file_order(self, name: str, epoch: int) -> list[int]:
        """The order in which file list `name` is read in `epoch` (see gpudecode.io.files)."""
        return self.planner.file_order(name, epoch)

    def shards_for(self, epoch: int, rank: int | None = None) -> list[str]:
        """The shards this consumer (or, with `rank`, that rank's consumer with this
        process's DataLoader worker index) reads in `epoch`, in reading order."""
        if rank is None:
            return [seg.url for seg in self.plan(epoch).segments]
        ranks = self.placement()[1]
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} is outside world_size {ranks}")
        w, nw = _shards.detect_worker()
        return [seg.url for seg in self.plan(epoch, consumer=rank * nw + w).segments]

    def samples_per_epoch(self, epoch: int | None = None) -> int:
        """Samples this consumer yields in `epoch` (default: the current one; before
        on_error="skip" under even=None)."""
        return self.planner.samples(self.epoch if epoch is None else epoch)

    def warn_unequal(self, epoch: int) -> None:
        """even=None with several ranks: warns once when their sample counts differ."""
        self.planner.warn_unequal(epoch)

    # -- reading ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, *, start: int = 0, stop: threading.Event | None = None,
                   plan: _epoch.EpochPlan | None = None) -> Generator[Sample, None, None]:
        """The samples of `epoch`, skipping the first `start` of them (to resume). Setting
        `stop` ends the iteration (within a fraction of a second) and its threads. `plan`:
        this epoch's plan (self.plan(epoch, start=...)), e.g. an elastic one from a
        resumed job's global position."""
        self.planner.warn_unequal(epoch)
        if self.cache is not None:
            self.cache.new_epoch()  # each cached copy is revalidated at its first use in this epoch
        plan = plan if plan is not None else self.planner.plan(epoch)
        yield from self.planner.arranged(self.segments.read(plan, self.planner.orders(plan), stop), plan, start)

    def epoch_keys(self, epoch: int, *, start: int = 0, plan: _epoch.EpochPlan | None = None,
                   missing: Container[tuple[str, int]] = frozenset()) -> list[tuple[str, int]]:
        """(shard, index) of each sample iter_epoch(epoch, start=, plan=) yields (its
        Sample's `shard` and `index`), in the same order, without reading one: the order a
        resident store (gpudecode.resident) serves its epoch in. `missing`: samples known to
        be unreadable, left out where the reader would leave them out (on_error="skip")."""
        return self.planner.epoch_keys(plan if plan is not None else self.planner.plan(epoch), start=start,
                                       missing=missing)

    def every_key(self) -> Iterator[tuple[str, int]]:
        """(shard, index) of every sample of every source once, as their Samples name them."""
        return self.planner.every_key(self.epoch)

    def read_every(self, stop: threading.Event | None = None) -> Iterator[Sample]:
        """Every sample of every source once, in source order (each shard's and file
        list's samples in their own order), on the reader threads, failures under the
        error policy: what a resident store is filled from (all of it on every rank)."""
        return self.segments.read_every(stop)

    def read_shard(self, url: str) -> Iterator[Sample | Failure]:
        """Every sample of one shard, read as this reader reads it in an epoch (its
        extensions, mapped extensions and maps, its on_error: a Failure where it skips),
        in the shard's order."""
        return self.segments.read_shard(url)

    def read_sample(self, url: str, index: int) -> Sample:
        """Sample `index` of source `url` (one of self.urls): see SampleIndex.read."""
        return self.index.read(url, index)

    def read_times(self) -> dict[str, tuple[float, int]]:
        """A mixture's read so far this epoch, per source (SegmentReader.read_times)."""
        return self.segments.read_times()

    @property
    def on_error(self) -> str:
        return self.policy.on_error

    @property
    def skipped(self) -> list[Skipped]:
        """What the error policy passed over (bad shards and samples; in a Loader, its
        images and labels too: the policy is shared)."""
        return self.policy.skipped

    @skipped.setter
    def skipped(self, value: list[Skipped]) -> None:
        self.policy.skipped = value


if TYPE_CHECKING:
    import torch.utils.data

    class ShardReader(BaseShardReader, torch.utils.data.IterableDataset):
        """Iterates over the samples of WebDataset-style tar shards (see BaseShardReader)."""
else:
    def __getattr__(name: str) -> Any:
        """ShardReader, made on first use: a BaseShardReader that is also torch's
        IterableDataset (DataLoader takes it), without importing torch for those that
        only read shards."""
        if name != "ShardReader":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import torch.utils.data

        cls = type("ShardReader", (BaseShardReader, torch.utils.data.IterableDataset),
                   {"__module__": __name__, "__qualname__": "ShardReader", "__doc__": BaseShardReader.__doc__})
        globals()["ShardReader"] = cls
        return cls

