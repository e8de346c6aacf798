"""The reader's threads: the segments of a plan (runs of a shard's samples, or of a file
list's files) read on reader threads and handed to the consumer in the plan's order, so
the order is the same whatever the number of threads (`SegmentReader`).

Each segment has its own bounded queue; the threads take segments in turn and run at most
a window of segments ahead of the consumer (`_Window`); a thread hands over lists of up to
_CHUNK samples, failures as they come, then an end mark. Failures meet the error policy in
the consumer's thread (`_consume`), so a shard's fault is raised (or counted) in order.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from typing import Any, Generator, Iterator, Sequence, cast

from .. import _native
from .._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from ..errors import ErrorPolicy, ResourceError, ShardReadError, wrap_data_error
from . import epoch as _epoch
from . import shards as _shards
from .assembly import _shard_lists, iter_shard
from .cache import ShardCache
from .files import iter_files
from .members import Failure, _MapCache, _Pooled, Sample
from .remote import RemoteOptions
from .sources import Sources

_CHUNK = 64  # samples handed over per queue item
_FILE_PIECE = 64  # files of a file list read by one reader thread in turn
_END = object()  # the end of a segment, on its queue

__all__ = ["SegmentReader"]


class SegmentReader:
    """Reads segments of `inputs` on `num_threads` threads: the fields `extensions`
    (None: all), `map_extensions` as views of mapped shards, `pool_extensions` as views of
    recycled blocks (see ShardReader for each), failures under `policy`."""

    def __init__(self, inputs: Sources, *, policy: ErrorPolicy, num_threads: int = 2,
                 extensions: frozenset[str] | None = None, map_extensions: frozenset[str] = frozenset(),
                 pool_extensions: frozenset[str] = frozenset(), pool_limit: int = 128 << 20,
                 remote: RemoteOptions | None = None, cache: ShardCache | None = None,
                 max_file_bytes: int) -> None:
        if pool_limit < 0:
            raise ValueError("pool_limit must be >= 0")
        self.inputs, self.policy, self.num_threads = inputs, policy, max(1, num_threads)
        self.extensions, self.map_extensions = extensions, map_extensions
        self.pool_extensions, self.pool_limit = pool_extensions, pool_limit
        self.remote, self.cache, self.max_file_bytes = remote, cache, max_file_bytes
        self.maps = _MapCache()
        self.pooled = _Pooled(pool_extensions, _native.BlockPool(pool_limit)) if pool_extensions else None
        # a mixture's reads this epoch: source index -> [seconds reading, samples] (all threads)
        self.source_read: dict[int, list] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # (to DataLoader's spawned workers: the lock is made anew there)
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Drops the shard mappings kept between epochs and the pool's free blocks."""
        self.maps.close()
        if self.pooled is not None:
            self.pooled.pool.release()

    def read(self, plan: _epoch.EpochPlan, orders: dict[str, list[int]],
             stop: threading.Event | None) -> Iterator[Sample]:
        """A plan's samples in its order (`orders`: its file lists' epoch orders): segment
        after segment, a file list's run in pieces on every thread; or interleaved."""
        self.source_read = {}
        if plan.interleaved:
            return self._interleaved(plan, orders, stop)
        segments: list[_shards.Segment] = []
        for seg in plan.segments:
            if seg.url not in orders:
                segments.append(seg)
                continue
            end = len(orders[seg.url]) if seg.stop is None else seg.stop
            segments += [_shards.Segment(seg.url, a, min(a + _FILE_PIECE, end))
                         for a in range(seg.start, end, _FILE_PIECE)]
        # (the reader threads hand over lists of samples; flattened here in C)
        return itertools.chain.from_iterable(self.threaded(segments, stop, orders))

    def read_every(self, stop: threading.Event | None = None) -> Iterator[Sample]:
        """Every sample of every source once, in source order (each in its own order)."""
        orders = {u: list(range(len(f))) for u, f in self.inputs.files.items()}
        segments = [_shards.Segment(u, 0, None) for u in dict.fromkeys(self.inputs.urls)]
        return itertools.chain.from_iterable(self.threaded(segments, stop, orders))

    def read_shard(self, url: str) -> Iterator[Sample | Failure]:
        """Every sample of one shard, in its order, read as an epoch reads it."""
        return iter_shard(url, on_error=self.policy.on_error, extensions=self.extensions, mapped=self.map_extensions,
                          maps=self.maps)

    def read_times(self) -> dict[str, tuple[float, int]]:
        """A mixture's read so far this epoch, per source label: (seconds on the reader
        threads, samples); {} when the sources are not a mixture."""
        if self.inputs.mixture is None:
            return {}
        with self._lock:
            return {self.inputs.mixture[i].label: (t, n) for i, (t, n) in self.source_read.items()}

    def _interleaved(self, plan: _epoch.EpochPlan, orders: dict[str, list[int]],
                     stop: threading.Event | None) -> Iterator[Sample]:
        """An interleaved plan's samples: each part's runs read (in parallel, on the reader
        threads), then given out interleaved as the window orders them."""
        # the threads may read a few chunks ahead (a chunk's runs are short)
        per_chunk = -(-len(plan.segments) // max(1, len(plan.chunks)))
        tagged = cast(Generator[Any, None, None],
                      self.threaded(plan.segments, stop, orders, tagged=True, ahead=2 * per_chunk))
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

    def threaded(self, segments: Sequence[_shards.Segment], stop: threading.Event | None,
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

        timed = self.inputs.mixture is not None  # a mixture: what each source's reads cost (stats, profile)

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

    def _timed(self, items: Iterator[list[Sample | Failure]], url: str) -> Iterator[list[Sample | Failure]]:
        """`items` with the time spent producing them (not the time their queue made the
        thread wait) and their samples added to their source's `source_read`."""
        i = self.inputs.source_of(url)
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
                with self._lock:
                    rec = self.source_read.setdefault(i, [0.0, 0])
                    rec[0] += acc[0]
                    rec[1] += acc[1]

    def _segment_items(self, seg: _shards.Segment, group: ThreadGroup,
                       orders: dict[str, list[int]] | None) -> Iterator[list[Sample | Failure]]:
        """A segment's samples and failures, in lists: from its shard, or from its file list."""
        flist = self.inputs.files.get(seg.url)
        if flist is None:
            yield from _shard_lists(seg.url, on_error=self.policy.on_error, extensions=self.extensions,
                                    remote=self.remote, group=group, start=seg.start, stop=seg.stop,
                                    cache=self.cache, mapped=self.map_extensions, maps=self.maps,
                                    pooled=self.pooled)
            return
        run: list[Sample | Failure] = []  # (in lists of up to _CHUNK, as _produce hands them on: no list a file)
        for path, i, fields, err in iter_files(flist, (orders or {})[seg.url], seg.start, seg.stop,
                                                extensions=self.extensions, max_bytes=self.max_file_bytes):
            run.append(Sample(flist.keys[i], fields, path, i) if err is None else Failure(err, fatal=False))
            if len(run) >= _CHUNK:
                yield run
                run = []
        if run:
            yield run

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
                if self.policy.on_error == "raise" or isinstance(item.error, ResourceError):
                    raise item.error
                self.policy.record(item.error, stacklevel=2)
                continue
            yield item


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
