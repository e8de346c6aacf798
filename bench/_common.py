"""Helpers shared by the benchmark scripts: timing, machine facts, result files."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable

from gpudecode.bench.common import machine  # noqa: F401  (CPU, cores, memory, GPU, versions)

OUT = Path(__file__).resolve().parent / "_out"


def timeit(fn: Callable[[], int], *, repeat: int = 3, warmup: int = 1) -> tuple[float, int]:
    """Median seconds of `repeat` runs of fn (which returns the item count) after warm-up."""
    for _ in range(warmup):
        fn()
    times, count = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), count


def save(name: str, result: dict) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(result, indent=1))
    return path
