"""examples/timm/swap.py: the lines it adds to timm's train.py and validate.py, run
against the objects those scripts build (timm's create_dataset and create_loader with
DeiT's recipe on an ImageFolder tree of photographs): the swapped loaders yield what
timm's loaders yield (the same labels in the same order for evaluation, the eval pixels
within the resampler's tolerance of timm's PIL, train batches of the recipe's shape and
soft labels after timm's Mixup); a script of another layout is refused with what was
looked for. (The whole scripts need a pytorch-image-models checkout; the run on one is
recorded in examples/timm/README.md.)"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import encode

timm_data = pytest.importorskip("timm.data")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "timm"))
import swap  # noqa: E402

# timm's ImageDataset opens each file without closing it (PIL reads it lazily): its
# ResourceWarnings are timm's, not the Loader's
pytestmark = [pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

CLASSES = ["astronaut", "chelsea", "coffee", "rocket"]


@pytest.fixture(scope="module")
def tree(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("timm_tree")
    rng = np.random.default_rng(0)
    for split, per in (("train", 3), ("val", 2)):
        for name in CLASSES:
            d = root / split / name
            d.mkdir(parents=True)
            img = photos[name]
            h, w = img.shape[:2]
            for k in range(per):
                t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, w // 3))
                (d / f"{name}_{k}.jpg").write_bytes(encode(np.ascontiguousarray(img[t:t + h // 2, l:l + w // 2])))
    return root


MIXUP = dict(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=len(CLASSES))


def _timm_side(root: Path, size: int, prefetcher: bool = False):
    """What train.py has built by the swap's line: its datasets (their transforms set by
    create_loader from the command line), its train and eval loaders (timm's PrefetchLoader
    on the CPU with the prefetcher), the collate_fn (FastCollateMixup with the prefetcher,
    as train.py makes it) and its args."""
    common = dict(input_size=(3, size, size), use_prefetcher=prefetcher, num_workers=0, batch_size=4,
                  **({"device": torch.device("cpu")} if prefetcher else {}))
    ds_train = timm_data.create_dataset("", root=str(root), split="train", is_training=True)
    ds_eval = timm_data.create_dataset("", root=str(root), split="val")
    collate_fn = timm_data.FastCollateMixup(**MIXUP) if prefetcher else None
    loader_train = timm_data.create_loader(ds_train, is_training=True, re_prob=0.25, re_mode="pixel",
                                           auto_augment="rand-m9-mstd0.5-inc1", interpolation="random",
                                           collate_fn=collate_fn, **common)
    loader_eval = timm_data.create_loader(ds_eval, is_training=False, interpolation="bicubic", crop_pct=0.875,
                                          **common)
    args = argparse.Namespace(data_dir=str(root), train_split="train", val_split="val", batch_size=4, workers=2,
                              validation_batch_size=None, aug_repeats=0.0, prefetcher=prefetcher)  # (timm: a float)
    return ds_train, ds_eval, loader_eval, args, loader_train, collate_fn


def test_the_swapped_loaders_yield_what_timms_do(tree):
    size = 64
    ds_train, ds_eval, timm_eval, args, timm_train, collate_fn = _timm_side(tree, size)
    scope = {"os": os, "args": args, "dataset_train": ds_train, "dataset_eval": ds_eval, "loader_eval": timm_eval,
             "loader_train": timm_train, "collate_fn": collate_fn}
    exec(textwrap.dedent(swap.TRAIN_SWAP), scope)  # the lines as the script runs them
    import gpudecode
    loader_train, loader_eval = scope["loader_train"], scope["loader_eval"]
    assert isinstance(loader_train, gpudecode.Loader) and isinstance(loader_eval, gpudecode.Loader)
    fused = str(loader_train.describe())
    assert "TimmRandAugment" in fused and "RandomErasing" in fused
    # evaluation: the same images in the same order with the same labels, the pixels
    # within the resampler's tolerance of timm's (PIL's bicubic and Resize's rounding)
    ours = [(b.images, b.labels) for b in loader_eval]
    theirs = list(timm_eval)
    assert len(ours) == len(theirs) == len(loader_eval) == 2
    for (xi, yi), (xt, yt) in zip(ours, theirs):
        assert torch.equal(yi.long(), yt.long())
        assert xi.shape == xt.shape == (4, 3, size, size)
        # normalised units: 3 levels of 255 over the smallest std (0.224) is 0.053
        diff = (xi - xt).abs()
        assert float(diff.max()) < 0.12 and float((diff > 0.053).float().mean()) < 0.01
    # training: the recipe's batches, then timm's Mixup on them as train.py applies it
    mixup = timm_data.Mixup(**MIXUP)
    loader_train.set_epoch(0)
    seen = 0
    for b in loader_train:
        x, y = mixup(b.images, b.labels.long())
        assert x.shape == (4, 3, size, size) and y.shape == (4, len(CLASSES)) and torch.isfinite(x).all()
        assert torch.allclose(y.sum(1), torch.ones(4))
        seen += 1
    assert seen == len(loader_train) == 3  # 12 images, drop_last (as timm's train loader)


def test_with_timms_prefetcher_the_swap_normalizes_erases_and_mixes_as_timm_does(tree):
    """Issue 58, item 3: timm's default (--prefetcher): its transform stops at uint8, its
    PrefetchLoader normalizes and erases on the device and FastCollateMixup mixes. The
    swapped loaders give the script what timm's did: evaluation batches equal to the
    PrefetchLoader's within the resampler's tolerance, train batches normalized float
    with timm's erasing fused and its Mixup's soft labels (was: uint8 images at the
    model's first layer, and no mixing)."""
    size = 64
    ds_train, ds_eval, timm_eval, args, timm_train, collate_fn = _timm_side(tree, size, prefetcher=True)
    assert type(timm_eval).__name__ == "PrefetchLoader" and type(collate_fn).__name__ == "FastCollateMixup"
    scope = {"os": os, "args": args, "dataset_train": ds_train, "dataset_eval": ds_eval, "loader_eval": timm_eval,
             "loader_train": timm_train, "collate_fn": collate_fn}
    exec(textwrap.dedent(swap.TRAIN_SWAP), scope)
    loader_train, loader_eval = scope["loader_train"], scope["loader_eval"]
    ours = [(b.images, b.labels) for b in loader_eval]
    theirs = list(timm_eval)
    assert len(ours) == len(theirs) == 2
    for (xi, yi), (xt, yt) in zip(ours, theirs):
        assert torch.equal(yi.long(), yt.long()) and xi.dtype == xt.dtype == torch.float32
        diff = (xi - xt).abs()
        assert float(diff.max()) < 0.12 and float((diff > 0.053).float().mean()) < 0.01
    fused = str(loader_train.describe())
    assert "Normalize" in fused and "RandomErasing" in fused and "TimmRandAugment" in fused
    loader_train.set_epoch(0)
    batches = list(loader_train)
    assert len(batches) == 3
    for b in batches:
        assert b.images.dtype == torch.float32 and b.images.shape == (4, 3, size, size)
        assert b.labels.shape == (4, len(CLASSES)) and torch.allclose(b.labels.sum(1), torch.ones(4))
        assert float(b.images.mean().abs()) < 3  # (normalized: not 0-255)
    scope = {"os": os, "root_dir": str(tree), "dataset": ds_eval, "loader": timm_eval,
             "args": argparse.Namespace(split="val", batch_size=4, workers=2, prefetcher=True)}
    exec(textwrap.dedent(swap.VALIDATE_SWAP), scope)
    for (xi, _), b in zip(theirs, scope["loader"]):
        assert float((b.images - xi).abs().max()) < 0.12


def test_the_swap_keeps_timms_aug_repeats(tree):
    """timm's --aug-repeats 3 (its RepeatAugSampler) becomes the Loader's repeated_augs=3,
    with RASampler's epoch size said where it cuts an epoch (issue 58, item 2)."""
    ds_train, ds_eval, timm_eval, args, timm_train, collate_fn = _timm_side(tree, 64)
    args.aug_repeats = 3.0  # (timm's --aug-repeats is a float)
    scope = {"os": os, "args": args, "dataset_train": ds_train, "dataset_eval": ds_eval, "loader_eval": None,
             "loader_train": timm_train, "collate_fn": collate_fn}
    with pytest.warns(RuntimeWarning, match="repeated_augs=3"):
        exec(textwrap.dedent(swap.TRAIN_SWAP), scope)
    assert scope["loader_train"].reader.repeated_augs == 3


def test_the_swapped_validate_yields_timms_labels(tree):
    ds_train, ds_eval, timm_eval, *_ = _timm_side(tree, 64)
    scope = {"os": os, "root_dir": str(tree), "dataset": ds_eval, "loader": timm_eval,
             "args": argparse.Namespace(split="val", batch_size=4, workers=2, prefetcher=False)}
    exec(textwrap.dedent(swap.VALIDATE_SWAP), scope)
    labels = torch.cat([b.labels for b in scope["loader"]]).long()
    assert torch.equal(labels, torch.cat([y for _, y in timm_eval]).long())


def test_a_script_of_another_layout_is_refused_with_what_was_looked_for(tmp_path):
    (tmp_path / "train.py").write_text("def main():\n    pass\n")
    (tmp_path / "validate.py").write_text(f"def validate(args):\n{swap.VALIDATE_ANCHOR}")
    with pytest.raises(SystemExit, match="train.py: the line '# setup loss function' occurs 0 times"):
        swap.swap(tmp_path, tmp_path / "out")
    (tmp_path / "train.py").write_text(f"def main():\n{swap.TRAIN_ANCHOR}{swap.TRAIN_ANCHOR}")
    with pytest.raises(SystemExit, match="occurs 2 times"):
        swap.swap(tmp_path, tmp_path / "out")
    (tmp_path / "train.py").write_text(f"def main():\n    x = 1\n{swap.TRAIN_ANCHOR}    y = 2\n")
    train, validate = swap.swap(tmp_path, tmp_path / "out")
    text = train.read_text()
    assert text.index("x = 1") < text.index("gpudecode.Loader") < text.index("# setup loss function")
    compile(text, "train.py", "exec")
    compile(validate.read_text(), "validate.py", "exec")
