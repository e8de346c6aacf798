"""The `gpudecode` command line."""
from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any

from ._args import COUNT, COUNTS, DURATION, KIB, NONNEG, POSITIVE
from ._text import plural
from ._version import __version__


def _cmd_shard(a: argparse.Namespace) -> int:
    from .folder import shard_folder

    r = shard_folder(a.src, a.out, shard_size=a.shard_size, seed=a.seed, progress=not a.quiet, key=a.key,
                     overwrite=a.overwrite)
    print(f"wrote {plural(r.written, 'sample')} in {plural(len(r.shards), 'shard')}, {plural(len(r.classes), 'class')} "
          f"-> {r.class_index}; read them as {a.out!r} (e.g. gpudecode inspect {a.out})")
    for path, why in r.rejected:
        print(f"not packed: {path}: {why}", file=sys.stderr)
    if r.written == 0:
        print(f"gpudecode shard: error: no image was packed from {a.src}", file=sys.stderr)
        return 1
    return 0


def _cmd_inspect(a: argparse.Namespace) -> int:
    from .io.reader import BaseShardReader  # not torch's IterableDataset: no torch to import
    from ._probe import probe_batch
    from .tensors import npy_layout

    reader = BaseShardReader(a.shards, on_error="warn" if a.keep_going else "raise")
    exts: collections.Counter = collections.Counter()
    fmts: collections.Counter = collections.Counter()
    shapes: collections.Counter = collections.Counter()
    n = 0
    for s in reader:
        n += 1
        exts.update(s.fields.keys())
        for ext, data in s.fields.items():
            if ext in ("jpg", "jpeg", "png"):
                info = probe_batch([data])[0]
                fmts[info if isinstance(info, str) else f"{info.format} {info.subsampling or info.color_space}"] += 1
            elif ext == "npy":  # a tensor sample: its shape, or why it is not one gpudecode reads
                try:
                    h, w, _ = npy_layout(data)
                    shapes[f"{h}x{w}x3 uint8"] += 1
                except ValueError as e:
                    shapes[f"unreadable: {e}"] += 1
    out = {"shards": len(reader.urls), "samples": n, "extensions": dict(exts), "images": dict(fmts),
           "skipped": [f"{s.shard} {s.key}: {s.reason}" for s in reader.skipped]}
    if shapes:
        out["tensors"] = dict(shapes.most_common())
    print(json.dumps(out, indent=1))
    return 0


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _cmd_precache(a: argparse.Namespace) -> int:
    from ._probe import DEFAULT_MAX_PIXELS
    from .precache import merge, precache

    if a.merge is not None:
        if a.src is not None or a.out is not None:
            raise ValueError("--merge OUT takes no SRC/OUT")
        print(f"manifest -> {merge(a.merge)}")
        return 0
    if a.src is None or a.out is None:
        raise ValueError("give SRC and OUT (or --merge OUT)")
    bar = None

    def progress(done: int, total: int | None) -> None:
        nonlocal bar
        if a.quiet or (bar is None and total == 0):
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="img", desc="precache", smoothing=0.1)
        bar.update(done - bar.n)

    def finished() -> str:
        return f" after {bar.n} of {bar.total} images" if bar is not None and bar.total else ""

    a.interrupted = lambda: (f"interrupted{finished()}; the source shards finished are kept: the same command with "
                             "--resume goes on from them")
    try:
        r = precache(a.src, a.out, size=a.size, crop=a.crop, shard_size=a.shard_size, shard_bytes=a.shard_bytes,
                     num_threads=a.threads, on_error="warn" if a.keep_going else "raise",
                     max_pixels=DEFAULT_MAX_PIXELS if a.max_pixels is None else a.max_pixels, device=a.device,
                     decoder=a.decoder, rank=a.rank, world_size=a.world_size, resume=a.resume,
                     executor="ray" if a.ray is not None else "local", ray_address=a.ray or None, progress=progress,
                     masks=a.mask or ())
    finally:
        if bar is not None:
            bar.close()
    rate = r.written / r.seconds if r.seconds > 0 else 0.0
    print(f"wrote {plural(r.written, 'sample')} from {plural(len(r.units), 'source shard')} in {r.seconds:.1f} s "
          f"({rate:.0f} img/s)" + (f"; kept {plural(r.samples - r.written, 'sample')} of "
                                   f"{plural(len(r.kept), 'source shard')} done before" if r.kept else ""))
    print(f"{plural(r.samples, 'sample')} in {plural(len(r.shards), 'tensor shard')}, {_human_bytes(r.bytes)}")
    for s in r.skipped:
        print(f"skipped: {s.shard} {s.key or ''}: {s.reason}: {s.error}", file=sys.stderr)
    if r.skipped:
        print(f"skipped {plural(len(r.skipped), 'sample')} (listed in the manifest)", file=sys.stderr)
    if r.manifest is not None:
        print(f"manifest -> {r.manifest}")
    else:
        print("other ranks' source shards are not done yet: the last rank to finish writes the manifest "
              f"(or run: gpudecode precache --merge {a.out})")
    if r.samples == 0 and r.skipped:  # --keep-going that kept nothing: a failure, whatever was asked
        print(f"precache: every sample was skipped ({plural(len(r.skipped), 'sample')}): nothing was written",
              file=sys.stderr)
        return 1
    return 0


