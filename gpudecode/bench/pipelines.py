"""The input pipelines `gpudecode bench` compares, each doing the same training transforms
(common.TRAIN) on the same images with the same number of threads or workers:

- gpudecode: the Loader on the dataset's shards (CPU, or CUDA with device="cuda");
- classic: torchvision's ImageFolder (PIL decode) + transforms in a DataLoader with W
  workers (tensor samples: np.load + the v2 transforms on tensors);
- dali: DALI's pipeline (file reader, random-crop decode, resize, brightness/contrast,
  hsv, crop_mirror_normalize), on the CPU or with the "mixed" decoder on a GPU;
- spdl: SPDL's thread-pool pipeline (spdl.pipeline, FFmpeg decode through spdl.io, then
  torchvision's v2 transforms in the pool);
- synthetic: batches already in memory, each copied into the output once (the ceiling of
  any pipeline here: memory bandwidth).

Each is an object with `epoch(e)` (an iterator of (images, labels) batches, images with
len()), `close()`, and `iterable` (what gpudecode.profile should wrap).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .common import MEAN, STD

NAMES = ("gpudecode", "classic", "dali", "spdl", "synthetic")


def available(name: str, fmt: str, device: str = "cpu") -> str | None:
    """None where `name` can run format `fmt` here, else why not."""
    if name in ("dali", "spdl") and fmt in ("avif", "heic", "jxl"):
        return f"{name.upper() if name == 'dali' else 'SPDL'}'s decoders are not measured on {fmt} here"
    if name == "dali":
        if fmt == "tensor":
            return "DALI's pipeline here reads image files; tensor samples are not measured with it"
        try:
            import nvidia.dali  # noqa: F401
        except Exception as e:
            return f"DALI is not installed ({type(e).__name__})"
    if name == "spdl":
        try:
            import spdl.io  # noqa: F401
            import spdl.pipeline  # noqa: F401
        except Exception as e:
            return f"SPDL is not installed or its FFmpeg libraries are missing ({type(e).__name__}: {e})"
    if name == "classic":
        try:
            import torchvision  # noqa: F401
        except ImportError:
            return "torchvision is not installed"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device"
    return None


def _files(root: Path, desc: dict, fmt: str) -> list[tuple[str, int]]:
    """(path, label) of every file of `fmt`, labels numbered by sorted class folder."""
    base = root / desc["files"][fmt]
    classes = sorted(p.name for p in base.iterdir() if p.is_dir())
    out = []
    for label, c in enumerate(classes):
        out += [(str(p), label) for p in sorted((base / c).iterdir()) if p.is_file()]
    return out


class GpudecodePipeline:
    def __init__(self, root: Path, desc: dict, fmt: str, threads: int, batch: int, device: str = "cpu",
                 crop: int = 224, transform: Any = None) -> None:
        from .. import Loader
        from .. import transforms as T

        tf = transform or T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(),
                                     T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Normalize(MEAN, STD)])
        self.name = "gpudecode" + ("" if device == "cpu" else f" ({device})")
        self.loader = Loader([str(root / s) for s in desc["shards"][fmt]], batch_size=batch, transform=tf,
                             device=device, num_threads=threads, seed=0, shuffle=True)
        self.iterable = self.loader
        self.device = device

    def epoch(self, e: int) -> Iterator:
        import torch

        self.loader.set_epoch(e)
        for b in self.loader:
            if self.device != "cpu":
                torch.cuda.current_stream().synchronize()  # the images are ready, not only enqueued
            yield b.images, b.labels

    @property
    def stats(self) -> Any:
        return self.loader.stats

    def close(self) -> None:
        self.loader.close()


def _load_npy_chw(path: str) -> Any:
    import torch

    return torch.from_numpy(np.load(path)).permute(2, 0, 1)


def _load_pil_rgb(path: str) -> Any:
    """torchvision's pil_loader, with the [formats] plugins registered (in each worker)."""
    from PIL import Image

    from ..decode._base import pillow_formats

    pillow_formats()
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class ClassicPipeline:
    def __init__(self, root: Path, desc: dict, fmt: str, workers: int, batch: int, crop: int = 224,
                 transform: Any = None) -> None:
        import torch
        import torchvision.transforms as v1
        import torchvision.transforms.v2 as v2
        from torchvision.datasets import DatasetFolder, ImageFolder

        base = str(root / desc["files"][fmt])
        if fmt == "tensor":
            tf = transform or v2.Compose([v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip(),
                                          v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ToDtype(torch.float32, scale=True),
                                          v2.Normalize(MEAN, STD)])
            ds: Any = DatasetFolder(base, loader=_load_npy_chw, extensions=(".npy",), transform=tf)
        else:
            tf = transform or v1.Compose([v1.RandomResizedCrop(crop), v1.RandomHorizontalFlip(),
                                          v1.ColorJitter(0.4, 0.4, 0.4, 0.1), v1.ToTensor(), v1.Normalize(MEAN, STD)])
            ds = (ImageFolder(base, transform=tf) if fmt in ("jpg", "png") else
                  # formats ImageFolder does not list (AVIF, HEIC, JPEG XL): the same PIL loader by extension
                  DatasetFolder(base, loader=_load_pil_rgb, extensions=("." + fmt,), transform=tf))
        self.name = f"classic ({workers} workers)"
        self.loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                                  persistent_workers=workers > 0,
                                                  prefetch_factor=2 if workers > 0 else None)
        self.iterable = self.loader

    def epoch(self, e: int) -> Iterator:
        yield from self.loader

    def close(self) -> None:
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # noqa: SLF001 (DataLoader's workers end no other way but del)
        self.loader = None  # type: ignore[assignment]


