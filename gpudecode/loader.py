"""Loader: shards in, augmented batches out, in place of DataLoader + torchvision transforms.

    reader threads (bytes) -> probe (header sizes) -> params (host, seeded) ->
    decode (GPU: DALI / nvJPEG; CPU: crop-window libjpeg-turbo) -> fused kernel -> Batch

Two producer threads prepare batches ahead (up to `prefetch`) while the trainer works on
batch k: one reads, probes and decodes batch k+2 while the other runs the kernel on k+1. On a GPU, decoding and the kernel run on a side CUDA stream; events
hand each batch over to the trainer's stream and guard the reuse of its buffer.
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence

import torch

from . import _native
from ._probe import probe_format
from .decode import DecodedBatch, Request, check_device, make_decoder
from .errors import DecodeError, LabelError, LocatedError
from .io.reader import OnError, Sample, ShardReader, Skipped, check_on_error, put_until_stopped, record_failure
from .kernels import fused
from .transforms import Compose, RandomResizedCrop

DEFAULT_MAX_PIXELS = 2 * 89_478_485  # Pillow's decompression-bomb error threshold


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


@dataclass(slots=True)
class BatchTiming:
    """Seconds spent on one batch: `wait` is the time the trainer waited for it; the
    others are the producer's stages (read: taking samples from the reader threads)."""

    size: int
    wait: float = 0.0
    read: float = 0.0
    probe: float = 0.0
    decode: float = 0.0
    augment: float = 0.0
    delivered: float = 0.0  # time.perf_counter() when the trainer got it

    @property
    def produce(self) -> float:
        """The producer's time for this batch: its two stages (read + probe + decode, and
        augment) run on separate threads, overlapped, so the slower one bounds it."""
        return max(self.read + self.probe + self.decode, self.augment)


@dataclass
class LoaderStats:
    """Per-batch timings of the last epoch, and a summary naming the slowest stage and
    the stalls (batches the trainer waited for many times longer than the median; the
    first batch of an epoch, which waits for the pipeline to fill, is not one)."""

    batches: list[BatchTiming] = field(default_factory=list)
    stall_factor: float = 5.0
    started: float = field(default_factory=time.perf_counter)  # when the epoch was asked for

    def summary(self) -> dict:
        if not self.batches:
            return {"batches": 0}
        stages = ("read", "probe", "decode", "augment")
        med = {s: statistics.median(getattr(b, s) for b in self.batches) for s in stages}
        waits = [b.wait for b in self.batches]
        med_wait = statistics.median(waits)
        threshold = max(self.stall_factor * med_wait, 0.005)
        stalls = [i for i, w in enumerate(waits) if w > threshold and i > 0]
        images = sum(b.size for b in self.batches)
        total = sum(b.produce for b in self.batches)
        elapsed = self.batches[-1].delivered - self.started
        return {
            "batches": len(self.batches), "images": images,
            "median_s": {**med, "wait": med_wait},
            "slowest_stage": max(med, key=lambda k: med[k]),
            # what the trainer received (its own time between batches included), and what
            # the producer could give with its stages overlapped and the cores to itself
            "images_per_s": images / elapsed if elapsed > 0 else float("inf"),
            "producer_images_per_s": images / total if total > 0 else float("inf"),
            "stalls": stalls,
            "stall_threshold_s": threshold,
        }

    def __str__(self) -> str:
        s = self.summary()
        if not s["batches"]:
            return "no batches yet"
        m = s["median_s"]
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in m.items())
        stalls = f"{len(s['stalls'])} stalls (> {s['stall_threshold_s'] * 1e3:.0f} ms wait)" if s["stalls"] else "no stalls"
        return (f"{s['batches']} batches, {s['images']} images; median per batch: {parts}; slowest stage: "
                f"{s['slowest_stage']}; delivered {s['images_per_s']:.0f} img/s (producer alone up to "
                f"{s['producer_images_per_s']:.0f}); {stalls}")


def split_exts(exts: str | Sequence[str]) -> list[str]:
    items = exts.split(";") if isinstance(exts, str) else list(exts)
    return [e.strip().lower().lstrip(".") for e in items if e.strip()]


def _parse_label(sample: Sample, label_exts: list[str]) -> int:
    for ext in label_exts:
        data = sample.fields.get(ext)
        if data is None:
            continue
        try:
            if ext == "json":
                return int(json.loads(data)["label"])
            return int(data.decode().strip())
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LabelError(f"label .{ext} is not an integer ({type(e).__name__}: {data[:40]!r})",
                             shard=sample.shard, key=sample.key) from None
    raise LabelError(f"no label (looked for .{', .'.join(label_exts)})", shard=sample.shard, key=sample.key)


def probe_samples(chunk: Sequence[Sample], image_exts: Sequence[str], max_pixels: int,
                  fail: Callable[[LocatedError], None],
                  extra: Callable[[Sample], Any] = lambda s: None) -> list[tuple[Sample, bytes, tuple[str, int, int], Any]]:
    """The samples of `chunk` with a readable image (the first of `image_exts` present)
    of at most `max_pixels` (0: any): (sample, image bytes, (format, height, width),
    extra(sample)). Each failure, extra's LocatedErrors included, goes to `fail` (which
    raises, or records and returns), in sample order."""
    datas, keep = [], []
    for s in chunk:
        data = next((s.fields[e] for e in image_exts if e in s.fields), None)
        if data is None:
            fail(DecodeError(f"no image (looked for .{', .'.join(image_exts)})", shard=s.shard, key=s.key))
            continue
        keep.append(s)
        datas.append(data)
    out = []
    for s, d, info in zip(keep, datas, _native.probe_batch(datas, 1)):
        try:
            if isinstance(info, dict):
                fmt_hw = (info["format"], info["height"], info["width"])
            else:
                fmt_hw = probe_format(d, shard=s.shard, key=s.key, why=info)
            if max_pixels and fmt_hw[1] * fmt_hw[2] > max_pixels:
                raise DecodeError(f"image of {fmt_hw[2]}x{fmt_hw[1]} pixels is over the limit of "
                                  f"{max_pixels} pixels", shard=s.shard, key=s.key)
            out.append((s, d, fmt_hw, extra(s)))
        except LocatedError as e:
            fail(e)
    return out


