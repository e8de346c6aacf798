"""Per-batch timings of the Loader, and the summary that names the slowest stage."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from ._text import plural


@dataclass(slots=True)
class BatchTiming:
    """Seconds spent on one batch: `wait` is the time the trainer waited for it; the
    others are the producer's stages (read: taking samples from the reader threads),
    timed on the host. On a CUDA device `gpu` holds CUDA events around the stages' GPU
    work ("decode", "h2d": the upload of host-decoded pixels, "augment"), resolved into
    seconds once they have completed (see resolve())."""

    size: int
    wait: float = 0.0
    read: float = 0.0
    probe: float = 0.0
    decode: float = 0.0
    augment: float = 0.0
    h2d: float = 0.0
    delivered: float = 0.0  # time.perf_counter() when the trainer got it
    encoded_bytes: int = 0  # compressed image bytes handed to the decoder
    h2d_bytes: int = 0      # decoded pixels uploaded to the device (the CPU decoder on CUDA)
    gpu: dict = field(default_factory=dict)  # stage -> (start event, end event), or seconds once done
    # a split decoder's engines: name -> (images, seconds busy on the host, the decode's span)
    engines: dict = field(default_factory=dict)

    def resolve(self) -> bool:
        """Turns completed event pairs into seconds (never waits): True when all are."""
        done = True
        for stage, value in list(self.gpu.items()):
            if isinstance(value, tuple):
                start, end = value
                if end.query():
                    self.gpu[stage] = start.elapsed_time(end) / 1000.0
                else:
                    done = False
        return done

    def stage(self, name: str) -> float:
        """A stage's time: the host's, or its GPU work's where that took longer (work
        enqueued on a stream is done later than the call that enqueued it returns)."""
        host = getattr(self, name)
        gpu = self.gpu.get(name)
        return max(host, gpu) if isinstance(gpu, float) else host

    @property
    def produce(self) -> float:
        """The producer's time for this batch: its two stages (read + probe + decode +
        upload, and augment) run on separate threads, overlapped, so the slower one bounds it."""
        return max(self.read + self.probe + self.stage("decode") + self.stage("h2d"), self.stage("augment"))


def engine_summary(batches: list[BatchTiming]) -> dict[str, dict]:
    """A split decoder's engines over `batches`: each one's share of the images, its rate
    while busy (img/s, host time) and the fraction of the decode it idled."""
    total: dict[str, list[float]] = {}  # name -> [images, busy seconds, span seconds]
    spans = 0.0
    for b in batches:
        if not b.engines:
            continue
        span_s = max(v[2] for v in b.engines.values())
        spans += span_s
        for name, (images, busy, _) in b.engines.items():
            t = total.setdefault(name, [0, 0.0, 0.0])
            t[0] += images
            t[1] += busy
    images = sum(t[0] for t in total.values())
    return {name: {"share": n / images if images else 0.0, "images_per_s": n / busy if busy > 0 else 0.0,
                   "idle_fraction": max(0.0, 1 - busy / spans) if spans > 0 else 0.0}
            for name, (n, busy, _) in total.items()}


@dataclass
class LoaderStats:
    """Per-batch timings of the last epoch, and a summary naming the slowest stage and
    the stalls (batches the trainer waited for many times longer than the median; the
    first batch of an epoch, which waits for the pipeline to fill, is not one)."""

    batches: list[BatchTiming] = field(default_factory=list)
    # a mixture (gpudecode.Source): samples read from each source this epoch, by its name
    sources: dict[str, int] = field(default_factory=dict)
    # and what reading each took: name -> (seconds on the reader threads, samples)
    source_read: dict[str, tuple[float, int]] = field(default_factory=dict)
    stall_factor: float = 5.0
    started: float = field(default_factory=time.perf_counter)  # when the epoch was asked for

    def summary(self) -> dict:
        if not self.batches:
            return {"batches": 0}
        timed = [b for b in self.batches if not b.gpu or b.resolve()]  # GPU work still running: left out
        stages = ("read", "probe", "decode", "h2d", "augment")
        med = {s: statistics.median(b.stage(s) for b in timed) for s in stages} if timed else {}
        if not any(b.gpu for b in self.batches):
            med.pop("h2d", None)
        waits = [b.wait for b in self.batches]
        med_wait = statistics.median(waits)
        threshold = max(self.stall_factor * med_wait, 0.005)
        stalls = [i for i, w in enumerate(waits) if w > threshold and i > 0]
        images = sum(b.size for b in self.batches)
        total = sum(b.produce for b in timed)
        elapsed = self.batches[-1].delivered - self.started
        out = {
            "batches": len(self.batches), "images": images,
            "median_s": {**med, "wait": med_wait},
            "slowest_stage": max(med, key=lambda k: med[k]) if med else None,
            # what the trainer received (its own time between batches included), and what
            # the producer could give with its stages overlapped and the cores to itself
            "images_per_s": images / elapsed if elapsed > 0 else float("inf"),
            "producer_images_per_s": sum(b.size for b in timed) / total if total > 0 else float("inf"),
            "stalls": stalls,
            "stall_threshold_s": threshold,
        }
        # each stage's capacity: the images it handled over the time it took in all (a mean, as
        # the delivered rate is: a stage that runs one batch at a time can never show less
        # capacity than what was delivered through it)
        timed_images = sum(b.size for b in timed)
        out["stage_capacity_img_s"] = {
            s: timed_images / t for s in med for t in [sum(b.stage(s) for b in timed)] if t > 0}
        out["encoded_bytes"] = sum(b.encoded_bytes for b in self.batches)
        out["h2d_bytes"] = sum(b.h2d_bytes for b in self.batches)
        if self.sources:
            out["sources"] = dict(self.sources)
        if self.source_read:  # each source's read rate on one reader thread: the slow one stands out
            out["source_read_img_s"] = {k: n / t if t > 0 else float("inf") for k, (t, n) in self.source_read.items()}
        engines = engine_summary(self.batches)
        if engines:
            out["decoder_engines"] = engines
        gpu = [b for b in timed if b.gpu]
        if gpu:  # what the GPU work itself took, as CUDA events saw it on the loader's stream
            out["gpu_median_s"] = {s: statistics.median(float(b.gpu.get(s, 0.0)) for b in gpu)
                                   for s in ("decode", "h2d", "augment")}
        return out

    def __str__(self) -> str:
        s = self.summary()
        if not s["batches"]:
            return "no batches yet"
        m = s["median_s"]
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in m.items())
        stalls = (f"{plural(len(s['stalls']), 'stall')} (> {s['stall_threshold_s'] * 1e3:.0f} ms wait)" if s["stalls"]
                  else "no stalls")
        engines = "".join(f"; decoder engine {k}: {v['share']:.0%} of the images, {v['images_per_s']:.0f} img/s "
                          f"busy, idle {v['idle_fraction']:.0%}" for k, v in s.get("decoder_engines", {}).items())
        return (f"{plural(s['batches'], 'batch')}, {plural(s['images'], 'image')}; median per batch: {parts}; slowest stage: "
                f"{s['slowest_stage']}; delivered {s['images_per_s']:.0f} img/s (producer alone up to "
                f"{s['producer_images_per_s']:.0f}); {stalls}{engines}")
