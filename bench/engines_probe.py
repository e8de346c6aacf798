"""Why every engine at once is no faster than the best engine alone (issue 53), measured:
the split decoder's contention, engine by engine, on a CUDA machine.

    python bench/engines_probe.py [--images 2048] [--threads 6,14] [--part all|direct|pairs|roi]

- direct: each engine's decoder called alone on one batch of 256 (no Loader), then two or
  three engines' decoders called at once from their own threads on their halves/thirds,
  and a pure-Python thread counting while an engine decodes (how much of the GIL a
  decode call holds: its count rate against an idle one's);
- pairs: the Loader with each pair of engines split, and all three with shares pinned to
  the engines' rates alone (the ideal split if nothing contended), at each --threads;
- threads: each GPU engine's decoder called alone on one batch with nvImageCodec given 1,
  2, 4, 8 and 14 CPU threads (the hardware engine alone got slower with more Loader
  threads on the H200: 9,684 img/s at 2, 8,564 at 14; is it nvImageCodec's own threads?);
- roi: the same engines alone and split with nvImageCodec's regions of interest on
  (GPUDECODE_NVIMGCODEC_ROI=1), in a child process; first each engine's ROI pixels against
  the CPU decoder's window (max abs difference, share of values off by more than 8).

Prints a table per part and writes engines_probe.json to --out. Without CUDA it says so
and exits 0 (no GPU figure is made up).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def requests(folder: str, n: int, seed: int = 0):
    """n JPEGs of the bench's set as a Requests batch, each with a RandomResizedCrop window."""
    import random

    import numpy as np
    from PIL import Image

    from gpudecode.decode import Requests

    files = sorted(Path(folder).rglob("*.jpg"))[:n]
    rng = random.Random(seed)
    datas, hs, ws, boxes = [], [], [], []
    for f in files:
        b = f.read_bytes()
        with Image.open(f) as im:
            w, h = im.size
        area = h * w * rng.uniform(0.08, 1.0)
        ch = max(1, min(h, int(round((area / rng.uniform(0.75, 1.33)) ** 0.5))))
        cw = max(1, min(w, int(round(area / ch))))
        boxes.append((rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw))
        datas.append(b)
        hs.append(h)
        ws.append(w)
    return Requests(datas, ["jpeg"] * len(datas), hs, ws, np.asarray(boxes, np.int64), [""] * len(datas),
                    [f.name for f in files])


def _sub(rq, rows):
    from gpudecode.decode import Requests

    return Requests([rq.datas[i] for i in rows], [rq.formats[i] for i in rows], [rq.heights[i] for i in rows],
                    [rq.widths[i] for i in rows], rq.boxes[rows], [rq.shards[i] for i in rows],
                    [rq.keys[i] for i in rows])


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(dec, rq, device: str, repeats=5) -> float:
    dec.decode(rq)
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dec.decode(rq)
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return len(rq) / best


def direct(folder: str, engines: list[str], threads: int, device: str = "cuda") -> dict:
    import numpy as np

    from gpudecode.decode import make_decoder

    rq = requests(folder, 256)
    decs = {e: make_decoder((e,), device=device, num_threads=threads, max_pixels=0) for e in engines}
    out: dict = {"alone": {e: _timed(d, rq, device) for e, d in decs.items()}}
    print("direct, each alone (img/s):", {k: round(v) for k, v in out["alone"].items()}, flush=True)

    def together(names):
        parts = np.array_split(np.arange(len(rq)), len(names))
        subs = [_sub(rq, p) for p in parts]
        for n, s in zip(names, subs):
            decs[n].decode(s)
        _sync(device)
        best = float("inf")
        for _ in range(5):
            bar = threading.Barrier(len(names) + 1)
            ts = []

            def work(n, s, bar=bar):
                bar.wait()
                decs[n].decode(s)

            th = [threading.Thread(target=work, args=(n, s)) for n, s in zip(names, subs)]
            for x in th:
                x.start()
            bar.wait()
            t = time.perf_counter()
            for x in th:
                x.join()
            _sync(device)
            ts.append(time.perf_counter() - t)
            best = min(best, ts[-1])
        return len(rq) / best

    combos = list(dict.fromkeys([tuple(engines)] + [(a, b) for i, a in enumerate(engines) for b in engines[i + 1:]]))
    if "nvimgcodec-hw" in decs:  # two hardware-engine decoders at once: one engine, or a lock?
        decs["nvimgcodec-hw#2"] = make_decoder(("nvimgcodec-hw",), device=device, num_threads=threads, max_pixels=0)
        combos.append(("nvimgcodec-hw", "nvimgcodec-hw#2"))
    out["together"] = {}
    for c in combos:
        r = together(list(c))
        out["together"][" + ".join(c)] = r
        print(f"direct, {' + '.join(c)} at once, an equal part each: {r:,.0f} img/s", flush=True)

    def spinner_rate(seconds=None, dec=None):
        count = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1

        th = threading.Thread(target=spin)
        th.start()
        t = time.perf_counter()
        if dec is None:
            time.sleep(seconds)
        else:
            for _ in range(5):
                dec.decode(rq)
            _sync(device)
        el = time.perf_counter() - t
        stop.set()
        th.join()
        return count[0] / el

    idle = spinner_rate(1.0)
    out["gil"] = {"idle_counts_per_s": idle}
    for e in engines:
        r = spinner_rate(dec=decs[e])
        out["gil"][e] = r / idle
        print(f"direct, a Python thread's count rate while {e} decodes: {r / idle:.2f} of idle", flush=True)
    for d in decs.values():
        d.close()
    return out


