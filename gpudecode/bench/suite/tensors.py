"""Tensor shards (`gpudecode precache`) against the classic JPEG DataLoader, in one run,
on ImageNet-like JPEGs (500x375, quality 90; the same images as bench/loader.py):

1. stored at 256 (shorter side), RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4,
   0.4, 0.1) + Normalize: gpudecode Loader on tensor shards, gpudecode Loader on the
   JPEGs, and torchvision's classic DataLoader (ImageFolder + PIL) with the same
   transforms;
2. stored at 224 centre (`--size 224 --crop center`), flip + Normalize (and CIFAR-style
   RandomCrop(224, padding=16) + flip + Normalize): gpudecode Loader on those shards,
   against the classic DataLoader producing the same images from the JPEGs each epoch
   (Resize(256) + CenterCrop(224) + flip + ToTensor + Normalize), and against copying
   the shards' bytes from the page cache (memory speed: --threads threads reading the
   files into a buffer), beside the Loader's kernel stage alone and a bare uint8 ->
   float32 cast of the same output (what the copy ratio is made of);
3. precache throughput with 1 .. --threads threads.

The JPEG pipeline against its ceiling is also measured in pairs (each Loader run beside
its own ceiling), as this VM's speed drifts between the parts of a run.

    python bench/tensors.py [--images 2048] [--threads 2] [--repeat 3]
"""
from __future__ import annotations

import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from ..common import machine
from . import OUT, pipeline_args, save
from .loader import MEAN, STD, build  # (the same JPEGs as the loader bench)


def precache_rate(shards: list[str], threads: int, size, crop: str) -> tuple[float, str]:
    from gpudecode.precache import precache

    out = OUT / f"tensors_precache_{threads}"
    shutil.rmtree(out, ignore_errors=True)
    r = precache(shards, out, size=size, crop=crop, num_threads=threads)
    shutil.rmtree(out, ignore_errors=True)
    return r.written / r.seconds, f"{r.bytes / r.written / 1024:.0f} KB/sample"


def make_tensor_shards(shards: list[str], name: str, size, crop: str) -> list[str]:
    from gpudecode.precache import precache, verify

    out = OUT / f"tensors_{len(shards)}_{name}"
    if (out / "manifest.json").exists() and not verify(out, checksums=False):
        return sorted(str(p) for p in out.glob("*.tar"))
    shutil.rmtree(out, ignore_errors=True)
    return precache(shards, out, size=size, crop=crop).shards


def loader_epochs(urls, tf, threads, batch, repeat):
    from gpudecode import Loader

    ld = Loader(urls, batch_size=batch, transform=tf, device="cpu", num_threads=threads, seed=0)
    rates = []
    for epoch in range(repeat + 1):  # epoch 0 warms up (kernel load, page cache)
        ld.set_epoch(epoch)
        t = time.perf_counter()
        n = sum(b.images.shape[0] for b in ld)
        if epoch:
            rates.append(n / (time.perf_counter() - t))
    rate = statistics.median(rates)
    stats = str(ld.stats)
    ld.close()
    return rate, stats


def jpeg_against_ceiling(jpegs, tf, threads, batch, rounds=3):
    """[(Loader img/s, ceiling img/s)] measured `rounds` times in turn, each pair a few
    seconds apart: the Loader's JPEG rate (2 epochs after a first) and the ceiling of
    `gil.python_per_sample` (the decode of the windows and the kernel, one core each)."""
    from gpudecode.bench.gil import python_per_sample

    pairs = []
    for _ in range(rounds):
        rate, _ = loader_epochs(jpegs, tf, threads, batch, 2)
        pairs.append((rate, python_per_sample(jpegs, tf, batch_size=batch, repeat=1)["ceiling_img_per_s"]))
    return pairs


def classic_epochs(folder, tf, threads, batch, repeat):
    import torch
    from torchvision.datasets import ImageFolder

    return dataloader_rate(torch.utils.data.DataLoader(ImageFolder(folder, transform=tf), batch_size=batch, shuffle=True,
                                                       num_workers=threads, persistent_workers=True, prefetch_factor=2),
                           repeat)


def dataloader_rate(dl, repeat: int) -> float:
    """img/s of a DataLoader: the median of `repeat` epochs after a first (workers start)."""
    rates = []
    for epoch in range(repeat + 1):
        t = time.perf_counter()
        n = sum(x.shape[0] for x, _ in dl)
        if epoch:
            rates.append(n / (time.perf_counter() - t))
    return statistics.median(rates)


