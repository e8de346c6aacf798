"""What every benchmark shares (`gpudecode bench`'s subcommands and the scripts in
bench/): the machine, timing, results on disk, tables."""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, Callable, Sequence

from .._report import table, write_json  # noqa: F401  (the library's: plan writes them too)

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TRAIN = "RandomResizedCrop(224) + RandomHorizontalFlip + ColorJitter(0.4, 0.4, 0.4, 0.1) + Normalize"


def machine() -> dict:
    """CPU model, cores, memory, GPU (if any), and the versions of what was measured."""
    info: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                            "python": platform.python_version(), "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as f:
            fields: dict[str, str] = {}
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                k, _, v = line.partition(":")
                fields[k.strip()] = v.strip()
        info["cpu"] = fields.get("model name", info["cpu"])
        # what tells one CPU from another where the model name does not ("AMD EPYC" in a VM)
        info["cpu_vendor"] = fields.get("vendor_id")
        info["cpu_family_model"] = f"{fields.get('cpu family', '?')}/{fields.get('model', '?')}"
        flags = set(fields.get("flags", "").split())
        info["cpu_isa"] = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
                                       "avx512_bf16", "amx_tile", "sha_ni") if f in flags]
        info["cpu_caches"] = _caches()
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # no torch or no driver: no GPU to name
        info["gpu"] = None
    versions = {}
    for mod, name in (("gpudecode", "gpudecode"), ("torch", "torch"), ("torchvision", "torchvision"),
                      ("numpy", "numpy"), ("numba", "numba"), ("PIL", "pillow"), ("nvidia.dali", "nvidia-dali"),
                      ("spdl.io", "spdl"), ("matplotlib", "matplotlib"),
                      ("webdataset", "webdataset")):
        try:
            m = __import__(mod, fromlist=["__version__"])
            versions[name] = getattr(m, "__version__", None) or _dist_version(name)
        except Exception:  # not installed (or broken): left out
            continue
    info["versions"] = versions
    return info


def _caches() -> dict[str, str]:
    """Cache sizes of CPU 0 (level and type -> size, e.g. {"L2": "1024K"}), from sysfs."""
    out: dict[str, str] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            if not d.startswith("index"):
                continue
            def read(name: str, d: str = d) -> str:
                with open(os.path.join(base, d, name)) as f:
                    return f.read().strip()
            kind = read("type")
            out[f"L{read('level')}" + ("d" if kind == "Data" else "i" if kind == "Instruction" else "")] = read("size")
    except OSError:
        pass
    return out


def describe_cpu(info: dict | None = None) -> str:
    """One line naming the CPU as every figure should be named beside it."""
    m = info or machine()
    caches = ", ".join(f"{k} {v}" for k, v in (m.get("cpu_caches") or {}).items())
    return (f"{m.get('cpu')} ({m.get('cpu_vendor') or '?'} family/model {m.get('cpu_family_model', '?')}; "
            f"{m.get('cores')} cores; {caches or 'caches unknown'}; {' '.join(m.get('cpu_isa') or []) or 'ISA unknown'})")


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    for dist in (name, name.replace("-", "_"), f"{name}-io"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def timeit(fn: Callable[[], int], *, repeat: int = 3, warmup: int = 1) -> tuple[float, int]:
    """Median seconds of `repeat` runs of fn (which returns the item count) after
    `warmup` runs (compilation, worker start, page cache), and the count."""
    for _ in range(warmup):
        fn()
    times, count = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), count


def rate(fn: Callable[[], int], repeat: int = 3, *, warmup: int = 1) -> float:
    """Median items a second of `repeat` runs of fn (returning its item count) after
    warm-up: each run's own rate, so a slow run does not weigh by its length."""
    for _ in range(warmup):
        fn()
    rates = []
    for _ in range(repeat):
        t = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t))
    return statistics.median(rates)


def alternated(runs: dict[str, Callable[[], int]], repeat: int = 3) -> dict[str, float]:
    """Each run's median items a second (rate's), the runs taken in turn after one warm-up
    each: `repeat` rounds, every other one in reverse order, so that a machine that speeds
    up or slows down over the minutes weighs on every run alike."""
    for fn in runs.values():
        fn()
    got: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(repeat):
        for k in (names if r % 2 == 0 else names[::-1]):
            t = time.perf_counter()
            n = runs[k]()
            got[k].append(n / (time.perf_counter() - t))
    return {k: statistics.median(v) for k, v in got.items()}


def epochs(ld: Any) -> Callable[[], int]:
    """A callable running a Loader's next epoch (set_epoch 0, 1, ...), returning the
    samples it gave: what `rate` times."""
    epoch = [0]

    def go() -> int:
        ld.set_epoch(epoch[0])
        epoch[0] += 1
        return sum(len(b.keys) for b in ld)
    return go


def spread(rates: Sequence[float]) -> dict:
    """Median, min, max of repeated measurements."""
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": list(rates)}


def progress(total: int | None, desc: str, *, enabled: bool = True):
    """A tqdm bar (or a do-nothing stand-in when disabled)."""
    if not enabled:
        class _Null:
            def update(self, n: int = 1) -> None:
                pass

            def set_postfix_str(self, s: str) -> None:
                pass

            def close(self) -> None:
                pass

            def __enter__(self):
                return self

            def __exit__(self, *a: Any) -> None:
                pass
        return _Null()
    from tqdm import tqdm

    # disable=None: no bar where stderr is not a terminal (output piped to a file stays readable)
    return tqdm(total=total, desc=desc, unit="img", leave=False, disable=None)


def device_memory(free_before: int, device: Any = None) -> dict:
    """Device memory as the driver sees it (torch.cuda.mem_get_info: nvImageCodec's pool,
    DALI's and nvJPEG's buffers count there) beside torch's own counts, in MiB:
    `driver_used_mb` is what the device lost since `free_before` (a mem_get_info()[0]
    taken before the run)."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return {"driver_used_mb": (free_before - free) / 2**20, "device_total_mb": total / 2**20,
            "torch_peak_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "torch_reserved_mb": torch.cuda.memory_reserved(device) / 2**20}
