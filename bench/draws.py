"""What a batch's random draws cost the host, for the detection presets and a classification
recipe: the stage that reads and decodes draws them, one thread, so on a GPU machine (where
decoding leaves the host) they are what that thread spends on each image.

    python bench/draws.py [--batch 64] [--repeats 20] [--seed 0]

--batch images of sizes 300-640 with 1-14 boxes each (a COCO-like spread, the same for every
row), each recipe's draws made as the Loader makes them (`draws.draw_batch` with the boxes,
then the decode windows and the kernel's arrays), against torchvision v2's own draws for the
same transforms (each transform's make_params, and the coin of those applied with a
probability, a sample at a time, as its DataLoader workers make them). For the recipes that
draw a crop from the boxes (RandomIoUCrop), the crops alone too: the native draw
(`RandomIoUCrop.crops`, one call a batch) against its Python reference (`crop`, numpy an
image at a time), which the tests hold equal to it. Each figure the best of --repeats
batches, microseconds an image. Prints a table and one line of JSON.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable


def best_us(fn: Callable[[], object], repeats: int, per: int) -> float:
    """The best of `repeats` calls (after 2 unmeasured), microseconds per item of `per`."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) / per * 1e6


def recipes() -> dict:
    """name -> (gpudecode Compose, torchvision v2 Compose): the same steps."""
    import torch
    import torchvision.transforms.v2 as tv

    from gpudecode import transforms as T

    f32 = (T.ToDtype(torch.float32, scale=True), tv.ToDtype(torch.float32, scale=True))
    sizes = (480, 512, 544, 576, 608, 640)
    return {
        "ssd (zoom-out, IoU crop, 300x300, flip, photometric)": (
            T.Compose([T.RandomZoomOut(fill=(123, 117, 104)), T.RandomIoUCrop(), T.Resize((300, 300)),
                       T.RandomHorizontalFlip(), T.RandomPhotometricDistort(), f32[0]]),
            tv.Compose([tv.RandomZoomOut(fill=(123, 117, 104)), tv.RandomIoUCrop(), tv.Resize((300, 300)),
                        tv.RandomHorizontalFlip(), tv.RandomPhotometricDistort(), f32[1]])),
        "ssdlite (IoU crop, flip; ragged)": (
            T.Compose([T.RandomIoUCrop(), T.RandomHorizontalFlip(), f32[0]], ragged=True),
            tv.Compose([tv.RandomIoUCrop(), tv.RandomHorizontalFlip(), f32[1]])),
        "multiscale (shortest side, flip; ragged)": (
            T.Compose([T.RandomShortestSize(sizes, 1333), T.RandomHorizontalFlip(), f32[0]], ragged=True),
            tv.Compose([tv.RandomShortestSize(sizes, 1333), tv.RandomHorizontalFlip(), f32[1]])),
        "hflip (flip; ragged)": (
            T.Compose([T.RandomHorizontalFlip(), f32[0]], ragged=True),
            tv.Compose([tv.RandomHorizontalFlip(), f32[1]])),
        "choice (RRC 224 or CenterCrop 224, flip, ColorJitter)": (
            T.Compose([T.RandomChoice([T.RandomResizedCrop(224), T.CenterCrop(224)]), T.RandomHorizontalFlip(),
                       T.ColorJitter(0.4, 0.4, 0.4), f32[0]]),
            tv.Compose([tv.RandomChoice([tv.RandomResizedCrop(224), tv.CenterCrop(224)]), tv.RandomHorizontalFlip(),
                        tv.ColorJitter(0.4, 0.4, 0.4), f32[1]])),
        "classification (RandomResizedCrop 224, flip, ColorJitter)": (
            T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4), f32[0]]),
            tv.Compose([tv.RandomResizedCrop(224), tv.RandomHorizontalFlip(), tv.ColorJitter(0.4, 0.4, 0.4), f32[1]])),
    }


