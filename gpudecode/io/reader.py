"""ShardReader: tar shards in, samples of compressed bytes out. No pixel is decoded here.

Reader threads parse shards (local ones through mmap, others as streams through fsspec)
and hand the consumer chunks of samples. The consumer takes the shards' samples in the
epoch's shard order, so the order is the same whatever the number of threads, then runs
an optional shuffle buffer seeded from (seed, epoch, rank, worker).
"""
from __future__ import annotations

import gzip
import mmap
import os
import queue
import random
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import torch.utils.data

from ..errors import GpuDecodeError, ShardFormatError, ShardReadError
from . import shards as _shards
from .tario import index_members, is_metadata, iter_stream, split_key

OnError = Literal["raise", "warn", "skip"]
Even = Literal["pad", "drop"]
_CHUNK = 64  # samples handed over per queue item
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(slots=True)
class Sample:
    """One sample: the members of a shard that share a key."""

    key: str
    fields: dict[str, bytes]
    shard: str
    index: int  # position of the sample in its shard


@dataclass(slots=True)
class Skipped:
    """Something passed over under on_error="skip" or "warn", and why."""

    shard: str
    key: str | None
    offset: int | None
    reason: str
    error: str  # the exception's class name


@dataclass(slots=True)
class _Failure:
    error: GpuDecodeError
    fatal: bool  # the rest of the shard is lost


_END = object()


def put_until_stopped(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Puts item on a bounded queue, waiting while it is full; False if `stop` was set
    first (the consumer went away), so producer threads never block forever."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def record_failure(err: BaseException, on_error: str, skipped: list[Skipped], *, who: str = "gpudecode",
                   stacklevel: int = 3) -> None:
    """What on_error="skip"/"warn" do with a bad shard or sample: list it in `skipped`,
    and warn under "warn". (on_error="raise" is the caller's: it raises instead.)"""
    skipped.append(Skipped(getattr(err, "shard", None) or "", getattr(err, "key", None),
                           getattr(err, "offset", None), getattr(err, "reason", str(err)), type(err).__name__))
    if on_error == "warn":
        warnings.warn(f"{who} skipped: {err}", RuntimeWarning, stacklevel=stacklevel + 1)


def check_on_error(on_error: str) -> str:
    if on_error not in ("raise", "warn", "skip"):
        raise ValueError(f"on_error must be 'raise', 'warn' or 'skip', not {on_error!r}")
    return on_error


def _open_members(url: str) -> Iterator[tuple[str, int, object]]:
    """(name, offset, data) for every regular member; data is bytes, or a zero-copy
    read function over the mmap for local uncompressed shards."""
    if _shards.is_local(url):
        path = _shards.local_path(url)
        try:
            f = open(path, "rb")
        except OSError as e:
            raise ShardReadError(f"cannot open shard: {e.strerror or e}", shard=url) from e
        with f:
            head = f.read(2)
            if head == _GZIP_MAGIC:
                f.seek(0)
                yield from _stream_members(gzip.GzipFile(fileobj=f), url)
                return
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ShardFormatError("empty file is not a tar shard", shard=url, offset=0)
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                for m in index_members(mm, url):
                    yield m.name, m.offset, (mm, m.offset, m.size)
            finally:
                mm.close()
        return
    import fsspec

    try:
        of = fsspec.open(url, "rb", compression="gzip" if url.endswith((".tgz", ".tar.gz")) else None)
        stream = of.open()
    except (OSError, ValueError) as e:
        raise ShardReadError(f"cannot open shard: {e}", shard=url) from e
    with stream:
        yield from _stream_members(stream, url)


def _stream_members(stream, url: str) -> Iterator[tuple[str, int, object]]:
    try:
        for i, (name, data) in enumerate(iter_stream(stream, url)):
            yield name, i, data
    except (OSError, EOFError, gzip.BadGzipFile) as e:  # a cut gzip stream or network error
        raise ShardReadError(f"read failed: {e}", shard=url) from e


def _materialize(data) -> bytes:
    if isinstance(data, tuple):
        mm, off, size = data
        return mm[off:off + size]
    return data


