"""`gpudecode bench formats`: images/s and MB/s for each format x pipeline, in one run,
same transforms (common.TRAIN), same thread/worker count; median and spread of repeated
epochs after a warm-up epoch; ratios against torchvision's classic pipeline."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

from .common import TRAIN, describe_cpu, machine, spread, table, write_json
from .data import load
from .pipelines import NAMES, available, build


def run_formats(data: str | os.PathLike, out: str | os.PathLike, *, threads: int = 2, device: str = "cpu",
                batch: int = 64, repeat: int = 3, pipelines: Sequence[str] = NAMES, crop: int = 224,
                show_progress: bool = True) -> dict:
    """Measures every (format, pipeline) of the dataset at `data`; writes formats.json,
    formats.md and the plots into `out`; returns the JSON document."""
    from .common import progress

    root, desc = load(data)
    outdir = Path(out)
    unknown = [p for p in pipelines if p not in NAMES]
    if unknown:
        raise ValueError(f"unknown pipelines {unknown} (choose from {', '.join(NAMES)})")
    if threads < 1 or batch < 1 or repeat < 1:
        raise ValueError("threads, batch and repeat must be >= 1")
    from ..decode import check_device

    device = check_device(device)  # (cuda without a GPU: refused, not a run that measures nothing and exits 0)
    results: dict[str, dict] = {}
    skipped: dict[str, dict] = {}
    stats: dict[str, dict] = {}
    jobs = [(f, p) for f in desc["formats"] for p in pipelines]
    names = {"gpudecode": "gpudecode" + ("" if device == "cpu" else f" ({device})")}
    with progress(len(jobs) * (repeat + 1) * desc["count"], "bench formats", enabled=show_progress) as bar:
        for fmt, name in jobs:
            why = available(name, fmt, device if name in ("gpudecode", "dali") else "cpu")
            if why is not None:
                skipped.setdefault(fmt, {})[name] = why
                bar.update((repeat + 1) * desc["count"])
                continue
            pipe = build(name, root, desc, fmt, threads=threads, batch=batch,
                         device=device if name in ("gpudecode", "dali") else "cpu", crop=crop)
            rates = []
            try:
                for e in range(repeat + 1):  # epoch 0 warms up: workers start, kernels load, the page cache fills
                    bar.set_postfix_str(f"{fmt} {name} epoch {e}")
                    t = time.perf_counter()
                    n = 0
                    for images, _ in pipe.epoch(e):
                        n += len(images)
                        bar.update(len(images))
                    dt = time.perf_counter() - t
                    if e:
                        rates.append(n / dt)
                if name == "gpudecode":
                    stats[fmt] = pipe.stats.summary()
            finally:
                pipe.close()
            r = spread(rates)
            r["mb_per_s"] = r["median"] * desc["bytes_per_image"][fmt] / 1e6
            r["label"] = names.get(name, pipe.name)
            results.setdefault(fmt, {})[name] = r
    ratios = {fmt: {name: r["median"] / rows["classic"]["median"] for name, r in rows.items()}
              for fmt, rows in results.items() if "classic" in rows}
    doc = {"command": "formats", "machine": machine(), "dataset": {**desc, "path": str(root)},
           "args": {"threads": threads, "device": device, "batch": batch, "repeat": repeat, "crop": crop,
                    "pipelines": list(pipelines)},
           "transforms": TRAIN, "img_per_s": results, "x_classic": ratios, "skipped": skipped,
           "gpudecode_stages": stats}
    outdir.mkdir(parents=True, exist_ok=True)
    write_json(outdir / "formats.json", doc)
    md = markdown(doc)
    (outdir / "formats.md").write_text(md + "\n")
    try:
        from .. import plots

        doc["plots"] = [plots.formats_figure(doc, outdir / "formats.png"),
                        plots.stages_figure(doc, outdir / "formats-stages.png"),
                        plots.datapath_figure(doc, outdir / "formats-datapath.png")]
        write_json(outdir / "formats.json", doc)
    except ImportError as e:
        doc["plots"] = f"no plots: {e} (pip install 'gpudecode[bench]')"
    return doc


def markdown(doc: dict) -> str:
    d = doc["dataset"]
    head = (f"{d['count']} images {d['size'][1]}x{d['size'][0]} per format; {doc['transforms']} to "
            f"{doc['args']['crop']}; batch {doc['args']['batch']}, {doc['args']['threads']} threads/workers; "
            f"median of {doc['args']['repeat']} epochs after a warm-up (min-max); "
            f"{describe_cpu(doc['machine'])}, GPU: {doc['machine']['gpu'] or 'none'}")
    rows = []
    for fmt, res in doc["img_per_s"].items():
        for name, r in res.items():
            ratio = doc["x_classic"].get(fmt, {}).get(name)
            # what an image costs: the run's threads (or workers) over its rate, and its stored size
            cost = doc["args"]["threads"] / r["median"] * 1e3 if r["median"] > 0 else float("nan")
            rows.append([fmt, r["label"], r["median"], f"{r['min']:,.0f}-{r['max']:,.0f}", r["mb_per_s"],
                         f"{cost:.2f}", f"{d['bytes_per_image'][fmt] / 1e3:,.1f}",
                         ratio if ratio is not None else None])
    out = head + "\n\n" + table(["format", "pipeline", "img/s", "spread", "MB/s", "core-ms/img", "kB/img",
                                  "x classic"], rows)
    for fmt, why in doc["skipped"].items():
        for name, reason in why.items():
            out += f"\n\nnot measured: {fmt} {name}: {reason}"
    for fmt, s in doc["gpudecode_stages"].items():
        med = s.get("median_s", {})
        parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in med.items())
        out += f"\n\ngpudecode stages, {fmt} (median per batch): {parts}; slowest: {s.get('slowest_stage')}"
    return out
