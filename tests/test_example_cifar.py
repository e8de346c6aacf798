"""examples/cifar/train.py, as a user runs it: its stand-in set read by torchvision's own
CIFAR10 class as the python files it wrote hold it (read with pickle), the test split fed
by the Loader as torchvision's CIFAR10 feeds it, and a short training run with the set
kept resident."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

import forkrun
from conftest import load_script

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "examples", "cifar", "train.py")


@pytest.fixture(scope="module")
def example():
    return load_script(SCRIPT, "cifar_example")


@pytest.fixture(scope="module")
def data(example, tmp_path_factory):
    return example.make_demo(str(tmp_path_factory.mktemp("cifar")), n=300)


def test_the_stand_in_is_the_python_files_as_torchvisions_cifar10_reads_them(example, data):
    import pickle

    planes, labels = [], []
    for name in example.BATCHES["train"]:
        with open(os.path.join(data, "cifar-10-batches-py", name), "rb") as f:
            d = pickle.load(f)
        planes.append(d["data"])
        labels += d["labels"]
    ds = example.stand_in_cifar10()(data, train=True)
    want = np.concatenate(planes).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(ds.data, want)
    assert ds.targets == labels and len(ds) == 300 and ds.classes[:2] == ["astronaut", "coffee"]


def test_the_test_split_is_fed_as_torchvisions_cifar10_feeds_it(example, data):
    import torchvision.transforms as tvt

    import gpudecode

    ds = example.stand_in_cifar10()(data, train=False, transform=tvt.Compose([tvt.ToTensor(), tvt.Normalize(example.MEAN, example.STD)]))
    want = torch.stack([ds[i][0] for i in range(len(ds))])
    want_labels = torch.tensor([ds[i][1] for i in range(len(ds))])
    with gpudecode.Loader(ds, batch_size=25, device="cpu", shuffle=False, keep="auto") as ld:  # (its transform, converted)
        assert ld.describe()["transform"] == ["ToDtype", "Normalize"]
        for epoch in (0, 1):  # the first fills the store, the second reads it
            ld.set_epoch(epoch)
            batches = list(ld)
            got = torch.cat([b.images for b in batches])
            assert torch.equal(torch.cat([b.labels for b in batches]), want_labels)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
        assert ld.describe()["keep"]["tier"] == "ram"


def test_autoaugment_converts_with_its_cifar10_policy(example, data):
    """--autoaugment: torchvision's AutoAugment(CIFAR10) after the flip converts as that
    policy (the ops its 25 sub-policies name, drawn per image) and trains from the store."""
    import argparse

    import gpudecode

    args = argparse.Namespace(data=data, demo=True, autoaugment=True, torchvision=False, batch_size=50, seed=1)
    train, _ = example.loaders(args, "cpu")
    with train:
        assert train.describe()["transform"] == ["RandomCrop", "RandomHorizontalFlip", "AutoAugment", "ToDtype",
                                                 "Normalize"]
        policy = train.transform.plan.program[0]
        assert isinstance(policy, gpudecode.transforms.AutoAugment) and policy.policy == "cifar10"
        drawn = [name for p in train.transform.make_params([(32, 32)] * 400, 3) for name, _ in p["auto_augment"]]
        assert {"TranslateY", "Brightness", "Sharpness"} <= set(drawn) <= {
            name for sub in gpudecode.transforms.policies.CIFAR10_POLICY for name, _, _ in sub}
        for epoch in (0, 1):
            train.set_epoch(epoch)
            images = torch.cat([b.images for b in train])
            assert images.shape == (300, 3, 32, 32) and torch.isfinite(images).all()


def test_a_short_training_run_keeps_the_set_resident():
    r = forkrun.run([SCRIPT, "--demo", "--epochs", "2", "--batch-size", "64", "--steps", "4", "--width", "8",
                     "--device", "cpu"], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    epochs = re.findall(r"epoch (\d): loss ([\d.]+), [\d,]+ img/s \(training included\), kept in ram", r.stdout)
    assert [e for e, _ in epochs] == ["0", "1"], r.stdout
    assert all(0 < float(loss) < 5 for _, loss in epochs)
    assert re.search(r"test accuracy [\d.]+ on 400 images", r.stdout), r.stdout
