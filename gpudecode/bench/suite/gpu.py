"""The GPU input pipeline, measured: decode + RandomResizedCrop(224) + flip + ColorJitter +
Normalize on ImageNet-like JPEGs (500x375, quality 90), per decoder and batch size, with
at most --threads CPU threads, against the CPU path and torchvision's classic DataLoader
on the same machine, in one run.

    python bench/gpu.py [--images 4096] [--batch-sizes 64,128,256] [--threads 6] [--out DIR]

For each run: images/s delivered to the trainer (its stream synchronized at the end, so
GPU work is counted), CPU threads used, peak GPU memory, host-to-device bytes per image
(the compressed JPEG bytes a GPU decoder reads, or the decoded pixels the CPU decoder
uploads), and the Loader's slowest stage from CUDA events. Targets (issue 11): at least
7,200 img/s on one H100 with at most 6 threads (MLPerf's DALI-fed ResNet-50 rate), and at
least 10x the classic DataLoader on the same machine.

Then every engine at once (issue 53): the split decoder (decoder "auto" on CUDA: the
hardware JPEG engine, nvJPEG on CUDA and the CPU decoder's threads) beside each of its
engines alone, at --engine-threads (2, 4, 7, 14), each engine's share and idle time, and
the sum of the engines' separate rates as the ceiling the split is compared to.

Then the set kept resident (issue 55): a CIFAR-sized set at batch 1024 and the JPEGs
precached at 256 with the training recipe, keep="gpu" (keep="ram" without CUDA).

Then PNG (issue 56): the same images as PNG shards through the two-halves engine
(nvCOMP's inflate + the CUDA unfilter kernel) against the CPU decoder on the CPU threads.

Then today's recipes on the GPU (issue 19), each written as a torchvision Compose in
bench/recipes.py: torchvision's reference recipe (TrivialAugmentWide, RandomErasing,
MixUp/CutMix on the GPU batch), DINO's 2 x 224 + 6 x 96 views with blur and solarize, and
ColorJitter before RandomResizedCrop (the first pass, on each whole image), with the CPU
decoder and the first GPU decoder there is, img/s of the second epoch.

Without a CUDA device it says so and runs the same pipelines on the CPU, small (every
decoder there is, in its CPU build; the recipes; the classic DataLoader): a rehearsal of
the GPU run (`make gpu-check` on a CPU machine), whose figures are CPU figures and are
named so; no GPU figure is made up. Each run names the backend that decoded (the
decoder's `backend`: GPU, hardware or CPU).
Writes gpu.md and gpu.json to --out (default bench/_out). Exits 1 when a run failed (its
error is in the report), else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from ..._args import COUNT, COUNTS
from ..common import machine
from . import OUT
from .loader import MEAN, STD, build, run_torchvision


def gpu_facts() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"cuda": False}
    facts = {"cuda": True, "name": torch.cuda.get_device_name(), "torch_cuda": torch.version.cuda,
             "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        facts["driver"], facts["memory"] = (x.strip() for x in out.splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        pass
    return facts


def versions() -> dict:
    out = {}
    for mod in ("nvidia.nvimgcodec", "nvidia.dali", "torchcodec", "numba", "numba_cuda"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            out[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # not installed, or built for another torch
            out[mod] = f"unavailable ({type(e).__name__})"
    return out


def tf():
    from gpudecode import transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.Normalize(MEAN, STD)])


def loader_run(shards, *, device, decoder, batch, threads, epochs=2) -> dict:
    """img/s of the second epoch (the first loads the kernels, warms the decoder)."""
    import torch

    from gpudecode import Loader

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        free_before = torch.cuda.mem_get_info()[0]
    ld = Loader(shards, batch_size=batch, transform=tf(), device=device, decoder=decoder, num_workers=threads,
                seed=0)
    rate = 0.0
    for _ in range(epochs):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        n = 0
        for b in ld:
            n += b.images.shape[0]
        if cuda:
            torch.cuda.synchronize()  # the trainer's stream: every batch's GPU work is done
        rate = n / (time.perf_counter() - t)
    s = ld.stats.summary()
    d = ld.describe()
    engine_detours = {name: e["detours"] for name, e in d.get("decoder_engines", {}).items() if e.get("detours")}
    out = {"engines": s.get("decoder_engines", {}), "tuning": d.get("decoder_tuning"), "device": device, "decoder": d["decoder"], "backend": d["decoder_backend"], "batch_size": batch,
           "threads": threads, "images_per_s": rate, "slowest_stage": s.get("slowest_stage"),
           "h2d_bytes_per_image": (s.get("encoded_bytes", 0) if ld.describe()["decoder"] != "cpu"
                                   else s.get("h2d_bytes", 0)) / max(s.get("images", 1), 1) if cuda else 0,
           "median_stage_ms": {k: v * 1e3 for k, v in s.get("median_s", {}).items()},
           **({"detours": d["decoder_detours"]} if d.get("decoder_detours") else {}),
           **({"engine_detours": engine_detours} if engine_detours else {})}
    if cuda:
        from gpudecode.bench.common import device_memory

        # torch's count misses nvImageCodec's pool, DALI and nvJPEG: the driver's beside it
        out["gpu_memory"] = device_memory(free_before)
        out["gpu_stage_ms"] = {k: v * 1e3 for k, v in s.get("gpu_median_s", {}).items()}
    ld.close()
    return out


def split_engines(device: str) -> list[str]:
    """The engines the split decoder ("auto" on CUDA) is made of here, by name (on the
    CPU, the rehearsal's: the CPU decoder and nvImageCodec's CPU build, where it imports)."""
    from gpudecode.decode import available, make_decoder
    from gpudecode.decode.split import SplitDecoder

    if not device.startswith("cuda"):
        return ["cpu"] + (["nvimgcodec"] if available("nvimgcodec")[0] else [])
    dec = make_decoder("split", device=device, num_threads=1, max_pixels=0)
    names = [e.name for e in dec.engines] if isinstance(dec, SplitDecoder) else [dec.name]
    dec.close()
    return names


def engine_runs(shards, *, device: str, batch: int, threads: list[int], images: int) -> list[dict]:
    """Each engine of the split alone ({engine: 1}: the same code path as inside the split)
    and all of them together, at each thread count, in one call: the split's rate against
    the sum of the engines' separate rates (its ceiling) and the best engine alone."""
    engines = split_engines(device)
    out = []
    for t in threads:
        alone = {}
        for name in engines:
            print(f"gpu bench: engine {name} alone, {t} threads, batch {batch}", flush=True)
            try:
                r = loader_run(shards, device=device, decoder={name: 1.0}, batch=batch, threads=t)
                alone[name] = r["images_per_s"]
                _said({"threads": t, "engine": name, "alone_images_per_s": r["images_per_s"]})
            except Exception as e:  # reported; the other runs go on
                out.append({"threads": t, "engine": name, "error": repr(e)})
        print(f"gpu bench: every engine at once ({', '.join(engines)}), {t} threads", flush=True)
        row: dict = {"threads": t, "batch_size": batch, "images": images, "alone": alone,
                     "ceiling": sum(alone.values()), "best_alone": max(alone.values(), default=0.0)}
        try:
            r = loader_run(shards, device=device, decoder=tuple(engines) if len(engines) > 1 else "auto",
                           batch=batch, threads=t)
            row.update(split=r["images_per_s"], shares={k: v["share"] for k, v in r.get("engines", {}).items()},
                       idle={k: v["idle_fraction"] for k, v in r.get("engines", {}).items()},
                       slowest_stage=r.get("slowest_stage"))
            row["of_ceiling"] = row["split"] / row["ceiling"] if row["ceiling"] else 0.0
            row["of_best"] = row["split"] / row["best_alone"] if row["best_alone"] else 0.0
        except Exception as e:
            row["error"] = repr(e)
        if device.startswith("cuda") and len(engines) > 1:  # decoder="auto": the subset of engines tuned
            tournament = 3 * (2 ** len(engines) - 1)  # (batches: every subset, 3 each, before the timed epoch)
            epochs = 2 + -(-tournament // max(1, images // batch))
            print(f"gpu bench: decoder='auto' (the engines tuned), {t} threads, {epochs} epochs", flush=True)
            try:
                r = loader_run(shards, device=device, decoder="auto", batch=batch, threads=t, epochs=epochs)
                row.update(auto=r["images_per_s"], auto_tuning=r.get("tuning"))
                row["auto_of_best"] = row["auto"] / row["best_alone"] if row["best_alone"] else 0.0
            except Exception as e:
                row["auto_error"] = repr(e)
        out.append(_said(row))
    return out


def _said(row: dict) -> dict:
    """`row` printed as one line as soon as it is measured (a call cut by its time limit
    before the report is written still leaves it in the log), and returned."""
    print("gpu bench: measured " + json.dumps(row, default=str), flush=True)
    return row


def resident_runs(shards, *, device: str, threads: int, cifar: int) -> list[dict]:
    """The set kept resident (issue 55): a CIFAR-sized set (32x32 PNG shards) with
    RandomCrop(32, padding=4) + flip + Normalize at batch 1024, and the bench's JPEGs
    precached at 256 with RandomResizedCrop(224) + flip + ColorJitter + Normalize at batch
    256, each with keep="gpu" on CUDA (keep="ram" without one), img/s of the epochs after
    the first (which fills the store), and the image bytes uploaded in them; on CUDA the
    256-pixel set with keep="ram" too (the tier of sets of 8-128 GB: each batch's windows
    gathered into the upload's staging and uploaded)."""
    from gpudecode import Loader
    from .resident import cifar_set, epochs_rate
    from .tensors import make_tensor_shards

    cuda = device.startswith("cuda")
    main: Literal["gpu", "ram"] = "gpu" if cuda else "ram"
    _, cifar_shards, cifar_tf = cifar_set(cifar, OUT)
    at256 = make_tensor_shards(shards, "256", 256, "none")
    name256 = "precached at 256, RRC(224) + flip + ColorJitter + Normalize"
    runs: list[tuple[str, list[str], Any, int, Literal["gpu", "ram"]]] = [
        ("CIFAR-sized 32x32, RandomCrop(32, pad 4) + flip + Normalize", cifar_shards, cifar_tf, 1024, main),
        (name256, at256, tf(), 256, main)] + ([(name256, at256, tf(), 256, "ram")] if cuda else [])
    out = []
    for name, urls, transform, batch, keep in runs:
        print(f"gpu bench: resident ({keep}) {name}, batch {batch}", flush=True)
        try:
            with Loader(urls, batch_size=batch, transform=transform, device=device, num_workers=threads, seed=0,
                        keep=keep) as ld:
                rate, first = epochs_rate(ld, 3)
                summary = ld.stats.summary()
                # where a batch's time goes, host stages and the GPU's own (the kernel's share of a
                # resident batch is what says whether the host or the GPU binds)
                out.append(_said({"set": name, "keep": keep, "device": device, "batch_size": batch,
                                  "threads": threads, "images_per_s": rate, "first_epoch_s": first,
                                  "store": ld.describe()["keep"], "h2d_bytes_last_epoch": summary.get("h2d_bytes", 0),
                                  "slowest_stage": summary.get("slowest_stage"),
                                  "median_stage_ms": {k: v * 1e3 for k, v in summary.get("median_s", {}).items()},
                                  "gpu_stage_ms": {k: v * 1e3 for k, v in summary.get("gpu_median_s", {}).items()}}))
        except Exception as e:  # reported; the other runs go on
            out.append({"set": name, "keep": keep, "device": device, "batch_size": batch, "error": repr(e)})
    return out


def png_shards(shards: list[str]) -> list[str]:
    """The bench's JPEG set as PNG shards (each image decoded by Pillow, saved at zlib
    level 6, on every core: Pillow's zlib releases the GIL, and one core takes over a
    minute for a thousand photographs, much of a GPU call), made once beside it."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    from gpudecode.io.reader import ShardReader
    from gpudecode.io.writer import ShardWriter

    root = Path(shards[0]).parent / "png"
    done = sorted(str(p) for p in root.glob("png-*.tar"))
    if done:
        return done
    root.mkdir(exist_ok=True)

    def as_png(sample) -> bytes:
        b = io.BytesIO()
        Image.open(io.BytesIO(sample.fields["jpg"])).save(b, format="PNG", compress_level=6)
        return b.getvalue()

    samples = list(ShardReader(shards, shuffle=False, num_threads=1))
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool, \
            ShardWriter(str(root / "png-%06d.tar"), maxcount=256) as w:
        for s, png in zip(samples, pool.map(as_png, samples)):
            w.write({"__key__": s.key, "png": png, "cls": s.fields["cls"]})
    return list(w.shards)


def png_runs(shards, *, device: str, batch: int, threads: int) -> list[dict]:
    """PNG on the GPU path (issue 56): the bench's images as PNG through the two-halves
    engine (decoder=("png",): nvCOMP's inflate and the CUDA unfilter kernel on a GPU; zlib
    and the kernel's CPU twin without one) against the CPU decoder (on the threads), and the
    two splitting each batch (decoder=("png", "cpu"): the GPU's halves and the host's cores
    at once), the training recipe, img/s of the second epoch; the JPEG figure is the runs'
    and engines' tables'."""
    out = []
    pngs = png_shards(shards)
    for label, dec in (("the CPU decoder on the CPU threads (decoder='cpu')", "cpu"),
                       ("two halves: inflate + unfilter kernel (decoder=('png',))", ("png",)),
                       ("both at once, each batch split by their rates (decoder=('png', 'cpu'))", ("png", "cpu"))):
        print(f"gpu bench: PNG, {label}, {threads} threads, batch {batch}", flush=True)
        try:
            r = loader_run(pngs, device=device, decoder=dec, batch=batch, threads=threads)
            out.append(_said({"decoder": label, "backend": r["backend"], "device": device, "batch_size": batch,
                              "threads": threads, "images_per_s": r["images_per_s"],
                              "slowest_stage": r["slowest_stage"], "median_stage_ms": r["median_stage_ms"],
                              "detours": r.get("detours") or r.get("engine_detours", {}).get("png"),
                              **({"shares": {name: e.get("share") for name, e in r["engines"].items()}}
                                 if r.get("engines") else {})}))
        except Exception as e:  # reported; the other runs go on
            out.append({"decoder": label, "device": device, "batch_size": batch, "error": repr(e)})
    return out


def recipe_runs(shards, *, decoders, batch, threads, device="cuda") -> list[dict]:
    """The reference recipe, DINO's multi-crop and ColorJitter before the crop (the first
    pass: transforms.first) through the Loader on `device`, per decoder."""
    import torch

    from gpudecode import Loader
    from gpudecode import transforms as T
    from .recipes import as_written, dino_views, mix, reference_recipe

    out = []
    for d in decoders:
        for name, kw in (("reference (TA, erasing, MixUp/CutMix)",
                          dict(transform=T.Compose.from_torchvision(reference_recipe()), batch_transform=mix())),
                         ("DINO 2x224 + 6x96", dict(transform=[T.Compose.from_torchvision(v) for v in dino_views()])),
                         ("ColorJitter first, RRC(224), flip", dict(transform=T.Compose.from_torchvision(next(
                             v for k, v in as_written().items() if k.startswith("ColorJitter first")))))):
            cuda = device.startswith("cuda")
            try:
                ld = Loader(shards, batch_size=batch, device=device, decoder=d, num_workers=threads, seed=0, **kw)
                rate = 0.0
                for epoch in range(2):  # the first loads the kernels
                    ld.set_epoch(epoch)
                    if cuda:
                        torch.cuda.synchronize()
                    t = time.perf_counter()
                    n = sum(len(b.keys) for b in ld)
                    if cuda:
                        torch.cuda.synchronize()
                    rate = n / (time.perf_counter() - t)
                out.append({"recipe": name, "device": device, "decoder": ld.describe()["decoder"],
                            "backend": ld.describe()["decoder_backend"], "batch_size": batch, "threads": threads,
                            "images_per_s": rate})
                ld.close()
            except Exception as e:  # reported (and the exit status says so), the other runs go on
                out.append({"recipe": name, "device": device, "decoder": d, "batch_size": batch, "error": repr(e)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=COUNT, default=4096, help="images in the dataset (without CUDA: at most 256)")
    ap.add_argument("--batch-sizes", type=COUNTS, default="64,128,256")
    ap.add_argument("--threads", type=COUNT, default=6, help="CPU threads for gpudecode and the classic workers")
    ap.add_argument("--engine-threads", type=COUNTS, default="2,4,7,14",
                    help="thread counts the split decoder is measured at, beside each engine alone (without CUDA: 2)")
    ap.add_argument("--sections", default="runs,engines,resident,png,recipes",
                    help="which tables to measure, of runs (each decoder and batch, the CPU path, the classic "
                         "DataLoader), engines, resident, png, recipes (a short GPU call measures a few)")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    sections = {s.strip() for s in a.sections.split(",") if s.strip()}
    unknown = sections - {"runs", "engines", "resident", "png", "recipes"}
    if unknown or not sections:
        ap.error(f"--sections: {', '.join(sorted(unknown)) or 'none given'}: choose from runs, engines, resident, "
                 "png, recipes")
    from gpudecode.decode import GPU_ORDER, available

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = min(a.threads, os.cpu_count() or 1)
    gpu = gpu_facts()
    cuda = gpu["cuda"]
    device = "cuda" if cuda else "cpu"
    batches = list(a.batch_sizes)
    images = a.images if cuda else min(a.images, 256)
    if not cuda:  # the rehearsal: the same pipelines, on the CPU, small
        print("no CUDA device (torch.cuda.is_available() is False): GPU figures are not measured here; the same "
              f"pipelines run on the CPU ({images} images, batch {min(batches[0], 32)}), as a rehearsal", flush=True)
        batches = [min(batches[0], 32)]
    shards, folder = build(images)
    report: dict = {"machine": machine(), "gpu": gpu, "versions": versions(), "threads": threads,
                    "images": images, "device": device, "runs": []}
    decoders = ["cpu"] + [d for d in GPU_ORDER if available(d)[0]] + (["auto"] if cuda else [])  # auto: every engine
    report["unavailable"] = {d: available(d)[1] for d in GPU_ORDER if not available(d)[0]}
    classic = 0.0
    for name in ("engines", "resident", "png", "recipes"):
        report[name] = []
    try:
        if "runs" in sections:
            for d in decoders:
                for b in batches:
                    print(f"gpu bench: Loader on {device}, decoder {d}, batch {b}", flush=True)
                    try:
                        report["runs"].append(loader_run(shards, device=device, decoder=d, batch=b, threads=threads))
                    except Exception as e:  # a backend that fails here is reported (and makes the exit status 1)
                        report["runs"].append({"device": device, "decoder": d, "batch_size": b, "error": repr(e)})
            if cuda:
                report["runs"].append(loader_run(shards, device="cpu", decoder="cpu", batch=batches[0], threads=threads))
            print("gpu bench: the classic DataLoader", flush=True)
            go = run_torchvision(folder, threads, batches[0], jitter=True)
            go()
            t = time.perf_counter()
            n = go()
            report["runs"].append({"device": "cpu", "decoder": "torchvision classic DataLoader", "threads": threads,
                                   "batch_size": batches[0], "images_per_s": n / (time.perf_counter() - t)})
            classic = report["runs"][-1]["images_per_s"]
        report["engines"] = engine_runs(shards, device=device, batch=batches[-1], images=images,
                                        threads=list(a.engine_threads) if cuda else [2]) if "engines" in sections else []
        report["resident"] = (resident_runs(shards, device=device, threads=threads, cifar=50000 if cuda else 2000)
                              if "resident" in sections else [])
        report["png"] = (png_runs(shards, device=device, batch=batches[-1], threads=threads)
                         if "png" in sections else [])
        if "recipes" in sections:
            print("gpu bench: recipes", flush=True)
        report["recipes"] = [] if "recipes" not in sections else recipe_runs(shards, decoders=decoders[:2] + (["auto"] if cuda else []),
                                        batch=128 if cuda else batches[0],
                                        threads=threads, device=device)
    except KeyboardInterrupt:  # (a call's time limit, SIGINT first: what was measured is still written)
        report["cut"] = "interrupted: the sections not in this report were not measured (or not all of them)"
        print(f"gpu bench: {report['cut']}", flush=True)
    if cuda and classic:
        best = max((r for r in report["runs"] if r.get("device") == "cuda" and "images_per_s" in r),
                   key=lambda r: r["images_per_s"], default=None)
        if best is not None:
            report["best"] = {**best, "x_classic": best["images_per_s"] / classic,
                              "target_7200": best["images_per_s"] >= 7200 and best["threads"] <= 6,
                              "target_10x": best["images_per_s"] >= 10 * classic}
    failed = [r for r in report["runs"] + report["recipes"] + report["engines"] + report["resident"] + report["png"]
              if "error" in r]
    report["failed"] = len(failed)
    (out / "gpu.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu.md").write_text("\n".join(render(report)) + "\n")
    print("\n".join(render(report)), flush=True)
    return 1 if failed or report.get("cut") else 0


def render(report: dict) -> list[str]:
    """gpu.md's lines."""
    gpu = report["gpu"]
    m = report["machine"]
    lines = [f"# bench/gpu.py: {gpu.get('name', 'no CUDA device')}", ""]
    if not gpu["cuda"]:
        lines += ["No CUDA device: every figure below was measured on the CPU (a rehearsal of the GPU run), "
                  "none is a GPU figure.", ""]
    lines += [f"{m.get('cpu')}, {m.get('cores')} cores; torch {m.get('versions', {}).get('torch')}; "
              f"{json.dumps(report['versions'])}; GPU {json.dumps(gpu)}", ""]
    if report.get("cut"):
        lines += [f"**{report['cut']}**", ""]
    if report.get("unavailable"):
        lines += ["not measured: " + "; ".join(f"{d} ({why})" for d, why in report["unavailable"].items()), ""]
    if report["runs"]:  # (a call of other sections has none)
        lines += ["| device | decoder | what decoded | batch | threads | img/s | slowest stage | H2D B/img | "
                  "torch peak MB | device used MB (driver) |",
                  "|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in report["runs"]:
        if "error" in r:
            lines.append(f"| {r['device']} | {r['decoder']} | | {r['batch_size']} | | error: {r['error'][:120]} | | "
                         "| | |")
            continue
        lines.append(f"| {r['device']} | {r['decoder']} | {r.get('backend') or ''} | {r.get('batch_size', '')} | "
                     f"{r.get('threads', '')} | {r['images_per_s']:.0f} | {r.get('slowest_stage') or ''} | "
                     f"{r.get('h2d_bytes_per_image', 0):.0f} | "
                     f"{r.get('gpu_memory', {}).get('torch_peak_allocated_mb', 0):.0f} | "
                     f"{r.get('gpu_memory', {}).get('driver_used_mb', 0):.0f} |")
    if "best" in report:
        b = report["best"]
        lines += ["", f"best: {b['decoder']} batch {b['batch_size']}: {b['images_per_s']:.0f} img/s, "
                      f"{b['x_classic']:.1f}x the classic DataLoader; target 7,200 img/s with <= 6 threads: "
                      f"{'met' if b['target_7200'] else 'NOT met'}; target 10x: {'met' if b['target_10x'] else 'NOT met'}"]
    if report.get("engines"):
        lines += ["", "Every engine at once (the split decoder) against each engine alone, in one run; the ceiling is "
                  "the sum of the engines' separate rates:", "",
                  "| threads | each engine alone, img/s | ceiling | split img/s | of ceiling | of best alone | "
                  "shares | idle |", "|---:|---|---:|---:|---:|---:|---|---|"]
        for r in report["engines"]:
            if "alone" not in r:
                lines.append(f"| {r['threads']} | {r.get('engine', '')}: error {r['error'][:100]} | | | | | | |")
                continue
            alone = ", ".join(f"{k} {v:.0f}" for k, v in r["alone"].items())
            if "split" not in r:
                lines.append(f"| {r['threads']} | {alone} | {r['ceiling']:.0f} | error: {r.get('error', '')[:100]} "
                             "| | | | |")
                continue
            shares = ", ".join(f"{k} {v:.0%}" for k, v in r["shares"].items())
            idle = ", ".join(f"{k} {v:.0%}" for k, v in r["idle"].items())
            lines.append(f"| {r['threads']} | {alone} | {r['ceiling']:.0f} | {r['split']:.0f} | "
                         f"{r['of_ceiling']:.2f} | {r['of_best']:.2f} | {shares} | {idle} |")
        tuned = [r for r in report["engines"] if "auto" in r or "auto_error" in r]
        if tuned:
            lines += ["", "decoder='auto' (which engines decode is measured: every subset a few batches, then the "
                      "fastest):", "", "| threads | img/s | of best alone | engines used | each subset measured, img/s |",
                      "|---:|---:|---:|---|---|"]
            for r in tuned:
                if "auto" not in r:
                    lines.append(f"| {r['threads']} | error: {r['auto_error'][:100]} | | | |")
                    continue
                t = r.get("auto_tuning") or {}
                measured = ", ".join(f"{k} {v:.0f}" for k, v in (t.get("measured_images_per_s") or {}).items())
                lines.append(f"| {r['threads']} | {r['auto']:.0f} | {r['auto_of_best']:.2f} | {t.get('using')} | "
                             f"{measured} |")
    if report.get("png"):
        lines += ["", "PNG (the same images saved as PNG, level 6), the training recipe:", "",
                  "| decoder | what decoded | device | batch | threads | img/s | slowest stage |",
                  "|---|---|---|---:|---:|---:|---|"]
        for r in report["png"]:
            rate = f"{r['images_per_s']:.0f}" if "images_per_s" in r else f"error: {r['error'][:100]}"
            lines.append(f"| {r['decoder']} | {r.get('backend', '')} | {r['device']} | {r['batch_size']} | "
                         f"{r.get('threads', '')} | {rate} | {r.get('slowest_stage', '')} |")
        for r in report["png"]:  # (where images went elsewhere, and nvCOMP's sizes kept: decode/png.py)
            if r.get("detours"):
                lines.append(f"\n{r['decoder']}: detours {r['detours']}")
            if r.get("shares"):
                lines.append(f"\n{r['decoder']}: shares of the images " +
                             ", ".join(f"{name} {share:.0%}" for name, share in r["shares"].items()))
    if report.get("resident"):
        lines += ["", "The set kept resident (keep=): epochs after the first, which fills the store:", "",
                  "| set | keep | device | batch | img/s | store | image bytes up, last epoch | median ms a batch "
                  "(host; GPU) |", "|---|---|---|---:|---:|---|---:|---|"]
        for r in report["resident"]:
            rate = f"{r['images_per_s']:.0f}" if "images_per_s" in r else f"error: {r['error'][:100]}"
            store = r.get("store", {})
            stages = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("median_stage_ms") or {}).items())
            gpu_stages = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("gpu_stage_ms") or {}).items())
            lines.append(f"| {r['set']} | {r['keep']} | {r['device']} | {r['batch_size']} | {rate} | "
                         f"{store.get('tier')} {store.get('bytes', 0) / 2**20:.0f} MiB | "
                         f"{r.get('h2d_bytes_last_epoch', 0)} | {stages}{'; ' + gpu_stages if gpu_stages else ''} |")
    if report.get("recipes"):
        lines += ["", "| recipe | device | decoder | batch | threads | img/s |", "|---|---|---|---:|---:|---:|"]
        for r in report["recipes"]:
            rate = f"{r['images_per_s']:.0f}" if "images_per_s" in r else f"error: {r['error'][:120]}"
            lines.append(f"| {r['recipe']} | {r.get('device', '')} | {r['decoder']} | {r['batch_size']} | "
                         f"{r.get('threads', '')} | {rate} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
