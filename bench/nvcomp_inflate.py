"""PNG's inflate half on the GPU (issue 56): nvCOMP's batched raw-Deflate decode of PNG
IDAT streams, checked equal to zlib's and timed against zlib on the host's cores.

    python bench/nvcomp_inflate.py [--images 256] [--threads 6] [--calls 64,256] [--levels 0-9] [--out DIR]

The corpus: scikit-image's photographs saved by Pillow as PNG in colour types 0, 2, 3, 4
and 6, zlib levels 0-9 (--levels: fewer, for a rehearsal), and a 500x375 batch of the photographs (the bench's JPEG set as
PNG, level 6). For each PNG the host part only: walk the chunks, join the IDAT payloads,
strip the zlib wrapper (2 header bytes, 4 Adler-32 bytes), gpudecode.decode.png.read_png's; nvCOMP inflates the raw
streams as one batch on the GPU; every output must equal zlib.decompress of the same
IDAT bytes. Then the batch's inflate rate: nvCOMP (the batch in device memory, its
stream synchronized) against zlib on one thread and on --threads threads (zlib on at most
256 of the images). --calls: nvCOMP's rate with that many streams in one call (the first
ones of the batch, their sizes found once), since a call of one batch's streams may not fill
the GPU (a stream is inflated by one unit of it): whether the rate grows with the streams a
call holds. Then the batch carved out of one buffer and inflated straight into another
(into_one_buffer: nvCOMP 6's offset tables and out=), the form the PNG engine could take.

Without CUDA or without nvCOMP it says which and exits 0 having measured only zlib:
no GPU figure is made up. Writes nvcomp.json to --out.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


class _NoDevice(RuntimeError):
    """No CUDA device here: nvCOMP is not measured (said in one line)."""


def corpus(n_batch: int, levels: range | list[int] = range(10)) -> list[tuple[str, bytes]]:
    import numpy as np
    from PIL import Image
    from skimage import data

    photos = {"astronaut": data.astronaut(), "coffee": data.coffee(), "chelsea": data.chelsea(),
              "rocket": data.rocket()}
    out = []
    for name, arr in photos.items():
        im = Image.fromarray(arr)
        for mode in ("L", "RGB", "P", "LA", "RGBA"):
            m = im.convert(mode) if mode != "P" else im.quantize(256)
            for level in levels:
                buf = io.BytesIO()
                m.save(buf, "PNG", compress_level=level)
                out.append((f"{name}-{mode}-z{level}", buf.getvalue()))
    rng = np.random.default_rng(0)
    base = list(photos.values())
    crops = []
    for i in range(n_batch):
        a = base[i % len(base)]
        y = int(rng.integers(0, max(1, a.shape[0] - 375)))
        x = int(rng.integers(0, max(1, a.shape[1] - 500)))
        crops.append(np.ascontiguousarray(np.resize(a[y:y + 375, x:x + 500], (375, 500, 3))))

    def png(crop) -> bytes:  # (on every core: Pillow's zlib releases the GIL)
        buf = io.BytesIO()
        Image.fromarray(crop).save(buf, "PNG", compress_level=6)
        return buf.getvalue()

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        out += [(f"batch-{i}", b) for i, b in enumerate(pool.map(png, crops))]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=256, help="500x375 PNGs in the timed batch")
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", default="", help="streams in one nvCOMP call, comma-separated (at most --images)")
    ap.add_argument("--levels", default="0-9", help="the zlib levels of the corpus: 0-9, or a comma-separated list")
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench/_out")
    a = ap.parse_args(argv)
    lo, dash, hi = a.levels.partition("-")
    try:
        levels = list(range(int(lo), int(hi) + 1)) if dash else [int(x) for x in a.levels.split(",")]
    except ValueError:
        levels = []
    if not levels or any(not 0 <= x <= 9 for x in levels):
        ap.error(f"--levels {a.levels!r}: zlib's levels are 0 to 9")
    report: dict = {}
    items = corpus(a.images, levels)
    from gpudecode.decode.png import read_png  # (the host half: chunks walked, IDATs joined)

    layouts = [read_png(b) for _, b in items]
    streams = [(k, lay.stream) for (k, _), lay in zip(items, layouts)]
    expect = [zlib.decompress(s) for _, s in streams]
    raws = [bytes(lay.raw_deflate()) for lay in layouts]
    whole = [i for i, (k, _) in enumerate(streams) if k.startswith("batch-")]
    batch = whole[:256]  # (timed against zlib; the --calls sizes take from `whole`)
    enc = sum(len(raws[i]) for i in batch)
    dec = sum(len(expect[i]) for i in batch)
    report["corpus"] = {"pngs": len(items), "batch": len(batch), "batch_raw_deflate_bytes": enc,
                        "batch_inflated_bytes": dec}
    print(f"corpus: {len(items)} PNGs; timed batch {len(batch)} of 500x375, {enc / 1e6:.1f} MB deflate -> "
          f"{dec / 1e6:.1f} MB", flush=True)

    def zlib_batch(pool=None):
        f = lambda i: zlib.decompress(raws[i], -15)  # noqa: E731
        return list(pool.map(f, batch)) if pool else [f(i) for i in batch]

    for threads in (1, a.threads):
        pool = ThreadPoolExecutor(threads) if threads > 1 else None
        zlib_batch(pool)
        best = float("inf")
        for _ in range(a.repeats):
            t = time.perf_counter()
            zlib_batch(pool)
            best = min(best, time.perf_counter() - t)
        report[f"zlib_{threads}_threads"] = {"s": best, "images_per_s": len(batch) / best, "GB_per_s": dec / best / 1e9}
        print(f"zlib, {threads} thread(s): {len(batch) / best:,.0f} img/s ({dec / best / 1e9:.2f} GB/s out)", flush=True)
        if pool:
            pool.shutdown()
    report["staging"] = staging(raws, whole, a.threads, a.repeats)
    try:
        import torch

        if not torch.cuda.is_available():
            raise _NoDevice("no CUDA device")
        from nvidia import nvcomp

        report["nvcomp"] = {"version": nvcomp.__version__, "gpu": torch.cuda.get_device_name()}
        codec = nvcomp.Codec(algorithm="Deflate", bitstream_kind=nvcomp.BitstreamKind.RAW)
        dev = [torch.frombuffer(bytearray(r), dtype=torch.uint8).cuda() for r in raws]
        torch.cuda.synchronize()
        srcs = nvcomp.as_arrays(dev)
        outs = codec.decode(srcs)
        bad = []
        host = outs.cpu()
        import numpy as np

        for i, (k, _) in enumerate(streams):
            got = np.asarray(host[i]).tobytes()
            if got != expect[i]:
                bad.append((k, len(got), len(expect[i])))
        report["nvcomp"]["equal"] = len(streams) - len(bad)
        report["nvcomp"]["unequal"] = bad[:20]
        print(f"nvCOMP inflate equals zlib on {len(streams) - len(bad)} of {len(streams)} PNGs"
              + (f"; unequal: {bad[:5]}" if bad else ""), flush=True)
        one = nvcomp.as_arrays([dev[i] for i in batch])
        cfgs = {}
        try:  # the sizes pass done once, outside the timing (a trainer knows them from IHDR)
            cfgs["sizes found once"] = codec.decompression_config(one)
        except Exception as e:
            report["nvcomp"]["config_error"] = repr(e)

        def best_of(arrays, count: int, cfg, codec=codec) -> float:
            """The fastest of --repeats decodes of `arrays` (`count` streams) after a warm-up, in seconds."""
            kw = {} if cfg is None else {"decompression_config": cfg}
            codec.decode(arrays, **kw)
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(a.repeats):
                t = time.perf_counter()
                r = codec.decode(arrays, **kw)
                r[count - 1]  # waits for the work that produced the batch
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            return best

        for label, cfg in [("sizes found by nvCOMP", None)] + [(k, v) for k, v in cfgs.items() if v is not None]:
            best = best_of(one, len(batch), cfg)
            report["nvcomp"][label] = {"s": best, "images_per_s": len(batch) / best, "GB_per_s": dec / best / 1e9}
            print(f"nvCOMP batched inflate ({label}): {len(batch) / best:,.0f} img/s ({dec / best / 1e9:.2f} GB/s out)",
                  flush=True)
        calls = {}
        for size in (int(c) for c in a.calls.split(",") if c.strip()):
            size = min(size, len(whole))
            some = nvcomp.as_arrays([dev[i] for i in whole[:size]])
            cfg = codec.decompression_config(some) if cfgs.get("sizes found once") is not None else None
            best = best_of(some, size, cfg)
            out_bytes = sum(len(expect[i]) for i in whole[:size])
            calls[size] = {"s": best, "images_per_s": size / best, "GB_per_s": out_bytes / best / 1e9}
            how = "sizes found once" if cfg is not None else "sizes found by nvCOMP"
            print(f"nvCOMP, {size} streams in one call ({how}): {size / best:,.0f} img/s "
                  f"({out_bytes / best / 1e9:.2f} GB/s out)", flush=True)
        report["nvcomp"]["calls"] = calls
        report["nvcomp"]["into_one_buffer"] = into_one_buffer(nvcomp, codec, [raws[i] for i in batch],
                                                              [expect[i] for i in batch], best_of)
    except Exception as e:
        report["nvcomp_error"] = f"{type(e).__name__}: {e}"
        print("nvCOMP not measured:", report["nvcomp_error"], flush=True)
        if not isinstance(e, _NoDevice):  # (a failure on a GPU: its whole story)
            traceback.print_exc()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvcomp.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


def staging(raws: list[bytes], whole: list[int], threads: int, repeats: int) -> dict:
    """The host's copy of a batch's raw Deflate streams into one staging buffer (page-locked
    where CUDA is), by the engine's own stage_streams: on one thread, and split over
    `threads` threads as the engine splits a large batch (numpy's copies release
    the GIL): whether the copy binds on this host and would gain from the engine's pool.
    The batch of 256 and every image of the batch set (--images). No GPU is used."""
    import numpy as np
    import torch

    from gpudecode.decode.png import stage_streams

    out: dict = {"pinned": torch.cuda.is_available()}
    for label, idx in (("256", whole[:256]), ("all", whole)):
        views = [raws[i] for i in idx]
        starts = np.concatenate([[0], np.cumsum([len(v) for v in views])]).astype(np.int64)
        buf = torch.empty(int(starts[-1]), dtype=torch.uint8, pin_memory=out["pinned"]).numpy()
        row = {"images": len(idx), "MB": int(starts[-1]) / 1e6}
        for k in (1, threads):
            cuts = np.linspace(0, len(views), k + 1).astype(int)
            parts = [(buf, starts, views, int(cuts[j]), int(cuts[j + 1])) for j in range(k)]
            with ThreadPoolExecutor(k) as pool:
                best = float("inf")
                for _ in range(repeats + 1):
                    t = time.perf_counter()
                    list(pool.map(lambda part: stage_streams(*part), parts))
                    best = min(best, time.perf_counter() - t)
            row[f"{k}_threads_ms"] = best * 1e3
        out[label] = row
        print(f"staging {len(idx)} streams ({row['MB']:.1f} MB, {'pinned' if out['pinned'] else 'pageable'}): "
              f"{row['1_threads_ms']:.2f} ms on one thread, {row[f'{threads}_threads_ms']:.2f} on {threads}", flush=True)
    return out


def into_one_buffer(nvcomp, codec, raws: list[bytes], expect: list[bytes], best_of) -> dict:
    """The batch as the PNG engine could hand it to nvCOMP 6 (not yet how it does: this
    measures whether to): the streams in one device buffer carved by an offset table
    (`as_arrays(buffer, offsets, sizes)`, no object a stream), inflated straight into one
    output buffer carved the same way (`decode(..., out=)`: the unfilter kernel's input,
    no copy a stream after). Checked equal to zlib; timed as the other rows; the host
    time of making each batch object both ways; and what nvCOMP says of an output of
    more room than the stream fills (its buffer_size) and of one too small (its error),
    which the engine's size check would rest on. Each part's failure is reported."""
    import numpy as np
    import torch

    r: dict = {}
    try:
        align = 16
        offs = np.concatenate([[0], np.cumsum([-(-len(x) // align) * align for x in raws])]).astype(np.int64)
        host = np.zeros(int(offs[-1]), np.uint8)
        for x, o in zip(raws, offs):
            host[o:o + len(x)] = np.frombuffer(x, np.uint8)
        comp = torch.from_numpy(host).cuda()
        outs = np.concatenate([[0], np.cumsum([-(-len(x) // align) * align for x in expect])]).astype(np.int64)
        dst = torch.zeros(int(outs[-1]), dtype=torch.uint8, device="cuda")
        sizes = [len(x) for x in raws]
        wants = [len(x) for x in expect]
        t = time.perf_counter()
        srcs = nvcomp.as_arrays(comp, offs[:-1].tolist(), sizes)
        r["host_us_carved_batch"] = (time.perf_counter() - t) * 1e6
        views = [comp[int(o):int(o) + n] for o, n in zip(offs, sizes)]
        t = time.perf_counter()
        nvcomp.as_arrays(views)
        r["host_us_batch_of_slices"] = (time.perf_counter() - t) * 1e6
        out = nvcomp.as_arrays(dst, outs[:-1].tolist(), wants)
        cfg = codec.decompression_config(srcs)
        codec.decode(srcs, out=out, decompression_config=cfg)
        torch.cuda.synchronize()
        got = dst.cpu().numpy()
        r["equal"] = sum(got[o:o + len(x)].tobytes() == x for o, x in zip(outs, expect))
        r["of"] = len(expect)
        best = best_of_out(codec, srcs, out, cfg, best_of)
        r["s"], r["images_per_s"] = best, len(raws) / best
        print(f"nvCOMP into one carved buffer: equal to zlib on {r['equal']} of {len(expect)}; "
              f"{len(raws) / best:,.0f} img/s; a batch object {r['host_us_carved_batch']:.0f} us carved, "
              f"{r['host_us_batch_of_slices']:.0f} us from {len(raws)} slices", flush=True)
    except Exception as e:
        r["error"] = f"{type(e).__name__}: {e}"
        print("nvCOMP into one buffer not measured:", r["error"], flush=True)
        traceback.print_exc()
    for label, room in (("more_room", 64), ("too_small", -64)):  # one stream, an output of want + room bytes
        try:
            x, want = raws[0], len(expect[0])
            one = nvcomp.as_arrays([torch.frombuffer(bytearray(x), dtype=torch.uint8).cuda()])
            buf = torch.zeros(want + room, dtype=torch.uint8, device="cuda")
            o = nvcomp.as_arrays(buf, [0], [want + room])
            res = codec.decode(one, out=o)
            torch.cuda.synchronize()
            r[label] = {"buffer_size": int(res[0].buffer_size), "want": want,
                        "equal": buf[:want].cpu().numpy().tobytes() == expect[0]}
        except Exception as e:
            r[label] = {"error": f"{type(e).__name__}: {e}"}
        print(f"nvCOMP, an output of {room:+d} bytes of room: {r[label]}", flush=True)
    return r


def best_of_out(codec, srcs, out, cfg, best_of) -> float:
    """best_of's timing of decode(srcs, out=out): the same repeats, warm-up and waits."""
    class _Into:  # (best_of calls codec.decode(arrays, **kw): this one adds out=)
        def decode(self, arrays, **kw):
            return codec.decode(arrays, out=out, **kw)

    return best_of(srcs, 1, cfg, codec=_Into())


if __name__ == "__main__":
    sys.exit(main())