def iter_shard(url: str, *, on_error: str = "raise", extensions: frozenset[str] | None = None) -> Iterator:
    """Samples of one shard, in order, interleaved with _Failure records. Under "raise"
    the first failure ends the shard; otherwise a bad sample is dropped and reading
    goes on, and a failure of the tar itself ends the shard."""
    key: str | None = None
    fields: dict[str, bytes] = {}
    bad: GpuDecodeError | None = None
    index = 0
    try:
        for name, offset, data in _open_members(url):
            if is_metadata(name):
                continue
            parts = split_key(name)
            if parts is None:
                continue
            k, ext = parts
            if k != key:
                if key is not None:
                    if bad is None:
                        yield Sample(key, fields, url, index)
                    else:
                        yield _Failure(bad, fatal=False)
                    index += 1
                key, fields, bad = k, {}, None
            if bad is not None:
                continue
            if ext in fields:
                bad = ShardFormatError(f"repeated extension {ext!r} in one sample", shard=url, key=k, offset=offset)
                if on_error == "raise":
                    yield _Failure(bad, fatal=True)
                    return
                continue
            if extensions is None or ext in extensions:
                fields[ext] = _materialize(data)
        if key is not None:
            yield Sample(key, fields, url, index) if bad is None else _Failure(bad, fatal=False)
    except GpuDecodeError as e:
        yield _Failure(e, fatal=True)


def count_samples(url: str) -> int:
    """Samples in one shard (reads headers only for local shards)."""
    return sum(1 for s in iter_shard(url, extensions=frozenset()) if isinstance(s, Sample))


