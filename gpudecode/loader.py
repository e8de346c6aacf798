"""Loader: shards in, augmented batches out, in place of DataLoader + torchvision transforms.

    reader threads (bytes) -> probe (header sizes) -> params (host, seeded) ->
    decode (GPU: DALI / nvJPEG; CPU: crop-window libjpeg-turbo) -> fused kernel -> Batch

Two producer threads prepare batches ahead (up to `prefetch`) while the trainer works on
batch k: the "decode" thread reads, probes and decodes batch k+2 while the "augment"
thread runs the kernel on k+1. On a GPU, decoding and the kernel run on a side CUDA
stream; events hand each batch over to the trainer's stream and guard the reuse of its
buffer.

Lifecycle: one iterator at a time per Loader (a second one while the first is active
raises ConcurrentIterationError: they would share the output buffers). An iterator
ends when exhausted, on `close()`, when it is garbage-collected, or when an exception
(Ctrl-C included) passes through it; every thread it started is joined then.
`Loader.close()` (or `with Loader(...) as loader:`) also releases the decoder's threads
and the output buffers.
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import torch

from ._probe import DEFAULT_MAX_PIXELS, ProbedImage, probe_samples
from ._threads import STOPPED, ThreadGroup, get_until_stopped, put_until_stopped
from .decode import DecodedBatch, Request, check_device, make_decoder
from .errors import (ConcurrentIterationError, DecodeError, LocatedError, OnError, Skipped, check_on_error,
                     record_failure)
from .io.reader import Sample, ShardReader, split_exts
from .io.remote import RemoteOptions
from .kernels import fused
from .labels import parse_label
from .stats import BatchTiming, LoaderStats
from .transforms import Compose, RandomResizedCrop

__all__ = ["Loader", "LoaderIterator", "Batch", "BatchTiming", "LoaderStats", "DEFAULT_MAX_PIXELS", "split_exts"]

class Batch(tuple):
    """(images, labels), as a DataLoader batch unpacks, with `.images`, `.labels` and
    `.keys` (the samples' keys, in order)."""

    keys: list[str]

    def __new__(cls, images: torch.Tensor, labels: torch.Tensor | None, keys: list[str]) -> "Batch":
        obj = super().__new__(cls, (images, labels))
        obj.keys = keys
        return obj

    @property
    def images(self) -> torch.Tensor:
        return self[0]

    @property
    def labels(self) -> torch.Tensor | None:
        return self[1]


@dataclass
class _Prepared:
    """A batch between the two stages: decoded pixels and everything the kernel needs."""

    samples: list[Sample]
    params: list[dict]
    sizes: list[tuple[int, int]]
    labels: list[int]
    decoded: DecodedBatch | None
    timing: BatchTiming
    position: int = 0


@dataclass
class _Ready:
    """A finished batch on its way to the trainer: the output slot it occupies and the
    CUDA event its pixels are ready at (None on the CPU)."""

    batch: "Batch"
    timing: BatchTiming
    position: int
    slot: int
    ready: Any = None


class _Epoch:
    """One epoch's two producer threads: "decode" reads, probes, draws and decodes batch
    k+1 while "augment" runs the fused kernel on batch k and fills the queue the trainer
    takes from. Exceptions are handed on to the trainer, which re-raises them."""

    def __init__(self, loader: "Loader", epoch: int, start: int) -> None:
        self.loader = loader
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, loader.prefetch))
        self.mid: queue.Queue = queue.Queue(maxsize=1)
        self.group = ThreadGroup("loader")
        self.stop = self.group.stop_event
        self.group.start(self._decode_stage, epoch, start, name="decode")
        self.group.start(self._augment_stage, name="augment")

    def _put(self, q: queue.Queue, item: Any) -> bool:
        return put_until_stopped(q, item, self.stop)

    def _decode_stage(self, epoch: int, start: int) -> None:
        ld = self.loader
        samples = ld.reader.iter_epoch(epoch, start=start, stop=self.stop)
        try:
            position = start
            while not self.stop.is_set():
                t0 = time.perf_counter()
                chunk: list[Sample] = []
                for s in samples:
                    chunk.append(s)
                    if len(chunk) == ld.batch_size:
                        break
                t_read = time.perf_counter() - t0
                if self.stop.is_set():
                    return
                if not chunk or (ld.drop_last and len(chunk) < ld.batch_size):
                    break
                prepared = ld._prepare(chunk, epoch, position)
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
        slot = 0
        try:
            while True:
                item = get_until_stopped(self.mid, self.stop)
                if item is STOPPED:
                    return
                if item is None or isinstance(item, BaseException):
                    self._put(self.queue, item)
                    return
                ready = ld._finish(item, slot)
                if ready is not None:
                    slot = (slot + 1) % ld._ring
                    if not self._put(self.queue, ready):
                        return
        except BaseException as e:
            self._put(self.queue, e)

    def close(self) -> None:
        self.group.stop()


