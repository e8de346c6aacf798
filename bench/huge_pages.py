"""Large host buffers in transparent huge pages (kernels.workspace.huge_pages), on and off in
one process, alternated:

    python bench/huge_pages.py [--rounds 3] [--images 2048]

1. a batch output of 64 at 224 (float32, 38.5 MB) made and written once (what every batch
   costs where the caller keeps its batches, so that no output slot comes free), ms; and
   written again in place (the slots' usual reuse: three outputs each way, made first,
   then written in turn, on and off alternated write by write), by a fill and by the
   fused kernel (flip + Normalize on 2 threads), ms;
2. the Loader on the bench's tensor shards at 224 (flip + Normalize, batch 64, 2 threads):
   streamed, kept in RAM, and streamed with the consumer keeping 16 batches an epoch, img/s.

"off" makes the advice a no-op; each Loader is made anew, so each run's buffers are its own.
Where this kernel gives no transparent huge pages to madvised memory it says so, and both
columns measure the same thing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--images", type=int, default=2048)
    a = p.parse_args(argv)
    import torch

    import gpudecode._native as native
    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.bench.suite.loader import MEAN, STD, build
    from gpudecode.bench.suite.tensors import make_tensor_shards
    from gpudecode.kernels.workspace import huge_pages

    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print("transparent huge pages:", thp.read_text().strip() if thp.exists() else "not on this system")
    advise = native.huge_pages
    urls = make_tensor_shards(build(a.images)[0], "224c", 224, "center")
    tf = T.Compose([T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    n = 64 * 3 * 224 * 224

    def fresh() -> float:
        t = time.perf_counter()
        huge_pages(torch.empty(n)).fill_(1.0)
        return time.perf_counter() - t

    def written_again(rounds: int) -> dict[str, dict[str, float]]:
        import numpy as np

        from gpudecode.kernels import fused
        from gpudecode.kernels.workspace import Workspace

        sizes = [(224, 224)] * 64
        geom, args, order = tf.encode(tf.make_params(sizes, 0), sizes)
        geom[:, fused.OFFSET] = np.arange(64) * 224 * 224 * 3
        geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = 224 * 3, 3, 1
        src = torch.randint(0, 256, (64 * 224 * 224 * 3,), dtype=torch.uint8)
        ws, outs = Workspace(), {}
        for mode in ("off", "on"):
            native.huge_pages = advise if mode == "on" else (lambda m: 0)
            outs[mode] = [tf.new_output(64, size=(224, 224)) for _ in range(3)]
            for o, _ in outs[mode]:
                o.fill_(0.0)
        native.huge_pages = advise
        times: dict[str, dict[str, list[float]]] = {"fill": {"off": [], "on": []}, "kernel": {"off": [], "on": []}}
        for i in range(20 * rounds):
            for mode in (("off", "on") if i % 2 else ("on", "off")):
                o, v = outs[mode][i % 3]
                t = time.perf_counter()
                o.fill_(1.0)
                times["fill"][mode].append(time.perf_counter() - t)
                t = time.perf_counter()
                tf.run(src, geom, args, order, v, workspace=ws, num_threads=2)
                times["kernel"][mode].append(time.perf_counter() - t)
        return {f"output written again by a {k}, ms": {m: statistics.median(t) * 1e3 for m, t in v.items()}
                for k, v in times.items()}

    def epochs(keep=None, hold: int = 0) -> float:
        with Loader(urls, batch_size=64, transform=tf, device="cpu", num_threads=2, seed=0, keep=keep) as ld:
            rates = []
            for e in range(4):
                ld.set_epoch(e)
                t = time.perf_counter()
                kept, k = [], 0
                for b in ld:
                    k += len(b.keys)
                    if hold:
                        kept.append(b)
                        if len(kept) == hold:
                            break
                del kept
                if e:
                    rates.append(k / (time.perf_counter() - t))
            return statistics.median(rates)

    rows: dict[str, dict[str, list[float]]] = {}
    for _ in range(a.rounds):
        for mode in ("off", "on"):
            native.huge_pages = advise if mode == "on" else (lambda m: 0)
            try:
                got = {"output made and written, ms": statistics.median(fresh() for _ in range(10)) * 1e3,
                       "Loader streamed, img/s": epochs(),
                       "Loader keep='ram', img/s": epochs("ram"),
                       "Loader streamed, 16 batches kept, img/s": epochs(hold=16)}
            finally:
                native.huge_pages = advise
            for k, v in got.items():
                rows.setdefault(k, {"off": [], "on": []})[mode].append(v)
            print(mode, {k: round(v, 2) for k, v in got.items()}, flush=True)
    for k, v in written_again(a.rounds).items():
        rows[k] = {m: [x] for m, x in v.items()}
        print(k, {m: round(x, 3) for m, x in v.items()}, flush=True)
    print(f"\n| (medians of {a.rounds} rounds) | off | on | on / off |\n|---|---:|---:|---:|")
    for k, v in rows.items():
        off, on = statistics.median(v["off"]), statistics.median(v["on"])
        print(f"| {k} | {off:,.2f} | {on:,.2f} | {on / off:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
