"""Every engine decodes: each batch split among several decoders that work at once.

A GPU machine has more than one thing that decodes JPEG: the hardware JPEG engine
(A100, H100, H200, ...), nvJPEG on the CUDA cores, and the host's cores (the CPU decoder's
native threads, decoding only each crop's window). Alone, each leaves the others idle;
`SplitDecoder` gives each batch's images to all of them, each engine on a thread of its own
(and on a GPU a CUDA stream of its own), and joins their outputs into one DecodedBatch in
batch order, which the fused kernel reads as it reads any decoder's.

Who gets which image. Each engine has a measured rate: cost units a second, where an
image costs the pixels the engine decodes for it (its crop window for an engine that
decodes windows, the whole image for one that decodes whole images) plus OVERHEAD_PIXELS
for the image itself. After each batch an engine's rate moves towards what that batch
measured (an exponentially weighted average, `smoothing` the weight of the newest). The
images are then handed out largest first, each to the engine that would finish it
soonest counting what it already holds (the min-completion-time rule for unequal
machines), so that every engine's part of a batch takes about as long as the others'
and no engine idles while another still decodes. What an engine does best settles the
rest by itself: a crop of a large image costs a window engine its window and a whole-
image engine the whole image, so it goes to the window engine unless that one is much
slower. An engine that takes only some formats (`formats=`: the hardware engine takes
JPEG) never gets the others. Every engine decodes at least one image of a batch (when
there are enough), so a rate that was low for a while is measured again.

Which engines decode at all (`tune=True`, what decoder="auto" makes). Engines slow each
other down when they run together (nvJPEG on CUDA takes SMs and host cores from the others;
the hardware engine decodes less of its share beside the CPU decoder than alone:
bench/RESULTS.md, the second GPU run), and a rate measured per engine cannot see that: a
split can be slower than its best engine alone. So the split measures
what a whole set of engines delivers: each subset of the engines decodes `trial` batches
(the first of them a warm-up, not counted), its images a second over the rest (the host
span of decode(), every engine's part included) is kept, and the best subset decodes from
then on; every `retune` batches the two best others are measured again, and the best then
kept (a subset whose engine failed is dropped). An image no engine of the subset takes (a
PNG, with JPEG-only GPU engines) goes to an engine outside it that does. Tuning changes
who decodes, never the pixels' meaning: each image is still its engine's own decode.

`shares=` pins the split instead: each engine gets that fraction of the images, in batch
order, whatever it measures (the same batch gives the same assignment every run: the
choice for bit-reproducible runs, since two engines' pixels may differ by rounding). An
engine left out of `shares`, or with share 0, gets nothing.

Failures. An image an engine cannot decode is that image's error (DecodedBatch.errors,
then the Loader's DecodeError naming its shard and key), as with any decoder. An engine
that fails as a whole (raises) has its images decoded by the other engines in the same
batch, and is left out of later batches, with a RuntimeWarning saying why
(`describe()` names it): nothing lost, nothing silent.

Results: a result stays valid until `buffers` more decode() calls have returned (the
least of the engines' rings and this decoder's own ring of uploads); on a GPU the
caller's current stream is made to wait for every engine's work, so the returned pixels
are ready on it.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..errors import Cancelled, known
from ._base import DecodedBatch, Decoder, Request, Requests
from ._span import span
from ._upload import UploadRing
from .assign import Assigner, _Tuner

# An image's fixed cost, in pixels' worth of decoding (the header, the entropy decoder's
# start, the per-image calls): about a 140x140 image's pixels. It only has to be of the
# right order: the rates are measured with it, so its value shifts them, not the balance.
OVERHEAD_PIXELS = 20_000


@dataclass
class EngineStats:
    """What one engine did, over the batches since the decoder was made (or reset):
    images and decoded pixels (its cost units less the per-image overhead), seconds busy
    and seconds idle (a batch's span less its busy time: waiting for the others)."""

    images: int = 0
    pixels: int = 0
    busy: float = 0.0
    idle: float = 0.0
    batches: int = 0

    def as_dict(self, total_images: int) -> dict:
        span_s = self.busy + self.idle
        return {"images": self.images, "share": self.images / total_images if total_images else 0.0,
                "images_per_s": self.images / self.busy if self.busy > 0 else 0.0,
                "mpixels_per_s": self.pixels / self.busy / 1e6 if self.busy > 0 else 0.0,
                "busy_s": self.busy, "idle_s": self.idle,
                "idle_fraction": self.idle / span_s if span_s > 0 else 0.0}


class Engine:
    """One decoder of a split, with what it takes and its measured rate.

    Args:
        decoder: the decoder (the Decoder protocol).
        name: its name in the split (default: the decoder's `name`); unique in a split.
        formats: the request formats it takes ("jpeg", "png", "npy", "other"), or None
            for all.
        windows: whether it decodes only each request's box (its cost is the box) or
            whole images (its cost is the image); default: the decoder's
            `decodes_windows`, else True.
    """

    def __init__(self, decoder: Decoder, *, name: str | None = None, formats: Sequence[str] | None = None,
                 windows: bool | None = None) -> None:
        self.decoder = decoder
        self.name = name or str(getattr(decoder, "name", type(decoder).__name__))
        self.formats = frozenset(formats) if formats is not None else None
        self.windows = bool(getattr(decoder, "decodes_windows", True) if windows is None else windows)
        self.rate: float | None = None  # cost units a second (EWMA); None before its first measured batch
        self.stats = EngineStats()
        self.excluded: str | None = None  # why it no longer decodes (it failed as a whole)
        self.stream: Any = None  # its CUDA stream (made on first use on a CUDA device)
        self._pool: ThreadPoolExecutor | None = None

    def accepts(self, fmt: str) -> bool:
        return self.formats is None or fmt in self.formats

    def costs(self, rq: Requests) -> np.ndarray:
        """What each request costs this engine, in pixels (see the module doc)."""
        if self.windows:
            boxes = np.asarray(rq.boxes, np.int64).reshape(-1, 4)
            px = boxes[:, 2] * boxes[:, 3]
        else:
            px = np.asarray(rq.heights, np.int64) * np.asarray(rq.widths, np.int64)
        return px + OVERHEAD_PIXELS

    def submit(self, fn: Any, *args: Any) -> Future:
        """Runs fn(*args) on this engine's own thread (always the same one: a GPU library's
        state and a CUDA context stay on the thread that made them)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"gpudecode-engine-{self.name}")
        return self._pool.submit(fn, *args)

    def measured(self, units: float, seconds: float, smoothing: float) -> None:
        """A batch's part: `units` of cost decoded in `seconds`."""
        if seconds <= 0 or units <= 0:
            return
        sample = units / seconds
        self.rate = sample if self.rate is None else (1 - smoothing) * self.rate + smoothing * sample

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"Engine({self.name!r}, formats={sorted(self.formats) if self.formats else None}, windows={self.windows})"


@dataclass
class _Part:
    """An engine's part of one batch, once decoded."""

    engine: int
    rows: np.ndarray        # the batch's indices it decoded, ascending
    units: float            # their cost units
    decoded: DecodedBatch | None = None
    seconds: float = 0.0    # host time of its decode (and upload)
    events: tuple = ()      # CUDA (start, end) events of its GPU work, or ()
    failure: BaseException | None = None


class _Pending:
    """The parts' deferred checks (DecodedBatch.pending), answered in batch rows."""

    def __init__(self, parts: list[tuple[np.ndarray, Any]]) -> None:
        self.parts = parts

    def result(self) -> list[int]:
        out: list[int] = []
        for rows, pending in self.parts:
            out.extend(int(rows[k]) for k in pending.result())
        return sorted(out)


class SplitDecoder:
    """Decodes each batch with every engine at once (see the module doc).

    Args:
        engines: decoders (or `Engine`s saying what each takes); at least one.
        device: where the joined pixels are ("cpu" or "cuda[:N]"): an engine that
            decodes on the host has its pixels uploaded (one copy from page-locked memory
            where its ring is pinned, else through a pinned staging buffer).
        shares: {engine name: fraction} to pin the split (see the module doc), or None to
            follow the measured rates.
        smoothing: the newest batch's weight in each engine's rate (0 < smoothing <= 1).
        tune: choose which engines decode by measuring each subset of them (see the module
            doc; with measured shares only); False: every engine decodes every batch.
        trial: batches each subset decodes when measured (the first not counted; >= 2).
        retune: batches between two re-measurings of the best other subsets (>= 1).
        buffers: how many results stay valid at once (the upload ring's depth; the
            engines' own rings count too: see `buffers`).
        own: close the engines' decoders with this one.

    Raises:
        ValueError: no engine, two with one name, a share for an unknown engine, a
            negative, NaN or infinite share, or shares that sum to 0.
    """

    name = "split"

    def __init__(self, engines: Sequence[Decoder | Engine], *, device: str = "cpu",
                 shares: Mapping[str, float] | None = None, smoothing: float = 0.5, buffers: int = 3,
                 own: bool = True, tune: bool = False, trial: int = 3, retune: int = 400) -> None:
        made = [e if isinstance(e, Engine) else Engine(e) for e in engines]
        if not made:
            raise ValueError("SplitDecoder needs at least one engine")
        names = [e.name for e in made]
        if len(set(names)) != len(names):
            raise ValueError(f"SplitDecoder: engine names must differ ({names}); name them with "
                             "Engine(decoder, name=...)")
        if not (isinstance(smoothing, (int, float)) and 0 < smoothing <= 1):
            raise ValueError(f"smoothing must be in (0, 1], not {smoothing!r}")
        if isinstance(buffers, bool) or not isinstance(buffers, int) or buffers < 1:
            raise ValueError(f"buffers must be a positive int, not {buffers!r}")
        for what, given, least in (("trial", trial, 2), ("retune", retune, 1)):
            if isinstance(given, bool) or not isinstance(given, int) or given < least:
                raise ValueError(f"{what} must be an int >= {least}, not {given!r}")
        pinned = None
        if shares is not None:
            pinned = {}
            for k, v in dict(shares).items():
                if k not in names:
                    raise ValueError(f"shares names {k!r}, which is not an engine of this split ({', '.join(names)})")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"share of {k!r} must be a finite number >= 0, not {v!r}")
                pinned[k] = float(v)
            if sum(pinned.values()) <= 0:
                raise ValueError("shares must give some engine a share above 0")
        self.engines = made
        self.device = device
        self.shares = pinned
        self.smoothing = float(smoothing)
        self.ring = buffers
        self.own = own
        self.last_assignment = np.zeros(0, np.int64)  # the engine of each image of the last batch
        self._dev = torch.device(device)
        self._turn = 0
        self._uploads = UploadRing(self._dev, buffers) if self._dev.type == "cuda" else None
        self._stop = False
        self._lock = threading.Lock()
        self._measures: list[tuple[_Part, float]] = []  # GPU parts whose time is not known yet
        # who gets which image: by measured rates (tuned: which engines at all) or by pinned shares
        self._assigner = Assigner(made, pinned, _Tuner(trial, retune) if tune and pinned is None and len(made) > 1
                                  else None)

    # -- what it is --------------------------------------------------------------------------

    @property
    def buffers(self) -> int:
        """Results valid at once: the least of this decoder's upload ring and its engines' rings."""
        rings = [b for b in (getattr(e.decoder, "buffers", None) for e in self.engines) if b is not None]
        return min([self.ring, *rings])

    @property
    def backend(self) -> str:
        parts = []
        for e in self.engines:
            what = getattr(e.decoder, "backend", e.name)
            if e.excluded:
                what += f" [left out: {e.excluded}]"
            elif self.shares is not None:
                what += f" [share {self.shares.get(e.name, 0.0):.2f}]"
            parts.append(f"{e.name}: {what}")
        how = "pinned shares" if self.shares is not None else "shares by measured rate"
        return f"every engine at once ({how}): " + "; ".join(parts)

    def engine_stats(self) -> dict[str, dict]:
        """Each engine's images, share, rate (img/s, Mpx/s while busy), busy and idle
        seconds, its current rate estimate (cost units a second; None before measured), and
        what it sent elsewhere where it says (`detours()`: the PNG engine's)."""
        self._resolve(wait=False)
        total = sum(e.stats.images for e in self.engines)
        return {e.name: {**e.stats.as_dict(total), "rate_units_per_s": e.rate, "excluded": e.excluded,
                         **({"detours": e.decoder.detours()} if hasattr(e.decoder, "detours") else {})}
                for e in self.engines}

    # -- assigning (decode/assign.py) -------------------------------------------------------

    def tuning(self) -> dict | None:
        """With tune=True: the engines decoding now, and each subset measured (images a
        second of decode(), the engines' names joined by '+'); else None."""
        return self._assigner.tuning()

    def assign(self, rq: Requests) -> np.ndarray:
        """The engine (its index in `engines`) each request goes to."""
        return self._assigner.assign(rq)

    # -- decoding ----------------------------------------------------------------------------

    def decode(self, requests: Sequence[Request]) -> DecodedBatch:
        if self._stop:
            raise Cancelled("the decoder was interrupted (its Loader was closed) before this batch was decoded")
        rq = Requests.of(requests)
        n = len(rq)
        self._resolve(wait=False)
        assignment = self.assign(rq) if n else np.zeros(0, np.int64)
        self.last_assignment = assignment
        caller = torch.cuda.current_stream(self._dev) if self._dev.type == "cuda" else None
        t0 = time.perf_counter()
        parts = self._run(rq, assignment, caller)
        failed = [p for p in parts if p.failure is not None]
        if failed:
            parts = [p for p in parts if p.failure is None] + self._retry(rq, failed, caller)
        span_s = time.perf_counter() - t0
        self._assigner.record(n, span_s)
        for p in parts:
            if caller is not None and p.events:
                caller.wait_event(p.events[1])  # the caller's stream: every engine's pixels are ready on it
        self._account(parts, span_s)
        joined = _join(rq, parts, self._dev)
        joined.engines = {self.engines[p.engine].name: (len(p.rows), p.seconds, span_s) for p in parts if p.engine >= 0}
        return joined

    def _run(self, rq: Requests, assignment: np.ndarray, caller: Any) -> list[_Part]:
        """Each engine's part decoded on its own thread, all at once; a Cancelled raised."""
        parts, futures = [], []
        for i, e in enumerate(self.engines):
            rows = np.flatnonzero(assignment == i)
            if not len(rows):
                continue
            part = _Part(i, rows, float(e.costs(_subset(rq, rows)).sum()))
            parts.append(part)
            futures.append(e.submit(self._decode_part, e, _subset(rq, rows), part, caller))
        cancelled = None
        for f in futures:
            try:
                f.result()
            except Cancelled as c:  # (the others are waited for first: no engine left writing)
                cancelled = c
        if cancelled is not None:
            raise cancelled
        return parts

    def _decode_part(self, e: Engine, sub: Requests, part: _Part, caller: Any) -> None:
        """On e's thread: its part decoded (and, for a GPU, uploaded) on its own stream."""
        t0 = time.perf_counter()
        try:
            if caller is None:
                part.decoded = e.decoder.decode(sub)
            else:
                if e.stream is None:
                    e.stream = torch.cuda.Stream(device=self._dev)
                with torch.cuda.device(self._dev), torch.cuda.stream(e.stream):
                    e.stream.wait_stream(caller)  # after what the caller enqueued (the rings' reuse)
                    start = torch.cuda.Event(enable_timing=True)
                    start.record(e.stream)
                    decoded = e.decoder.decode(sub)
                    if decoded.pixels.device.type != "cuda":
                        decoded = self._upload(decoded)
                    end = torch.cuda.Event(enable_timing=True)
                    end.record(e.stream)
                    part.decoded, part.events = decoded, (start, end)
        except Cancelled:
            raise
        except Exception as ex:  # the engine failed as a whole: its images go to the others (decode())
            part.failure = ex
        part.seconds = time.perf_counter() - t0

    def _upload(self, decoded: DecodedBatch) -> DecodedBatch:
        """Host pixels onto this decoder's device, on the current stream: one copy from
        page-locked memory (through a pinned staging buffer when they are not), into this
        turn's device buffer (valid for `ring` decodes)."""
        with self._lock:  # (two host engines upload at once: each its own turn)
            self._turn = (self._turn + 1) % self.ring
            k = self._turn
        dev, host = known(self._uploads, "a device decoder's upload ring").upload(decoded.pixels, k, stage=not decoded.pixels.is_pinned())
        return DecodedBatch(dev, decoded.offsets, decoded.shapes, decoded.strides, decoded.boxes, decoded.errors,
                            owner=(decoded.owner, decoded.pixels, host), pending=decoded.pending)

    def _retry(self, rq: Requests, failed: list[_Part], caller: Any) -> list[_Part]:
        """The images of engines that failed as a whole, decoded by the others; those
        engines are left out from now on (a warning says why)."""
        for p in failed:
            e = self.engines[p.engine]
            e.excluded = f"{type(p.failure).__name__}: {p.failure}"
            warnings.warn(f"split decoder: engine {e.name!r} failed ({e.excluded}); its images go to the other "
                          "engines, and it decodes no more batches", RuntimeWarning, stacklevel=4)
        rows = np.sort(np.concatenate([p.rows for p in failed]))
        sub = _subset(rq, rows)
        if not self._assigner.active():  # none left: each image's error says why
            errs = "; ".join(f"{self.engines[p.engine].name}: {self.engines[p.engine].excluded}" for p in failed)
            decoded = DecodedBatch(torch.zeros(1, dtype=torch.uint8, device=self._dev), np.zeros(len(rows), np.int64),
                                   np.zeros((len(rows), 2), np.int64), np.zeros((len(rows), 3), np.int64),
                                   np.zeros((len(rows), 4), np.int64),
                                   [f"every engine of the split decoder failed ({errs})"] * len(rows))
            return [_Part(-1, rows, 0.0, decoded)]
        again = self._run(sub, self.assign(sub), caller)
        for p in again:
            p.rows = rows[p.rows]
        failed_again = [p for p in again if p.failure is not None]
        if failed_again:
            return [p for p in again if p.failure is None] + self._retry(rq, failed_again, caller)
        return again

    # -- measuring ---------------------------------------------------------------------------

    def _account(self, parts: list[_Part], span_s: float) -> None:
        """Each part's engine: its images, pixels, busy and idle time; its rate, from the
        host time on the CPU, from its GPU work's events on a GPU once they have completed."""
        for p in parts:
            if p.engine < 0:
                continue
            e = self.engines[p.engine]
            e.stats.images += len(p.rows)
            e.stats.pixels += int(p.units) - OVERHEAD_PIXELS * len(p.rows)
            e.stats.batches += 1
            if p.events:
                self._measures.append((p, span_s))
            else:
                e.stats.busy += p.seconds
                e.stats.idle += max(span_s - p.seconds, 0.0)
                e.measured(p.units, p.seconds, self.smoothing)
        busy = {p.engine for p in parts}
        for i, e in enumerate(self.engines):  # an engine given nothing this batch idled all of it
            if e.excluded is None and i not in busy and self._assigner.chosen(i):
                e.stats.idle += span_s  # (one the tuning left out this batch was not waiting: not counted)

    def _resolve(self, *, wait: bool) -> None:
        """GPU parts whose events have completed: their time (the longer of the host's
        call and the GPU work) into their engine's rate and stats."""
        keep = []
        for p, span_s in self._measures:
            start, end = p.events
            if not wait and not end.query():
                keep.append((p, span_s))
                continue
            end.synchronize()
            seconds = max(p.seconds, start.elapsed_time(end) / 1000.0)
            e = self.engines[p.engine]
            e.stats.busy += seconds
            e.stats.idle += max(span_s - seconds, 0.0)
            e.measured(p.units, seconds, self.smoothing)
        self._measures = keep

    # -- lifecycle ---------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stops a decode running on another thread (each engine that can be interrupted is)."""
        self._stop = True
        for e in self.engines:
            if hasattr(e.decoder, "interrupt"):
                e.decoder.interrupt()

    def resume(self) -> None:
        self._stop = False
        for e in self.engines:
            if hasattr(e.decoder, "resume"):
                e.decoder.resume()

    def close(self) -> None:
        for e in self.engines:
            e.close()
            if self.own and hasattr(e.decoder, "close"):
                e.decoder.close()

    def __repr__(self) -> str:
        return f"SplitDecoder({self.engines!r}, device={self.device!r}, shares={self.shares!r})"


