"""examples/segmentation: images with palette-PNG masks trained on with torchvision's
segmentation reference recipe, each mask moved with its image: every image once an
epoch as (images, masks) with padding at the ignore index, and a mask that is not one
(a colour PNG) skipped and named, the rest trained on."""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from PIL import Image

import forkrun
from conftest import make_shard, tar_samples

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "segmentation" / "train.py"


def _run(tmp_path, *extra):
    p = forkrun.run([EXAMPLE, "--epochs", "2", *extra], cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_the_example_trains_on_masks_and_skips_a_colour_mask(tmp_path):
    out = _run(tmp_path, "--make-demo", str(tmp_path / "set"))
    assert "48 images with masks, 6 batches an epoch" in out and "['images', 'seg.png']" in out, out
    assert re.findall(r"epoch (\d): (\d+) images", out) == [("0", "48"), ("1", "48")], out
    assert "skipped" not in out

    (_, first), *_ = tar_samples(tmp_path / "set" / "seg-000000.tar")
    with Image.open(io.BytesIO(first["seg.png"])) as im:
        assert im.mode == "P"
        colour = im.convert("RGB")
    b = io.BytesIO()
    colour.save(b, "PNG")  # (a colour-coded mask: its classes are not its pixels)
    make_shard(tmp_path / "set" / "seg-000002.tar", [{"__key__": "colour-0000", "jpg": first["jpg"], "seg.png": b.getvalue()}])
    out = _run(tmp_path, "--data", str(tmp_path / "set"))
    assert "49 images with masks" in out and "skipped 1: colour-0000: field .seg.png is a PNG of mode RGB" in out, out
    assert re.findall(r"epoch (\d): (\d+) images", out) == [("0", "47"), ("1", "47")], out  # (6 batches of 8, less it)
    assert np.isfinite([float(v) for v in re.findall(r"loss ([0-9.]+)", out)]).all()


def test_the_example_rotates_masks_with_their_images(tmp_path):
    """--rotate 30: RandomRotation(30) after the flip; every image once an epoch, the
    corners the rotation brings in ignored (more of the pixels than without it)."""
    plain = _run(tmp_path, "--make-demo", str(tmp_path / "set"), "--epochs", "1")
    rotated = _run(tmp_path, "--data", str(tmp_path / "set"), "--rotate", "30", "--epochs", "1")
    assert re.findall(r"epoch (\d): (\d+) images", rotated) == [("0", "48")], rotated
    share = [float(re.search(r"([0-9.]+)% of pixels ignored", out).group(1)) for out in (plain, rotated)]
    assert share[1] > share[0] + 3, share  # (a 30-degree turn brings in corners of about 10% on average)
    assert np.isfinite(float(re.search(r"loss ([0-9.]+)", rotated).group(1)))


def test_the_example_trains_from_precached_shards_with_their_masks_moved(tmp_path):
    """--precache 64: the images decoded once into tensor shards at shorter side 64, each
    mask moved there with its image (a palette PNG of the stored size, its record saying
    so), then trained from: every image once; a second run keeps the shards (resume)."""
    from gpudecode.transforms.stored import RECORD, read_record

    out = _run(tmp_path, "--epochs", "1", "--make-demo", str(tmp_path / "set"), "--precache", "64")
    cache = tmp_path / "set-precached-64"
    assert f"precached 48 images and their masks (shorter side at most 64) into {cache}, 48 decoded now" in out, out
    assert re.findall(r"epoch (\d): (\d+) images", out) == [("0", "48")], out
    samples = [s for p in sorted(cache.glob("*.tar")) for _, s in tar_samples(p)]
    assert len(samples) == 48
    for s in samples:
        rec = read_record(s[RECORD])
        with Image.open(io.BytesIO(s["seg.png"])) as im:
            assert im.mode == "P" and im.size == (rec.size[1], rec.size[0]) and min(rec.size) == 64
        assert rec.done("seg.png") == len(rec.steps) == 1 and min(rec.source) > 64
    again = _run(tmp_path, "--epochs", "1", "--data", str(tmp_path / "set"), "--precache", "64")
    assert f"into {cache}, 0 decoded now" in again, again
