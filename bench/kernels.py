"""The fused CPU kernel against torchvision, one core, in one run: decoded ImageNet-like
images (500x375) -> RandomResizedCrop(224) + flip [+ ColorJitter(0.4, 0.4, 0.4, 0.1)]
+ Normalize. Ours includes drawing the parameters; its output buffer is allocated once
and reused (as the Loader does), torchvision allocates per image as it always does.

    python bench/kernels.py [--images 256]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, save, timeit  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def imagenet_like(n: int):
    import numpy as np
    from PIL import Image
    from skimage import data

    base = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    out = []
    for k in range(n):
        im = Image.fromarray(base[k % len(base)]).resize((500, 375), Image.BILINEAR)
        out.append(np.ascontiguousarray(np.roll(np.asarray(im), 13 * k, axis=1)))
    return out


def runner(tf, packed, n: int):
    """A timed call of the fused CPU kernel on the n packed 500x375 HWC images: draws
    fresh params each call (included in the time), writes a reused output buffer (as
    the Loader reuses its output buffers)."""
    import numpy as np

    from gpudecode.kernels import fused

    sizes = [(375, 500)] * n
    seed = [0]
    out, view = tf.new_output(n)

    def run() -> int:
        seed[0] += 1
        geom, f, o = tf.encode(tf.make_params(sizes, seed[0]), sizes)
        geom[:, fused.OFFSET] = np.arange(n) * 375 * 500 * 3
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = 1500, 3, 1
        tf.run(packed, geom, f, o, view, num_threads=1)
        return n

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import numpy as np
    import torch
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2
    from PIL import Image

    from gpudecode import transforms as T

    torch.set_num_threads(1)
    imgs = imagenet_like(a.images)
    n = len(imgs)
    packed = torch.from_numpy(np.stack(imgs).reshape(-1))  # as the loader's decoders leave them: HWC, packed
    tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im in imgs]
    pils = [Image.fromarray(im) for im in imgs]
    rows = {}
    for jitter in (True, False):
        cj = [0.4, 0.4, 0.4, 0.1]
        tag = "ColorJitter" if jitter else "no jitter"
        ours = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + ([T.ColorJitter(*cj)] if jitter else [])
                         + [T.Normalize(MEAN, STD)])
        run_ours = runner(ours, packed, n)

        tv2 = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
                         + ([v2.ColorJitter(*cj)] if jitter else [])
                         + [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
        tv1 = v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip()] + ([v1.ColorJitter(*cj)] if jitter else [])
                         + [v1.ToTensor(), v1.Normalize(MEAN, STD)])

        def run_tv2():
            for t in tensors:
                tv2(t)
            return n

        def run_tv1():
            for p in pils:
                tv1(p)
            return n

        for name, fn in [(f"gpudecode fused CPU, {tag}", run_ours), (f"torchvision v2 tensors, {tag}", run_tv2),
                         (f"torchvision classic PIL, {tag}", run_tv1)]:
            t, count = timeit(fn, repeat=a.repeat)
            rows[name] = count / t
    # output layouts and dtypes (ColorJitter on): what the other output choices cost
    variants = {}
    for layout in ("NCHW", "NHWC"):
        for dtype in (torch.float32, torch.float16):
            steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                     T.Normalize(MEAN, STD)] + ([T.ToDtype(dtype)] if dtype != torch.float32 else [])
            t, count = timeit(runner(T.Compose(steps, layout=layout), packed, n), repeat=a.repeat)
            variants[f"{layout} {str(dtype).replace('torch.', '')}"] = count / t
    print(f"{n} decoded 500x375 images -> 224x224, 1 core (gpudecode num_threads=1, torch 1 thread)")
    print(f"{'pipeline':44s} {'img/s':>8s} {'x tv2':>7s} {'x PIL':>7s}")
    for tag in ("ColorJitter", "no jitter"):
        tv2r, pilr = rows[f"torchvision v2 tensors, {tag}"], rows[f"torchvision classic PIL, {tag}"]
        for name, r in rows.items():
            if name.endswith(tag):
                print(f"{name:44s} {r:8.0f} {r / tv2r:7.1f} {r / pilr:7.1f}")
    print("gpudecode fused CPU with ColorJitter, by output layout and dtype:")
    for name, r in variants.items():
        print(f"  {name:16s} {r:8.0f} img/s")
    save("kernels", {"machine": machine(), "args": vars(a), "img_per_s": rows, "outputs": variants})


if __name__ == "__main__":
    main()
