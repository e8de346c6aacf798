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

import collections
import dataclasses
import itertools
import os
import queue
import random
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Container, Generator, Iterator, Literal, Sequence, TypeVar, cast

import numpy as np

from .._text import plural
from .. import _native

from .._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from ..errors import (GpuDecodeError, OnError, ResourceError, ShardReadError, Skipped, ErrorPolicy, wrap_data_error)
from . import epoch as _epoch
from . import shards as _shards
from .cache import ShardCache
from .files import MAX_FILE_BYTES, FileList, iter_files
from .parquet import classes as parquet_classes, is_parquet, read_sample as parquet_read_sample
from .remote import RemoteOptions
from .tario import index_file, split_key
from .assembly import _shard_lists, iter_shard
from .counts import count_samples, forget_count, forget_counts, shard_counts
from .members import Failure, Grouper, _MapCache, _Pooled, _stream_error, Sample, split_exts
from .members import iter_members, stream_members  # noqa: F401  (gpudecode.io.reader's names, as before)

Even = Literal["pad", "drop"]

_CHUNK = 64  # samples handed over per queue item
_INDEXES = 64  # shards whose member index read_sample keeps
_PAD_HEAD = 1024  # samples kept to make up a short share under `even`
_SHUFFLE_INITIAL = 100  # samples in the shuffle buffer before it gives out the first
_FILE_PIECE = 64  # files of a file list read by one reader thread in turn
_END = object()  # the end of a segment, on its queue