class LoaderIterator:
    """An epoch of batches from a Loader (what `iter(loader)` returns). Ends when
    exhausted, on close(), when garbage-collected, or when an exception (Ctrl-C
    included) passes through `__next__`; its threads are joined then."""

    def __init__(self, loader: "Loader", epoch: int, start: int) -> None:
        self._loader = loader
        self.epoch = epoch
        self._handed: list[int] = []  # output slots handed to the trainer, in order
        self._done = False
        self._ep = _Epoch(loader, epoch, start)

    @property
    def active(self) -> bool:
        return not self._done

    def __iter__(self) -> "LoaderIterator":
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> "Batch":
        if self._done:
            raise StopIteration
        try:
            return self._next()
        except BaseException:  # the end, an error, Ctrl-C: nothing keeps running behind the trainer
            self.close()
            raise

    def _next(self) -> "Batch":
        ld, ep = self._loader, self._ep
        if ld._stream is not None and len(self._handed) >= 2:
            # asking for batch k: the trainer's work on batch k-2 is enqueued; its buffer
            # may be reused once that work is done (the augment stage waits on this)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(ld.device))
            ld._events[self._handed[-2]] = done
        t0 = time.perf_counter()
        item = get_until_stopped(ep.queue, threading.Event(), alive=ep.group.alive)
        wait = time.perf_counter() - t0
        if item is STOPPED:
            raise RuntimeError("gpudecode loader threads ended without a result (this is a bug)")
        if item is None:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        r: _Ready = item
        r.timing.wait = wait
        r.timing.delivered = t0 + wait
        ld.stats.batches.append(r.timing)
        ld._position = r.position
        if r.ready is not None:  # the trainer's stream waits for the side stream
            torch.cuda.current_stream(ld.device).wait_event(r.ready)
        self._handed.append(r.slot)
        return r.batch

    def close(self) -> None:
        """Stops the epoch and joins its threads (idempotent)."""
        if not self._done:
            self._done = True
            self._ep.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


