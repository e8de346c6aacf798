"""Helpers shared by the benchmark scripts: timing, machine facts, result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

OUT = Path(__file__).resolve().parent / "_out"


def machine() -> dict:
    import numpy
    import torch

    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": numpy.__version__, "torch": torch.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for mod in ("torchvision", "numba", "PIL", "webdataset", "nvidia.dali"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            info[mod] = getattr(m, "__version__", "?")
        except ImportError:
            pass
    return info


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
