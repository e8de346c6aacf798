"""The CPU decoder's PNG against libpng and the alternatives, in one run: one thread each,
scikit-image's photographs at 500x375 saved by Pillow (zlib level 6, its adaptive filters)
in five colour types, whole images and RandomResizedCrop(224)-like windows.

    python bench/png.py [--images 64] [--repeat 3]

- gpudecode: the CPU decoder's PNG decode (csrc/png_decode.cpp): its direct path where the
  result is sure to be libpng's (libdeflate or zlib, unfiltering in SIMD lanes), else libpng;
- libpng: the same function with the direct path off (libpng row by row, what the CPU
  decoder did before), the reference whose pixels the direct path must equal (checked
  here on every image);
- pyspng and Pillow (Image.open + convert("RGB")), whole images.
Prints img/s a thread and the ratio gpudecode / libpng per colour type. Writes png.json to
bench/_out.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path


def corpus(n: int) -> dict[str, list[bytes]]:
    import numpy as np
    from PIL import Image
    from skimage import data

    base = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry()]
    modes = {"RGB": "RGB", "RGBA": "RGBA", "grey": "L", "palette": "P", "grey+alpha": "LA"}
    out: dict[str, list[bytes]] = {m: [] for m in modes}
    rng = np.random.default_rng(0)
    for k in range(n):
        img = base[k % len(base)]
        h, w = img.shape[:2]
        t, left = int(rng.integers(0, h // 4)), int(rng.integers(0, w // 4))
        im = Image.fromarray(img[t:, left:]).resize((500, 375), Image.Resampling.BILINEAR)
        for name, mode in modes.items():
            b = io.BytesIO()
            (im.convert("RGBA").convert(mode) if mode in ("RGBA", "LA") else im.convert(mode)).save(b, "PNG")
            out[name].append(b.getvalue())
    return out


def windows(n: int, h: int = 375, w: int = 500) -> list[tuple[int, int, int, int]]:
    """RandomResizedCrop's windows (scale 0.08-1, ratio 3/4-4/3), as torchvision draws them."""
    import math
    import random

    rng = random.Random(1)
    out = []
    while len(out) < n:
        area = h * w * rng.uniform(0.08, 1.0)
        r = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(area * r))), int(round(math.sqrt(area / r)))
        if 0 < cw <= w and 0 < ch <= h:
            out.append((rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw))
    return out


def rate(fn, items, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        best = min(best, time.perf_counter() - t0)
    return len(items) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import numpy as np
    import pyspng
    from PIL import Image

    from gpudecode import _native
    from gpudecode.bench.common import machine

    sets = corpus(a.images)
    boxes = windows(a.images)
    whole = (0, 0, 375, 500)
    results: dict = {"machine": machine(), "images": a.images, "kinds": {}}
    print(f"{a.images} PNGs of 500x375 a colour type, one thread, img/s (best of {a.repeat})")
    print(f"{'':12} {'gpudecode':>10} {'libpng':>8} {'ratio':>6} | windows: {'gpudecode':>10} {'libpng':>8} "
          f"{'ratio':>6} | {'pyspng':>7} {'Pillow':>7}  direct")
    for kind, datas in sets.items():
        paths = set()
        for data, box in zip(datas, boxes):  # the same pixels as libpng's, and which path decided
            for b in (whole, box):
                (err, px, path), (ref_err, ref, _) = (_native.decode_png(data, b, 0, True),
                                                      _native.decode_png(data, b, 0, False))
                if err or ref_err or px != ref:
                    sys.exit(f"{kind}: the direct path and libpng differ ({err!r}, {ref_err!r})")
                paths.add(path)
        row = {
            "gpudecode": rate(lambda d: _native.decode_png(d, whole, 0, True), datas, a.repeat),
            "libpng": rate(lambda d: _native.decode_png(d, whole, 0, False), datas, a.repeat),
            "gpudecode_windows": rate(lambda it: _native.decode_png(it[0], it[1], 0, True), list(zip(datas, boxes)),
                                      a.repeat),
            "libpng_windows": rate(lambda it: _native.decode_png(it[0], it[1], 0, False), list(zip(datas, boxes)),
                                   a.repeat),
            "pyspng": rate(lambda d: pyspng.load(d, format="RGB"), datas, a.repeat),
            "pillow": rate(lambda d: np.asarray(Image.open(io.BytesIO(d)).convert("RGB")), datas, a.repeat),
            "paths": sorted(paths),
        }
        results["kinds"][kind] = row
        print(f"{kind:12} {row['gpudecode']:10.0f} {row['libpng']:8.0f} {row['gpudecode'] / row['libpng']:5.2f}x | "
              f"{'':9} {row['gpudecode_windows']:10.0f} {row['libpng_windows']:8.0f} "
              f"{row['gpudecode_windows'] / row['libpng_windows']:5.2f}x | {row['pyspng']:7.0f} {row['pillow']:7.0f}  "
              f"{'/'.join(row['paths'])}")
    out = Path(os.environ.get("GPUDECODE_BENCH_OUT", Path(__file__).resolve().parent / "_out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "png.json").write_text(json.dumps(results, indent=1))
    m = results["machine"]
    print(f"machine: {m.get('cpu_model', m.get('cpu'))}, {m.get('cores')} cores; written {out / 'png.json'}")


if __name__ == "__main__":
    main()