class DaliPipeline:
    def __init__(self, root: Path, desc: dict, fmt: str, threads: int, batch: int, device: str = "cpu",
                 crop: int = 224) -> None:
        from nvidia.dali import fn, pipeline_def, types

        base = str(root / desc["files"][fmt])
        gpu = device.startswith("cuda")
        dev_id = int(device.split(":")[1]) if gpu and ":" in device else (0 if gpu else None)

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=dev_id, seed=0)  # type: ignore[arg-type]
        def pipe():
            files, labels = fn.readers.file(file_root=base, random_shuffle=True, name="reader")
            img = fn.decoders.image_random_crop(files, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                                random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            img = fn.resize(img, resize_x=crop, resize_y=crop, antialias=True)
            img = fn.brightness_contrast(img, brightness=fn.random.uniform(range=[0.6, 1.4]),
                                         contrast=fn.random.uniform(range=[0.6, 1.4]))
            img = fn.hsv(img, hue=fn.random.uniform(range=[-36.0, 36.0]), saturation=fn.random.uniform(range=[0.6, 1.4]))
            img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW",
                                           mirror=fn.random.coin_flip(), mean=[m * 255 for m in MEAN],
                                           std=[s * 255 for s in STD])
            return img, labels

        self.name = "DALI" + (" (GPU)" if gpu else "")
        self.pipe = pipe()
        self.pipe.build()
        self.size = self.pipe.epoch_size("reader")
        self.iterable = self

    def epoch(self, e: int) -> Iterator:
        n = 0
        while n < self.size:
            images, labels = self.pipe.run()
            n += len(images)
            yield images, labels

    def __iter__(self) -> Iterator:
        return self.epoch(0)

    def close(self) -> None:
        del self.pipe


class SpdlPipeline:
    def __init__(self, root: Path, desc: dict, fmt: str, threads: int, batch: int, crop: int = 224) -> None:
        import torch
        import torchvision.transforms.v2 as v2

        self.files = _files(root, desc, fmt)
        self.fmt = fmt
        self.threads = threads
        self.batch = batch
        self.tf = v2.Compose([v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip(),
                              v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ToDtype(torch.float32, scale=True),
                              v2.Normalize(MEAN, STD)])
        self.name = "SPDL"
        self.iterable = self

    def _load(self, item: tuple[str, int]) -> tuple[Any, int]:
        import spdl.io
        import torch

        path, label = item
        if self.fmt == "tensor":  # (numpy's reader: spdl.io.load_npy's arrays outlive their owner at exit)
            arr = np.load(path)
        else:
            arr = spdl.io.to_numpy(spdl.io.load_image(path))  # FFmpeg: RGB24, HWC
        return self.tf(torch.from_numpy(arr).permute(2, 0, 1)), label

    @staticmethod
    def _collate(items: list) -> tuple[Any, Any]:
        import torch

        return torch.stack([i for i, _ in items]), torch.tensor([lab for _, lab in items])

    def epoch(self, e: int) -> Iterator:
        import torch
        from spdl.pipeline import PipelineBuilder

        order = list(self.files)
        random.Random(e).shuffle(order)
        builder: Any = PipelineBuilder()
        pipeline = (builder.add_source(order).pipe(self._load, concurrency=self.threads)
                    .aggregate(self.batch).pipe(self._collate).add_sink(3).build(num_threads=self.threads))
        # the pool's threads are the parallelism: one intra-op thread per torch call, as each
        # DataLoader worker is given (torch's default here would oversubscribe the cores)
        saved = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with pipeline.auto_stop():
                yield from pipeline.get_iterator()
        finally:
            torch.set_num_threads(saved)

    def __iter__(self) -> Iterator:
        return self.epoch(0)

    def close(self) -> None:
        pass


class SyntheticPipeline:
    """Batches already decoded and transformed, in memory: each step copies one into the
    output buffer the trainer receives (the least any loader does: write its output), so
    this is the ceiling of a pipeline on this machine, set by memory bandwidth."""

    def __init__(self, count: int, batch: int, crop: int = 224) -> None:
        import torch

        self.sources = [torch.randn(batch, 3, crop, crop) for _ in range(4)]
        self.outputs = [torch.empty(batch, 3, crop, crop) for _ in range(3)]
        self.labels = torch.zeros(batch, dtype=torch.int64)
        self.count = count
        self.batch = batch
        self.name = "synthetic (in memory)"
        self.iterable = self

    def epoch(self, e: int) -> Iterator:
        left, i = self.count, 0
        while left > 0:
            n = min(self.batch, left)
            out = self.outputs[i % len(self.outputs)][:n]
            out.copy_(self.sources[i % len(self.sources)][:n])
            yield out, self.labels[:n]
            left -= n
            i += 1

    def __iter__(self) -> Iterator:
        return self.epoch(0)

    def close(self) -> None:
        pass


def build(name: str, root: Path, desc: dict, fmt: str, *, threads: int, batch: int, device: str = "cpu",
          crop: int = 224) -> Any:
    if name == "gpudecode":
        return GpudecodePipeline(root, desc, fmt, threads, batch, device, crop)
    if name == "classic":
        return ClassicPipeline(root, desc, fmt, threads, batch, crop)
    if name == "dali":
        return DaliPipeline(root, desc, fmt, threads, batch, device, crop)
    if name == "spdl":
        return SpdlPipeline(root, desc, fmt, threads, batch, crop)
    if name == "synthetic":
        return SyntheticPipeline(desc["count"], batch, crop)
    raise ValueError(f"unknown pipeline {name!r} (one of {', '.join(NAMES)})")
