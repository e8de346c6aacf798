"""examples/imagenet: the gpudecode training script runs on a tiny ImageFolder tree and on
--dummy (FakeData) with a small model on the CPU (train, evaluate, resume), single process
and under torchrun with two processes (gloo); its evaluation of a checkpoint equals the
DataLoader script's on the same images (the tree's, FakeData's); and the swap between the
two scripts stays small."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import forkrun
from conftest import encode

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "imagenet"
CLASSES = ["astronaut", "chelsea", "coffee", "rocket"]
COMMON = ["-a", "resnet18", "-b", "4", "--image-size", "32", "--num-classes", "4", "-j", "2", "-p", "100",
          "--seed", "0"]


@pytest.fixture(scope="module")
def data(photos, tmp_path_factory):
    """images/{train,val}/<class>/*.jpg (ImageFolder)."""
    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for split, per in (("train", 6), ("val", 3)):
        for name in CLASSES:
            d = root / "images" / split / name
            d.mkdir(parents=True)
            img = photos[name]
            for k in range(per):
                h, w = img.shape[:2]
                t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, w // 3))
                (d / f"{name}_{k}.jpg").write_bytes(encode(np.ascontiguousarray(img[t:t + h // 2, l:l + w // 2])))
    return root


def run(script, *args, cwd, torchrun=False):
    cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"] if torchrun else []
    cmd += [EXAMPLE / script, *args]
    # torchrun's rendezvous leaves a torchelastic_* folder in TMPDIR: the test's own folder, not /tmp
    env = dict(os.environ, TMPDIR=str(cwd))
    p = forkrun.run(cmd, cwd=cwd, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def accuracies(out):
    return re.findall(r"\* Acc@1 ([\d.]+) Acc@5 ([\d.]+) Loss [\d.]+ \((\d+) images\)", out)


def test_swap_is_small():
    diff = subprocess.run(["diff", str(EXAMPLE / "main_dataloader.py"), str(EXAMPLE / "main.py")], capture_output=True,
                          text=True).stdout
    changed = [line for line in diff.splitlines() if line[:2] in ("< ", "> ")]
    written = [line for line in changed if line.startswith("> ")]
    # the user writes 5 lines (an import, the two loaders, the sampler) and deletes the
    # DataLoader block; the datasets stay as the script builds them (FakeData under --dummy)
    assert 0 < len(written) <= 8 and len(changed) - len(written) <= 10, diff
    # the README shows exactly these lines
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    block = readme.split("```diff\n", 1)[1].split("```", 1)[0].splitlines()
    assert sorted(("-" if c[0] == "<" else "+") + c[2:] for c in changed) == sorted(block)


@pytest.mark.slow  # over 20 s on 2 cores (make test's --durations)
def test_train_evaluate_resume_single_process(data, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    images = data / "images"
    out = run("main.py", images, *COMMON, "--epochs", "1", "--checkpoint-dir", ckpt, cwd=tmp_path)
    assert "Epoch: [0][0/6]" in out and accuracies(out)[-1][2] == "12"
    ours = run("main.py", images, *COMMON, "-e", "--resume", ckpt / "checkpoint.pth.tar", cwd=tmp_path)
    theirs = run("main_dataloader.py", images, *COMMON, "-e", "--resume", ckpt / "checkpoint.pth.tar", cwd=tmp_path)
    assert accuracies(ours) == accuracies(theirs)  # the same checkpoint, the same verdict
    out = run("main.py", images, *COMMON, "--epochs", "2", "--resume", ckpt / "checkpoint.pth.tar",
              "--checkpoint-dir", ckpt, cwd=tmp_path)
    assert "loaded checkpoint" in out and "(epoch 1)" in out
    assert "Epoch: [1][0/6]" in out and "Epoch: [0]" not in out


@pytest.mark.slow  # over 20 s on 2 cores (make test's --durations)
def test_dummy_runs_in_both_scripts_and_evaluates_alike(tmp_path):
    """--dummy (pytorch/examples' FakeData run) through the swapped script: it trains, and
    its checkpoint evaluates on FakeData's validation images as the DataLoader script's,
    on their centre crops and on ten crops of each (--ten-crop)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    dummy = ["--dummy", "--dummy-size", "40"]
    out = run("main.py", "unused", *COMMON, *dummy, "--epochs", "1", "--checkpoint-dir", ckpt, cwd=tmp_path)
    assert "=> Dummy data is used!" in out and "Epoch: [0][0/10]" in out
    ours = run("main.py", "unused", *COMMON, *dummy, "-e", "--resume", ckpt / "checkpoint.pth.tar", cwd=tmp_path)
    theirs = run("main_dataloader.py", "unused", *COMMON, *dummy, "-e", "--resume", ckpt / "checkpoint.pth.tar",
                 cwd=tmp_path)
    assert accuracies(ours) and [a[2] for a in accuracies(ours)] == ["2"]  # 40 * 50000 / 1281167 rounds to 2
    # FakeData's float noise made into images, then Normalize: the loaders' values agree to float rounding
    for (a1, a5, n), (b1, b5, m) in zip(accuracies(ours), accuracies(theirs)):
        assert (a1, a5, n) == (b1, b5, m)
    # --ten-crop: v2's TenCrop, the DataLoader's collated list of ten batches and the Loader's ten views
    ours = run("main.py", "unused", *COMMON, *dummy, "-e", "--ten-crop", "--resume", ckpt / "checkpoint.pth.tar",
               cwd=tmp_path)
    theirs = run("main_dataloader.py", "unused", *COMMON, *dummy, "-e", "--ten-crop", "--resume",
                 ckpt / "checkpoint.pth.tar", cwd=tmp_path)
    assert accuracies(ours) == accuracies(theirs) and [a[2] for a in accuracies(ours)] == ["2"]


@pytest.mark.slow  # over 20 s on 2 cores (make test's --durations)
def test_torchrun_two_processes(data, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    out = run("main.py", data / "images", *COMMON, "--epochs", "1", "--dist-backend", "gloo", "--checkpoint-dir", ckpt,
              cwd=tmp_path, torchrun=True)
    # 24 training images over 2 ranks, batch 4: 3 steps on each rank
    assert out.count("Epoch: [0][0/3]") == 2
    # every rank's validation covers all 12 images: its share, the others' (all_reduce), the remainder
    assert [a[2] for a in accuracies(out)] == ["12", "12"]
    assert (ckpt / "checkpoint.pth.tar").exists()
    ev = run("main.py", data / "images", *COMMON, "-e", "--dist-backend", "gloo", "--resume",
             ckpt / "checkpoint.pth.tar", cwd=tmp_path, torchrun=True)
    single = run("main.py", data / "images", *COMMON, "-e", "--resume", ckpt / "checkpoint.pth.tar", cwd=tmp_path)
    assert [a[:2] for a in accuracies(ev)] == [accuracies(single)[0][:2]] * 2
