"""The fused CPU kernel against torchvision, one core, in one run: decoded ImageNet-like
images (500x375) -> RandomResizedCrop(224) + flip [+ ColorJitter(0.4, 0.4, 0.4, 0.1)]
+ Normalize. Ours includes drawing the parameters; its output buffer is allocated once
and reused (as the Loader does), torchvision allocates per image as it always does.

    python bench/kernels.py [--images 256]
    python bench/kernels.py --stages [--images 64]   where the base resample's time goes,
        stage by stage (issue 41)
    python bench/kernels.py --ops [--images 128]   each op's added cost per image (fused,
        one core) beside torchvision's cost of the same op on 224x224 images (v2 on uint8
        tensors, and on PIL images), in one run
"""
from __future__ import annotations

import argparse

from ..._args import COUNT
from ..common import describe_cpu, machine, timeit
from . import save

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def imagenet_like(n: int):
    import numpy as np
    from PIL import Image
    from skimage import data

    base = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    out = []
    for k in range(n):
        im = Image.fromarray(base[k % len(base)]).resize((500, 375), Image.Resampling.BILINEAR)
        out.append(np.ascontiguousarray(np.roll(np.asarray(im), 13 * k, axis=1)))
    return out


def runner(tf, packed, n: int):
    """A timed call of the fused CPU kernel on the n packed 500x375 HWC images: draws
    fresh params each call (included in the time), writes a reused output buffer (as
    the Loader reuses its output buffers, and its workspace, as the Loader's pipeline does)."""
    import numpy as np

    from gpudecode.kernels import fused
    from gpudecode.kernels.workspace import Workspace

    sizes = [(375, 500)] * n
    seed = [0]
    out, view = tf.new_output(n)
    ws = Workspace()

    if tf.plan.makes_images or tf.plan.post is not None:  # (canvases, the first pass, the post warp: in apply)
        from gpudecode.decode._base import DecodedBatch

        shapes = np.asarray(sizes, np.int64)
        decoded = DecodedBatch(packed, np.arange(n, dtype=np.int64) * 375 * 500 * 3, shapes,
                               np.tile(np.array([[1500, 3, 1]], np.int64), (n, 1)),
                               np.concatenate([np.zeros((n, 2), np.int64), shapes], axis=1), [None] * n)

        def run_canvas() -> int:
            seed[0] += 1
            tf.apply(decoded, tf.make_params(sizes, seed[0]), sizes, view, num_threads=1, workspace=ws)
            return n

        return run_canvas

    def run() -> int:
        seed[0] += 1
        geom, f, o = tf.encode(tf.make_params(sizes, seed[0]), sizes)
        geom[:, fused.OFFSET] = np.arange(n) * 375 * 500 * 3
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = 1500, 3, 1
        tf.run(packed, geom, f, o, view, num_threads=1, workspace=ws)
        return n

    return run


