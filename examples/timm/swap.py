"""timm's own training and validation scripts (`train.py`, `validate.py` of a
pytorch-image-models checkout) on gpudecode's Loader: the swap, and a check of it.

The swap adds a few lines to each script, after it has built its loaders, and changes
nothing else: the dataset's transform, the one timm's `create_loader` gave it from the
command line (`--aa`, `--reprob`, `--remode`, `--train-interpolation`, ...), goes to
`gpudecode.Loader` as it is. With timm's prefetcher on (its default), the transform
stops at uint8 and timm's PrefetchLoader normalizes and erases on the device while its
collate mixes: the swap hands the Loader timm's own Normalize, RandomErasing and Mixup
with the same settings (gpudecode.transforms.timm_augment.prefetcher_transforms), so the
script gets the batches it would have; `--no-prefetcher` works as well.

    python examples/timm/swap.py TIMM_CHECKOUT OUT_DIR
        writes OUT_DIR/train.py and OUT_DIR/validate.py, swapped
    python examples/timm/swap.py TIMM_CHECKOUT OUT_DIR --check IMAGEFOLDER_ROOT
        and checks them on the CPU (ROOT/train and ROOT/val are ImageFolder trees):
        2 epochs of training with DeiT's recipe (RandAugment rand-m9-mstd0.5-inc1,
        RandomErasing 0.25 "pixel", Mixup 0.8 / CutMix 1.0, random interpolation); the
        checkpoint evaluated by the original validate.py and by the swapped one (their
        results must be equal); 2 epochs under torchrun with 2 processes (gloo); then
        the same with timm's prefetcher on (its default) and --aug-repeats 3, whose
        batches an epoch must be what timm's RepeatAugSampler gives each rank (with at
        least 256 training images: timm's sampler rounds an epoch down to a multiple of
        256).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

# Where the lines go: before these lines (each found once) of timm's scripts.
TRAIN_ANCHOR = "    # setup loss function\n"
VALIDATE_ANCHOR = "    batch_time = AverageMeter()\n"

TRAIN_SWAP = '''\
    import gpudecode  # gpudecode's Loader in place of create_loader's
    from gpudecode.transforms.timm_augment import prefetcher_transforms
    train_tf, mix = dataset_train.transform, None
    if args.prefetcher:  # what timm's prefetcher does on the device (normalize, erase) and its collate (mix)
        train_tf, mix = prefetcher_transforms(loader_train, train_tf, collate_fn)
    if loader_eval is not None:
        eval_tf = prefetcher_transforms(loader_eval, dataset_eval.transform)[0] if args.prefetcher else \\
            dataset_eval.transform
        loader_eval = gpudecode.Loader(os.path.join(args.data_dir, args.val_split), transform=eval_tf,
                                       batch_size=args.validation_batch_size or args.batch_size, shuffle=False,
                                       num_workers=args.workers)
    loader_train = gpudecode.Loader(os.path.join(args.data_dir, args.train_split), transform=train_tf,
                                    batch_transform=mix, batch_size=args.batch_size, shuffle=True,
                                    num_workers=args.workers, drop_last=True,
                                    repeated_augs=max(1, int(args.aug_repeats)))  # (timm's --aug-repeats, a float: its RepeatAugSampler)

'''

VALIDATE_SWAP = '''\
    import gpudecode  # gpudecode's Loader in place of create_loader's
    from gpudecode.transforms.timm_augment import prefetcher_transforms
    eval_tf = prefetcher_transforms(loader, dataset.transform)[0] if args.prefetcher else dataset.transform
    loader = gpudecode.Loader(os.path.join(root_dir, args.split), transform=eval_tf,
                              batch_size=args.batch_size, shuffle=False, num_workers=args.workers)

'''

# timm's train.py hands DDP `device_ids=[device]`, which torch refuses for a CPU module (the
# original script cannot run under torchrun on the CPU either): for the CPU check only, the
# same one-line change is made to the script's call, not to anything of gpudecode's.
CPU_DDP = ("task.prepare_distributed(device_ids=[device],",
           "task.prepare_distributed(device_ids=[device] if device.type == 'cuda' else None,")

RECIPE = ["--model", "resnet10t", "--epochs", "2", "-b", "8", "--device", "cpu", "--no-prefetcher",
          "--aa", "rand-m9-mstd0.5-inc1", "--reprob", "0.25", "--remode", "pixel", "--mixup", "0.8",
          "--cutmix", "1.0", "--train-interpolation", "random", "--workers", "2", "--sched", "cosine",
          "--warmup-epochs", "0", "--seed", "0", "--lr", "0.01", "--checkpoint-hist", "1"]


def insert(source: str, anchor: str, lines: str, script: str) -> str:
    """`source` with `lines` before its one `anchor` line; a script of another layout is
    refused with what was looked for."""
    n = source.count(anchor)
    if n != 1:
        raise SystemExit(f"{script}: the line {anchor.strip()!r} occurs {n} times (once expected): a timm of "
                         "another layout; add the swap's lines by hand after the script builds its loaders")
    return source.replace(anchor, lines + anchor)


def swap(checkout: Path, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    train = insert((checkout / "train.py").read_text(), TRAIN_ANCHOR, TRAIN_SWAP, "train.py")
    validate = insert((checkout / "validate.py").read_text(), VALIDATE_ANCHOR, VALIDATE_SWAP, "validate.py")
    (out / "train.py").write_text(train)
    (out / "validate.py").write_text(validate)
    return out / "train.py", out / "validate.py"


def _run(cmd: list[str], cwd: Path, log: Path) -> str:
    env = dict(os.environ, TMPDIR=str(cwd))  # torchrun's rendezvous files stay in OUT_DIR
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    log.write_text(p.stdout + p.stderr)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed (exit {p.returncode}); its output: {log}")
    return p.stdout


def _result(stdout: str) -> object:
    return json.loads(stdout[stdout.rindex("--result") + len("--result"):])


def check(checkout: Path, out: Path, root: Path) -> dict:
    train, validate = swap(checkout, out)
    classes = len([d for d in (root / "train").iterdir() if d.is_dir()])
    data = ["--data-dir", str(root), "--num-classes", str(classes)]
    report: dict = {}
    stdout = _run([sys.executable, str(train), *data, "--train-split", "train", "--val-split", "val", *RECIPE,
                   "--output", str(out / "runs"), "--experiment", "one"], out, out / "train.log")
    report["train"] = _result(stdout)
    best = out / "runs" / "one" / "model_best.pth.tar"
    ev = [*data, "--split", "val", "--model", "resnet10t", "-b", "8", "--device", "cpu", "--no-prefetcher",
          "--workers", "2", "--checkpoint", str(best)]
    original = _result(_run([sys.executable, str(checkout / "validate.py"), *ev], out, out / "validate_original.log"))
    swapped = _result(_run([sys.executable, str(validate), *ev], out, out / "validate_swapped.log"))
    report["validate"] = {"original": original, "swapped": swapped, "equal": original == swapped}
    ddp = out / "train_ddp.py"
    text = train.read_text()
    if CPU_DDP[0] in text:
        text = text.replace(CPU_DDP[0], CPU_DDP[1])
    ddp.write_text(text)
    stdout = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(ddp),
                   *data, "--train-split", "train", "--val-split", "val", *RECIPE, "--output", str(out / "runs"),
                   "--experiment", "two"], out, out / "train_ddp.log")
    log = (out / "train_ddp.log").read_text()
    report["torchrun"] = {"result": _result(stdout),
                          "batches_per_epoch": sorted(set(re.findall(r"Train: \d+ \[\s*\d+/(\d+)", log)))}
    report["prefetcher"] = _prefetcher_run(ddp, data, root, out)
    return report


def _prefetcher_run(ddp: Path, data: list[str], root: Path, out: Path) -> dict:
    """The swapped train.py under torchrun (2 processes: timm's create_loader takes
    --aug-repeats only when distributed) with timm's prefetcher on and --aug-repeats 3: it
    trains, and each rank's batches an epoch are those of timm's own RepeatAugSampler over
    the same images (timm's class, asked directly: len() over the batch size, drop_last)."""
    from timm.data.distributed_sampler import RepeatAugSampler

    recipe = [a for a in RECIPE if a != "--no-prefetcher"] + ["--aug-repeats", "3"]
    n = sum(1 for _ in (root / "train").rglob("*") if _.is_file())
    batch = int(RECIPE[RECIPE.index("-b") + 1])
    want = len(RepeatAugSampler(list(range(n)), num_replicas=2, rank=0, num_repeats=3)) // batch
    stdout = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(ddp),
                   *data, "--train-split", "train", "--val-split", "val", *recipe, "--output", str(out / "runs"),
                   "--experiment", "prefetcher"], out, out / "train_prefetcher.log")
    log = (out / "train_prefetcher.log").read_text()
    got = sorted({int(b) for b in re.findall(r"Train: \d+ \[\s*\d+/(\d+)", log)})
    return {"result": _result(stdout), "images": n, "batches_per_epoch": got, "timm_repeat_aug_batches": want,
            "equal": got == [want]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="a pytorch-image-models checkout (its train.py and validate.py)")
    ap.add_argument("out", type=Path, help="where the swapped scripts (and the check's runs) go")
    ap.add_argument("--check", type=Path, metavar="ROOT", help="check on ROOT/train and ROOT/val (ImageFolder trees)")
    a = ap.parse_args(argv)
    if a.check is None:
        for p in swap(a.checkout, a.out):
            print(p)
        return 0
    report = check(a.checkout, a.out.resolve(), a.check.resolve())
    print(json.dumps(report, indent=1))
    return 0 if report["validate"]["equal"] and report["prefetcher"]["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
