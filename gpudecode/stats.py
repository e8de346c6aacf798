"""Per-batch timings of the Loader, and the summary that names the slowest stage."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


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
