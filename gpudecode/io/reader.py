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
  member of another key follows it, or the end-of-archive block: a fault in a header
  names the sample before it (it may be missing fields), a fault after the end block
  names no sample (every one before it was delivered).
"""
from __future__ import annotations

import contextlib
import gzip
import os
import queue
import random
import tempfile
import threading
import zlib
from dataclasses import dataclass
from typing import IO, Callable, Generator, Iterator, Literal, Sequence, cast

import numpy as np
import torch.utils.data

from .. import _native

from .._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from ..errors import (GpuDecodeError, LocatedError, OnError, ShardFormatError, ShardReadError, Skipped,
                      check_on_error, record_failure, wrap_data_error)
from . import shards as _shards
from .remote import RemoteOptions, open_remote
from .tario import BLOCK, Member, TarFault, index_file, is_metadata, iter_stream, split_key

Even = Literal["pad", "drop"]
_CHUNK = 64  # samples handed over per queue item
_READ_BATCH = 256  # members read from a local shard per native call
_GZIP_MAGIC = b"\x1f\x8b"

__all__ = ["Sample", "Skipped", "ShardReader", "OnError", "iter_shard", "count_samples", "record_failure",
           "check_on_error", "put_until_stopped", "split_exts"]


@dataclass(slots=True)
class Sample:
    """One sample: the members of a shard that share a key."""

    key: str
    fields: dict[str, bytes]
    shard: str
    index: int  # position of the sample in its shard


@dataclass(slots=True)
class _Failure:
    error: GpuDecodeError
    fatal: bool  # the rest of the shard is lost


_END = object()


def _stream_error(e: BaseException, url: str) -> LocatedError:
    """An exception of a shard stream as the project's error naming the shard."""
    if isinstance(e, LocatedError):
        return e
    if isinstance(e, (zlib.error, gzip.BadGzipFile, EOFError)):
        return wrap_data_error(e, ShardFormatError, "corrupt or cut-off gzip stream", shard=url)
    if isinstance(e, OSError):
        return wrap_data_error(e, ShardReadError, "read failed", shard=url)
    return wrap_data_error(e, ShardReadError, "reading the shard failed", shard=url)


def _gunzip(f: IO[bytes]) -> IO[bytes]:
    return cast(IO[bytes], gzip.GzipFile(fileobj=f, mode="rb"))


