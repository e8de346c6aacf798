"""examples/mnist/train.py, as a user runs it: its stand-in set read by torchvision's own
MNIST class from the IDX files it wrote, the test split fed by the Loader as torchvision's
MNIST + DataLoader feed it ([N, 1, 28, 28], the same values), the augmenting transform
converted, and a short training run each way with batches of one channel."""
from __future__ import annotations

import argparse
import os
import re

import pytest
import torch

import forkrun
from conftest import load_script

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "examples", "mnist", "train.py")


@pytest.fixture(scope="module")
def example():
    return load_script(SCRIPT, "mnist_example")


@pytest.fixture(scope="module")
def data(example, tmp_path_factory):
    return example.make_demo(str(tmp_path_factory.mktemp("mnist")), n=250)


def test_the_stand_in_is_read_by_torchvisions_mnist(data):
    import torchvision

    train, test = (torchvision.datasets.MNIST(data, train=t) for t in (True, False))
    assert len(train) == 250 and len(test) == 50
    assert train.data.shape == (250, 28, 28) and train.data.dtype == torch.uint8
    assert set(train.targets.tolist()) <= set(range(10)) and len(set(train.targets.tolist())) > 5
    assert (train.data.flatten(1).amax(1) >= 100).all()  # (each image holds its drawn digit)


def test_the_test_split_is_fed_as_torchvisions_dataloader_feeds_it(example, data):
    args = argparse.Namespace(data=data, augment=False, torchvision=False, batch_size=50, seed=1, workers=0)
    _, test = example.loaders(args, "cpu")
    args.torchvision = True
    _, theirs = example.loaders(args, "cpu")
    with test:
        assert test.describe()["transform"] == ["ToDtype", "Normalize"]
        for epoch in (0, 1):  # (the first fills the store, the second reads it)
            test.set_epoch(epoch)
            got = [(b.images, b.labels) for b in test]
            want = list(theirs)
            assert [g.shape for g, _ in got] == [w.shape for w, _ in want] == [(50, 1, 28, 28)]
            for (g, gl), (w, wl) in zip(got, want):
                assert torch.equal(gl, wl)
                torch.testing.assert_close(g, w, atol=2e-6, rtol=0)


def test_the_augmenting_transform_converts_and_keeps_one_channel(example, data):
    args = argparse.Namespace(data=data, augment=True, torchvision=False, batch_size=50, seed=1, workers=0)
    train, _ = example.loaders(args, "cpu")
    with train:
        assert train.describe()["transform"] == ["RandomAffine", "ColorJitter", "ToDtype", "Normalize"]
        assert train.transform.channels == 1 and train.transform.grey
        images = torch.cat([b.images for b in train])
        assert images.shape == (250, 1, 28, 28) and torch.isfinite(images).all()
        assert float(images.std()) > 0.5  # (digits on black: far from the mean's level)


@pytest.mark.parametrize("way", ["gpudecode", "torchvision"])
def test_a_short_training_run_each_way(way):
    extra = ["--torchvision", "--workers", "0"] if way == "torchvision" else []
    r = forkrun.run([SCRIPT, "--demo", "--demo-size", "300", "--epochs", "2", "--steps", "3", "--device", "cpu",
                     *extra], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    epochs = re.findall(r"epoch (\d): loss ([\d.]+), [\d,]+ img/s \(training included\), batches \[64, 1, 28, 28\]",
                        r.stdout)
    assert [e for e, _ in epochs] == ["0", "1"], r.stdout
    assert all(0 < float(loss) < 5 for _, loss in epochs)
    assert re.search(r"test accuracy [\d.]+ on 60 images", r.stdout), r.stdout