def op_cases():
    """(name, our step, torchvision v2's transform) per op, with the arguments recipes use."""
    import torch
    import torchvision.transforms.v2 as v2

    from gpudecode import transforms as T

    bil = v2.InterpolationMode.BILINEAR
    return [
        ("ColorJitter(0.4, 0.4, 0.4, 0.1)", T.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)),
        ("RandomGrayscale(p=1)", T.RandomGrayscale(1.0), v2.RandomGrayscale(1.0)),
        ("RandomSolarize(128, p=1)", T.RandomSolarize(128, 1.0), v2.RandomSolarize(128, 1.0)),
        ("RandomPosterize(4, p=1)", T.RandomPosterize(4, 1.0), v2.RandomPosterize(4, 1.0)),
        ("RandomAutocontrast(p=1)", T.RandomAutocontrast(1.0), v2.RandomAutocontrast(1.0)),
        ("RandomEqualize(p=1)", T.RandomEqualize(1.0), v2.RandomEqualize(1.0)),
        ("RandomAdjustSharpness(2, p=1)", T.RandomAdjustSharpness(2.0, 1.0), v2.RandomAdjustSharpness(2.0, 1.0)),
        ("GaussianBlur(23, (0.1, 2))", T.GaussianBlur(23, (0.1, 2.0)), v2.GaussianBlur(23, (0.1, 2.0))),
        ("RandomRotation(15)", T.RandomRotation(15), v2.RandomRotation(15)),
        ("RandomRotation(15, bilinear)", T.RandomRotation(15, "bilinear"), v2.RandomRotation(15, bil)),
        ("RandomAffine(10, (.1, .1), (.9, 1.1), 5)", T.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
         v2.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5)),
        ("TrivialAugmentWide", T.TrivialAugmentWide(), v2.TrivialAugmentWide()),
        ("TrivialAugmentWide(bilinear)", T.TrivialAugmentWide(interpolation="bilinear"),
         v2.TrivialAugmentWide(interpolation=bil)),
        ("RandAugment(2, 9)", T.RandAugment(2, 9), v2.RandAugment(2, 9)),
        ("AutoAugment(ImageNet)", T.AutoAugment(), v2.AutoAugment()),
        ("AugMix", T.AugMix(), v2.AugMix()),
        ("RandomPhotometricDistort", T.RandomPhotometricDistort(), v2.RandomPhotometricDistort()),
        ("RandomChannelPermutation", T.RandomChannelPermutation(), v2.RandomChannelPermutation()),
        # (torchvision's noise needs a float image: its conversion is counted with it)
        ("GaussianNoise(0, 0.1)", T.GaussianNoise(), v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                                                                  v2.GaussianNoise()])),
        ("ElasticTransform(50, 5), after RRC", T.ElasticTransform(), v2.ElasticTransform()),
    ]


def ops_table(a) -> None:
    """Each op's added cost per image over RRC(224) + flip + Normalize in the fused CPU
    kernel (one core), beside torchvision's cost of the op alone on 224x224 images."""
    import numpy as np
    import torch
    from PIL import Image

    from gpudecode import transforms as T

    torch.set_num_threads(1)
    imgs = imagenet_like(a.images)
    n = len(imgs)
    packed = torch.from_numpy(np.stack(imgs).reshape(-1))
    small = [np.ascontiguousarray(im[75:299, 138:362]) for im in imgs]  # 224x224 crops: what the op sees
    tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im in small]
    pils = [Image.fromarray(im) for im in small]
    crop: list = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    norm: list = [T.Normalize(MEAN, STD)]
    t, count = timeit(runner(T.Compose(crop + norm), packed, n), repeat=a.repeat)
    base = t / count
    t, count = timeit(runner(T.Compose([T.RandomResizedCrop(224, interpolation="bicubic"), crop[1]] + norm), packed, n),
                      repeat=a.repeat)
    bicubic = t / count
    rows = {}
    for name, ours, theirs in op_cases():
        t, count = timeit(runner(T.Compose(crop + [ours] + norm), packed, n), repeat=a.repeat)
        added = t / count - base

        def run_on(items, tf=theirs):
            def go():
                for x in items:
                    tf(x)
                return len(items)
            return go
        tv_t, tv_n = timeit(run_on(tensors), repeat=a.repeat)
        pil_t, pil_n = timeit(run_on(pils), repeat=a.repeat)
        rows[name] = {"fused_added_us": added * 1e6, "tv2_tensor_us": tv_t / tv_n * 1e6,
                      "tv2_pil_us": pil_t / pil_n * 1e6}
    rows.update(_canvas_rows(a, packed, n, base, crop, norm))
    print(f"CPU: {describe_cpu()}")
    print(f"{n} decoded 500x375 images, 1 core; base RRC(224) + flip + Normalize: {base * 1e6:.0f} us/img fused, "
          f"{bicubic * 1e6:.0f} with a bicubic RRC")
    print(f"{'op':42s} {'fused +us':>10s} {'tv tensor us':>13s} {'tv PIL us':>10s}")
    for name, r in rows.items():
        print(f"{name:42s} {r['fused_added_us']:10.0f} {r['tv2_tensor_us']:13.0f} {r['tv2_pil_us']:10.0f}")
    save("kernel_ops", {"machine": machine(), "args": vars(a), "base_us": base * 1e6, "bicubic_base_us": bicubic * 1e6,
                        "ops": rows})