def nvimgcodec_threads(folder: str, engines: list[str], counts=(1, 2, 4, 8, 14)) -> dict:
    """Each engine's decoder alone on one batch of 256, by nvImageCodec's CPU threads."""
    from gpudecode.decode import make_decoder

    rq = requests(folder, 256)
    out: dict = {}
    for e in engines:
        out[e] = {}
        for n in counts:
            dec = make_decoder((e,), device="cuda", num_threads=n, max_pixels=0)
            out[e][n] = _timed(dec, rq, "cuda")
            dec.close()
        print(f"threads, {e} alone by nvImageCodec's CPU threads (img/s):",
              {k: round(v) for k, v in out[e].items()}, flush=True)
    return out


def pairs(shards: list[str], engines: list[str], threads: list[int]) -> list[dict]:
    from gpudecode.bench.suite.gpu import loader_run

    rows = []
    for t in threads:
        alone = {}
        for e in engines:
            alone[e] = loader_run(shards, device="cuda", decoder={e: 1.0}, batch=256, threads=t)["images_per_s"]
        total = sum(alone.values())
        specs: list = [(a, b) for i, a in enumerate(engines) for b in engines[i + 1:]]
        specs.append({e: r / total for e, r in alone.items()})
        row = {"threads": t, "alone": alone, "runs": {}}
        for s in specs:
            label = ("pinned " + ", ".join(f"{k} {v:.2f}" for k, v in s.items())) if isinstance(s, dict) else " + ".join(s)
            try:
                r = loader_run(shards, device="cuda", decoder=s, batch=256, threads=t)
                row["runs"][label] = {"images_per_s": r["images_per_s"], "engines": r.get("engines", {}),
                                      "stages_ms": r.get("median_stage_ms"), "gpu_stages_ms": r.get("gpu_stage_ms")}
                print(f"pairs, {t} threads, {label}: {r['images_per_s']:,.0f} img/s (alone: "
                      f"{ {k: round(v) for k, v in alone.items()} }); stages {r.get('median_stage_ms')}", flush=True)
            except Exception as ex:  # reported, the others go on
                row["runs"][label] = {"error": repr(ex)}
                print(f"pairs, {t} threads, {label}: error {ex!r}", flush=True)
        rows.append(row)
    return rows


def roi_pixels(folder: str, engines: list[str], device: str = "cuda") -> dict:
    import numpy as np

    from gpudecode.decode import make_decoder

    rq = requests(folder, 64, seed=1)
    ref = make_decoder("cpu", device="cpu", num_threads=2, max_pixels=0).decode(rq)
    out = {}
    for e in engines:
        if e == "cpu":
            continue
        dec = make_decoder((e,), device=device, num_threads=2, max_pixels=0)
        got = dec.decode(rq)
        _sync(device)
        worst, off = 0, 0.0
        for k in range(len(rq)):
            def img(d, k):  # the requested box, which boxes[k] places in the decoded region
                t, l, h, w = (int(v) for v in d.boxes[k])
                sy, sx, sc = (int(v) for v in d.strides[k])
                start = int(d.offsets[k]) + t * sy + l * sx
                return d.pixels[start:].as_strided((h, w, 3), (sy, sx, sc)).cpu().numpy().astype(np.int16)
            a, b = img(got, k), img(ref, k)
            diff = np.abs(a - b)
            worst = max(worst, int(diff.max()))
            off += float((diff > 8).mean()) / len(rq)
        out[e] = {"max_abs": worst, "share_off_by_more_than_8": off, "backend": dec.backend}
        print(f"roi pixels, {e} ({dec.backend}) against the CPU decoder's windows: max |diff| {worst}, "
              f"{off:.4%} of values off by more than 8", flush=True)
        dec.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--threads", default="6,14")
    ap.add_argument("--part", default="all", choices=["all", "direct", "pairs", "roi", "threads"])
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench/_out")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured (this probe measures GPU engines only)")
        return 0
    from gpudecode.bench.suite.gpu import split_engines
    from gpudecode.bench.suite.loader import build

    threads = [int(x) for x in a.threads.split(",")]
    shards, folder = build(a.images)
    engines = split_engines("cuda")
    report: dict = {"engines": engines, "gpu": torch.cuda.get_device_name(), "roi_env": os.environ.get("GPUDECODE_NVIMGCODEC_ROI")}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "engines_probe_roi.json" if os.environ.get("GPUDECODE_NVIMGCODEC_ROI") == "1" else "engines_probe.json"

    def save():
        (out / name).write_text(json.dumps(report, indent=1, default=str))

    if a.part in ("all", "direct"):
        report["direct"] = direct(folder, engines, threads[0])
        save()
    if a.part == "roi" and os.environ.get("GPUDECODE_NVIMGCODEC_ROI") == "1":
        report["roi_pixels"] = roi_pixels(folder, engines)
        save()
        report["direct"] = direct(folder, engines, threads[0])
        save()
        report["pairs"] = pairs(shards, engines, threads[:1])
        save()
    elif a.part == "roi":
        return subprocess.call([sys.executable, *sys.argv], env=dict(os.environ, GPUDECODE_NVIMGCODEC_ROI="1"))
    if a.part in ("all", "threads"):
        report["threads"] = nvimgcodec_threads(folder, [e for e in engines if e != "cpu"])
        save()
    if a.part in ("all", "pairs"):
        report["pairs"] = pairs(shards, engines, threads)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