__all__ = ["Sample", "Failure", "BaseShardReader", "ShardReader", "iter_shard", "count_samples", "shard_counts",
           "forget_counts", "split_exts"]


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
        self.files: dict[str, FileList] = {}
        # a mixture: a list of gpudecode.Source, each expanded on its own
        self.sources: list[_epoch.Source] | None = None
        self.source_urls: list[list[str]] = []
        self.label_offsets: dict[str, int] = {}  # shard -> offset (file lists carry theirs in their labels)
        if isinstance(urls, (list, tuple)) and urls and all(isinstance(u, _epoch.Source) for u in urls):
            self.sources = list(urls)
            self.urls = self._expand_sources(self.sources)
            if split not in ("auto", "elastic"):
                raise ValueError(f"a mixture of sources is split elastically (its epoch is drawn from the sources "
                                 f"as one global order): split={split!r} cannot be used with Source lists")
            split = "elastic"
        elif isinstance(urls, (list, tuple)) and any(isinstance(u, _epoch.Source) for u in urls):
            raise ValueError("a mixture is a list of gpudecode.Source alone: wrap the other entries in Source(...)")
        else:
            if epoch_size is not None:
                raise ValueError("epoch_size sizes a mixture of gpudecode.Source: give the sources as Source(...)")
            self.urls = _shards.expand_urls(urls, files=self.files)
        self.epoch_size = epoch_size
        # a mixture's reads this epoch: source index -> [seconds reading, samples] (all threads)
        self.source_read: dict[int, list] = {}
        self._read_lock = threading.Lock()
        self._indexes: collections.OrderedDict[str, list] = collections.OrderedDict()  # read_sample's
        # one label means one class: trees with other class folders would mix them up (within a
        # source of a mixture; its sources keep their own, label_offset sets them apart)
        groups = ([[self.files[u] for u in g if u in self.files] for g in self.source_urls]
                  if self.sources is not None else [list(self.files.values())])
        for group in groups:
            trees = [f for f in group if f.classes]
            for f in trees[1:]:
                if f.classes != trees[0].classes:
                    a, b = trees[0], f
                    raise ValueError(f"the ImageFolder trees {a.root} ({_names(a.classes)}) and {b.root} "
                                     f"({_names(b.classes)}) have different classes: label 0 would be "
                                     f"{a.classes[0]!r} in one and {b.classes[0]!r} in the other. Read trees with "
                                     "the same class folders (or one tree; in a mixture, each as its own Source)")
        if not self.urls:
            raise ShardReadError(f"no shards: {urls!r} names none", shard=str(urls))
        missing = [u for u in self.urls if u not in self.files and _shards.is_local(u)
                   and not os.path.isfile(_shards.local_path(u))]
        if missing and len(self.urls) == 1:  # one path, not a pattern's list: it may have meant a folder
            path = _shards.local_path(missing[0])
            what = "shard" if path.endswith((".tar", ".tar.gz", ".tgz")) else "file or folder"
            raise ShardReadError(f"no such {what}: {path} (a source is a shard, a shard pattern, an ImageFolder "
                                 "tree, a list file or image paths)", shard=missing[0])
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ShardReadError(f"{len(missing)} of {plural(len(self.urls), 'shard')} {'does' if len(missing) == 1 else 'do'} not exist: "
                                 f"{', '.join(missing[:3])}{more}", shard=missing[0])
        if buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:  # type: ignore[operator]
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if even not in ("auto", None, "pad", "drop"):
            raise ValueError(f"even must be 'auto', None, 'pad' or 'drop', not {even!r}")
        _shards.choose_mode(split, 1, 1, None)  # checks the name
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be an int >= 1, not {chunk!r}")
        self.chunk = chunk
        self.shuffle = shuffle
        self.seed = seed
        self.buffer_size = buffer_size
        self.rank = rank
        self.world_size = world_size
        self.num_threads = max(1, num_threads or 2)
        # what happens to bad data; shared with a Loader's other stages when it passes its own
        self.policy = policy if policy is not None else ErrorPolicy(on_error)
        self.extensions = frozenset(e.lower().lstrip(".") for e in extensions) if extensions is not None else None
        self.map_extensions = frozenset(e.lstrip(".") for e in map_extensions)
        self.pool_extensions = frozenset(e.lstrip(".") for e in pool_extensions) - self.map_extensions
        if pool_limit < 0:
            raise ValueError("pool_limit must be >= 0")
        self.pool_limit = pool_limit
        self.max_file_bytes = int(max_file_bytes)  # an image file over this is its sample's error, not read
        self._pooled = _Pooled(self.pool_extensions, _native.BlockPool(pool_limit)) if self.pool_extensions else None
        self.even_policy = even  # as given; `even` is what it means for this process
        if isinstance(repeated_augs, bool) or not isinstance(repeated_augs, int) or not 1 <= repeated_augs <= 256:
            raise ValueError(f"repeated_augs must be an int in 1..256 (torchvision's and DeiT's use 3), not "
                             f"{repeated_augs!r}")
        self.repeated_augs = repeated_augs
        _check_epoch_size(epoch_size, self.sources)
        if repeated_augs > 1 and split == "elastic":
            raise ValueError("repeated_augs and split='elastic' are two orders of an epoch: choose one")
        if repeated_augs > 1 and (len(self.urls) != 1 or self.urls[0] not in self.files):
            raise ValueError(f"repeated_augs={repeated_augs} reads samples by index, as torchvision's RASampler: give "
                             "one ImageFolder tree, list file or list of paths (shards are read in order)")
        self.split = split
        self.remote = remote
        self.cache = ShardCache(cache_dir, limit=cache_limit, remote=remote,
                                on_change=self._remote_changed) if cache_dir is not None else None
        self._recount = False  # a cached remote shard changed: counted again at the next epoch
        self.epoch = 0
        self._counts: dict[str, int] | None = None
        self._counted_stats: list[tuple[int, int] | None] = []
        self._counted_epoch = 0
        self._warned_even = False
        self._warned_unequal = False
        self._maps = _MapCache()
        if split == "shard":
            self.mode()  # (fewer shards than consumers: refused now, not after an epoch of nothing)
        if repeated_augs > 1:
            _warn_ra_epoch(len(self.files[self.urls[0]]), repeated_augs, self.consumer()[1])

    def _expand_sources(self, sources: list[_epoch.Source]) -> list[str]:
        """Each source's urls (in self.source_urls), all of them in order; a shard or file
        in two sources is refused (its samples' source would be ambiguous); file lists of a
        source with a label_offset carry it in their labels, shards in label_offsets."""
        out: list[str] = []
        owner: dict[str, int] = {}
        for i, src in enumerate(sources):
            files: dict[str, FileList] = {}
            try:
                urls = _shards.expand_urls(src.urls, files=files)  # type: ignore[arg-type]
            except ShardReadError as e:
                raise type(e)(f"Source {src.label}: {e.reason}", shard=e.shard) from None
            for u in urls:
                if u in owner:
                    raise ValueError(f"{u} is in two sources ({sources[owner[u]].label} and {src.label}): a sample "
                                     "must belong to one")
                owner[u] = i
                if u in files:
                    f = files[u]
                    if src.label_offset:
                        f = dataclasses.replace(f, labels=tuple(None if v is None else v + src.label_offset
                                                                for v in f.labels))
                    self.files[u] = f
                elif src.label_offset:
                    self.label_offsets[u] = src.label_offset
            self.source_urls.append(list(urls))
            out += urls
        return out

    def read_shard(self, url: str) -> Iterator[Sample | Failure]:
        """Every sample of one shard, read as this reader reads it in an epoch (its
        extensions, mapped extensions and maps, its on_error: a Failure where it skips),
        in the shard's order."""
        return iter_shard(url, on_error=self.on_error, extensions=self.extensions, mapped=self.map_extensions,
                          maps=self._maps)

    def read_sample(self, url: str, index: int) -> Sample:
        """Sample `index` of source `url` (one of self.urls): a shard's index-th sample
        (a counted local shard is entered at its offset, a remote one read up to it), a
        file list's index-th file in list order; the reader's extensions and limits.

        Raises:
            ShardReadError, ShardFormatError, ...: the sample cannot be read (named).
            IndexError: the shard holds fewer samples (it changed since it was counted).
        """
        flist = self.files.get(url)
        if flist is not None:
            for path, _, fields, err in iter_files(flist, [index], 0, 1, extensions=self.extensions,
                                                    max_bytes=self.max_file_bytes):
                if err is not None:
                    raise err
                return Sample(flist.keys[index], fields, path, index)
        if is_parquet(url):
            return parquet_read_sample(url, index, self.extensions)
        if _shards.is_local(url) and not url.endswith((".tgz", ".tar.gz")):
            # random access: the shard's members indexed once (the last 64 shards kept), then
            # one native ranged read a sample (7x the rate of entering the shard each time)
            by_sample = self._members(url)
            if index >= len(by_sample):
                raise IndexError(f"sample {index} of shard {url!r} is not there (it holds {len(by_sample)}: the "
                                 "shard changed since it was counted)")
            members = by_sample[index]
            key = split_key(members[0].name)[0]  # type: ignore[index]
            exts = [(split_key(m.name) or ("", ""))[1] for m in members]
            take = [(e, m) for e, m in zip(exts, members) if m.type == "0"
                    and (self.extensions is None or e.lower() in self.extensions)]
            with open(_shards.local_path(url), "rb") as f:
                datas, got, error = _native.read_ranges(f.fileno(), np.array([m.offset for _, m in take], np.int64),
                                                        np.array([m.size for _, m in take], np.int64))
            if len(datas) < len(take):  # the shard shrank (or failed) since it was indexed
                m = take[len(datas)][1]
                raise ShardReadError(error or f"shard shrank while being read: member {m.name!r} needs {m.size} "
                                     f"bytes at offset {m.offset}, {got} left", shard=url, key=key)
            return Sample(key, {e: d for (e, _), d in zip(take, datas)}, url, index)
        for item in iter_shard(url, extensions=self.extensions, remote=self.remote, start=index, stop=index + 1,
                               cache=self.cache):
            if isinstance(item, Sample):
                return item
            raise item.error
        raise IndexError(f"sample {index} of shard {url!r} is not there (the shard changed since it was counted)")

    def _members(self, url: str) -> list:
        """Per sample of a local shard: its members (name, offset, size, type), indexed once
        per process (the last _INDEXES shards kept)."""
        with self._read_lock:
            found = self._indexes.get(url)
            if found is not None:
                self._indexes.move_to_end(url)
                return found
        try:
            with open(_shards.local_path(url), "rb") as f:
                members, _, _ = index_file(f.fileno(), os.fstat(f.fileno()).st_size)
        except OSError as e:
            raise _stream_error(e, url) from e
        grouper = Grouper()
        by_sample: list[list] = []
        for m in members:
            g = grouper.group(m.name)
            if g is None:
                continue
            if g == len(by_sample):
                by_sample.append([])
            by_sample[g].append(m)
        with self._read_lock:
            self._indexes[url] = by_sample
            while len(self._indexes) > _INDEXES:
                self._indexes.popitem(last=False)
        return by_sample

    def __getstate__(self) -> dict:  # (to DataLoader's spawned workers: locks and caches are made anew there)
        return {k: v for k, v in self.__dict__.items() if k not in ("_read_lock", "_indexes", "_owner")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._read_lock = threading.Lock()
        self._indexes = collections.OrderedDict()

    def mixture(self, epoch: int | None = None) -> list[dict]:
        """A mixture's epoch (default: the current one): per source, its name, its samples,
        and how many of them the epoch draws (exact: the counts add up to the epoch)."""
        if self.sources is None:
            return []
        counts = self.sample_counts()
        sizes = [sum(counts[u] for u in g) for g in self.source_urls]
        wants = _epoch.mixture_counts(sizes, self.sources, self.epoch_size)
        out = []
        for src, n, k in zip(self.sources, sizes, wants):
            how = ({"weight": src.weight} if src.weight is not None else {"repeat": src.repeat}
                   if src.repeat is not None else {"choose": src.choose} if src.choose is not None else {})
            out.append({"source": src.label, "samples": n, "per_epoch": k, **how,
                        **({"label_offset": src.label_offset} if src.label_offset else {})})
        return out

    def source_of(self, shard: str) -> int | None:
        """Which source of a mixture a sample's shard (or image file) belongs to."""
        if self.sources is None:
            return None
        if not hasattr(self, "_owner"):
            own: dict[str, int] = {}
            for i, g in enumerate(self.source_urls):
                for u in g:
                    own[u] = i
                    if u in self.files:
                        own.update(dict.fromkeys(self.files[u].paths, i))
            self._owner = own
        return self._owner.get(shard)

    def close(self) -> None:
        """Drops the shard mappings kept between epochs (see map_extensions) and the free
        blocks of its pool (see pool_extensions); the reader can still be iterated (shards
        are mapped again, blocks allocated again)."""
        self._maps.close()
        if self._pooled is not None:
            self._pooled.pool.release()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose shard order and shuffle the next iteration uses."""
        self.epoch = int(epoch)

    @property
    def even(self) -> Even | None:
        """The even policy in force: "auto" resolved for this process's ranks."""
        if self.even_policy == "auto":
            return "pad" if self._rank()[1] > 1 else None
        return self.even_policy  # type: ignore[return-value]

    def warn_unequal(self, epoch: int) -> None:
        """even=None asked for with several ranks: say before the first sample when their
        sample counts differ (DDP would hang or fail on the step count). Local shards
        only (their counts are a header scan, kept on disk)."""
        rank, ranks = self._rank()
        if self._warned_unequal or self.even_policy is not None or ranks < 2:
            return
        self._warned_unequal = True
        if not all(u in self.files or _shards.is_local(u) for u in self.urls):
            return
        _, nw = _shards.detect_worker()
        counts = self.sample_counts()
        mode = self.mode()
        per_rank = [0] * ranks
        for c in range(ranks * nw):
            if mode == "elastic":
                per_rank[c // nw] += self.plan(epoch, consumer=c).count or 0
                continue
            share = _shards.plan_share(self.urls, consumer=c, consumers=ranks * nw, mode=mode, even=None,
                                       shuffle=self.shuffle, seed=self.seed, epoch=epoch, counts=counts)
            per_rank[c // nw] += share.count or 0
        if len(set(per_rank)) > 1:
            shown = ", ".join(f"rank {r}: {n}" for r, n in enumerate(per_rank[:4]))
            more = ", ..." if ranks > 4 else ""
            warnings.warn(f"even=None: the {ranks} ranks read unequal sample counts in epoch {epoch} ({shown}{more}); "
                          "DDP training hangs or fails on unequal step counts: even='pad' (the default with several "
                          "ranks) or 'drop' give every rank the same", RuntimeWarning, stacklevel=3)

    def placement(self) -> tuple[int, int]:
        """(this process's rank, the world size): as given, else detected now
        (torch.distributed, torchrun, SLURM; see gpudecode.io.shards.detect_rank)."""
        if self.rank is not None:
            return self.rank, self.world_size  # type: ignore[return-value]
        return _shards.detect_rank()

    _rank = placement  # (the name the reader's own code used)

    def consumer(self) -> tuple[int, int]:
        """(this consumer's index, consumers): ranks x DataLoader workers."""
        r, n = self._rank()
        w, nw = _shards.detect_worker()
        return r * nw + w, n * nw

    def mode(self) -> str:
        """"shard" or "sample": how this reader splits an epoch (see `split`)."""
        return _shards.choose_mode(self.split, len(self.urls), self.consumer()[1], self.even)

    @property
    def resumes_anywhere(self) -> bool:
        """Whether an epoch is one global order that a job resumes on any world size and
        batch size (split="elastic"): the Loader asks this, not the mode."""
        return self.mode() == "elastic"

    def resumable_plan(self, epoch: int, start: int = 0) -> _epoch.EpochPlan | None:
        """The epoch's plan from global position `start` where it is one global order
        (resumes_anywhere), else None (the reader plans the epoch as it reads it)."""
        return self.plan(epoch, start=start) if self.resumes_anywhere else None

    def sample_counts(self) -> dict[str, int]:
        """Samples per shard (counted once; see shard_counts); a local shard whose size or
        modification time changed is counted again at the next epoch.

        Raises:
            ShardFormatError, ShardReadError: a shard cannot be counted, under on_error="raise".
        """
        if self._counts is not None and self._counted_epoch != self.epoch:
            # once per epoch: a local shard replaced or rewritten since (size or time) is counted again
            self._counted_epoch = self.epoch
            if self._stats() != self._counted_stats or self._recount:
                self._counts = None
        if self._counts is None:
            self._recount = False
            self._counted_stats = self._stats()
            self._counted_epoch = self.epoch
            shards = [u for u in self.urls if u not in self.files]
            counts = shard_counts(shards, remote=self.remote, tolerant=self.on_error != "raise", cache=self.cache)
            self._counts = {u: len(self.files[u]) if u in self.files else counts[u] for u in self.urls}
        return self._counts

    def _remote_changed(self, url: str) -> None:
        forget_count(url)
        self._recount = True

    def _stats(self) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for u in self.urls:
            if u in self.files or not _shards.is_local(u):
                out.append(None)
                continue
            try:
                st = os.stat(_shards.local_path(u))
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return out

    @property
    def classes(self) -> list[str]:
        """The class names of the ImageFolder trees read (class i is classes[i], as
        torchvision's ImageFolder numbers them); [] when none is read. A mixture's: each
        source's tree's classes from its label_offset on ("" where no tree names a label)."""
        if self.sources is not None:
            named: dict[int, str] = {}
            for src, g in zip(self.sources, self.source_urls):
                for f in (self.files[u] for u in g if u in self.files):
                    for j, c in enumerate(f.classes):
                        k = src.label_offset + j
                        if named.setdefault(k, c) != c:
                            raise ValueError(f"label {k} is class {named[k]!r} in one source and {c!r} in "
                                             f"{src.label}: set the sources apart with label_offset")
            return [named.get(k, "") for k in range(max(named) + 1)] if named else []
        out: list[str] = []
        for f in self.files.values():
            if f.classes:
                if out and list(f.classes) != out:
                    raise ValueError("the ImageFolder trees read have different classes")
                out = list(f.classes)
        if not out:  # a Parquet set's ClassLabel names (datasets writes them into every file's schema)
            for u in self.urls:
                if is_parquet(u):
                    try:
                        return list(parquet_classes(u))
                    except GpuDecodeError:
                        return []
        return out

    def file_order(self, name: str, epoch: int) -> list[int]:
        """The order in which file list `name` is read in `epoch` (see gpudecode.io.files);
        with repeated_augs, this rank's indices (ra_indices)."""
        if self.repeated_augs > 1:
            rank, world = self.consumer()
            return ra_indices(len(self.files[name]), epoch=epoch, seed=self.seed, rank=rank, world_size=world,
                              repetitions=self.repeated_augs, shuffle=self.shuffle)
        return self.files[name].order(shuffle=self.shuffle, seed=self.seed, epoch=epoch)

    @property
    def total_samples(self) -> int:
        """Samples in all shards, over all consumers."""
        return sum(self.sample_counts().values())

    def plan(self, epoch: int | None = None, *, start: int = 0, consumer: int | None = None) -> _epoch.EpochPlan:
        """What this consumer (or `consumer`) reads in `epoch` (default: the current one),
        in what order: its rank and world size, the split mode and even policy in force,
        its segments and sample counts (gpudecode.io.epoch.EpochPlan). `start`: with
        split="elastic", the global position to start from (a resumed job's place)."""
        e = self.epoch if epoch is None else int(epoch)
        rank, world = self.placement()
        c, n = self.consumer()
        c = c if consumer is None else consumer
        even = self.even
        if self.mode() == "elastic":
            counts = self.sample_counts()
            blocks = None
            if self.sources is not None:  # the epoch's draw from each source, exact
                sizes = [sum(counts[u] for u in g) for g in self.source_urls]
                wants = _epoch.mixture_counts(sizes, self.sources, self.epoch_size)
                blocks = _epoch.mixture_blocks(self.source_urls, counts, wants, seed=self.seed, epoch=e)
            return _epoch.plan_elastic(self.urls, counts, consumer=c, consumers=n, chunk=self.chunk,
                                       even=even, shuffle=self.shuffle, seed=self.seed, epoch=e, start=start,
                                       rank=rank, world_size=world, blocks=blocks)
        if start:
            raise ValueError("start= is a global position of split='elastic' (other splits skip samples of the "
                             "consumer's own share: iter_epoch(start=))")
        share = self.share(e, consumer=c)
        mode = "repeated" if self.repeated_augs > 1 else self.mode()
        return _epoch.EpochPlan(epoch=e, rank=rank, world_size=world, consumer=c, consumers=n, mode=mode, even=even,
                                segments=share.segments, count=share.count, target=share.target)

    def share(self, epoch: int | None = None, consumer: int | None = None) -> _shards.Share:
        """What this consumer (or `consumer`) reads in `epoch` (default: the current one)."""
        if self.repeated_augs > 1:  # the rank's indices are the whole of its share, all ranks alike
            e = self.epoch if epoch is None else epoch
            url = self.urls[0]
            n_own = len(self.file_order(url, e))
            return _shards.Share((_shards.Segment(url, 0, n_own),), n_own, n_own if self.even is not None else None)
        c, n = self.consumer()
        mode = self.mode()
        if mode == "elastic":
            p = self.plan(epoch, consumer=consumer)
            return _shards.Share(p.segments, p.count, p.target)
        needs_counts = mode == "sample" or self.even is not None
        counts = self.sample_counts() if needs_counts else None
        e = self.epoch if epoch is None else epoch
        share = _shards.plan_share(self.urls, consumer=c if consumer is None else consumer, consumers=n, mode=mode,
                                   even=self.even, shuffle=self.shuffle, seed=self.seed, epoch=e, counts=counts)
        if self.even is not None and counts is not None and not self._warned_even:
            self._warned_even = True
            cost = _shards.even_cost(self.urls, counts, consumers=n, mode=mode, even=self.even,
                                     shuffle=self.shuffle, seed=self.seed, epoch=e)
            total = sum(counts.values())
            if total and cost > max(0.02 * total, 0):
                what = "repeats" if self.even == "pad" else "leaves out"
                warnings.warn(f"even={self.even!r} {what} {cost} of {total} samples per epoch "
                              f"({100 * cost / total:.1f}%) to give {n} consumers equal counts", RuntimeWarning,
                              stacklevel=2)
        return share

    def shards_for(self, epoch: int, rank: int | None = None) -> list[str]:
        """The shards this consumer (or, with `rank`, that rank's consumer with this
        process's DataLoader worker index) reads in `epoch`, in reading order."""
        if rank is None:
            return [seg.url for seg in self.share(epoch).segments]
        _, ranks = self._rank()
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} is outside world_size {ranks}")
        w, nw = _shards.detect_worker()
        return [seg.url for seg in self.share(epoch, consumer=rank * nw + w).segments]

    def samples_per_epoch(self, epoch: int | None = None) -> int:
        """Samples this consumer yields in `epoch` (default: the current one; before
        on_error="skip" under even=None)."""
        share = self.share(epoch)
        if share.target is not None:
            return share.target
        if self.repeated_augs > 1:
            return share.count  # type: ignore[return-value]
        counts = self.sample_counts()
        return sum(counts[seg.url] for seg in share.segments)

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, *, start: int = 0, stop: threading.Event | None = None,
                   plan: _epoch.EpochPlan | None = None) -> Generator[Sample, None, None]:
        """The samples of `epoch`, skipping the first `start` of them (to resume). Setting
        `stop` ends the iteration (within a fraction of a second) and its threads. `plan`:
        this epoch's plan (self.plan(epoch, start=...)), e.g. an elastic one from a
        resumed job's global position."""
        self.warn_unequal(epoch)
        if self.cache is not None:
            self.cache.new_epoch()  # each cached copy is revalidated at its first use in this epoch
        if plan is None and self.mode() == "elastic":
            plan = self.plan(epoch)
        self.source_read = {}
        if plan is not None and plan.mode == "elastic":
            ordered: Iterator[Sample] = self._iter_elastic(plan, stop)
            if plan.even is not None and plan.target is not None:
                ordered = _evened(ordered, plan.target)
            yield from (itertools.islice(ordered, start, None) if start else ordered)
            return
        share = self.share(epoch)
        segments: list[_shards.Segment] = []
        orders: dict[str, list[int]] = {}
        for seg in share.segments:
            if seg.url not in self.files:
                segments.append(seg)
                continue
            # a file list's run is read in pieces, on every reader thread
            if seg.url not in orders:
                orders[seg.url] = self.file_order(seg.url, epoch)
            end = len(orders[seg.url]) if seg.stop is None else seg.stop
            segments += [_shards.Segment(seg.url, a, min(a + _FILE_PIECE, end)) for a in range(seg.start, end, _FILE_PIECE)]
        # (the reader threads hand over lists of samples; flattened here in C)
        it: Iterator[Sample] = itertools.chain.from_iterable(self._threaded(segments, stop, orders))
        if self.even is not None and share.target is not None:
            it = _evened(it, share.target)
        if self.shuffle and any(u not in self.files for u in self.urls):  # file lists come permuted
            c, _ = self.consumer()
            it = _shuffled(it, self.buffer_size, random.Random(f"gpudecode-samples:{self.seed}:{epoch}:{c}"))
        yield from (itertools.islice(it, start, None) if start else it)

    def epoch_keys(self, epoch: int, *, start: int = 0, plan: _epoch.EpochPlan | None = None,
                   missing: Container[tuple[str, int]] = frozenset()) -> list[tuple[str, int]]:
        """(shard, index) of each sample iter_epoch(epoch, start=, plan=) yields (its
        Sample's `shard` and `index`), in the same order, without reading one: the order a resident store (gpudecode.resident)
        serves its epoch in. `missing`: samples known to be unreadable, left out where the
        reader would leave them out (on_error="skip")."""
        if plan is None and self.mode() == "elastic":
            plan = self.plan(epoch)
        if plan is not None and plan.mode == "elastic":
            orders = {u: self.file_order(u, plan.epoch) for u in {seg.url for seg in plan.segments} if u in self.files}
            runs = [[k for k in self._segment_keys(seg, orders) if k not in missing] for seg in plan.segments]
            ordered: Iterator[tuple[str, int]] = itertools.chain.from_iterable(
                _epoch.interleave(part, rows) for part, rows in plan.by_part(runs))
            if plan.even is not None and plan.target is not None:
                ordered = _evened(ordered, plan.target)
            return list(itertools.islice(ordered, start, None))
        share = self.share(epoch)
        orders = {}
        for seg in share.segments:
            if seg.url in self.files and seg.url not in orders:
                orders[seg.url] = self.file_order(seg.url, epoch)
        it: Iterator[tuple[str, int]] = (k for seg in share.segments for k in self._segment_keys(seg, orders)
                                         if k not in missing)
        if self.even is not None and share.target is not None:
            it = _evened(it, share.target)
        if self.shuffle and any(u not in self.files for u in self.urls):
            c, _ = self.consumer()
            it = _shuffled(it, self.buffer_size, random.Random(f"gpudecode-samples:{self.seed}:{epoch}:{c}"))
        return list(itertools.islice(it, start, None))

    def _segment_keys(self, seg: _shards.Segment, orders: dict[str, list[int]]) -> Iterator[tuple[str, int]]:
        """(shard, sample index) of a segment's samples, in reading order, as their Samples
        name them (a file list's sample: its file's path and its index in the list)."""
        order = orders.get(seg.url)
        if order is not None:
            paths = self.files[seg.url].paths
            end = len(order) if seg.stop is None else seg.stop
            return ((paths[order[i]], order[i]) for i in range(seg.start, end))
        end = self.sample_counts()[seg.url] if seg.stop is None else seg.stop
        return ((seg.url, i) for i in range(seg.start, end))

    def every_key(self) -> Iterator[tuple[str, int]]:
        """(shard, index) of every sample of every source once, as their Samples name them."""
        counts = self.sample_counts()
        for u in dict.fromkeys(self.urls):
            flist = self.files.get(u)
            if flist is not None:
                yield from ((p, i) for i, p in enumerate(flist.paths))
            else:
                yield from ((u, i) for i in range(counts[u]))

    def read_every(self, stop: threading.Event | None = None) -> Iterator[Sample]:
        """Every sample of every source once, in source order (each shard's and file
        list's samples in their own order), on the reader threads, failures under the
        error policy: what a resident store is filled from (all of it on every rank)."""
        orders = {u: list(range(len(f))) for u, f in self.files.items()}
        segments = [_shards.Segment(u, 0, None) for u in dict.fromkeys(self.urls)]
        return itertools.chain.from_iterable(self._threaded(segments, stop, orders))

    def _iter_elastic(self, plan: _epoch.EpochPlan, stop: threading.Event | None) -> Iterator[Sample]:
        """An elastic plan's samples in the global order: each part's runs read (in
        parallel, on the reader threads), then given out interleaved as the window orders
        them."""
        orders = {u: self.file_order(u, plan.epoch) for u in {seg.url for seg in plan.segments} if u in self.files}
        # the threads may read a few chunks ahead (a chunk's runs are short)
        per_chunk = -(-len(plan.segments) // max(1, len(plan.chunks)))
        tagged = cast(Generator[Any, None, None],
                      self._threaded(plan.segments, stop, orders, tagged=True, ahead=2 * per_chunk))
        pending: tuple[int, list] | None = None
        at = 0
        try:
            for n, rows in plan.parts:
                runs: list[list[Sample]] = [[] for _ in range(n)]
                while True:
                    if pending is None:
                        pending = next(tagged, None)
                        if pending is None:
                            break
                    j, got = pending
                    if j >= at + n:
                        break
                    runs[j - at] += got
                    pending = None
                at += n
                yield from _epoch.interleave(runs, rows)
        finally:
            tagged.close()

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

    def _record(self, f: Failure) -> None:
        self.policy.record(f.error, stacklevel=3)

    def _threaded(self, segments: Sequence[_shards.Segment], stop: threading.Event | None,
                  orders: dict[str, list[int]] | None = None, *, tagged: bool = False,
                  ahead: int | None = None) -> Iterator[Any]:
        """The segments' samples, in order, in lists (as the reader threads hand them over);
        `tagged`: (segment index, list) pairs. `ahead`: segments the threads may read
        ahead of the consumer (default: 2 a thread, at least 4)."""
        if not segments:
            return
        nthreads = min(self.num_threads, len(segments))
        group = ThreadGroup("reader")
        halt = group.stop_event
        # reader threads run at most `window` segments ahead of the consumer: tiny shards
        # (one sample each) otherwise let them read every shard of the epoch ahead, holding
        # its bytes (and, mapped, a descriptor each) until the consumer gets there
        window = _Window(max(4, 2 * nthreads, ahead or 0), halt)
        # a queue a segment, made when the first of its reader and consumer comes to it and
        # dropped when consumed: only the window's segments have one (an elastic epoch of a
        # million samples is ~100k segments)
        queues: dict[int, queue.Queue] = {}
        qlock = threading.Lock()

        def queue_of(j: int) -> queue.Queue:
            with qlock:
                q = queues.get(j)
                if q is None:
                    q = queues[j] = queue.Queue(maxsize=8)
                return q

        timed = self.sources is not None  # a mixture: what each source's reads cost (stats, profile)

        def work(t: int) -> None:
            for j in range(t, len(segments), nthreads):
                if not window.may_start(j):
                    return
                items = self._segment_items(segments[j], group, orders)
                if timed:
                    items = self._timed(items, segments[j].url)
                if not _produce(items, queue_of(j), segments[j].url, halt):
                    return

        for t in range(nthreads):
            group.start(work, t, name=f"reader-{t}")
        outer = stop if stop is not None else threading.Event()
        try:
            for j, seg in enumerate(segments):
                q = queue_of(j)
                if tagged:
                    for got in self._consume(seg, q, outer, group):
                        yield j, got
                    stopped = outer.is_set()
                else:
                    stopped = yield from self._consume(seg, q, outer, group)
                if stopped:
                    return
                with qlock:
                    del queues[j]
                window.advance()
        finally:
            group.stop()

    def read_times(self) -> dict[str, tuple[float, int]]:
        """A mixture's read so far this epoch, per source label: (seconds on the reader
        threads, samples); {} when the shards are not a mixture."""
        if self.sources is None:
            return {}
        with self._read_lock:
            return {self.sources[i].label: (t, n) for i, (t, n) in self.source_read.items()}

    def _timed(self, items: Iterator[list[Sample | Failure]], url: str) -> Iterator[list[Sample | Failure]]:
        """`items` with the time spent producing them (not the time their queue made the
        thread wait) and their samples added to their source's `source_read`."""
        i = self.source_of(url)
        acc = [0.0, 0]
        t = time.perf_counter()
        try:
            for got in items:
                acc[0] += time.perf_counter() - t
                acc[1] += len(got)
                yield got
                t = time.perf_counter()
        finally:
            if i is not None:
                with self._read_lock:
                    rec = self.source_read.setdefault(i, [0.0, 0])
                    rec[0] += acc[0]
                    rec[1] += acc[1]

    def _segment_items(self, seg: _shards.Segment, group: ThreadGroup,
                       orders: dict[str, list[int]] | None) -> Iterator[list[Sample | Failure]]:
        """A segment's samples and failures, in lists: from its shard, or from its file list."""
        if seg.url not in self.files:
            yield from _shard_lists(seg.url, on_error=self.on_error, extensions=self.extensions, remote=self.remote,
                                    group=group, start=seg.start, stop=seg.stop, cache=self.cache,
                                    mapped=self.map_extensions, maps=self._maps, pooled=self._pooled)
            return
        flist = self.files[seg.url]
        for path, i, fields, err in iter_files(flist, (orders or {})[seg.url], seg.start, seg.stop,
                                                extensions=self.extensions, max_bytes=self.max_file_bytes):
            yield [Sample(flist.keys[i], fields, path, i) if err is None else Failure(err, fatal=False)]

    def _consume(self, seg: _shards.Segment, q: queue.Queue, outer: threading.Event,
                 group: ThreadGroup) -> Generator[list[Sample], None, bool]:
        """The samples of one segment from its queue, in lists, failures under the error
        policy; returns True when `outer` stopped the read."""
        while True:
            item = get_until_stopped(q, outer, alive=group.alive)
            if item is STOPPED:
                if outer.is_set():
                    return True
                raise ShardReadError("reader threads ended without finishing the shard", shard=seg.url)
            if item is _END:
                return False
            if isinstance(item, Failure):
                if self.on_error == "raise" or isinstance(item.error, ResourceError):
                    raise item.error
                self._record(item)
                continue
            yield item


def _warn_ra_epoch(n: int, repetitions: int, consumers: int) -> None:
    """torchvision's RASampler gives each rank floor(n // 256 * 256 / world_size) samples an
    epoch, whatever the repetitions: on few ranks, or a set of a few hundred images, far
    fewer than n; said once, as the Loader follows it exactly (its place in scripts)."""
    per_rank = int(n // 256 * 256 / consumers)
    if per_rank * consumers < n:
        warnings.warn(f"repeated_augs={repetitions}: each of the {consumers} consumers reads {per_rank} samples an "
                      f"epoch ({per_rank * consumers} of the {n}), as torchvision's RASampler gives them "
                      "(floor(n / 256) * 256 / world_size); without repeated_augs every sample is read once",
                      RuntimeWarning, stacklevel=4)


MAX_EPOCH = 10**9  # samples in a mixture's epoch: a billion (past it the epoch's blocks do not fit in memory)


def _check_epoch_size(epoch_size: Any, sources: Sequence[_epoch.Source] | None) -> None:
    """A mixture's epoch_size and weights, checked where they are given (they were refused
    only at len() or the first batch, and an epoch of 10**12 samples ran out of memory)."""
    if epoch_size is not None and not (isinstance(epoch_size, str) and epoch_size in _epoch.STOP_CRITERIA):
        if isinstance(epoch_size, bool) or not isinstance(epoch_size, int) or not 1 <= epoch_size <= MAX_EPOCH:
            raise ValueError(f"epoch_size must be an int in 1..{MAX_EPOCH:,} or one of {_epoch.STOP_CRITERIA}, not "
                             f"{epoch_size!r}")
    weighted = [s for s in sources or () if s.weight is not None]
    if weighted and not sum(float(s.weight or 0.0) for s in weighted) > 0:
        raise ValueError("the sources' weights sum to 0: give some source a weight above 0")


def _names(classes: Sequence[str], show: int = 4) -> str:
    more = f", ... ({len(classes)} classes)" if len(classes) > show else ""
    return ", ".join(classes[:show]) + more


class _Window:
    """How far the reader threads may run ahead: segment j starts once the consumer has
    finished all but `size` of the segments before it."""

    def __init__(self, size: int, halt: threading.Event) -> None:
        self.size, self.halt = size, halt
        self.progress = threading.Condition()
        self.consumed = 0

    def may_start(self, j: int) -> bool:
        """Waits for segment j's turn; False when the threads are told to stop."""
        with self.progress:
            while j >= self.consumed + self.size:
                if self.halt.is_set():
                    return False
                self.progress.wait(0.1)
        return True

    def advance(self) -> None:
        with self.progress:
            self.consumed += 1
            self.progress.notify_all()


def _produce(items: Iterator[list[Sample | Failure]], q: queue.Queue, url: str, halt: threading.Event) -> bool:
    """One segment into its queue: samples in lists of at most _CHUNK, failures as they
    come (a fatal one ends the segment), then _END; an exception becomes a fatal failure
    (the consumer is never left waiting). False when `halt` stopped it."""
    chunk: list = []
    try:
        for got in items:
            if halt.is_set():
                return False
            if Failure in set(map(type, got)):  # (the common list has none: the check in C)
                for item in got:
                    if not isinstance(item, Failure):
                        chunk.append(item)
                        continue
                    if chunk and not put_until_stopped(q, chunk, halt):
                        return False
                    chunk = []
                    if not put_until_stopped(q, item, halt):
                        return False
                    if item.fatal:
                        return put_until_stopped(q, _END, halt)
            else:
                chunk += got
            while len(chunk) >= _CHUNK:
                if not put_until_stopped(q, chunk[:_CHUNK], halt):
                    return False
                del chunk[:_CHUNK]
        if chunk and not put_until_stopped(q, chunk, halt):
            return False
    except BaseException as e:  # never leave the consumer waiting
        err = wrap_data_error(e, ShardReadError, "reader thread failed", shard=url)
        if not put_until_stopped(q, Failure(err, fatal=True), halt):
            return False
    return put_until_stopped(q, _END, halt)


_T = TypeVar("_T")


def _evened(it: Iterator[_T], target: int) -> Iterator[_T]:
    """Exactly `target` samples: the first `target` of `it`, then repeats of the first
    ones where `it` runs short (samples lost to on_error="skip", or padding)."""
    head: list[_T] = []
    n = 0
    for s in it:
        if n >= target:
            break
        if len(head) < _PAD_HEAD:
            head.append(s)
        yield s
        n += 1
    if n < target and not head:
        raise ShardReadError(f"no sample could be read to make up {target - n} of {target} samples")
    while n < target:
        yield head[n % len(head)]
        n += 1


def ra_indices(n: int, *, epoch: int, seed: int, rank: int, world_size: int, repetitions: int,
               shuffle: bool = True) -> list[int]:
    """The indices torchvision's (and DeiT's) RASampler gives `rank` in `epoch`: the
    epoch's permutation of range(n) (torch.randperm, a generator seeded with seed + epoch),
    each index `repetitions` times in a row, padded from its head to a multiple of the
    ranks, every world_size-th from `rank`, the first floor(n / 256) * 256 / world_size."""
    import math

    import torch

    per_rank = int(math.ceil(n * float(repetitions) / world_size))
    total = per_rank * world_size
    selected = int(math.floor(n // 256 * 256 / world_size))
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    rep = [i for i in order for _ in range(repetitions)]
    rep += rep[: total - len(rep)]
    return rep[rank:total:world_size][:selected]


def _shuffled(it: Iterator[_T], size: int, rng: random.Random, initial: int = _SHUFFLE_INITIAL
              ) -> Iterator[_T]:
    """A shuffle buffer of `size` samples that starts giving them out once it holds
    `initial` (webdataset's convention): while it fills, two samples go in for each one
    out, so an epoch's first batch waits for `initial` samples rather than `size` (1000
    samples took about 27 ms to read from page-cached tensor shards, a sixth of a
    2,048-image epoch's time). Every sample comes out exactly once (samples are never None)."""
    buf: list[_T] = []
    start = max(1, min(initial, size))
    it = iter(it)
    # randrange(n) is _randbelow(n) for n > 0: the same draws without randrange's checks
    below = getattr(rng, "_randbelow", rng.randrange)
    for s in it:
        buf.append(s)
        if len(buf) < size:
            nxt = next(it, None)
            if nxt is not None:
                buf.append(nxt)
        if len(buf) >= start:
            i = below(len(buf))
            buf[i], buf[-1] = buf[-1], buf[i]
            yield buf.pop()
    rng.shuffle(buf)
    yield from buf


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

