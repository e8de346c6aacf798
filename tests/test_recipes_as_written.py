"""The recipes as people write them (issue 38, first part): objects that carry a Compose
(torchvision's reference presets), torchvision's weights' eval transforms
(ImageClassification), a Compose's `.transforms` list; each converted unchanged."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as tv
from conftest import encode, make_shard
from PIL import Image

import gpudecode
from gpudecode import TransformError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class ClassificationPresetTrain:
    """As torchvision's references/classification/presets.py writes it (ta_wide, erasing)."""

    def __init__(self, crop_size: int = 48) -> None:
        self.transforms = tv.Compose([tv.PILToTensor(), tv.RandomResizedCrop(crop_size, antialias=True),
                                      tv.RandomHorizontalFlip(0.5), tv.TrivialAugmentWide(),
                                      tv.ToDtype(torch.float, scale=True), tv.Normalize(MEAN, STD),
                                      tv.RandomErasing(0.1)])

    def __call__(self, img):
        return self.transforms(img)


@pytest.fixture(scope="module")
def shard(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("recipes")
    imgs = [np.ascontiguousarray(photos[n][40:200, 30:250]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    return make_shard(d / "s.tar", [{"__key__": f"{i:03d}", "png": encode(im, "PNG"), "cls": b"1"}
                                    for i, im in enumerate(imgs)]), imgs


def _batches(shard, transform):
    ld = gpudecode.Loader(shard, batch_size=2, transform=transform, device="cpu", seed=3)
    return [b.images.clone() for b in ld]


def test_a_preset_object_converts_as_its_compose(shard):
    path, _ = shard
    preset = ClassificationPresetTrain()
    a, b = _batches(path, preset), _batches(path, preset.transforms)
    assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b))
    # and a Compose's .transforms list is that Compose (one view), not views
    c = _batches(path, list(preset.transforms.transforms))
    assert all(torch.equal(x, y) for x, y in zip(a, c))


def test_a_list_of_composes_is_views_and_a_mixed_list_is_refused(shard):
    path, _ = shard
    ld = gpudecode.Loader(path, batch_size=2, device="cpu",
                          transform=[tv.Compose([tv.CenterCrop(32)]), tv.Compose([tv.CenterCrop(16)])])
    assert ld.describe()["views"] == 2
    with pytest.raises(TransformError, match="mixes whole transforms and single steps"):
        gpudecode.Loader(path, batch_size=2, transform=[tv.Compose([tv.CenterCrop(32)]), tv.CenterCrop(16)])


def test_weights_transforms_convert_with_torchvisions_numbers(shard):
    """ResNet-50's IMAGENET1K_V2 eval transforms (resize 232, crop 224, float, normalize):
    the Loader's output against torchvision's ImageClassification on the same images."""
    path, imgs = shard
    weights_tf = torchvision.models.ResNet50_Weights.IMAGENET1K_V2.transforms()
    ld = gpudecode.Loader(path, batch_size=4, transform=weights_tf, device="cpu", shuffle=False)
    assert ld.describe()["transform"] == ["Resize", "CenterCrop", "ToDtype", "Normalize"]
    batch = next(iter(ld))
    assert batch.images.shape == (4, 3, 224, 224)
    for got, img in zip(batch.images, imgs):
        ref = weights_tf(torch.from_numpy(img).permute(2, 0, 1))
        # within 1 level of 255 before normalization
        tol = (1.0 / 255) / min(STD) + 1e-5
        assert (got - ref).abs().max().item() <= tol