def _cmd_verify(a: argparse.Namespace) -> int:
    from ._manifest import verify  # not precache: no torch to import

    problems = verify(a.out, checksums=not a.quick)
    for p in problems:
        print(f"{a.out}: {p}", file=sys.stderr)
    if problems:
        print(f"verify: {len(problems)} problem{'s' if len(problems) > 1 else ''} in {a.out}", file=sys.stderr)
        return 1
    print(f"verify: {a.out} matches its manifest")
    return 0


def _cmd_bench(a: argparse.Namespace) -> int:
    out: str = getattr(a, "out", "") or "gpudecode-bench"
    if a.bench == "make-data":
        from .bench.data import make_data

        doc = make_data(a.dir, count=a.count, size=a.size, formats=a.formats.split(","), seed=a.seed,
                        shard_size=a.shard_size, show_progress=not a.quiet)
        per = ", ".join(f"{f} {b / 1024:.1f} KB" for f, b in doc["bytes_per_image"].items())
        print(f"{doc['count']} images {doc['size'][1]}x{doc['size'][0]} in {', '.join(doc['formats'])} -> {a.dir} "
              f"(per image: {per})")
        return 0
    if a.bench == "formats":
        from .bench.formats import markdown, run_formats

        doc = run_formats(a.data, out, threads=a.threads, device=a.device, batch=a.batch, repeat=a.repeat,
                          pipelines=a.pipelines.split(","), crop=a.crop, show_progress=not a.quiet)
        print(markdown(doc))
    elif a.bench == "train":
        from .bench.train import run_train, train_markdown

        doc = run_train(a.data, out, fmt=a.format, step_ms=a.step_ms, model=a.model,
                        workers=list(a.workers), threads=a.threads, batch=a.batch,
                        batches=a.batches, device=a.device)
        print(train_markdown(doc))
    elif a.bench == "io":
        from .bench.storage import run_io

        doc = run_io(a.path, out, block=a.block_kib * 1024, tiers=a.tiers, threads=a.threads,
                     link_mb_s=a.link_mb_s, first_byte_ms=a.first_byte_ms, nfs_latency_ms=a.nfs_latency_ms,
                     tier_files=a.tier_files)
        print(doc["markdown"])
    else:
        from .bench.train import run_profile

        doc = run_profile(a.data, out, fmt=a.format, step_ms=a.step_ms, threads=a.threads, batch=a.batch,
                          batches=a.batches, device=a.device)
    plots = doc.get("plots")
    print(f"\nresults: {out}/{doc['command']}.json" + (f"; plots: {', '.join(plots)}" if isinstance(plots, list)
                                                          else f"; {plots}"))
    return 0