def page_cache_copy(urls, threads, repeat):
    """Bytes/s of reading the shards (already in the page cache) into a reused buffer."""
    size = max(os.path.getsize(u) for u in urls)
    bufs = [bytearray(size) for _ in range(threads)]

    def read(i_url):
        i, url = i_url
        with open(url, "rb", buffering=0) as f:
            return f.readinto(memoryview(bufs[i % threads]))

    total = sum(os.path.getsize(u) for u in urls)
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        for r in range(repeat + 1):
            t = time.perf_counter()
            got = sum(pool.map(read, enumerate(urls)))
            if r:
                rates.append(got / (time.perf_counter() - t))
            if got != total:  # (a shard that changed under the bench: its figure would be wrong)
                raise RuntimeError(f"read {got} bytes of the shards' {total}")
    return statistics.median(rates)


def main() -> None:
    ap = pipeline_args(__doc__, images=2048)
    ap.add_argument("--skip-precache", action="store_true", help="skip part 3")
    a = ap.parse_args()
    import torchvision.transforms as v1

    from gpudecode import transforms as T

    jpegs, folder = build(a.images)
    t256 = make_tensor_shards(jpegs, "256", 256, "none")
    t224 = make_tensor_shards(jpegs, "224c", 224, "center")
    rows: dict[str, float] = {}
    stats: dict[str, str] = {}

    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       T.Normalize(MEAN, STD)])
    rows["1. gpudecode, tensor@256, RRC+flip+jitter+norm"], stats["tensor@256"] = loader_epochs(
        t256, train, a.threads, a.batch, a.repeat)
    rows["1. gpudecode, JPEG, RRC+flip+jitter+norm"], stats["jpeg"] = loader_epochs(
        jpegs, train, a.threads, a.batch, a.repeat)
    classic_train = v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), v1.ColorJitter(0.4, 0.4, 0.4, 0.1),
                                v1.ToTensor(), v1.Normalize(MEAN, STD)])
    rows["1. classic DataLoader, JPEG, RRC+flip+jitter+norm"] = classic_epochs(
        folder, classic_train, a.threads, a.batch, a.repeat)

    flip = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    cifar = T.Compose([T.RandomCrop(224, padding=16), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    rows["2. gpudecode, tensor@224c, flip+norm"], stats["tensor@224c flip"] = loader_epochs(
        t224, flip, a.threads, a.batch, a.repeat)
    rows["2. gpudecode, tensor@224c, RandomCrop(pad 16)+flip+norm"], stats["tensor@224c crop"] = loader_epochs(
        t224, cifar, a.threads, a.batch, a.repeat)
    classic_val = v1.Compose([v1.Resize(256), v1.CenterCrop(224), v1.RandomHorizontalFlip(), v1.ToTensor(),
                              v1.Normalize(MEAN, STD)])
    rows["2. classic DataLoader, JPEG, resize+center+flip+norm"] = classic_epochs(
        folder, classic_val, a.threads, a.batch, a.repeat)
    per_image = sum(os.path.getsize(u) for u in t224) / a.images
    copy = page_cache_copy(t224, a.threads, a.repeat)
    rows["2. page-cache copy of the tensor@224c shards"] = copy / per_image
    from gpudecode.bench.gil import conversion_rate, finish_alone

    # what the Loader's rate is made of: its kernel stage alone, and the memory's own
    # rate for this output (a bare uint8 -> float32 cast of the same size)
    rows["2. its kernel stage alone, tensor@224c, flip+norm"] = finish_alone(t224, flip, batch_size=a.batch,
                                                                            num_threads=a.threads)
    rows["2. a bare uint8->float32 cast of the same output"] = conversion_rate(batch_size=a.batch,
                                                                              num_threads=a.threads)

    print(f"{a.images} JPEGs 500x375 q90; tensor shards by gpudecode precache; batch {a.batch}, "
          f"{a.threads} threads/workers, {os.cpu_count()} cores; output float32 NCHW 224x224")
    c1 = rows["1. classic DataLoader, JPEG, RRC+flip+jitter+norm"]
    c2 = rows["2. classic DataLoader, JPEG, resize+center+flip+norm"]
    print(f"{'pipeline':58s} {'img/s':>8s} {'x classic':>10s}")
    for name, r in rows.items():
        base = c1 if name.startswith("1.") else c2
        print(f"{name:58s} {r:8.0f} {r / base:10.2f}")
    fast = rows["2. gpudecode, tensor@224c, flip+norm"]
    page = rows["2. page-cache copy of the tensor@224c shards"]
    print(f"tensor@256 vs classic (target >= 16x): {rows['1. gpudecode, tensor@256, RRC+flip+jitter+norm'] / c1:.1f}x")
    print(f"tensor@224c flip+norm vs classic (target >= 25x): {fast / c2:.1f}x; vs page-cache copy "
          f"({copy / 1e9:.2f} GB/s, {per_image / 1024:.0f} KB/image) (target >= 0.5): "
          f"{fast / page:.2f}")
    cast = rows["2. a bare uint8->float32 cast of the same output"]
    alone = rows["2. its kernel stage alone, tensor@224c, flip+norm"]
    print(f"  of the page-cache copy: its kernel stage alone {alone / page:.2f}, a bare uint8->float32 cast of the "
          f"output {cast / page:.2f} (the Loader at {fast / alone:.2f} of its kernel stage alone)")
    for k, s in stats.items():
        print(f"  {k}: {s}")
    from gpudecode.bench.gil import loader_python_per_sample, python_per_sample

    gil = {"tensor@224c flip+norm": python_per_sample(t224, flip, batch_size=a.batch),
           "JPEG RRC+flip+jitter+norm": python_per_sample(jpegs, train, batch_size=a.batch)}
    print("Python per sample (the GIL's), apart from native calls, each part alone on one thread:")
    for name, parts in gil.items():
        print(f"  {name}: " + ", ".join(f"{k} {parts[k]['python_us']:.1f} us (native {parts[k]['native_us']:.1f})"
                                        for k in ("reader", "prepare", "finish", "loader")))
    running = {"tensor@224c flip+norm": loader_python_per_sample(t224, flip, batch_size=a.batch,
                                                                 num_threads=a.threads, epochs=a.repeat),
               "JPEG RRC+flip+jitter+norm": loader_python_per_sample(jpegs, train, batch_size=a.batch,
                                                                     num_threads=a.threads, epochs=a.repeat)}
    print("Python per sample in a running Loader, every thread (its CPU time less the native calls', the hand-offs, "
          "queues and shuffle included) (target <= 8 us):")
    for name, lr in running.items():
        print(f"  {name}: {lr['python_us']:.1f} us, of it garbage collection {lr['gc_us']:.1f} (system time, "
              f"native calls' included: {lr['sys_us']:.1f}; native "
              f"{lr['native_us']:.1f} us; {lr['img_per_s']:.0f} img/s with the decoder on one native thread)")
    jpeg = rows["1. gpudecode, JPEG, RRC+flip+jitter+norm"]
    ceiling = gil["JPEG RRC+flip+jitter+norm"]["ceiling_img_per_s"]
    print(f"JPEG training pipeline against its ceiling (decode windows + kernel, per core, x {os.cpu_count()} cores: "
          f"{ceiling:.0f} img/s) (target >= 0.9): {jpeg / ceiling:.2f}")
    pairs = jpeg_against_ceiling(jpegs, train, a.threads, a.batch)
    print("  measured in pairs, each Loader run next to its ceiling (this VM's speed drifts between parts of a run): "
          + ", ".join(f"{r:.0f} of {c:.0f}: {r / c:.2f}" for r, c in pairs)
          + f"; median {statistics.median(r / c for r, c in pairs):.2f}")
    pre: dict[str, float] = {}
    if not a.skip_precache:
        for th in sorted({1, a.threads}):
            rate, note = precache_rate(jpegs, th, 256, "none")
            pre[f"precache --size 256, {th} threads"] = rate
            print(f"precache --size 256, {th} thread(s): {rate:.0f} img/s ({note})")
    save("tensors", {"machine": machine(), "args": vars(a), "img_per_s": rows, "stats": stats,
                     "page_cache_bytes_per_s": copy, "bytes_per_image_224c": per_image, "precache_img_per_s": pre,
                     "python_per_sample": gil, "loader_python_per_sample": running, "jpeg_against_ceiling": pairs})


if __name__ == "__main__":
    main()
