"""examples/detection: images with COCO annotations trained on with the large-scale-jitter
recipe and torchvision's Faster R-CNN, each sample's boxes moved with its image: every
image once an epoch as (images, targets), and a sample whose annotations hold a box of
negative width skipped and named, the rest trained on; with --precache, from tensor
shards whose boxes follow their resized images; with --recipe ssd, SSD's zoom-out and
IoU crop; with --recipe ssdlite / multiscale, those presets as written (images of their
own sizes)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import forkrun
from conftest import load_script, make_shard, tar_samples

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "detection" / "train.py"


def _run(tmp_path, *extra):
    """The example with `extra`, at 64 pixels (the model's work a quarter of the demo's 128:
    the same steps, in a test's time)."""
    p = forkrun.run([EXAMPLE, "--size", "64", *extra], cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def _make_demo(out):
    """The example's own demo set (its make_demo), written here: 48 images in two shards."""
    return load_script(EXAMPLE, "detection_example").make_demo(str(out))


def test_the_example_trains_on_boxes_and_skips_a_bad_annotation(tmp_path):
    """The demo's 48 images and a shard of one whose annotations hold a box of negative
    width: two epochs of the 47 the batches hold once it is skipped (6 batches of 8 less
    it), named in the skipped line; finite losses. (The demo made by --make-demo itself
    trains in the other tests.)"""
    _make_demo(tmp_path / "set")
    (_, first), *_ = tar_samples(tmp_path / "set" / "det-000000.tar")
    anns = json.loads(first["json"])
    assert anns and all(set(a) == {"bbox", "category_id", "iscrowd"} for a in anns)
    anns[0]["bbox"][2] = -5  # (a box of negative width)
    make_shard(tmp_path / "set" / "det-000002.tar",
               [{"__key__": "bad-0000", "jpg": first["jpg"], "json": json.dumps(anns).encode()}])
    out = _run(tmp_path, "--epochs", "2", "--data", str(tmp_path / "set"))
    assert "49 images with boxes, 6 batches an epoch" in out and "['images', 'json']" in out, out
    assert re.search(r"skipped 1: bad-0000: field \.json holds box 0, .* of negative width or height as XYWH", out), out
    epochs = re.findall(r"epoch (\d): (\d+) images, (\d+) boxes", out)
    assert [(e, n) for e, n, _ in epochs] == [("0", "47"), ("1", "47")] and all(int(b) > 47 for *_, b in epochs), out
    assert np.isfinite([float(v) for v in re.findall(r"loss ([0-9.]+)", out)]).all()


def test_the_example_trains_from_precached_tensor_shards(tmp_path):
    """--precache 96: the demo's images decoded once into tensor shards at shorter side 96
    (each with its record), then trained from: every image once, boxes in every batch; a
    second run keeps the precached shards (resume)."""
    from gpudecode.transforms.stored import RECORD, read_record

    out = _run(tmp_path, "--epochs", "1", "--make-demo", str(tmp_path / "set"), "--precache", "96")
    cache = tmp_path / "set-precached-96"
    assert f"precached 48 images (shorter side at most 96) into {cache}, 48 decoded now" in out, out
    epochs = re.findall(r"epoch (\d): (\d+) images, (\d+) boxes", out)
    assert [(e, n) for e, n, _ in epochs] == [("0", "48")] and int(epochs[0][2]) > 48, out
    records = [read_record(s[RECORD]) for p in sorted(cache.glob("*.tar")) for _, s in tar_samples(p)]
    assert len(records) == 48 and all(min(r.size) == 96 and min(r.source) > 96 for r in records)
    again = _run(tmp_path, "--epochs", "0", "--data", str(tmp_path / "set"), "--precache", "96")  # (no training)
    assert f"precached 48 images (shorter side at most 96) into {cache}, 0 decoded now" in again, again


def test_the_example_trains_with_ssds_recipe(tmp_path):
    """--recipe ssd: RandomPhotometricDistort first (on each whole image), RandomZoomOut,
    RandomIoUCrop (its crop drawn from each sample's boxes), Resize: every image once an
    epoch, boxes in the batches, a finite loss."""
    out = _run(tmp_path, "--epochs", "1", "--make-demo", str(tmp_path / "set"), "--recipe", "ssd")
    epochs = re.findall(r"epoch (\d): (\d+) images, (\d+) boxes", out)
    assert [(e, n) for e, n, _ in epochs] == [("0", "48")] and int(epochs[0][2]) > 24, out
    assert np.isfinite([float(v) for v in re.findall(r"loss ([0-9.]+)", out)]).all()
    assert "skipped" not in out


@pytest.mark.parametrize("recipe", ["ssdlite", "multiscale"])
def test_the_example_trains_with_images_of_their_own_sizes(tmp_path, recipe):
    """--recipe ssdlite / multiscale, the presets as written (ragged=True): every image once
    an epoch, at sizes of their own, boxes in the batches, a finite loss."""
    out = _run(tmp_path, "--epochs", "1", "--make-demo", str(tmp_path / "set"), "--recipe", recipe)
    epochs = re.findall(r"epoch (\d): (\d+) images, (\d+) boxes", out)
    assert [(e, n) for e, n, _ in epochs] == [("0", "48")] and int(epochs[0][2]) > 24, out
    assert np.isfinite([float(v) for v in re.findall(r"loss ([0-9.]+)", out)]).all()
    assert "skipped" not in out
