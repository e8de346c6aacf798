"""`gpudecode.profile`: where the input pipeline a user has now stands against their step.

Wraps any iterable of batches (a torch DataLoader, a DALI iterator, a gpudecode Loader,
a generator) and a training step (a callable taking the batch, or seconds to simulate
one), and measures per batch how long the step waited for its batch and how long the
step took. The report says whether data or compute bounds training and by how much,
finds stalls (batches that waited many times the usual) and periodic stalls (every k-th
batch: the signature of a loader bound by its workers, k = num_workers), and for a
gpudecode Loader the capacity of each stage and the weakest link.

    report = gpudecode.profile(loader, step=train_step, batches=100)
    print(report.summary()); report.plot("batches.png"); report.to_json()

Also the hook the GIL benchmark (gpudecode.bench.gil) measures with: `native_calls_timed(
clock)` times every call into gpudecode's native code (the C++ module's functions and the
numba CPU kernel) into a `NativeClock`, so the Python around them is the rest of a part's
time. A documented, tested hook, so no bench patches the library's modules itself.
"""
from __future__ import annotations

import contextlib
import json
import math
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ._text import plural

DATA_BOUND = 0.10  # the step waited for more than this fraction of the time: data-bound
FEW_BATCHES = 20  # fewer measured batches than this: the report says its figures are rough

_ADVICE = {
    "read": "read-bound: storage or network feeds the loader too slowly (keep remote shards on the node with "
            "cache_dir=; bigger shards; check `gpudecode bench io`)",
    "probe": "probe-bound: reading headers and labels costs more than decoding (very small images; precache to "
             "tensor shards)",
    "decode": "decode-bound on the CPU: decode on the GPU (device='cuda') or precache (gpudecode precache)",
    "h2d": "host-to-device bound: decode on the GPU, or pin_memory=True",
    "augment": "augment-bound: run the kernel on the GPU (device='cuda') or give it more threads (num_workers)",
}


@dataclass
class ProfileReport:
    """Per-batch timings and what they say. Times in seconds; `timeline` holds (asked,
    got, stepped) for each batch, relative to the start."""

    loader: str
    batches: int
    images: int
    elapsed: float
    wait: list[float]
    step: list[float]
    sizes: list[int]
    timeline: list[tuple[float, float, float]]
    wait_fraction: float
    bound: str                      # "data" or "compute"
    input_speedup_needed: float     # x more input throughput for the step never to wait (1.0: none)
    stalls: list[int]               # batch indices that waited more than stall_threshold
    stall_threshold: float
    period: int | None              # stalls every `period` batches, where they repeat so
    num_workers: int | None         # the loader's, where it has one (DataLoader, gpudecode Loader)
    stage_capacity: dict[str, float] = field(default_factory=dict)  # img/s each gpudecode stage sustains
    weakest: str | None = None
    source_capacity: dict[str, float] = field(default_factory=dict)  # a mixture's: img/s each source reads
    decoder_engines: dict[str, dict] = field(default_factory=dict)  # a split decoder's: each engine's share, rate, idle
    stage_median_s: dict[str, float] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    epochs: int = 1                 # epochs the measured batches came from (batches= loops them)
    notes: list[str] = field(default_factory=list)  # what limits the figures (too few batches, ...)

    @property
    def images_per_s(self) -> float:
        return self.images / self.elapsed if self.elapsed > 0 else float("inf")

    def summary(self) -> str:
        """A few lines: the rate, the verdict, stalls and their period, the stages, advice."""
        med_w, med_s = _median(self.wait), _median(self.step)
        lines = [f"{self.loader}: {plural(self.batches, 'batch')}, {plural(self.images, 'image')} in "
                 f"{self.elapsed:.2f} s = "
                 f"{self.images_per_s:.0f} img/s; median wait {med_w * 1e3:.1f} ms, median step {med_s * 1e3:.1f} ms; "
                 f"waiting {self.wait_fraction:.0%} of the time"
                 + (f" ({self.epochs} epochs)" if self.epochs > 1 else "")]
        lines += [f"note: {n}" for n in self.notes]
        if self.bound == "data":
            lines.append(f"data-bound: {self.input_speedup_needed:.1f}x more input throughput needed for the step "
                         "never to wait")
        else:
            lines.append("compute-bound: the step, not the input, sets the pace")
        if self.stalls:
            per = ""
            if self.period:
                per = f"; every {self.period} batches"
                if self.num_workers:
                    per += f" (num_workers = {self.num_workers})"
            lines.append(f"{plural(len(self.stalls), 'stall')} (> {self.stall_threshold * 1e3:.0f} ms wait){per}")
        else:
            lines.append("no stalls")
        if self.stage_capacity:
            caps = ", ".join(f"{k} {v:.0f}" for k, v in self.stage_capacity.items())
            lines.append(f"stage capacity, img/s: {caps}; weakest: {self.weakest}")
        if self.source_capacity:
            caps = ", ".join(f"{k} {v:.0f}" for k, v in self.source_capacity.items())
            slow = min(self.source_capacity, key=lambda k: self.source_capacity[k])
            lines.append(f"read rate by source (one reader thread), img/s: {caps}; slowest: {slow}")
        if self.decoder_engines:
            lines.append("decoder engines: " + "; ".join(
                f"{k} {v['share']:.0%} of the images at {v['images_per_s']:.0f} img/s, idle {v['idle_fraction']:.0%}"
                for k, v in self.decoder_engines.items()))
        lines += [f"-> {a}" for a in self.advice]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["images_per_s"] = self.images_per_s
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=_json_default)

    def plot(self, path: str, *, max_batches: int = 80) -> str:
        """The life of each batch (waiting, then the step) on a time line, the per-batch
        times, and the stages' capacity where known; written as a PNG to `path`."""
        from .plots import profile_figure

        return profile_figure(self, path, max_batches=max_batches)


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _batch_size(batch: Any) -> int:
    images = getattr(batch, "images", None)
    if images is None and isinstance(batch, (tuple, list)) and batch:
        images = batch[0]
    if images is None and isinstance(batch, dict) and batch:
        images = next(iter(batch.values()))
    if isinstance(images, (list, tuple)):  # a DALI iterator's [dict]
        images = images[0] if images else None
        if isinstance(images, dict) and images:
            images = next(iter(images.values()))
    shape = getattr(images, "shape", None)
    try:
        return int(shape[0]) if shape is not None and len(shape) else 1
    except (TypeError, IndexError):  # shape() as a method (DALI's TensorList): its length is the batch
        try:
            return len(images)  # type: ignore[arg-type]
        except TypeError:
            return 1