def _canvas_rows(a, packed, n: int, base: float, crop: list, norm: list) -> dict:
    """The canvas steps (before the crop, on the whole 500x375 image), RandomZoomOut,
    RandomRotation(expand=True) and ElasticTransform: the added cost to the fused base; torchvision's, the step
    + RandomResizedCrop(224) less its RandomResizedCrop(224) alone, on the same whole
    images (tensors)."""
    import torchvision.transforms.v2 as v2

    from gpudecode import transforms as T

    mean = (123, 117, 104)
    t, count = timeit(runner(T.Compose([T.RandomZoomOut(mean, (1.0, 4.0), 0.5)] + crop + norm), packed, n),
                      repeat=a.repeat)
    whole = [x.permute(2, 0, 1).contiguous() for x in packed.view(n, 375, 500, 3)]

    def tv_time(tf):
        def go():
            for x in whole:
                tf(x)
            return len(whole)
        tt, tn = timeit(go, repeat=a.repeat)
        return tt / tn

    rrc = v2.RandomResizedCrop(224, antialias=True)
    alone = tv_time(rrc)
    theirs = tv_time(v2.Compose([v2.RandomZoomOut(list(mean), (1.0, 4.0), 0.5), rrc])) - alone
    rows = {"RandomZoomOut(mean, (1, 4), p=0.5), before RRC": {
        "fused_added_us": (t / count - base) * 1e6, "tv2_tensor_us": theirs * 1e6, "tv2_pil_us": float("nan")}}
    t, count = timeit(runner(T.Compose([T.RandomRotation(15, "bilinear", expand=True)] + crop + norm), packed, n),
                      repeat=a.repeat)
    theirs = tv_time(v2.Compose([v2.RandomRotation(15, v2.InterpolationMode.BILINEAR, expand=True), rrc])) - alone
    rows["RandomRotation(15, bilinear, expand=True), before RRC"] = {
        "fused_added_us": (t / count - base) * 1e6, "tv2_tensor_us": theirs * 1e6, "tv2_pil_us": float("nan")}
    t, count = timeit(runner(T.Compose([T.ElasticTransform()] + crop + norm), packed, n), repeat=a.repeat)
    theirs = tv_time(v2.Compose([v2.ElasticTransform(), rrc])) - alone
    rows["ElasticTransform(50, 5), before RRC"] = {
        "fused_added_us": (t / count - base) * 1e6, "tv2_tensor_us": theirs * 1e6, "tv2_pil_us": float("nan")}
    return rows


def stages_table(a) -> None:
    """Where the base RRC(224) + flip + Normalize's time goes on this CPU (issue 41: 3x
    its Zen 4 cost on an Intel Xeon), stage by stage: the filter weights, the vertical
    pass (the source's rows read), the transpose between the passes, the horizontal
    pass, and the output (transposed and normalized into the batch, streaming stores);
    each stage timed around its own call, image by image, beside the whole fused call.
    Twice: over n distinct images into n output slots (the sources and the outputs go
    through memory, as in training), and with every sample reading one image and writing
    one slot (both in the caches): the difference between the columns is what memory
    costs each stage on this CPU. And this core's memory bandwidth, read and copy."""
    import numpy as np
    import torch

    from gpudecode import transforms as T

    imgs = imagenet_like(a.images)
    n = len(imgs)
    packed = np.stack(imgs).reshape(-1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    per = {case: _stage_times(tf, packed, n, a.repeat, distinct=case == "memory") for case in ("memory", "cached")}
    run = runner(tf, torch.from_numpy(packed), n)
    run()
    whole, _ = timeit(run, repeat=a.repeat)
    bandwidth = _bandwidth()
    print(describe_cpu())
    print(f"{n} decoded 500x375 images -> RRC(224) + flip + Normalize, 1 core; the whole fused call "
          f"{whole / n * 1e6:.0f} us/img; its stages, each timed around its own call, over {n} distinct images "
          f"(memory) and over one image written to one slot (cached):")
    print(f"{'stage':12s} {'memory us':>10s} {'share':>6s} {'cached us':>10s} {'memory/cached':>14s}")
    for stage in STAGES:
        m, c = per["memory"][stage], per["cached"][stage]
        print(f"{stage:12s} {m:10.0f} {m / sum(per['memory'].values()):6.0%} {c:10.0f} {m / c:13.2f}x")
    mem, cached = sum(per["memory"].values()), sum(per["cached"].values())
    print(f"{'sum':12s} {mem:10.0f} {'':6s} {cached:10.0f}")
    print(f"memory costs the stages about {mem - cached:.0f} us an image of {mem:.0f} ({(mem - cached) / mem:.0%}); the rest "
          f"is the cores' work on data in the caches")
    print("one core's memory bandwidth (256 MiB): " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bandwidth.items()))
    save("kernels_stages", {"machine": machine(), "args": vars(a), "whole_us": whole / n * 1e6,
                            "stages_us": per["memory"], "stages_cached_us": per["cached"], "bandwidth_gbs": bandwidth})


