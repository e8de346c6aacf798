"""examples/lightning: a LightningDataModule around the Loader trains 2 epochs with 2 DDP
processes on the CPU (gloo), with Lightning's defaults (its sanity check runs part of the
val Loader before training, and every epoch starts a new iterator); each rank's batch
count is the same; the checkpoint carries the Loader's state."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import forkrun
from conftest import encode

pytest.importorskip("lightning", reason="Lightning is in the [lightning] extra (make test installs it)")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lightning" / "train.py"


def test_lightning_ddp_two_processes(photos, tmp_path):
    import torch

    rng = np.random.default_rng(0)
    for split, per in (("train", 10), ("val", 4)):
        for name in ("astronaut", "chelsea", "coffee"):
            d = tmp_path / "data" / split / name
            d.mkdir(parents=True)
            img = photos[name]
            h, w = img.shape[:2]
            for k in range(per):
                t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, w // 3))
                (d / f"{k}.jpg").write_bytes(encode(np.ascontiguousarray(img[t:t + h // 2, l:l + w // 2])))
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = forkrun.run([EXAMPLE, "--data", tmp_path / "data", "--epochs", "2", "--accelerator", "cpu", "--devices", "2",
                     "--strategy", "ddp", "--out", tmp_path / "logs"], cwd=tmp_path, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    counts = re.findall(r"rank (\d) epoch (\d): (\d+) batches", p.stdout)
    # 30 images over 2 ranks in batches of 8: 15 a rank, 2 batches a rank, every epoch
    assert sorted(counts) == [("0", "0", "2"), ("0", "1", "2"), ("1", "0", "2"), ("1", "1", "2")], p.stdout
    done = re.search(r"done: val_acc ([\d.]+) val_loss ([\d.]+); checkpoint (\S+)", p.stdout)
    assert done is not None, p.stdout
    ckpt = torch.load(tmp_path / done.group(3) if not os.path.isabs(done.group(3)) else done.group(3),
                      weights_only=False)
    state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state["dataset_state"]["format"] == "gpudecode.Loader/1"
