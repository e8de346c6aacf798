"""A soak (issue 57): one Loader process through --epochs epochs (400 by default) of a
small set, as a long training job runs it: shuffled, augmented (RandomResizedCrop, flip,
ColorJitter, Normalize), `set_epoch` each epoch, and every --resume-every epochs an epoch
broken off in its middle, its state saved, the Loader closed and a new one made from the
state (as a job restarted from a checkpoint). Each epoch it records the process's
resident memory, its threads, its open file descriptors and the epoch's time; it checks
every sample is delivered once an epoch (resumed epochs included).

Flat means: the median resident memory of the last 100 epochs is less than --rss-mib
over that of the 100 after the first --warm (the first epochs fill the allocators' pools
and the kernel's caches; medians, as a resume moves the memory by a few MiB either way,
a new Loader's buffers in the allocator's other places); the most threads and
descriptors seen in the last 50 epochs are no more than in the 50 after the warm-up
(a pipeline thread ending as an epoch ends is counted or not, by a hair); and the last 50
epochs' median time is within 1.25x of the median just after the warm-up. The verdict and the series go to bench/_out/soak.json.

    python bench/soak.py [--epochs 400] [--images 512] [--batch 16] [--threads 2] [--parquet]

--parquet reads the same images from two Parquet files (as `datasets` stores them:
uncompressed, plain), through the walk kept from one epoch to the next.
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def build(out: str, n: int) -> str:
    """n crops of scikit-image's photographs (JPEG, 96 to 160 pixels a side) in 2 shards."""
    import numpy as np
    from PIL import Image
    from skimage import data

    from gpudecode.io.writer import ShardWriter

    os.makedirs(out, exist_ok=True)
    pattern = os.path.join(out, f"soak-{n}-%02d.tar")
    if os.path.exists(pattern % 1):
        return os.path.join(out, f"soak-{n}-{{00..01}}.tar")
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    rng = np.random.default_rng(0)
    with ShardWriter(pattern, maxcount=(n + 1) // 2) as w:
        for k in range(n):
            p = photos[k % len(photos)]
            h, wd = (int(v) for v in rng.integers(96, 161, 2))
            t, l = int(rng.integers(0, p.shape[0] - h)), int(rng.integers(0, p.shape[1] - wd))
            b = io.BytesIO()
            Image.fromarray(p[t:t + h, l:l + wd]).save(b, "JPEG", quality=90)
            w.write({"__key__": f"{k:06d}", "jpg": b.getvalue(), "cls": str(k % 10)})
    return os.path.join(out, f"soak-{n}-{{00..01}}.tar")


def as_parquet(urls: str, out: str) -> str:
    """The shards' samples as two Parquet files (an image struct and a label column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpudecode.io.reader import ShardReader
    from gpudecode.io.shards import expand_urls

    for k, url in enumerate(expand_urls(urls)):
        path = os.path.join(out, f"soak-{k:02d}.parquet")
        if not os.path.exists(path):
            rows = [({"bytes": bytes(s.fields["jpg"]), "path": f"{s.key}.jpg"}, int(s.fields["cls"]))
                    for s in ShardReader([url], shuffle=False, num_threads=1)]
            table = pa.table({"image": pa.array([r[0] for r in rows]), "label": pa.array([r[1] for r in rows])})
            pq.write_table(table, path, compression="none", use_dictionary=False, row_group_size=100)
    return os.path.join(out, "soak-{00..01}.parquet")


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import torch

    import gpudecode
    from gpudecode import transforms as T
    from gpudecode._args import COUNT, NONNEG
    from gpudecode.bench.common import machine
    from gpudecode.bench.suite import OUT, save

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=COUNT, default=400)
    ap.add_argument("--images", type=COUNT, default=512)
    ap.add_argument("--batch", type=COUNT, default=16)
    ap.add_argument("--threads", type=COUNT, default=2)
    ap.add_argument("--resume-every", type=NONNEG, default=40, help="0: never")
    ap.add_argument("--warm", type=COUNT, default=20)
    ap.add_argument("--rss-mib", type=float, default=16.0)
    ap.add_argument("--parquet", action="store_true")
    a = ap.parse_args(argv)
    urls = build(str(OUT / "soak"), a.images)
    if a.parquet:
        os.makedirs(OUT / f"soak-parquet-{a.images}", exist_ok=True)
        urls = as_parquet(urls, str(OUT / f"soak-parquet-{a.images}"))
    tf = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.ToDtype(torch.float32, scale=True), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def make() -> gpudecode.Loader:
        return gpudecode.Loader(urls, batch_size=a.batch, transform=tf, device="cpu", num_threads=a.threads,
                                shuffle=True, seed=7)

    ld = make()
    series: list[dict] = []
    missing = 0
    t_all = time.perf_counter()
    for epoch in range(a.epochs):
        t = time.perf_counter()
        ld.set_epoch(epoch)
        keys: list[str] = []
        if a.resume_every and epoch % a.resume_every == a.resume_every - 1:
            it = iter(ld)
            for _ in range(len(ld) // 2):
                keys += next(it).keys
            state = ld.state_dict()
            ld.close()
            ld = make()
            ld.load_state_dict(state)
        for b in ld:
            keys += b.keys
        if len(keys) != a.images or len(set(keys)) != a.images:
            missing += 1
        series.append({"epoch": epoch, "seconds": time.perf_counter() - t, "rss_mib": rss_mib(),
                       "threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task")),
                       "fds": descriptors()})
        if epoch % 50 == 0 or epoch == a.epochs - 1:
            s = series[-1]
            print(f"epoch {epoch:4d}: {s['seconds'] * 1e3:7.1f} ms, RSS {s['rss_mib']:7.1f} MiB, "
                  f"{s['tasks']} threads, {s['fds']} descriptors", flush=True)
    ld.close()
    last = series[-1]
    first_rss = float(np.median([s["rss_mib"] for s in series[a.warm:a.warm + 100] or series]))
    last_rss = float(np.median([s["rss_mib"] for s in series[-100:]]))
    growth = last_rss - first_rss
    after = series[a.warm:a.warm + 50] or series
    tail = series[-50:]
    early = statistics.median(s["seconds"] for s in after)
    late = statistics.median(s["seconds"] for s in series[-50:])
    checks = {"every sample once an epoch": missing == 0,
              f"RSS growth after epoch {a.warm} under {a.rss_mib:g} MiB (medians of 100 epochs)": growth < a.rss_mib,
              "no more threads at the end": max(s["tasks"] for s in tail) <= max(s["tasks"] for s in after),
              "no more descriptors at the end": max(s["fds"] for s in tail) <= max(s["fds"] for s in after),
              "last 50 epochs within 1.25x of the first after the warm-up": late <= 1.25 * early}
    cpu = machine().get("cpu")
    print(f"{cpu}; {'Parquet' if a.parquet else 'tar'}, {a.epochs} epochs of {a.images} images, batch {a.batch}, {a.threads} threads, a resume every "
          f"{a.resume_every} epochs, {time.perf_counter() - t_all:.0f} s")
    print(f"RSS (median of 100 epochs) {first_rss:.1f} MiB after epoch {a.warm} -> {last_rss:.1f} at the end "
          f"({growth:+.1f}; the last epoch {last['rss_mib']:.1f}); "
          f"epoch time median {early * 1e3:.1f} ms -> {late * 1e3:.1f} ms; threads (most) "
          f"{max(s['tasks'] for s in after)} -> {max(s['tasks'] for s in tail)}; descriptors "
          f"{max(s['fds'] for s in after)} -> {max(s['fds'] for s in tail)}; epochs with a sample missing or twice: "
          f"{missing}")
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'NOT'} {name}")
    flat = all(checks.values())
    print(f"soak: {'flat' if flat else 'NOT flat'}")
    save("soak-parquet" if a.parquet else "soak", {"machine": machine(), "args": vars(a), "checks": checks, "flat": flat, "series": series})
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
