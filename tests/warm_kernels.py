"""Compiles the CPU kernels the suite uses most into GPUDECODE_CACHE_DIR before it starts.

`make test` runs this beside mypy and the fuzz replay, on the core they leave idle, so the
suite's tests load the kernels from the disk cache instead of compiling them. Without it
the first tests of each pytest worker, and the scripts they start, compiled the same
kernels at once (a kernel variant is about 50 s on a 2-core Zen 4, once). It asserts
nothing about the kernels: the tests do. Whatever it leaves out is compiled where a test
first needs it, as before; a failure here fails `make test` before the suite, with the
traceback of the call that failed.

    GPUDECODE_CACHE_DIR=... python tests/warm_kernels.py
"""
from __future__ import annotations

import io
import os
import sys
import time

import numpy as np


def _png(img: np.ndarray) -> bytes:
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
    # the fused kernel's four variants: float32 and uint8 outputs, NCHW (contiguous) and NHWC (strided)
    for layout in ("NCHW", "NHWC"):
        for tail in ([T.Normalize([0.5] * 3, [0.25] * 3)], []):
            T.Compose([T.RandomResizedCrop(12), T.RandomHorizontalFlip(), *tail], layout=layout)(imgs)
    # the barrier passes (a statistic of the whole image), the blur and the mix; the elastic field's blur
    T.Compose([T.RandomResizedCrop(12), T.RandomEqualize(1.0), T.RandomAutocontrast(1.0), T.GaussianBlur(3),
               T.AugMix(mixture_width=2, chain_depth=1)])(imgs)
    T.Compose([T.RandomResizedCrop(12), T.ElasticTransform(10.0, 1.0)])(imgs)
    # PNG in two halves on the CPU: the unfilter kernel's twin and the Adler-32 pieces
    data = _png(rng.integers(0, 256, (9, 11, 3), np.uint8))
    req = Request(data, "png", 9, 11, (0, 0, 9, 11), "warm.tar", "k")
    PngDecoder(device="cpu").decode([req]).settle()
    print(f"warm_kernels: the CPU kernels compiled or loaded in {time.perf_counter() - t0:.0f} s "
          f"into {os.environ['GPUDECODE_CACHE_DIR']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