STAGES = ("weights", "vertical", "transpose", "horizontal", "output")


def _stage_times(tf, packed, n: int, repeat: int, *, distinct: bool) -> dict:
    """us an image of each stage of the base resample (see stages_table): sample i reads
    image i and writes output slot i with `distinct`, else image 0 and slot 0."""
    import time

    import numpy as np
    import torch

    from gpudecode.kernels import fused

    sizes = [(375, 500)] * n
    st = fused.cpu_stages()
    mean, std = np.array(MEAN, np.float32), np.array(STD, np.float32)
    oh = ow = 224
    dst = torch.empty(n * 3 * oh * ow).numpy()  # (torch's allocations are 64-byte aligned, as the Loader's)
    total = dict.fromkeys(STAGES, 0.0)
    for rep in range(repeat + 1):  # the first round warms up (compiles, faults the output's pages in)
        geom, _, _ = tf.encode(tf.make_params(sizes, rep + 1), sizes)
        geom[:, fused.OFFSET] = np.arange(n) * 375 * 500 * 3 if distinct else 0
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = 1500, 3, 1
        work = np.empty(2 * oh * int(geom[:, fused.BW].max()) * 3 + 4 * ow * oh * 3, np.float32)
        taps = fused.axis_taps(geom)
        index, weights = np.empty(3 * (oh + ow), np.int64), np.empty((oh + ow + 1) * taps, np.float32)
        for i in range(n):
            g = geom[i]
            bw, n3 = int(g[fused.BW]), int(g[fused.BW]) * 3
            t = [time.perf_counter()]
            yf, yc, yw, yv = st["_axis_weights"](oh, g[fused.VH], g[fused.OY], g[fused.BH], g[fused.VFLIP] != 0, True,
                                                 g[fused.FILTER], index[:3 * oh], weights[:oh * taps], g[fused.PAD])
            xf, xc, xw, xv = st["_axis_weights"](ow, g[fused.VW], g[fused.OX], bw, g[fused.FLIP] != 0, True,
                                                 g[fused.FILTER], index[3 * oh:], weights[oh * taps:(oh + ow) * taps],
                                                 g[fused.PAD])
            t.append(time.perf_counter())
            st["_vertical_pass"](packed, g, yf, yc, yw, yv, oh, work, weights[(oh + ow) * taps:])
            t.append(time.perf_counter())
            st["transpose"](work, 0, n3, work, oh * n3, oh, oh, n3, False, np.float32(0), np.float32(1))
            t.append(time.perf_counter())
            st["_horizontal_pass"](work, oh, bw, ow, xf, xc, xw, xv)
            t.append(time.perf_counter())
            st["_output_pass"](work, oh, bw, ow, mean, std, True, False, dst, (i if distinct else 0) * 3 * oh * ow, False,
                               ow, oh * ow)
            t.append(time.perf_counter())
            if rep:
                for k, name in enumerate(STAGES):
                    total[name] += t[k + 1] - t[k]
    return {k: v / (repeat * n) * 1e6 for k, v in total.items()}