def _add_bench(sub: Any) -> None:
    b = sub.add_parser("bench", help="benchmark input pipelines: datasets, formats, a trainer's view, storage, "
                       "profile", description="Each measurement writes a markdown table to stdout and a JSON file "
                       "(every raw figure, the machine) and PNG plots into --out.")
    bs = b.add_subparsers(dest="bench", required=True, metavar="SUBCOMMAND")

    def common(p: argparse.ArgumentParser, *, data: bool = True) -> None:
        if data:
            p.add_argument("data", help="a dataset made by `gpudecode bench make-data`")
        p.add_argument("--out", default="gpudecode-bench", help="where the JSON and plots go (default ./gpudecode-bench)")

    p = bs.add_parser("make-data", help="a dataset of realistic images cut from real photographs, in each format")
    p.add_argument("dir", help="output folder (new, empty, or an earlier make-data's)")
    p.add_argument("--count", type=COUNT, default=2048, help="images to make")
    p.add_argument("--size", default="224", help="224, 768 or WxH (default 224)")
    p.add_argument("--formats", default="png,jpg,tensor", help="comma-separated: png, jpg, tensor, and webp, tiff, "
                   "avif, heic, jxl (heic and jxl need pip install 'gpudecode[formats]')")
    p.add_argument("--shard-size", type=COUNT, default=256, help="samples per shard")
    p.add_argument("--seed", type=NONNEG, default=0, help="seed of the images drawn")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = bs.add_parser("formats", help="img/s and MB/s of each format x pipeline, one run, same transforms")
    common(p)
    p.add_argument("--threads", type=COUNT, default=2, help="threads / DataLoader workers for every pipeline")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for gpudecode and DALI")
    p.add_argument("--batch", type=COUNT, default=64, help="images per batch")
    p.add_argument("--repeat", type=COUNT, default=3, help="measured epochs (after a warm-up one)")
    p.add_argument("--crop", type=COUNT, default=224, help="RandomResizedCrop size")
    p.add_argument("--pipelines", default="gpudecode,classic,dali,spdl,synthetic",
                   help="comma-separated (those not installed are reported as such)")
    p.add_argument("--quiet", action="store_true", help="no progress output")

    p = bs.add_parser("train", help="a trainer consuming batches: wait, stalls and their period, classic "
                      "DataLoader with 1..W workers against gpudecode")
    common(p)
    p.add_argument("--format", default="jpg", choices=["jpg", "png", "tensor"], help="which shards of the dataset")
    p.add_argument("--step-ms", type=DURATION, default=50.0, help="the simulated step (default 50 ms)")
    p.add_argument("--model", default=None, help="a torchvision model (e.g. resnet18): a real step on the GPU")
    p.add_argument("--workers", type=COUNTS, default="1,2", help="DataLoader worker counts to run (default 1,2)")
    p.add_argument("--threads", type=COUNT, default=None, help="gpudecode's threads (default: the most workers)")
    p.add_argument("--batch", type=COUNT, default=64, help="images per batch")
    p.add_argument("--batches", type=COUNT, default=None, help="batches measured (default: one epoch)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for gpudecode")

    p = bs.add_parser("io", help="read bandwidth of where the data lives: whole shards in order vs small files, "
                      "local disk cold and warm, and (--tiers) an object store and NFS stood in for on this machine",
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("path", help="a folder (shards and/or image files below it), or a make-data dataset (by format)")
    p.add_argument("--out", default="gpudecode-bench", help="where io.json, io.md and io.png go")
    p.add_argument("--block-kib", type=KIB, default=1024, help="read size on the local disk")
    p.add_argument("--tiers", action="store_true", help="also the object-store stand-in (HTTP on 127.0.0.1, "
                   "with and without cache_dir) and the NFS stand-in")
    p.add_argument("--threads", type=COUNT, default=8, help="concurrent reads on the stand-in tiers")
    p.add_argument("--link-mb-s", type=POSITIVE, default=100.0, help="object-store stand-in: MB/s per connection")
    p.add_argument("--first-byte-ms", type=DURATION, default=20.0, help="object-store stand-in: ms to the first byte")
    p.add_argument("--nfs-latency-ms", type=DURATION, default=1.0, help="NFS stand-in: ms per request")
    p.add_argument("--tier-files", type=COUNT, default=512, help="small files per format read on the stand-ins")

    p = bs.add_parser("profile", help="gpudecode.profile on the classic pipeline and on gpudecode")
    common(p)
    p.add_argument("--format", default="jpg", choices=["jpg", "png", "tensor"], help="which shards of the dataset")
    p.add_argument("--step-ms", type=DURATION, default=20.0, help="the simulated training step per batch, ms")
    p.add_argument("--threads", type=COUNT, default=2, help="threads / DataLoader workers")
    p.add_argument("--batch", type=COUNT, default=64, help="images per batch")
    p.add_argument("--batches", type=COUNT, default=None, help="batches measured (default: one epoch)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for gpudecode")
    b.set_defaults(func=_cmd_bench)


def _cmd_plan(a: argparse.Namespace) -> int:
    from . import planning as pl

    costs = pl.costs_from_json(a.from_json, pipeline=a.pipeline) if a.from_json else []
    for c in a.cost or []:
        given = pl.parse_cost(c)
        costs = [x for x in costs if x.name != given.name] + [given]
    if a.formats:
        want = a.formats.split(",")
        missing = [f for f in want if f not in {c.name for c in costs}]
        if missing:
            raise pl.PlanError(f"--formats {a.formats}: no costs for {', '.join(missing)} "
                               f"(have: {', '.join(c.name for c in costs) or 'none'})")
        costs = [c for c in costs if c.name in want]
    if not costs:
        raise pl.PlanError("no per-image costs: give --from a `gpudecode bench formats` JSON, or --cost "
                           "NAME:KB_PER_IMAGE:CORE_MS_PER_IMAGE")
    if (a.rate is None) == (a.step_ms is None):
        raise pl.PlanError("give the GPUs' appetite: --step-ms MS (with --batch) or --rate IMG_S_PER_GPU")
    consumer = (pl.Consumer(a.rate, f"{a.rate:g} img/s per GPU, given") if a.rate is not None
                else pl.Consumer.from_step(step_ms=a.step_ms, batch=a.batch))
    overrides: dict[str, str] = {}
    storage = [n.strip() for n in a.storage.split(",") if n.strip()]
    for spec in a.tier or []:
        name, sep, over = spec.partition(":")
        if not sep:
            raise pl.PlanError(f"--tier {spec!r}: expected NAME:key=value[,key=value]")
        if name not in storage:  # an override of a tier not planned would be dropped without a word
            raise pl.PlanError(f"--tier {spec!r}: {name!r} is not one of --storage's tiers ({', '.join(storage)})")
        overrides[name] = over
    measured = pl.tiers_from_io(a.io) if a.io else {}
    tiers = [pl.tier(f"{n}:{overrides[n]}" if n in overrides else n, measured) for n in storage]
    node = pl.Node().with_(**pl.parse_overrides(a.node, "--node")) if a.node else pl.Node()
    try:
        gpus = [int(g) for g in a.gpus.split(",")]
    except ValueError:
        raise pl.PlanError(f"--gpus {a.gpus!r}: GPU counts are whole numbers, comma-separated (e.g. 1,8,64)") from None
    doc = pl.plan(costs, gpus=gpus, consumer=consumer, tiers=tiers, node=node, dataset_images=a.dataset_images)
    print(doc["markdown"] if a.all else doc["summary"])
    if a.out:
        paths = pl.write(doc, a.out)
        print(f"\nwritten: {', '.join(paths)}")
    return 0


def _add_plan(sub: Any) -> None:
    from .planning import TIERS

    s = sub.add_parser(
        "plan", help="how many disks, links and CPU cores a cluster needs, per format and storage tier "
        "(max-flow min-cut over measured capacities)",
        description="Builds each node's datapath as a flow network (storage devices, storage network, node "
        "links, node-local disks or cache, CPU cores, PCIe, the GPUs' step), capacities from measured "
        "per-image costs and documented part defaults, and finds with a max-flow what reaches the GPUs and "
        "with the minimum cut what holds it there. Every default is printed beside the table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s.add_argument("--from", dest="from_json", default=None, metavar="JSON",
                   help="per-image costs from a `gpudecode bench formats` JSON (e.g. "
                        "bench/results/formats/formats.json)")
    s.add_argument("--pipeline", default="gpudecode", choices=["gpudecode", "classic"],
                   help="whose measured costs to plan with (classic: torchvision's DataLoader)")
    s.add_argument("--cost", action="append", metavar="NAME:KB:CORE_MS[:GPU_IMG_S]",
                   help="a format's costs by hand (repeatable; replaces --from's of that name), e.g. jpg:110:2.4")
    s.add_argument("--formats", default=None, help="only these formats, comma-separated (default: all given)")
    s.add_argument("--gpus", default="1,4,8,16,64,256", help="GPU counts, comma-separated")
    s.add_argument("--step-ms", type=POSITIVE, default=None, help="the training step per batch, ms")
    s.add_argument("--batch", type=COUNT, default=256, help="images per GPU per step (with --step-ms)")
    s.add_argument("--rate", type=POSITIVE, default=None, help="or: img/s one GPU consumes")
    s.add_argument("--storage", default="local-nvme,nfs-hdd,object-store",
                   help=f"storage tiers, comma-separated (known: {', '.join(TIERS)})")
    s.add_argument("--io", default=None, metavar="JSON", help="tiers measured by `gpudecode bench io --tiers` "
                   "(io.json): adds measured-disk and measured-object-store to --storage's choices")
    s.add_argument("--tier", action="append", metavar="NAME:key=value,...",
                   help="override a tier's parts (repeatable), e.g. nfs-hdd:devices=48,server_gbit=100")
    s.add_argument("--node", default=None, metavar="key=value,...",
                   help="override the node (gpus, cores, links, link_gbit, pcie_gb_s, cache_gb, cache_mb_s); "
                        "default: DGX-class, 8 GPUs, 128 cores, 2 x 200 Gbit/s")
    s.add_argument("--dataset-images", type=COUNT, default=1_281_167,
                   help="images in the data set (the node-local cache's share; default ImageNet-1k train)")
    s.add_argument("--all", action="store_true", help="print every row, edge by edge (default: per GPU count and "
                   "tier, the best format and its cuts in order)")
    s.add_argument("--out", default="gpudecode-plan", help="where plan.json, plan.md and plan.png go ('' for none)")
    s.set_defaults(func=_cmd_plan)


def _cmd_ops(a: argparse.Namespace) -> int:
    import textwrap

    from ._ops_table import OPS

    print("What a Compose may hold to be fused (torchvision's classes, or gpudecode.transforms'), in order:")
    for kind, ops in OPS:
        print(textwrap.fill(ops, 100, initial_indent=f"  {kind + ':':<28}", subsequent_indent=" " * 30,
                            break_on_hyphens=False))
    print("Anything else: run it on each batch the Loader yields, or keep DataLoader for that pipeline.")
    return 0


def _cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(a.workdir, images=a.images, batch_size=a.batch_size, seed=a.seed)


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default shown, unless its help says it already (or there is none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if ("default" in h or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return h
        return h + " (default: %(default)s)"


def _formatted(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.formatter_class = _Help
    for a in parser._actions:  # noqa: SLF001 (argparse lists its subcommands nowhere public)
        if isinstance(a, argparse._SubParsersAction):  # noqa: SLF001
            for sp in a.choices.values():
                _formatted(sp)
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpudecode", description="GPU-side image decoding and augmentation "
                                "for PyTorch training: shard tools, precache, inspection and a demo.")
    p.add_argument("--version", action="version", version=f"gpudecode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("shard", help="pack an ImageFolder tree into shuffled WebDataset shards")
    s.add_argument("src", help="folder with one subfolder per class")
    s.add_argument("out", help="shard pattern, e.g. out/train-%%06d.tar")
    s.add_argument("--shard-size", type=COUNT, default=1000, help="samples per shard (default 1000)")
    s.add_argument("--seed", type=NONNEG, default=0, help="seed of the sample order")
    s.add_argument("--key", choices=["seq", "path"], default="seq",
                   help="sample keys: seq (000000000, ...; default) or path (the file's path in the tree); "
                        "either way <key>.json holds the path and label")
    s.add_argument("--overwrite", action="store_true",
                   help="remove the shards of this pattern an earlier run left, and its class index, first "
                        "(without it such an output is refused)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_shard)

    s = sub.add_parser("inspect", help="count samples, extensions and image encodings in shards")
    s.add_argument("shards", help="shards: path, brace pattern, directory, list file or URL")
    s.add_argument("--keep-going", action="store_true", help="report bad samples instead of stopping")
    s.set_defaults(func=_cmd_inspect)

    s = sub.add_parser("precache", help="write tensor shards of decoded, downsized images (read by the Loader "
                       "like any shards; crops and jitter stay random at train time)",
                       description="Decodes every image once and stores its pixels (uint8 HWC .npy) in WebDataset "
                       "shards with the samples' other fields, and beside each image it resizes or cuts a record of "
                       "how (KEY.gpudecode.json: the Loader moves masks and boxes onto the stored image by it; --mask moves a "
                       "mask member here, once). "
                       "Resumable (--resume), spread over ranks (torchrun, "
                       "SLURM, SLURM arrays; no coordinator) or a Ray cluster (--ray); `gpudecode verify OUT` checks "
                       "the result against its manifest.")
    s.add_argument("src", nargs="?", help="source shards: path, brace pattern, directory, list file or URL")
    s.add_argument("out", nargs="?", help="output directory (shards named inside it) or shard pattern, e.g. "
                   "cache/train-%%06d.tar")
    s.add_argument("--size", default="256", help="S: shorter side at most S (never upscaled; default 256), "
                   "or HxW: exactly that")
    s.add_argument("--crop", choices=["none", "center"], default="none",
                   help="center: then cut the SxS centre (train at the stored size)")
    s.add_argument("--mask", action="append", default=None, metavar="EXT",
                   help="a member that is a segmentation mask (e.g. seg.png; repeatable): moved with its image here, "
                   "once, rather than by the Loader each epoch")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--shard-size", type=COUNT, default=None, help="samples per output shard "
                   "(default: one output shard per source shard)")
    g.add_argument("--shard-bytes", default=None, help="bytes per output shard, e.g. 1GB")
    s.add_argument("--threads", type=COUNT, default=None, help="decode and resize threads (default: all cores)")
    s.add_argument("--max-pixels", type=NONNEG, default=None,
                   help="refuse images with more pixels (default: the Loader's limit; 0: no limit)")
    s.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: decode and resize on the GPU")
    s.add_argument("--decoder", default="auto", choices=["auto", "cpu", "nvimgcodec", "dali", "torchcodec"],
                   help="auto (default): nvImageCodec, else DALI, else torchcodec on a GPU; libjpeg-turbo on the CPU")
    s.add_argument("--rank", type=NONNEG, default=None, help="this process's rank (default: torchrun's RANK, SLURM's "
                   "SLURM_PROCID or SLURM_ARRAY_TASK_ID, else 0)")
    s.add_argument("--world-size", type=COUNT, default=None, help="number of ranks (default: from the same variables)")
    s.add_argument("--resume", action="store_true", help="keep the source shards already done (checked) and "
                   "do the rest")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the source shards as Ray tasks on the cluster at ADDRESS (or 'auto'; none: a local Ray)")
    s.add_argument("--merge", default=None, metavar="OUT", help="only write OUT's manifest from its ranks' records")
    s.add_argument("--keep-going", action="store_true", help="skip bad samples (listed in the manifest) instead "
                   "of stopping")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_precache)

    s = sub.add_parser("verify", help="check a precache output against its manifest (exit 1 on any problem)")
    s.add_argument("out", help="the precache output: directory or shard pattern")
    s.add_argument("--quick", action="store_true", help="skip the sha256 of the shards")
    s.set_defaults(func=_cmd_verify)

    _add_bench(sub)
    _add_plan(sub)

    s = sub.add_parser("ops", help="what a transform may hold to be fused, and in which order")
    s.set_defaults(func=_cmd_ops)

    s = sub.add_parser("demo", help="build shards from bundled photos and run the loader on the CPU")
    s.add_argument("--workdir", default="demo_data", help="where the demo shards go")
    s.add_argument("--images", type=COUNT, default=512, help="samples in the demo shards")
    s.add_argument("--batch-size", type=COUNT, default=64, help="images per batch")
    s.add_argument("--seed", type=NONNEG, default=0, help="seed of the demo data and the loader")
    s.set_defaults(func=_cmd_demo)
    return _formatted(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .errors import GpuDecodeError

    try:
        return int(args.func(args) or 0)
    except (GpuDecodeError, OSError, ValueError) as e:  # (OSError: a path that is not a folder, a read-only disk)
        print(f"gpudecode {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # one line: what was finished and how to go on, no traceback
        said = getattr(args, "interrupted", None)
        print(f"\ngpudecode {args.command}: {said() if said else _INTERRUPTED.get(args.command, 'interrupted')}",
              file=sys.stderr)
        return 130


_INTERRUPTED = {
    "shard": "interrupted; the shards written so far are not a whole set: run the same command again with --overwrite",
    "inspect": "interrupted; nothing was changed",
    "verify": "interrupted; nothing was changed, nothing verified: run it again",
    "plan": "interrupted; nothing was written",
    "bench": "interrupted; the measurements finished are not written: run it again (smaller: --repeat, --batches)",
    "demo": "interrupted; run it again (it starts over)",
    "ops": "interrupted",
}


if __name__ == "__main__":
    sys.exit(main())
