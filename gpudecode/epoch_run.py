"""An epoch of a Loader as it runs: its two producer threads (`EpochRun`) and the
iterator the trainer holds (`LoaderIterator`); see gpudecode.loader for the design (the
streams, the rings, the lifecycle)."""
from __future__ import annotations

import functools
import itertools
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from .cursor import Start
from .errors import ConcurrentIterationError
from .pipeline import Batch, Ready
from .resident import epoch_chunks

if TYPE_CHECKING:
    from .loader import Loader

__all__ = ["EpochRun", "LoaderIterator"]


class EpochRun:
    """One epoch's two producer threads: "decode" reads, probes, draws and decodes batch
    k+1 while "augment" runs the fused kernel on batch k and fills the queue the trainer
    takes from. Exceptions are handed on to the trainer, which re-raises them.

    An epoch of a resident store (gpudecode.resident) runs both stages on the "decode"
    thread, one batch after the other: its stage A is no more than draws and boxes, and
    split over two threads the stages' Python contended for the GIL, each hand-off waiting
    for the other thread to wake, which cost more than the overlap gained (bench/RESULTS.md,
    the fifteenth session). On a GPU the kernel is asynchronous anyway; on the CPU it is
    the same kernel, on the same cores."""

    def __init__(self, loader: Loader, start: Start) -> None:
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
        loader, pipe, reader = self.loader, self.pipe, self.loader.reader
        samples: Any = iter(())
        names = [src.label for src in reader.sources] if reader.sources is not None else None
        try:
            store = loader.keeper.store(pipe, reader, self.stop)  # (filled once, at the first epoch; None: streaming)
            if self.stop.is_set():
                return
            if store is not None:  # the epoch's order as rows of the store: nothing read, probed or decoded
                samples = epoch_chunks(reader, store, epoch, start=start, plan=self.plan, batch_size=loader.batch_size,
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
                    chunk = list(itertools.islice(samples, loader.batch_size))  # (the loop in C)
                    taken = len(chunk)
                t_read = time.perf_counter() - t0
                if self.stop.is_set():
                    return
                if not taken or (loader.drop_last and taken < loader.batch_size):
                    break
                if names is not None:  # the mix, counted as read (loader.stats.sources)
                    read: list[Any] = chunk if store is None else [store.samples[r] for r in chunk.tolist()]
                    for sample in read:
                        i = reader.source_of(sample.shard)
                        if i is not None:
                            loader.stats.sources[names[i]] = loader.stats.sources.get(names[i], 0) + 1
                    loader.stats.source_read = reader.read_times()
                prepare = (pipe.prepare if store is None
                           else functools.partial(pipe.prepare_resident, store=store, places=places, taken=taken))
                at = self.plan.draw_at(position, loader.batch_size) if self.plan is not None else None
                if at is not None:
                    # a run of the global order: its samples draw by their global positions, as a
                    # single process would draw them (any world size alike)
                    prepared = prepare(chunk, seed=loader.seed, epoch=epoch, position=at, rank=0, world=1)
                else:
                    prepared = prepare(chunk, seed=loader.seed, epoch=epoch, position=position, rank=self.rank,
                                       world=self.world)
                prepared.timing.read = t_read
                position += taken
                prepared.position = position
                if store is not None:  # stage B here too (the class doc says why)
                    ready = pipe.finish(prepared, self.even)
                    if ready is not None and not self._put(self.queue, ready):
                        return
                    continue
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

    def __init__(self, loader: Loader, start: Start, length: Callable[[], int]) -> None:
        self.epoch = start.epoch
        self._cursor = loader.cursor
        self._stats = loader.stats
        self._run = start.run
        self._length = length
        self._done = False
        self._superseded = False  # ended by a newer iter(loader)
        self._pid = os.getpid()
        self._busy = threading.Lock()  # one next() at a time
        self._ep = EpochRun(loader, start)
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
        slots = gpu if gpu is not None else ep.pipe.ring.pinned  # (CUDA outputs, or pinned host ones)
        if slots is not None:
            # asking for batch k: the trainer's work on batch k-2 (and before) is enqueued on its
            # stream; those slots may be reused once that work is done (the augment stage waits,
            # or for pinned host outputs the host)
            slots.release_handed(keep=1)
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
        if gpu is not None:
            if r.ready is not None:
                gpu.hand_over(r)
        elif slots is not None:  # a pinned host slot: its release is recorded as for a CUDA one
            slots.handed.append(r.slot)
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
