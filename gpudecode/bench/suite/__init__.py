"""The measurements behind bench/RESULTS.md, one module each, every alternative measured
in the same run: `reader` (ShardReader against tarfile and webdataset), `kernels` (the
fused kernel and each op against torchvision), `loader` (the training pipeline against
torchvision's DataLoader and DALI), `formats` (JPEG, PNG and tensor shards through the
Loader), `tensors` (tensor shards, precache, the Python per sample, the ceilings),
`recipes` (today's training recipes), `resident` (the set kept in RAM against streaming,
and a CIFAR-sized set against torchvision's CIFAR10), `gpu` (the GPU path; `make gpu-check`).

Each runs as `python bench/<name>.py [args]` (a thin caller) or `python -m
gpudecode.bench.suite.<name>`, and writes its figures to <out>/<name>.json, <out> being
$GPUDECODE_BENCH_OUT, else ./bench/_out. Their datasets are made once in <out> and kept.
The helpers they share (timing, machine facts, pipelines, datasets) are gpudecode.bench's.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..._args import COUNT
from ..common import write_json

OUT = Path(os.environ.get("GPUDECODE_BENCH_OUT") or Path("bench") / "_out").resolve()


def save(name: str, result: dict) -> Path:
    """<out>/<name>.json"""
    return write_json(OUT / f"{name}.json", result)


def pipeline_args(doc: str | None, images: int) -> argparse.ArgumentParser:
    """The arguments every pipeline benchmark takes: --images (default `images`),
    --threads (2), --batch (64), --repeat (3); a suite adds its own."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--images", type=COUNT, default=images)
    ap.add_argument("--threads", type=COUNT, default=2)
    ap.add_argument("--batch", type=COUNT, default=64)
    ap.add_argument("--repeat", type=COUNT, default=3)
    return ap
