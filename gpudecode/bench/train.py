"""`gpudecode bench train` and `gpudecode bench profile`: a trainer consuming batches.

train: the classic DataLoader with 1, 2, ... W workers and the gpudecode Loader, each
under the same step (a fixed time, or a real resnet18 forward/backward on a GPU):
per-batch wait, the fraction of time the trainer waited, stalls and their period (the
worker-dependency pattern: every W-th batch waits for a worker), side by side.
profile: gpudecode.profile on the classic pipeline and on gpudecode, its summaries and
"life of a batch" plots.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from .common import TRAIN, machine, table, write_json
from .data import load
from .pipelines import ClassicPipeline, GpudecodePipeline


def model_step(model: str, device: str = "cuda") -> Callable[[Any], None]:
    """A real training step: forward, backward and an SGD update of a torchvision model
    on a CUDA device, synchronized (loss.item()) so its time is the step's.

    Raises:
        ValueError: no CUDA device, or an unknown model.
    """
    import torch
    import torchvision

    if not torch.cuda.is_available():
        raise ValueError(f"--model {model} runs a real step on a GPU, and there is none here: use --step-ms to "
                         "simulate the step instead")
    try:
        net = getattr(torchvision.models, model)(num_classes=1000).to(device)
    except AttributeError:
        raise ValueError(f"unknown torchvision model {model!r}") from None
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(batch: Any) -> None:
        images, labels = batch[0], batch[1]
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True) % 1000
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(images), labels)
        loss.backward()
        opt.step()
        loss.item()

    return step


def _configs(root: Path, desc: dict, fmt: str, workers: Sequence[int], threads: int, batch: int, device: str):
    for w in workers:
        yield f"classic, {w} workers", w, lambda w=w: ClassicPipeline(root, desc, fmt, w, batch)
    yield f"gpudecode, {threads} threads", threads, lambda: GpudecodePipeline(root, desc, fmt, threads, batch, device)


def run_train(data: str | os.PathLike, out: str | os.PathLike, *, fmt: str = "jpg", step_ms: float = 50.0,
              model: str | None = None, workers: Sequence[int] = (1, 2), threads: int | None = None,
              batch: int = 64, batches: int | None = None, device: str = "cpu") -> dict:
    """Runs the trainer over each configuration; writes train.json, train.md and plots."""
    from ..profiling import profile

    root, desc = load(data)
    if fmt not in desc["formats"]:
        raise ValueError(f"the dataset has no {fmt!r} images (it has {', '.join(desc['formats'])})")
    if not workers or min(workers) < 0:
        raise ValueError("workers must be a list of counts >= 0")
    threads = threads or max(1, max(workers))
    step: Any = model_step(model) if model else step_ms / 1000.0
    reports = {}
    for label, w, make in _configs(root, desc, fmt, workers, threads, batch, device):
        pipe = make()
        try:
            rep = profile(pipe.iterable, step=step, batches=batches, warmup=1)
        finally:
            pipe.close()
        reports[label] = {"workers": w, **rep.to_dict(), "summary": rep.summary()}
    doc = {"command": "train", "machine": machine(), "dataset": {**desc, "path": str(root)}, "format": fmt,
           "transforms": TRAIN, "step": f"{model} forward/backward on {device}" if model else f"{step_ms:g} ms (sleep)",
           "args": {"workers": list(workers), "threads": threads, "batch": batch, "batches": batches},
           "runs": reports}
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    write_json(outdir / "train.json", doc)
    (outdir / "train.md").write_text(train_markdown(doc) + "\n")
    try:
        from .. import plots

        doc["plots"] = [plots.train_figure(doc, outdir / "train.png")]
        write_json(outdir / "train.json", doc)
    except ImportError as e:
        doc["plots"] = f"no plots: {e}"
    return doc


def train_markdown(doc: dict) -> str:
    rows = []
    for label, r in doc["runs"].items():
        period = r["period"]
        rows.append([label, r["images_per_s"], r["wait_fraction"] * 100, sorted(r["wait"])[len(r["wait"]) // 2] * 1e3,
                     len(r["stalls"]), f"every {period}" if period else None, r["bound"]])
    head = (f"{doc['format']} images, {doc['transforms']}; step {doc['step']}; batch {doc['args']['batch']}; "
            f"{doc['machine']['cpu']}, {doc['machine']['cores']} cores")
    return head + "\n\n" + table(["pipeline", "img/s", "% time waiting", "median wait ms", "stalls", "period",
                                  "bound"], rows)


def run_profile(data: str | os.PathLike, out: str | os.PathLike, *, fmt: str = "jpg", step_ms: float = 20.0,
                threads: int = 2, batch: int = 64, batches: int | None = None, device: str = "cpu") -> dict:
    """gpudecode.profile on the classic pipeline (threads workers) and on gpudecode."""
    from ..profiling import profile

    root, desc = load(data)
    if fmt not in desc["formats"]:
        raise ValueError(f"the dataset has no {fmt!r} images (it has {', '.join(desc['formats'])})")
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    runs = {}
    plots_made = []
    for key, make in (("classic", lambda: ClassicPipeline(root, desc, fmt, threads, batch)),
                      ("gpudecode", lambda: GpudecodePipeline(root, desc, fmt, threads, batch, device))):
        pipe = make()
        try:
            rep = profile(pipe.iterable, step=step_ms / 1000.0, batches=batches, warmup=1)
        finally:
            pipe.close()
        runs[key] = {**rep.to_dict(), "summary": rep.summary()}
        print(f"## {key}\n{rep.summary()}\n")
        try:
            plots_made.append(rep.plot(str(outdir / f"profile-{key}.png")))
        except ImportError as e:
            plots_made.append(f"no plot: {e}")
    doc = {"command": "profile", "machine": machine(), "dataset": {**desc, "path": str(root)}, "format": fmt,
           "step_ms": step_ms, "args": {"threads": threads, "batch": batch, "batches": batches}, "runs": runs,
           "plots": plots_made}
    write_json(outdir / "profile.json", doc)
    return doc