def _bandwidth(mib: int = 256) -> dict:
    """One core's read and copy bandwidth in GB/s (the best of three): a sum over a buffer
    larger than the caches, and torch's copy of it (read + write counted)."""
    import time

    import numpy as np
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.ones(mib << 18, dtype=torch.float32)  # mib MiB
        b = torch.empty_like(a)
        nbytes = a.numel() * 4
        best = {"read": 0.0, "copy (read + write)": 0.0}
        for _ in range(3):
            t = time.perf_counter()
            np.add.reduce(a.numpy().view(np.int64))
            best["read"] = max(best["read"], nbytes / (time.perf_counter() - t) / 1e9)
            t = time.perf_counter()
            b.copy_(a)
            best["copy (read + write)"] = max(best["copy (read + write)"], 2 * nbytes / (time.perf_counter() - t) / 1e9)
        return best
    finally:
        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=COUNT, default=256)
    ap.add_argument("--repeat", type=COUNT, default=3)
    ap.add_argument("--ops", action="store_true", help="each op's added cost, beside torchvision's")
    ap.add_argument("--stages", action="store_true", help="the base resample's time, stage by stage")
    a = ap.parse_args(argv)
    if a.ops:
        ops_table(a)
        return
    if a.stages:
        stages_table(a)
        return
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

        reused = ours.new_output(n)[0]

        def run_call(out=None):  # the direct call on the same tensors (read where they lie), a fresh output or `out`
            ours(tensors, out=out)
            return n

        def run_tv1():
            for p in pils:
                tv1(p)
            return n

        for name, fn in [(f"gpudecode fused CPU, {tag}", run_ours), (f"gpudecode Compose(tensors), {tag}", run_call),
                         (f"gpudecode Compose(tensors, out=), {tag}", lambda: run_call(reused)),
                         (f"torchvision v2 tensors, {tag}", run_tv2),
                         (f"torchvision classic PIL, {tag}", run_tv1)]:
            t, count = timeit(fn, repeat=a.repeat)
            rows[name] = count / t
    # output layouts and dtypes (ColorJitter on): what the other output choices cost
    variants = {}
    for layout in ("NCHW", "NHWC"):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                     T.Normalize(MEAN, STD)] + ([T.ToDtype(dtype)] if dtype != torch.float32 else [])
            t, count = timeit(runner(T.Compose(steps, layout=layout), packed, n), repeat=a.repeat)
            variants[f"{layout} {str(dtype).replace('torch.', '')}"] = count / t
    # one CIFAR-sized image a call, as a Dataset's __getitem__ calls a transform: the fixed cost of a call
    small = [c.contiguous() for c in torch.nn.functional.interpolate(
        torch.stack(tensors[:64]).float(), size=(32, 32), mode="area").round().to(torch.uint8)]
    per_call = {}
    cifar = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    # the same as PIL images too, as torchvision's CIFAR10 dataset gives them, with the classic
    # recipe (ToTensor) and the Compose converted from it as the dataset's transform
    small_pil = [Image.fromarray(im.permute(1, 2, 0).numpy()) for im in small]
    classic = v1.Compose([v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(), v1.ToTensor(),
                          v1.Normalize(MEAN, STD)])
    tv2_small = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    for name, tf, images in (("gpudecode Compose(image)", cifar, small), ("torchvision v2 (image)", tv2_small, small),
                             ("gpudecode Compose(PIL image)", T.Compose.from_torchvision(classic), small_pil),
                             ("torchvision classic (PIL image)", classic, small_pil)):
        def run_small(tf=tf, images=images):
            for _ in range(10):
                for im in images:
                    tf(im)
            return 10 * len(images)
        t, count = timeit(run_small, repeat=a.repeat)
        per_call[name] = t / count * 1e6
    # the same images as one CHW batch tensor a call (a set kept as a tensor, e.g. on the GPU): per image
    stacked = torch.stack(small * 16)  # [1024, 3, 32, 32]
    reuse = cifar.new_output(len(stacked))[0]

    def run_stacked():
        cifar(stacked, out=reuse)
        return len(stacked)
    t, count = timeit(run_stacked, repeat=a.repeat)
    per_call["gpudecode Compose(batch of 1024)"] = t / count * 1e6
    print(f"CPU: {describe_cpu()}")
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
    print("32x32 images, RandomCrop(32, padding=4) + flip + Normalize: one a call (a Dataset's __getitem__), "
          "or a CHW batch tensor of 1024 a call:")
    for name, us in per_call.items():
        print(f"  {name:34s} {us:8.2f} us an image ({per_call['torchvision v2 (image)'] / us:.2f}x torchvision v2, "
              f"{per_call['torchvision classic (PIL image)'] / us:.2f}x classic on PIL)")
    save("kernels", {"machine": machine(), "args": vars(a), "img_per_s": rows, "outputs": variants,
                     "us_per_image_32x32": per_call})


if __name__ == "__main__":
    main()