def tv_draws(tvc, flats: list) -> None:
    """torchvision v2's draws for each sample's inputs: each transform's make_params, after
    its coin where it applies with a probability (what its forward draws)."""
    import torch

    for flat in flats:
        for t in tvc.transforms:
            if type(t).__name__ == "RandomChoice":  # (its pick, then the picked transform's draws)
                t = t.transforms[int(torch.multinomial(torch.tensor(t.p), 1))]
            if hasattr(t, "p") and not hasattr(t, "p_brightness"):  # (_RandomApplyTransform's coin)
                if torch.rand(1) >= t.p:
                    continue
            t.make_params(flat)


def measure(ours, theirs, sizes: list, boxes: list, flats: list, keys: list, repeats: int) -> dict:
    """One recipe's figures, us an image: our draws as the Loader makes them, torchvision's,
    and (a crop drawn from the boxes) the crops natively and by their Python reference."""
    import numpy as np

    from gpudecode.transforms.draws import draw_batch

    batch = len(sizes)
    size_array, indices = np.asarray(sizes, np.int64), np.arange(batch)
    step = {"seed": 0}

    def gpudecode_draws() -> None:
        step["seed"] += 1
        d = draw_batch(ours.plan, sizes, step["seed"], indices=indices, size_array=size_array, boxes=boxes)
        d.boxes()
        d.encode()

    row = {"gpudecode": best_us(gpudecode_draws, repeats, batch),
           "torchvision": best_us(lambda: tv_draws(theirs, flats), repeats, batch)}
    if ours.plan.reads_boxes:
        iou = ours.plan.geometry[0]
        row["iou crops, native"] = best_us(lambda: iou.crops(keys, sizes, boxes), repeats, batch)
        row["iou crops, Python reference"] = best_us(
            lambda: [iou.crop(k, s, b) for k, s, b in zip(keys, sizes, boxes)], max(3, repeats // 4), batch)
    return row


def probe(batch: int, repeats: int, seed: int) -> dict:
    import numpy as np
    import torch
    from torchvision import tv_tensors

    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(300, 641)), int(rng.integers(300, 641))) for _ in range(batch)]
    boxes = []
    for h, w in sizes:
        k = int(rng.integers(1, 15))
        wh = rng.uniform(0.05, 0.6, (k, 2)) * (w, h)
        xy = rng.uniform(0, 1, (k, 2)) * ((w, h) - wh)
        boxes.append(np.concatenate([xy, xy + wh], 1).astype(np.float32))
    flats = [[tv_tensors.Image(torch.zeros((3, h, w), dtype=torch.uint8)),
              tv_tensors.BoundingBoxes(torch.from_numpy(b), format="XYXY", canvas_size=(h, w))]
             for (h, w), b in zip(sizes, boxes)]
    torch.manual_seed(seed)
    keys = [int(v) for v in rng.integers(0, 2**63, batch, dtype=np.int64)]
    rows = {name: measure(ours, theirs, sizes, boxes, flats, keys, repeats) for name, (ours, theirs) in recipes().items()}
    return {"machine": f"{platform.processor() or platform.machine()}, {_cpu()}", "batch": batch, "repeats": repeats,
            "us_an_image": rows}


def _cpu() -> str:
    """The CPU's model name, family and model (/proc/cpuinfo's), where the platform says."""
    said: dict = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                said.setdefault(key.strip(), value.strip())
    except OSError:
        return "cpu unknown"
    return f"{said.get('model name', 'cpu unknown')} (family {said.get('cpu family', '?')} model {said.get('model', '?')})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    r = probe(a.batch, a.repeats, a.seed)
    print(f"draws on {r['machine']}: batches of {a.batch}, best of {a.repeats}, us an image")
    print(f"  {'recipe':<58} {'gpudecode':>10} {'torchvision':>12} {'ratio':>7}")
    for name, row in r["us_an_image"].items():
        print(f"  {name:<58} {row['gpudecode']:10.1f} {row['torchvision']:12.1f} "
              f"{row['torchvision'] / row['gpudecode']:6.1f}x")
        if "iou crops, native" in row:
            native, ref = row["iou crops, native"], row["iou crops, Python reference"]
            print(f"    {'its IoU crops: native / the Python reference':<56} {native:10.1f} {ref:12.1f} "
                  f"{ref / native:6.1f}x")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
