"""The `gpudecode` command line."""
from __future__ import annotations

import argparse
import collections
import json
import sys

from ._version import __version__


def _cmd_shard(a: argparse.Namespace) -> int:
    from .folder import shard_folder

    r = shard_folder(a.src, a.out, shard_size=a.shard_size, seed=a.seed, progress=not a.quiet, key=a.key)
    print(f"wrote {r.written} samples in {len(r.shards)} shards, {len(r.classes)} classes -> {r.class_index}")
    for path, why in r.rejected:
        print(f"not packed: {path}: {why}", file=sys.stderr)
    return 0


def _cmd_inspect(a: argparse.Namespace) -> int:
    from .io.reader import ShardReader
    from ._probe import probe_batch

    reader = ShardReader(a.shards, on_error="warn" if a.keep_going else "raise")
    exts: collections.Counter = collections.Counter()
    fmts: collections.Counter = collections.Counter()
    n = 0
    for s in reader:
        n += 1
        exts.update(s.fields.keys())
        for ext, data in s.fields.items():
            if ext in ("jpg", "jpeg", "png"):
                info = probe_batch([data])[0]
                fmts[info if isinstance(info, str) else f"{info.format} {info.subsampling or info.color_space}"] += 1
    out = {"shards": len(reader.urls), "samples": n, "extensions": dict(exts), "images": dict(fmts),
           "skipped": [f"{s.shard} {s.key}: {s.reason}" for s in reader.skipped]}
    print(json.dumps(out, indent=1))
    return 0


def _cmd_precache(a: argparse.Namespace) -> int:
    from ._probe import DEFAULT_MAX_PIXELS
    from .precache import precache

    bar = None
    if not a.quiet:
        from tqdm import tqdm

        bar = tqdm(unit="img", desc="precache")
    last = [0]

    def progress(n: int) -> None:
        if bar is not None:
            bar.update(n - last[0])
        last[0] = n

    try:
        r = precache(a.src, a.out, size=a.size, shard_size=a.shard_size, num_threads=a.threads,
                     on_error="warn" if a.keep_going else "raise",
                     max_pixels=DEFAULT_MAX_PIXELS if a.max_pixels is None else a.max_pixels, manifest=a.manifest, progress=progress, device=a.device,
                     decoder=a.decoder)
    finally:
        if bar is not None:
            bar.close()
    print(f"wrote {r.samples} samples in {len(r.shards)} tensor shards (shorter side at most {a.size}) -> {r.manifest}")
    for s in r.skipped:
        print(f"skipped: {s.shard} {s.key or ''}: {s.reason}", file=sys.stderr)
    return 0


def _cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(a.workdir, images=a.images, batch_size=a.batch_size, seed=a.seed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudecode", description="GPU-side image decoding and augmentation "
                                "for PyTorch training: shard tools, precache, inspection and a demo.")
    p.add_argument("--version", action="version", version=f"gpudecode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("shard", help="pack an ImageFolder tree into shuffled WebDataset shards")
    s.add_argument("src", help="folder with one subfolder per class")
    s.add_argument("out", help="shard pattern, e.g. out/train-%%06d.tar")
    s.add_argument("--shard-size", type=int, default=1000, help="samples per shard (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="seed of the sample order")
    s.add_argument("--key", choices=["seq", "path"], default="seq",
                   help="sample keys: seq (000000000, ...; default) or path (the file's path in the tree); "
                        "either way <key>.json holds the path and label")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_shard)

    s = sub.add_parser("inspect", help="count samples, extensions and image encodings in shards")
    s.add_argument("shards", help="shards: path, brace pattern, directory, list file or URL")
    s.add_argument("--keep-going", action="store_true", help="report bad samples instead of stopping")
    s.set_defaults(func=_cmd_inspect)

    s = sub.add_parser("precache", help="write tensor shards of decoded, downsized images (read by the Loader "
                       "like any shards; crops and jitter stay random at train time)")
    s.add_argument("src", help="source shards: path, brace pattern, directory, list file or URL")
    s.add_argument("out", help="output shard pattern, e.g. cache/train-%%06d.tar")
    s.add_argument("--size", type=int, default=256, help="shorter side at most this (default 256; never upscaled)")
    s.add_argument("--shard-size", type=int, default=1000, help="samples per shard (default 1000)")
    s.add_argument("--threads", type=int, default=None, help="decode and resize threads (default: all cores)")
    s.add_argument("--max-pixels", type=int, default=None,
                   help="refuse images with more pixels (default: the Loader's limit; 0: no limit)")
    s.add_argument("--manifest", default=None, help="manifest path (default: beside the shards)")
    s.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: decode and resize on the GPU")
    s.add_argument("--decoder", default="auto", choices=["auto", "cpu", "nvimgcodec", "dali", "torchcodec"],
                   help="auto (default): nvImageCodec, else DALI, else torchcodec on a GPU; libjpeg-turbo on the CPU")
    s.add_argument("--keep-going", action="store_true", help="skip bad samples (listed in the manifest) instead of stopping")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_precache)

    s = sub.add_parser("demo", help="build shards from bundled photos and run the loader on the CPU")
    s.add_argument("--workdir", default="demo_data", help="where the demo shards go")
    s.add_argument("--images", type=int, default=512, help="samples in the demo shards")
    s.add_argument("--batch-size", type=int, default=64)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .errors import GpuDecodeError

    try:
        return int(args.func(args) or 0)
    except (GpuDecodeError, FileNotFoundError, ValueError) as e:
        print(f"gpudecode {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