class _Epoch:
    """One epoch's two producer threads: stage A reads, probes, draws and decodes batch
    k+1 while stage B runs the fused kernel on batch k; B fills the queue the trainer
    takes from."""

    def __init__(self, loader: "Loader", epoch: int, start: int) -> None:
        self.loader = loader
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, loader.prefetch))
        self.mid: queue.Queue = queue.Queue(maxsize=1)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._stage_a, args=(epoch, start), daemon=True,
                                         name="gpudecode-decode"),
                        threading.Thread(target=self._stage_b, daemon=True, name="gpudecode-augment")]
        for t in self.threads:
            t.start()

    def _put(self, q: queue.Queue, item: Any) -> bool:
        return put_until_stopped(q, item, self.stop)

    def _stage_a(self, epoch: int, start: int) -> None:
        ld = self.loader
        try:
            samples = ld.reader.iter_epoch(epoch, start=start)
            position = start
            while not self.stop.is_set():
                t0 = time.perf_counter()
                chunk: list[Sample] = []
                for s in samples:
                    chunk.append(s)
                    if len(chunk) == ld.batch_size:
                        break
                t_read = time.perf_counter() - t0
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

    def _stage_b(self) -> None:
        ld = self.loader
        slot = 0
        try:
            while not self.stop.is_set():
                try:
                    item = self.mid.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is None or isinstance(item, BaseException):
                    self._put(self.queue, item)
                    return
                batch = ld._finish(item, slot)
                if batch is not None:
                    slot = (slot + 1) % ld._ring
                    if not self._put(self.queue, (batch, item.timing, item.position)):
                        return
        except BaseException as e:
            self._put(self.queue, e)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


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
                 max_pixels: int = DEFAULT_MAX_PIXELS, fast_decode: bool = False) -> None:
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
                                  extensions=self.image_exts + self.label_exts, even=even)
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

    def __iter__(self) -> Iterator[Batch]:
        self._ensure_decoder()
        start = self._resume if self._resume is not None else 0
        self._resume = None
        self._position = start
        self._skipped = []
        self.stats = LoaderStats()
        ep = _Epoch(self, self.epoch, start)
        handed: list[int] = []  # output slots handed to the trainer, in order
        try:
            while True:
                if self._stream is not None and len(handed) >= 2:
                    # asking for batch k: the trainer's work on batch k-2 is enqueued; its
                    # buffer may be reused once that work is done (the producer waits on this)
                    done = torch.cuda.Event()
                    done.record(torch.cuda.current_stream(self.device))
                    self._events[handed[-2]] = done
                t0 = time.perf_counter()
                item = ep.queue.get()
                wait = time.perf_counter() - t0
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                batch, timing, position = item
                timing.wait = wait
                timing.delivered = t0 + wait
                self.stats.batches.append(timing)
                self._position = position
                if batch._ready is not None:  # the trainer's stream waits for the side stream
                    torch.cuda.current_stream(self.device).wait_event(batch._ready)
                handed.append(batch._slot)
                yield batch
        finally:
            ep.close()

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

    def _probe(self, chunk: list[Sample]) -> tuple[list[Sample], list[bytes], list[tuple[str, int, int]], list[int]]:
        """Keeps samples with a readable image header (and label): (samples, image bytes,
        (format, height, width), labels)."""
        label = (lambda s: _parse_label(s, self.label_exts)) if self.labels else (lambda s: 0)
        kept = probe_samples(chunk, self.image_exts, self.max_pixels, self._fail, label)
        return [k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept], [k[3] for k in kept]

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
        samples, datas, infos, labels = self._probe(chunk)
        sizes = [(h, w) for _, h, w in infos]
        rank, world = self.reader._rank()
        # unique over ranks: (seed, epoch, global index) fixes each sample's draws
        params = self.transform.make_params(sizes, self.seed, epoch=epoch,
                                            indices=[index[id(s)] * world + rank for s in samples])
        rrc = isinstance(self.transform.plan.geometry[0], RandomResizedCrop)
        requests = [Request(d, f, h, w, tuple(p["crop"]) if rrc else (0, 0, h, w), s.shard, s.key)
                    for d, (f, h, w), p, s in zip(datas, infos, params, samples)]
        t1 = time.perf_counter()
        timing.probe = t1 - t0
        decoded = None
        if requests:
            with torch.cuda.stream(self._stream) if self._stream is not None else _nullcontext():
                decoded = self._decoder.decode(requests)  # type: ignore[union-attr]
        timing.decode = time.perf_counter() - t1
        return _Prepared(samples, params, sizes, labels, decoded, timing)

    def _finish(self, p: _Prepared, slot: int) -> Batch | None:
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
        with torch.cuda.stream(self._stream) if self._stream is not None else _nullcontext():
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
        batch._ready = ready  # type: ignore[attr-defined]
        batch._slot = slot  # type: ignore[attr-defined]
        return batch


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None