def _open_local(path: str, url: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise ShardReadError(f"cannot open shard: {e.strerror or e}", shard=url) from e


def iter_members(url: str, *, want: Callable[[str], bool] = lambda name: True,
                 remote: RemoteOptions | None = None,
                 group: ThreadGroup | None = None) -> Iterator[tuple[Member, bytes | None] | TarFault]:
    """(member, data) for every member of a shard (data None where want(name) is False,
    or for a link), then a last TarFault if the tar is refused.

    Local uncompressed shards are indexed natively and their members read with pread.
    A gzip shard (by content, local or remote) is first decompressed into an anonymous
    temporary file (in GPUDECODE_TMPDIR, else the system's), reading the gzip stream to its
    end so its CRC and length are checked before any sample is delivered; the file is then
    read as a local shard. Remote uncompressed shards are parsed as streams. With `group`,
    its stop() cancels a remote read blocked on the network.

    Raises:
        ShardReadError: the shard cannot be opened or read (names it).
        ShardFormatError: a corrupt gzip stream (CRC, length, deflate data).
    """
    if _shards.is_local(url):
        f = _open_local(_shards.local_path(url), url)
        with f:
            if f.peek(2)[:2] == _GZIP_MAGIC:
                with _spooled(f, url) as tmp:
                    yield from _file_members(tmp, url, want)
            else:
                yield from _file_members(f, url, want)
        return
    stream = open_remote(url, remote)
    cancel = getattr(getattr(stream, "raw", None), "cancel", None)
    with stream, (group.cancelling(cancel) if group is not None and cancel is not None else contextlib.nullcontext()):
        if stream.peek(2)[:2] == _GZIP_MAGIC:
            with _spooled(stream, url) as tmp:
                yield from _file_members(tmp, url, want)
        else:
            yield from stream_members(stream, url, want=want)


@contextlib.contextmanager
def _spooled(stream: IO[bytes], url: str) -> Iterator[IO[bytes]]:
    """The gunzipped bytes of `stream` in an anonymous temporary file, CRC and length checked."""
    tmp = tempfile.TemporaryFile(dir=os.environ.get("GPUDECODE_TMPDIR") or None)
    try:
        try:
            gz = _gunzip(stream)
            while True:
                chunk = gz.read(1 << 20)
                if not chunk:
                    break
                tmp.write(chunk)
            tmp.flush()
        except (OSError, EOFError, zlib.error, MemoryError, OverflowError) as e:
            raise _stream_error(e, url) from e
        yield tmp  # type: ignore[misc]
    finally:
        tmp.close()


def _file_members(f: IO[bytes], url: str, want: Callable[[str], bool]
                  ) -> Iterator[tuple[Member, bytes | None] | TarFault]:
    try:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        members, fault = index_file(fd, size)
        for start in range(0, len(members), _READ_BATCH):
            part = members[start:start + _READ_BATCH]
            wanted = [m for m in part if m.type == "0" and want(m.name)]
            datas, got, error = _native.read_ranges(fd, np.array([m.offset for m in wanted], np.int64),
                                                    np.array([m.size for m in wanted], np.int64))
            data_of = dict(zip((id(m) for m in wanted), datas))
            if len(datas) < len(wanted):  # the file shrank, or failed, under the reader
                m = wanted[len(datas)]
                for mm in part:
                    if mm is m:
                        break
                    yield mm, data_of.get(id(mm))
                why = error or (f"shard shrank while being read: member {m.name!r} needs {m.size} bytes "
                                f"at offset {m.offset}, {got} left (the file was {size} bytes when opened)")
                yield TarFault(why, m.offset - BLOCK, m.name, io=True)
                return
            for m in part:
                yield m, data_of.get(id(m))
        if fault is not None:
            yield fault
    except (OSError, MemoryError, OverflowError) as e:
        raise _stream_error(e, url) from e


def stream_members(stream: IO[bytes], url: str, *, want: Callable[[str], bool] = lambda name: True
                   ) -> Iterator[tuple[Member, bytes | None] | TarFault]:
    """iter_stream over a shard stream, gunzipped when its first bytes say gzip; the
    stream's own exceptions (network, gzip CRC/length/deflate errors) come out as
    ShardReadError / ShardFormatError naming `url`."""
    try:
        head = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
        if head == _GZIP_MAGIC or (not head and url.endswith((".tgz", ".tar.gz"))):
            yield from iter_stream(_gunzip(stream), want=want)
        else:
            yield from iter_stream(stream, want=want)
    except (OSError, EOFError, zlib.error, MemoryError, OverflowError) as e:
        raise _stream_error(e, url) from e


def split_exts(exts: str | Sequence[str]) -> list[str]:
    items = exts.split(";") if isinstance(exts, str) else list(exts)
    return [e.strip().lower().lstrip(".") for e in items if e.strip()]


def _link_kind(t: str) -> str:
    return "hard link" if t == "1" else "symbolic link"


def iter_shard(url: str, *, on_error: str = "raise", extensions: frozenset[str] | None = None,
               remote: RemoteOptions | None = None, group: ThreadGroup | None = None) -> Iterator[Sample | _Failure]:
    """Samples of one shard, in order, interleaved with _Failure records (see the module
    doc for what is delivered around a fault). Under "raise" the first failure ends
    the shard."""
    key: str | None = None
    fields: dict[str, bytes] = {}
    bad: GpuDecodeError | None = None
    index = 0

    def want(name: str) -> bool:
        if extensions is None:
            return True
        parts = split_key(name)
        return parts is not None and parts[1] in extensions and not is_metadata(name)

    def pending() -> Sample | _Failure:
        return Sample(key, fields, url, index) if bad is None else _Failure(bad, fatal=False)  # type: ignore[arg-type]

    try:
        for item in iter_members(url, want=want, remote=remote, group=group):
            if isinstance(item, TarFault):
                parts = split_key(item.member) if item.member is not None else None
                if item.after_end:  # the archive ended before the fault: its last sample is whole
                    if key is not None:
                        yield pending()
                    key = None
                elif parts is not None and parts[0] != key:
                    if key is not None:
                        yield pending()  # the fault is in another sample's data: this one is complete
                    key = parts[0]
                cls = ShardReadError if item.io else ShardFormatError
                yield _Failure(cls(item.message, shard=url, key=key, offset=item.offset), fatal=True)
                return
            member, data = item
            name = member.name
            if is_metadata(name):
                continue
            parts = split_key(name)
            if parts is None:
                continue
            k, ext = parts
            if k != key:
                if key is not None:
                    yield pending()
                    index += 1
                key, fields, bad = k, {}, None
            if bad is not None:
                continue
            if member.type != "0":
                bad = ShardFormatError(f"member {name!r} is a {_link_kind(member.type)}: gpudecode reads only "
                                       "regular files (pack the target's bytes instead)", shard=url, key=k,
                                       offset=member.offset - BLOCK)
            elif ext in fields:
                bad = ShardFormatError(f"repeated extension {ext!r} in one sample", shard=url, key=k,
                                       offset=member.offset - BLOCK)
            elif data is not None:
                fields[ext] = data
            if bad is not None and on_error == "raise":
                yield _Failure(bad, fatal=True)
                return
        if key is not None:
            yield pending()
    except GpuDecodeError as e:
        # the shard failed under the reader (open, network, gzip): the sample being
        # assembled may be incomplete, and is named
        if isinstance(e, LocatedError) and e.key is None and key is not None:
            e = type(e)(e.reason, shard=e.shard, key=key, offset=e.offset)
        yield _Failure(e, fatal=True)


def count_samples(url: str, *, remote: RemoteOptions | None = None) -> int:
    """Samples in one shard (local shards: headers only; streams are read through).

    Raises:
        ShardFormatError, ShardReadError: the shard cannot be read to its end.
    """
    n = 0
    for item in iter_shard(url, extensions=frozenset(), remote=remote):
        if isinstance(item, _Failure):
            raise item.error
        n += 1
    return n


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
        remote: timeouts and retries for remote shards (`gpudecode.io.remote.RemoteOptions`).

    Over one epoch with N ranks and even=None every sample is yielded exactly once across
    ranks (the split is by shard, so use at least as many shards as ranks x workers).
    """

    def __init__(self, urls, *, shuffle: bool = False, seed: int = 0, buffer_size: int = 1000,
                 rank: int | None = None, world_size: int | None = None, num_threads: int | None = None,
                 on_error: OnError = "raise", extensions: Sequence[str] | None = None,
                 even: Even | None = None, remote: RemoteOptions | None = None) -> None:
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
        self.remote = remote
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
                self._counts[u] = count_samples(u, remote=self.remote)
        return dict(self._counts)

    def _even_target(self, epoch: int) -> int:
        counts = self.sample_counts()
        _, n = self._rank()
        order = _shards.epoch_order(self.urls, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        per_rank = [sum(counts[u] for u in _shards.split(order, r, n)) for r in range(n)]
        return max(per_rank) if self.even == "pad" else min(per_rank)

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_epoch(self.epoch)

    def iter_epoch(self, epoch: int, *, start: int = 0, stop: threading.Event | None = None) -> Generator[Sample, None, None]:
        """The samples of `epoch`, skipping the first `start` of them (to resume). Setting
        `stop` ends the iteration (within a fraction of a second) and its threads."""
        it = self._threaded(self.shards_for(epoch), stop)
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

    def _threaded(self, urls: list[str], stop: threading.Event | None) -> Iterator[Sample]:
        if not urls:
            return
        nthreads = min(self.num_threads, len(urls))
        queues: list[queue.Queue] = [queue.Queue(maxsize=8) for _ in urls]
        group = ThreadGroup("reader")
        halt = group.stop_event
        on_error, extensions, remote = self.on_error, self.extensions, self.remote

        def work(t: int) -> None:
            for j in range(t, len(urls), nthreads):
                q = queues[j]
                chunk: list = []
                try:
                    for item in iter_shard(urls[j], on_error=on_error, extensions=extensions, remote=remote,
                                           group=group):
                        if halt.is_set():
                            return
                        if isinstance(item, _Failure):
                            if chunk and not put_until_stopped(q, chunk, halt):
                                return
                            chunk = []
                            if not put_until_stopped(q, item, halt):
                                return
                            if item.fatal:
                                break
                            continue
                        chunk.append(item)
                        if len(chunk) >= _CHUNK:
                            if not put_until_stopped(q, chunk, halt):
                                return
                            chunk = []
                    if chunk and not put_until_stopped(q, chunk, halt):
                        return
                except BaseException as e:  # never leave the consumer waiting
                    err = wrap_data_error(e, ShardReadError, "reader thread failed", shard=urls[j])
                    if not put_until_stopped(q, _Failure(err, fatal=True), halt):
                        return
                if not put_until_stopped(q, _END, halt):
                    return

        for t in range(nthreads):
            group.start(work, t, name=f"reader-{t}")
        outer = stop if stop is not None else threading.Event()
        try:
            for url, q in zip(urls, queues):
                while True:
                    item = get_until_stopped(q, outer, alive=group.alive)
                    if item is STOPPED:
                        if outer.is_set():
                            return
                        raise ShardReadError("reader threads ended without finishing the shard", shard=url)
                    if item is _END:
                        break
                    if isinstance(item, _Failure):
                        if self.on_error == "raise":
                            raise item.error
                        self._record(item)
                        continue
                    yield from item
        finally:
            group.stop()


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