class ShardReader(torch.utils.data.IterableDataset):
    """Iterates over the samples of WebDataset-style tar shards.

    Args:
        urls: shards, in any form `gpudecode.io.shards.expand_urls` accepts.
        shuffle: shuffle the shard order per epoch and samples in a buffer.
        seed: fixes every random choice together with the epoch.
        buffer_size: samples held by the shuffle buffer (used when shuffle is on).
        rank, world_size: this process's part; detected (torch.distributed, torchrun,
            SLURM) when None. Inside DataLoader workers the rank's shards are split
            again by worker.
        num_threads: reader threads (default 2).
        on_error: "raise" stops at the first bad shard or sample; "warn" and "skip"
            pass over it, count it in `skipped` ("warn" also warns).
        extensions: if given, only these extensions' bytes are read (others are left
            in the shard, and absent from `fields`).
        even: None, "pad" or "drop": with several ranks, make every rank yield the same
            number of samples (DDP needs equal step counts): "pad" repeats a rank's first
            samples up to the largest rank's count, "drop" stops every rank at the
            smallest count. Needs the per-shard sample counts (a header scan per shard).

    Over one epoch with N ranks and even=None every sample is yielded exactly once across
    ranks (the split is by shard, so use at least as many shards as ranks x workers).
    """

    def __init__(self, urls, *, shuffle: bool = False, seed: int = 0, buffer_size: int = 1000,
                 rank: int | None = None, world_size: int | None = None, num_threads: int | None = None,
                 on_error: OnError = "raise", extensions: Sequence[str] | None = None,
                 even: Even | None = None) -> None:
        super().__init__()
        self.urls = _shards.expand_urls(urls)
        if not self.urls:
            raise ValueError("no shards given")
        if buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:  # type: ignore[operator]
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if even not in (None, "pad", "drop"):
            raise ValueError(f"even must be None, 'pad' or 'drop', not {even!r}")
        self.shuffle = shuffle
        self.seed = seed
        self.buffer_size = buffer_size
        self.rank = rank
        self.world_size = world_size
        self.num_threads = max(1, num_threads or 2)
        self.on_error = check_on_error(on_error)
        self.extensions = frozenset(e.lower().lstrip(".") for e in extensions) if extensions is not None else None
        self.even = even
        self.epoch = 0
        self.skipped: list[Skipped] = []
        self._counts: dict[str, int] = {}

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose shard order and shuffle the next iteration uses."""
        self.epoch = int(epoch)

    def _rank(self) -> tuple[int, int]:
        if self.rank is not None:
            return self.rank, self.world_size  # type: ignore[return-value]
        return _shards.detect_rank()

    def shards_for(self, epoch: int, rank: int | None = None) -> list[str]:
        """This rank's (and worker's) shards for `epoch`, in reading order."""
        r, n = self._rank()
        if rank is not None:
            r = rank
        order = _shards.epoch_order(self.urls, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        mine = _shards.split(order, r, n)
        w, nw = _shards.detect_worker()
        return _shards.split(mine, w, nw)

    def sample_counts(self) -> dict[str, int]:
        """Samples per shard (cached after the first call)."""
        for u in self.urls:
            if u not in self._counts:
                self._counts[u] = count_samples(u)
        return dict(self._counts)

    def _even_target(self, epoch: int) -> int:
        counts = self.sample_counts()
        _, n = self._rank()
        order = _shards.epoch_order(self.urls, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        per_rank = [sum(counts[u] for u in _shards.split(order, r, n)) for r in range(n)]
        return max(per_rank) if self.even == "pad" else min(per_rank)

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, *, start: int = 0) -> Iterator[Sample]:
        """The samples of `epoch`, skipping the first `start` of them (to resume)."""
        it = self._threaded(self.shards_for(epoch))
        if self.even is not None:
            it = self._evened(it, self._even_target(epoch))
        if self.shuffle:
            r, _ = self._rank()
            w, _ = _shards.detect_worker()
            it = _shuffled(it, self.buffer_size, random.Random(f"gpudecode-samples:{self.seed}:{epoch}:{r}:{w}"))
        for i, s in enumerate(it):
            if i >= start:
                yield s

    def _evened(self, it: Iterator[Sample], target: int) -> Iterator[Sample]:
        head: list[Sample] = []
        n = 0
        for s in it:
            if n >= target:
                break
            if self.even == "pad" and len(head) < target:
                head.append(s)
            yield s
            n += 1
        if self.even == "pad" and head:
            while n < target:
                yield head[n % len(head)]
                n += 1

    def _record(self, f: _Failure) -> None:
        record_failure(f.error, self.on_error, self.skipped, stacklevel=3)

    def _threaded(self, urls: list[str]) -> Iterator[Sample]:
        if not urls:
            return
        nthreads = min(self.num_threads, len(urls))
        queues: list[queue.Queue] = [queue.Queue(maxsize=8) for _ in urls]
        stop = threading.Event()
        on_error, extensions = self.on_error, self.extensions

        def put(q: queue.Queue, item) -> bool:
            return put_until_stopped(q, item, stop)

        def work(t: int) -> None:
            for j in range(t, len(urls), nthreads):
                q = queues[j]
                chunk: list = []
                try:
                    for item in iter_shard(urls[j], on_error=on_error, extensions=extensions):
                        if isinstance(item, _Failure):
                            if chunk and not put(q, chunk):
                                return
                            chunk = []
                            if not put(q, item):
                                return
                            if item.fatal:
                                break
                            continue
                        chunk.append(item)
                        if len(chunk) >= _CHUNK:
                            if not put(q, chunk):
                                return
                            chunk = []
                    if chunk and not put(q, chunk):
                        return
                except BaseException as e:  # never leave the consumer waiting
                    err = ShardReadError(f"reader thread failed: {type(e).__name__}: {e}", shard=urls[j])
                    err.__cause__ = e
                    if not put(q, _Failure(err, fatal=True)):
                        return
                if not put(q, _END):
                    return

        threads = [threading.Thread(target=work, args=(t,), daemon=True, name=f"gpudecode-reader-{t}")
                   for t in range(nthreads)]
        for th in threads:
            th.start()
        try:
            for q in queues:
                while True:
                    item = q.get()
                    if item is _END:
                        break
                    if isinstance(item, _Failure):
                        if self.on_error == "raise":
                            raise item.error
                        self._record(item)
                        continue
                    yield from item
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=5)


def _shuffled(it: Iterator[Sample], size: int, rng: random.Random) -> Iterator[Sample]:
    buf: list[Sample] = []
    for s in it:
        if len(buf) < size:
            buf.append(s)
            continue
        i = rng.randrange(size)
        yield buf[i]
        buf[i] = s
    rng.shuffle(buf)
    yield from buf