def find_period(stalls: list[int], batches: int, *, max_period: int = 32) -> int | None:
    """The smallest k (>= 2) such that the stalls fall on one residue mod k and come about
    every k batches (at least 60% of batches/k of them, 80% on that residue); None
    where they do not repeat."""
    if len(stalls) < 3:
        return None
    for k in range(2, min(max_period, batches // 2) + 1):
        counts: dict[int, int] = {}
        for i in stalls:
            counts[i % k] = counts.get(i % k, 0) + 1
        top = max(counts.values())
        if top >= 0.8 * len(stalls) and top >= 0.6 * (batches / k) and len(stalls) <= 1.3 * (batches / k) + 1:
            return k
    return None


def profile(iterable: Iterable, *, step: float | Callable[[Any], Any] = 0.0, batches: int | None = None,
            warmup: int = 1, stall_factor: float = 5.0,
            clock: Callable[[], float] = time.perf_counter) -> ProfileReport:
    """Iterates `iterable` like a training loop and measures it (see the module doc).

    Args:
        iterable: any iterable of batches.
        step: the training step: a callable given each batch (make it synchronize a GPU
            if it uses one, e.g. with .item(), or its time is not the step's), or seconds
            to simulate one (time.sleep).
        batches: batches measured after the warm-up (default: until the iterable ends).
        warmup: batches taken first and not measured (the pipeline filling up).
        stall_factor: a stall waits more than this times the usual wait (the lower
            quartile: where every k-th batch stalls, the median can be a stall itself).
        clock: seconds, monotonic (time.perf_counter); a simulation passes its own, its
            iterable and step advancing it.

    Raises:
        ValueError: no batch was measured.
    """
    run = step if callable(step) else None
    seconds = float(step) if not callable(step) else 0.0
    if batches is not None and batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    it = iter(iterable)
    loops = it is not iterable  # a loader (iterable again, one epoch each time), not a one-shot iterator
    timeline: list[tuple[float, float, float]] = []
    sizes: list[int] = []
    taken = 0
    epochs = 1
    start = None
    while batches is None or taken < warmup + batches:
        t0 = clock()
        try:
            batch = next(it)
        except StopIteration:
            if batches is None or not loops or taken == 0:
                break
            it = iter(iterable)  # the next epoch: `batches` asked for more than one epoch holds
            epochs += 1
            try:
                batch = next(it)
            except StopIteration:
                break
        t1 = clock()
        if run is not None:
            run(batch)
        elif seconds > 0:
            time.sleep(seconds)
        t2 = clock()
        taken += 1
        if taken <= warmup:
            continue
        if start is None:
            start = t0
        timeline.append((t0 - start, t1 - start, t2 - start))
        sizes.append(_batch_size(batch))
    if not timeline:
        raise ValueError(f"no batch measured: the iterable gave {taken} (warmup {warmup})")
    wait = [t1 - t0 for t0, t1, _ in timeline]
    stp = [t2 - t1 for _, t1, t2 in timeline]
    elapsed = timeline[-1][2]
    waited = sum(wait)
    q25 = sorted(wait)[len(wait) // 4]
    threshold = max(stall_factor * q25, q25 + 0.005)
    stalls = [i for i, w in enumerate(wait) if w > threshold]
    fraction = waited / elapsed if elapsed > 0 else 0.0
    total_step = sum(stp)
    speedup = elapsed / total_step if total_step > 0 else float("inf")
    num_workers = getattr(iterable, "num_workers", None)
    report = ProfileReport(
        loader=type(iterable).__name__, batches=len(timeline), images=sum(sizes), elapsed=elapsed, wait=wait,
        step=stp, sizes=sizes, timeline=timeline, wait_fraction=fraction,
        bound="data" if fraction > DATA_BOUND else "compute", input_speedup_needed=max(1.0, speedup),
        stalls=stalls, stall_threshold=threshold, period=find_period(stalls, len(timeline)),
        num_workers=int(num_workers) if isinstance(num_workers, int) else None)
    report.epochs = epochs
    if batches is not None and report.batches < batches:
        report.notes.append(f"measured {report.batches} batches of the {batches} asked for (the iterable "
                            "ended and cannot be iterated again)")
    if report.batches < FEW_BATCHES:
        report.notes.append(f"only {report.batches} batches measured: rates and stalls are rough below "
                            f"{FEW_BATCHES} (ask for more with batches=; epochs repeat)")
    _stages(iterable, report)
    _advise(report)
    return report


def _stages(iterable: Any, report: ProfileReport) -> None:
    """A gpudecode Loader's stage capacities, from its own per-batch timings."""
    stats: Any = getattr(iterable, "stats", None)
    summary = getattr(stats, "summary", None)
    if stats is None or summary is None or not callable(summary):
        return
    s = summary()
    med = s.get("median_s") or {}
    if not s.get("batches") or not med:
        return
    stages = {k: v for k, v in med.items() if k != "wait"}
    report.stage_median_s = dict(stages)
    # read, probe, decode (and the upload) run one after another on one thread; augment
    # on another: each stage's own capacity, images over the time it took in all (the
    # delivered rate is a mean too, so a stage never shows less than passed through it)
    report.stage_capacity = dict(s.get("stage_capacity_img_s") or {})
    report.source_capacity = dict(s.get("source_read_img_s") or {})
    report.decoder_engines = dict(s.get("decoder_engines") or {})
    if report.stage_capacity:
        report.weakest = min(report.stage_capacity, key=lambda k: report.stage_capacity[k])


def _advise(report: ProfileReport) -> None:
    med_step = _median(report.step)
    if report.bound == "compute":
        if report.stage_capacity:
            head = min(report.stage_capacity.values()) / (statistics.median(report.sizes) / med_step) \
                if med_step > 0 else float("inf")
            report.advice.append(f"the input keeps up; its slowest stage ({report.weakest}) has {head:.1f}x the "
                                 "step's rate")
        return
    if report.period and report.num_workers and report.period == report.num_workers:
        per_batch = report.elapsed / report.batches * report.period
        report.advice.append(f"worker-bound: one batch in {report.period} waits and num_workers = "
                             f"{report.num_workers}: each worker needs about {per_batch:.2f} s per batch; more "
                             "workers (cores permitting) or a faster pipeline (gpudecode.Loader)")
    if report.weakest in _ADVICE:
        report.advice.append(_ADVICE[report.weakest])
    if report.weakest == "read" and len(report.source_capacity) > 1:
        slow = min(report.source_capacity, key=lambda k: report.source_capacity[k])
        report.advice.append(f"of the mixture's sources, {slow} reads slowest "
                             f"({report.source_capacity[slow]:.0f} img/s a reader thread): its storage first")
    elif not report.stage_capacity:
        report.advice.append(f"the input delivers {report.images_per_s:.0f} img/s; the step could take "
                             f"{report.images_per_s * report.input_speedup_needed:.0f}")


__all__ = ["profile", "ProfileReport", "find_period"]


class NativeClock:
    """Seconds spent inside the calls native_calls_timed wraps, summed over the threads
    making them: wall time, or with `cpu` each calling thread's CPU time (what the call ran
    on that thread: with more threads than cores a call's wall time also holds its wait)."""

    def __init__(self, cpu: bool = False) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._now = time.thread_time if cpu else time.perf_counter

    def wrap(self, f: Any) -> Any:
        now = self._now

        def timed(*a: Any, **k: Any) -> Any:
            t = now()
            try:
                return f(*a, **k)
            finally:
                dt = now() - t
                with self._lock:
                    self.seconds += dt
        return timed


@contextlib.contextmanager
def native_calls_timed(clock: NativeClock) -> Iterator[NativeClock]:
    """Within the block, every call into gpudecode's native code (each public function of
    the C++ module `gpudecode._native`, and the numba CPU kernel `kernels.cpu_twin.cpu_kernel`
    gives, which fused_cpu calls) is timed into `clock`; everything is as it was after the block. For one
    measurement at a time in a process (the calls are wrapped where gpudecode looks them up)."""
    from . import _native
    from .kernels import cpu_twin

    saved = {}
    for name in dir(_native):
        f = getattr(_native, name)
        if callable(f) and not isinstance(f, type) and not name.startswith("_"):
            saved[name] = f
            setattr(_native, name, clock.wrap(f))
    kernel = cpu_twin.cpu_kernel
    cpu_twin.cpu_kernel = lambda: clock.wrap(kernel())  # type: ignore[assignment]
    try:
        yield clock
    finally:
        for name, f in saved.items():
            setattr(_native, name, f)
        cpu_twin.cpu_kernel = kernel  # type: ignore[assignment]