def _join(rq: Requests, parts: list[_Part], device: torch.device) -> DecodedBatch:
    """The parts as one DecodedBatch in batch order: pixels a view spanning the parts'
    buffers (decode._span), each image's offset moved to it."""
    n = len(rq)
    if len(parts) == 1 and len(parts[0].rows) == n and parts[0].decoded is not None:
        return dataclasses.replace(parts[0].decoded)  # (one engine had it all: its rows are 0..n-1 in order)
    offsets = np.zeros(n, np.int64)
    shapes = np.zeros((n, 2), np.int64)
    strides = np.zeros((n, 3), np.int64)
    boxes = np.zeros((n, 4), np.int64)
    errors: list[str | None] = [None] * n
    held = [p for p in parts if p.decoded is not None and p.decoded.pixels.numel()]
    pixels, rel = span([p.decoded.pixels.data_ptr() for p in held],  # type: ignore[union-attr]
                       [p.decoded.pixels.numel() for p in held], device)  # type: ignore[union-attr]
    base = {id(p): int(r) for p, r in zip(held, rel)}
    pending = []
    for p in parts:
        d = known(p.decoded, "a part's pixels")  # (a failed part was retried or made an error part)
        offsets[p.rows] = d.offsets + base.get(id(p), 0)
        shapes[p.rows], strides[p.rows], boxes[p.rows] = d.shapes, d.strides, d.boxes
        for j, k in enumerate(p.rows.tolist()):
            errors[k] = d.errors[j]
        if d.pending is not None:
            pending.append((p.rows, d.pending))
    return DecodedBatch(pixels, offsets, shapes, strides, boxes, errors, owner=[p.decoded for p in parts],
                        pending=_Pending(pending) if pending else None)


def _subset(rq: Requests, rows: np.ndarray) -> Requests:
    """Requests `rows` of `rq` (ascending), as columns."""
    idx = rows.tolist()
    boxes = rq.boxes[rows] if isinstance(rq.boxes, np.ndarray) else [rq.boxes[k] for k in idx]
    return Requests([rq.datas[k] for k in idx], [rq.formats[k] for k in idx], [rq.heights[k] for k in idx],
                    [rq.widths[k] for k in idx], boxes, [rq.shards[k] for k in idx], [rq.keys[k] for k in idx])
