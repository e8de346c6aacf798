"""Compiles the CPU kernels the suite uses most into GPUDECODE_CACHE_DIR before it starts.

`make test` runs this beside mypy and the fuzz replay, on the core they leave idle, so the
suite's tests load the kernels from the disk cache instead of compiling them. Without it
the first tests of each pytest worker, and the scripts they start, compiled the same
kernels at once (a kernel variant is about 50 s on a 2-core Zen 4, once). It asserts
nothing about the kernels: the tests do. A call that fails is printed with its error and
left to the tests, which say what is wrong in their own words; whatever it leaves out is
compiled where a test first needs it, as before.

    GPUDECODE_CACHE_DIR=... python tests/warm_kernels.py
"""
from __future__ import annotations

import io
import os
import sys
import time

import numpy as np


def _png(img: np.ndarray) -> bytes:  # (conftest.encode's; importing conftest would choose the CUDA simulator)
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def main() -> int:
    if not os.environ.get("GPUDECODE_CACHE_DIR"):
        print("warm_kernels: set GPUDECODE_CACHE_DIR (the cache the suite will read)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    import torch

    from gpudecode import transforms as T
    from gpudecode.decode import Request
    from gpudecode.decode.png import PngDecoder

    rng = np.random.default_rng(0)
    imgs = [torch.from_numpy(rng.integers(0, 256, (3, 20 + k, 24), np.uint8)) for k in range(2)]
    data = _png(rng.integers(0, 256, (9, 11, 3), np.uint8))
    calls = {}
    # the fused kernel's four variants: float32 and uint8 outputs, NCHW (contiguous) and NHWC (strided)
    for layout in ("NCHW", "NHWC"):
        for name, tail in (("float32", [T.Normalize([0.5] * 3, [0.25] * 3)]), ("uint8", [])):
            calls[f"the fused kernel, {name} {layout}"] = lambda tail=tail, layout=layout: T.Compose(
                [T.RandomResizedCrop(12), T.RandomHorizontalFlip(), *tail], layout=layout)(imgs)
    # the barrier passes (a statistic of the whole image), the blur and the mix; the elastic field's blur
    calls["the barrier, blur and mix passes"] = lambda: T.Compose(
        [T.RandomResizedCrop(12), T.RandomEqualize(1.0), T.RandomAutocontrast(1.0), T.GaussianBlur(3),
         T.AugMix(mixture_width=2, chain_depth=1)])(imgs)
    calls["the elastic field's blur"] = lambda: T.Compose(
        [T.RandomResizedCrop(12), T.ElasticTransform(10.0, 1.0)])(imgs)
    # PNG in two halves on the CPU: the unfilter kernel's twin
    calls["the PNG unfilter twin"] = lambda: PngDecoder(device="cpu").decode(
        [Request(data, "png", 9, 11, (0, 0, 9, 11), "warm.tar", "k")]).settle()
    failed = 0
    for what, call in calls.items():
        try:
            call()
        except Exception as e:  # (the tests say what is wrong; this only compiles ahead)
            failed += 1
            print(f"warm_kernels: {what} failed, left to the tests: {type(e).__name__}: {e}", file=sys.stderr)
    print(f"warm_kernels: {len(calls) - failed} of {len(calls)} calls' kernels compiled or loaded in "
          f"{time.perf_counter() - t0:.0f} s into {os.environ['GPUDECODE_CACHE_DIR']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