class Loader:
    """Batches of augmented images from tar shards, on the GPU when there is one.

    Args:
        urls: shards (see `gpudecode.ShardReader`).
        batch_size: images per batch.
        transform: a `gpudecode.transforms.Compose` (a torchvision Compose is converted
            with `Compose.from_torchvision`, or refused with the reason).
        device: "auto" (CUDA if available, else CPU), "cpu", "cuda" or "cuda:N".
        decoder: "auto" | "dali" | "nvjpeg" | "cpu", or a decoder instance (see
            gpudecode.decode); `describe()` says which one runs.
        shuffle, seed: shard order and sample shuffle per epoch; (seed, epoch, sample
            position) fixes every random choice whatever the thread count.
        image_ext, label_ext: extensions tried in order (";"-separated); `.cls` holds an
            integer as text, `.json` a {"label": int}. labels=False turns labels off.
            `.npy` is a tensor sample written by `gpudecode precache` (decoded RGB).
        num_threads: decode and kernel threads on the CPU (default: all cores).
        prefetch: batches prepared ahead.
        drop_last: drop the last, smaller batch.
        on_error: "raise" (default), "warn" or "skip" for bad shards, undecodable images
            and bad labels; what was skipped is in `skipped`. A batch that lost images
            to skip/warn is smaller than batch_size.
        rank, world_size, even: split over processes (see ShardReader).
        max_pixels: images with more pixels are refused (decompression bombs).
        fast_decode: CPU JPEG decoding with the fast IDCT, plain upsampling and DCT
            downscaling (not bit-exact; see the decode docs).
        remote: timeouts and retries for remote shards (`gpudecode.io.remote.RemoteOptions`).

    Batches come from a ring of `prefetch + 3` output buffers: the tensors of batch k
    are still intact while you work on batch k+1 and are overwritten after that (as
    with DALI's iterators): `.clone()` what you keep longer.
    """

    def __init__(self, urls: Any, *, batch_size: int, transform: Any, device: str = "auto",
                 decoder: Any = "auto", shuffle: bool = True, seed: int = 0,
                 image_ext: str | Sequence[str] = "jpg;jpeg;png;webp;npy", label_ext: str | Sequence[str] = "cls",
                 labels: bool = True, num_threads: int | None = None, prefetch: int = 2, drop_last: bool = False,
                 on_error: OnError = "raise", rank: int | None = None, world_size: int | None = None,
                 even: Literal["pad", "drop"] | None = None, buffer_size: int = 1000,
                 max_pixels: int = DEFAULT_MAX_PIXELS, fast_decode: bool = False,
                 remote: RemoteOptions | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        if not isinstance(transform, Compose):
            transform = Compose.from_torchvision(transform)
        device = check_device(device)
        self.transform = transform
        self.batch_size = batch_size
        self.device = device
        self.decoder_name = decoder
        self.seed = seed
        self.image_exts = split_exts(image_ext)
        self.label_exts = split_exts(label_ext) if labels else []
        self.labels = labels
        self.num_threads = num_threads or os.cpu_count() or 1
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.on_error = check_on_error(on_error)
        self.max_pixels = max_pixels
        self.fast_decode = fast_decode
        self.reader = ShardReader(urls, shuffle=shuffle, seed=seed, buffer_size=buffer_size, rank=rank,
                                  world_size=world_size, num_threads=2, on_error=on_error,
                                  extensions=self.image_exts + self.label_exts, even=even, remote=remote)
        self.epoch = 0
        self.stats = LoaderStats()
        self._decoder: Any = None  # created on first use: no CUDA context before workers fork
        self._ring = prefetch + 3
        self._outputs: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * self._ring
        self._events: list[Any] = [None] * self._ring
        self._stream: Any = None
        self._position = 0
        self._resume: int | None = None
        self._skipped: list[Skipped] = []
        self._active: weakref.ref[LoaderIterator] | None = None

    # -- public API ---------------------------------------------------------------------

    @property
    def skipped(self) -> list[Skipped]:
        """Everything skipped under on_error="skip"/"warn": bad shards, images, labels."""
        return self.reader.skipped + self._skipped

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.reader.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches per epoch for this rank (reads the shards' headers once)."""
        counts = self.reader.sample_counts()
        n = sum(counts[u] for u in self.reader.shards_for(self.epoch))
        if self.reader.even is not None:
            n = self.reader._even_target(self.epoch)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self) -> dict:
        """Where the current epoch stands (samples taken), to resume with the same order."""
        return {"epoch": self.epoch, "position": self._position, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"state was saved with seed {state['seed']}, this loader has seed {self.seed}")
        self.set_epoch(state["epoch"])
        self._resume = int(state["position"])

    def describe(self) -> dict:
        """What this loader does and with what (the decoder is chosen on first use)."""
        if self._decoder is not None:
            dec = self._decoder.name
        elif not isinstance(self.decoder_name, str):
            dec = self.decoder_name.name
        elif self.decoder_name == "auto":
            from .decode import available

            dec = "cpu" if self.device == "cpu" else next(n for n in ("dali", "nvjpeg", "cpu") if available(n)[0])
        else:
            dec = self.decoder_name
        plan = self.transform.plan
        return {"device": self.device, "decoder": dec, "num_threads": self.num_threads, "prefetch": self.prefetch,
                "batch_size": self.batch_size, "shards": len(self.reader.urls), "out_size": plan.out_size,
                "dtype": str(plan.dtype), "transform": [type(t).__name__ for t in plan.steps],
                "fast_decode": self.fast_decode}

    def __iter__(self) -> LoaderIterator:
        """Starts an epoch (resuming where load_state_dict said, if it was called).

        Raises:
            ConcurrentIterationError: an iterator of this Loader is still active.
        """
        active = self._active() if self._active is not None else None
        if active is not None and active.active:
            raise ConcurrentIterationError(
                "this Loader already has an active iterator (they would share output buffers): exhaust it, "
                "call its close(), or drop it before starting another")
        self._ensure_decoder()
        start = self._resume if self._resume is not None else 0
        self._resume = None
        self._position = start
        self._skipped = []
        self.reader.skipped = []
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
        if self._decoder is not None and isinstance(self.decoder_name, str) and hasattr(self._decoder, "close"):
            self._decoder.close()
        if isinstance(self.decoder_name, str):
            self._decoder = None
        self._outputs = [None] * self._ring
        self._events = [None] * self._ring
        self._stream = None

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- producer side ------------------------------------------------------------------

    def _ensure_decoder(self) -> None:
        if self._decoder is None and not isinstance(self.decoder_name, str):
            self._decoder = self.decoder_name  # a decoder instance (e.g. DaliDecoder(device="cpu"))
        if self._decoder is None:
            self._decoder = make_decoder(self.decoder_name, device=self.device, num_threads=self.num_threads,
                                         max_pixels=self.max_pixels, fast=self.fast_decode)
            if hasattr(self._decoder, "out_size"):
                self._decoder.out_size = self.transform.out_size
        if self._stream is None and self.device.startswith("cuda"):
            self._stream = torch.cuda.Stream(device=self.device)

    def _fail(self, err: LocatedError) -> None:
        if self.on_error == "raise":
            raise err
        record_failure(err, self.on_error, self._skipped, stacklevel=2)

    def _probe(self, chunk: list[Sample]) -> list[ProbedImage]:
        """Samples with a readable image header (and label; `extra` holds it)."""
        if self.labels:
            exts = self.label_exts

            def label(s: Sample) -> int:
                return parse_label(s.fields, exts, shard=s.shard, key=s.key)
        else:
            def label(s: Sample) -> int:
                return 0
        return probe_samples(chunk, self.image_exts, self.max_pixels, self._fail, label)

    def _output(self, slot: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pair = self._outputs[slot]
        if pair is None:
            pair = self._outputs[slot] = self.transform.new_output(self.batch_size, self.device)
        out, view = pair
        return out[:n], view[:n]

    def _prepare(self, chunk: list[Sample], epoch: int, position: int) -> _Prepared:
        """Stage A: probe, draw the params, decode (only the windows the crops need)."""
        timing = BatchTiming(size=0)
        t0 = time.perf_counter()
        index = {id(s): position + i for i, s in enumerate(chunk)}
        probed = self._probe(chunk)
        samples = [p.sample for p in probed]
        sizes = [(p.height, p.width) for p in probed]
        labels = [p.extra for p in probed]
        rank, world = self.reader._rank()
        # unique over ranks: (seed, epoch, global index) fixes each sample's draws
        params = self.transform.make_params(sizes, self.seed, epoch=epoch,
                                            indices=[index[id(s)] * world + rank for s in samples])
        rrc = isinstance(self.transform.plan.geometry[0], RandomResizedCrop)
        requests = [Request(p.data, p.format, p.height, p.width,
                            tuple(prm["crop"]) if rrc else (0, 0, p.height, p.width), p.sample.shard, p.sample.key)
                    for p, prm in zip(probed, params)]
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        decoded = None
        if requests:
            with torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext():
                decoded = self._decoder.decode(requests)  # type: ignore[union-attr]
        timing.decode = time.perf_counter() - t1
        return _Prepared(samples, params, sizes, labels, decoded, timing)

    def _finish(self, p: _Prepared, slot: int) -> _Ready | None:
        """Stage B: the fused kernel into output slot `slot`, and the labels."""
        t0 = time.perf_counter()
        decoded = p.decoded
        ok: list[int] = []
        if decoded is not None:
            for k, err in enumerate(decoded.errors):
                if err is None:
                    ok.append(k)
                else:
                    self._fail(DecodeError(err, shard=p.samples[k].shard, key=p.samples[k].key))
        if not ok or decoded is None:
            return None
        geom, factors, order = self.transform.encode([p.params[k] for k in ok], [p.sizes[k] for k in ok])
        for row, k in enumerate(ok):
            h, w = decoded.shapes[k]
            g = geom[row]
            g[fused.OFFSET] = decoded.offsets[k]
            g[fused.H], g[fused.W] = h, w
            if decoded.chw:
                g[fused.SY], g[fused.SX], g[fused.SC] = w, 1, h * w
            else:
                g[fused.SY], g[fused.SX], g[fused.SC] = 3 * w, 3, 1
            g[fused.TOP:fused.BW + 1] = decoded.boxes[k]
        ready = None
        with torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext():
            if self._stream is not None and self._events[slot] is not None:
                self._stream.wait_event(self._events[slot])  # the trainer is done with this buffer
            out, view = self._output(slot, len(ok))
            self.transform.run(decoded.pixels, geom, factors, order, view, stream=self._stream,
                               num_threads=self.num_threads)
            lab = torch.tensor([p.labels[k] for k in ok], dtype=torch.int64) if self.labels else None
            if lab is not None and self.device != "cpu":
                lab = lab.pin_memory().to(self.device, non_blocking=True)
            if self._stream is not None:
                ready = torch.cuda.Event()
                ready.record(self._stream)
        p.timing.augment = time.perf_counter() - t0
        p.timing.size = len(ok)
        batch = Batch(out, lab, [p.samples[k].key for k in ok])
        return _Ready(batch, p.timing, p.position, slot, ready)
