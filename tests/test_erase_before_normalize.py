"""RandomErasing before Normalize (`[..., ToTensor(), RandomErasing(), Normalize(...)]`, as
many scripts write it; refused before): the erasing runs on the kernel's normalized output,
each value it writes normalized as torchvision's Normalize then makes it. Against
torchvision's erase and normalize replaying the draws on photographs; the noise of
value="random" as the erasing after Normalize draws it, normalized; the batched (GPU)
form equal to the per-image one; what stays refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def photo_batch(photos):
    return [torch.from_numpy(np.ascontiguousarray(p[::4, ::4].transpose(2, 0, 1))) for p in photos.values()] * 2


@pytest.mark.parametrize("value", [0, (0.1, 0.5, 0.9)])
def test_a_value_is_torchvisions_erase_then_normalize(photo_batch, value):
    """v1 as written: `[Resize((40, 44)), flip, ToTensor(), RandomErasing(p=0.7, value),
    Normalize]`: torchvision's resize, flip, erase and normalize of the float image,
    replaying the draws, within float rounding; some images erased, some not."""
    tvc = tv1.Compose([tv1.Resize((40, 44)), tv1.RandomHorizontalFlip(), tv1.ToTensor(),
                       tv1.RandomErasing(p=0.7, value=value), tv1.Normalize(MEAN, STD)])
    ours = T.Compose.from_torchvision(tvc)
    assert ours.plan.erase is not None and ours.plan.erase.normalized and ours.plan.normalize is not None
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = ours.make_params(sizes, 4)
    got = ours(photo_batch, params)
    fill = torch.tensor(value if isinstance(value, tuple) else (value,) * 3, dtype=torch.float32)[:, None, None]
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.resize(F.to_dtype(img, torch.float32, scale=True), [40, 44], antialias=True)
        x = F.horizontal_flip(x) if p["flip"] else x
        if p["erase"] is not None:
            e = p["erase"]
            x = F.erase(x, e["i"], e["j"], e["h"], e["w"], fill)
        want = F.normalize(x, MEAN, STD)
        assert float((got[k] - want).abs().max()) < 1e-5, (k, p["erase"])
    assert {p["erase"] is None for p in params} == {True, False}


def test_noise_is_normalized_and_the_batched_form_agrees(photo_batch):
    """value="random": the erased pixels are the noise the erasing after Normalize writes
    (the same draws), normalized; elsewhere the images are equal. The batched form (one
    upload a batch, as on a GPU) writes the same values as the per-image one."""
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    f32 = T.ToDtype(torch.float32, scale=True)
    before = T.Compose([T.Resize((40, 44)), f32, T.RandomErasing(1.0, value="random"), T.Normalize(MEAN, STD)])
    after = T.Compose([T.Resize((40, 44)), f32, T.RandomErasing(1.0, value="random")])
    params = before.make_params(sizes, 9)
    assert params == after.make_params(sizes, 9)
    got, raw = before(photo_batch, params), after(photo_batch, params)
    for k, p in enumerate(params):
        e = p["erase"]
        inside = torch.zeros((40, 44), dtype=torch.bool)
        inside[e["i"]:e["i"] + e["h"], e["j"]:e["j"] + e["w"]] = True
        want = F.normalize(raw[k], MEAN, STD)
        assert float((got[k] - want).abs().max()) < 1e-5, k
        assert float(raw[k][:, inside].std()) > 0.5  # (noise there: N(0, 1) before the Normalize)
    plain = T.Compose([T.Resize((40, 44)), f32, T.Normalize(MEAN, STD)])(photo_batch, params)
    batched = plain.clone()
    before.plan.erase.erase(batched, params, batched=True)
    one_by_one = plain.clone()
    before.plan.erase.erase(one_by_one, params, batched=False)
    assert torch.equal(batched, one_by_one) and torch.equal(one_by_one, got)


def test_what_stays_refused():
    """A step other than Normalize after the erasing, a second Normalize, and an erasing of
    uint8 images (torchvision's Normalize takes floats) stay refused."""
    f32 = T.ToDtype(torch.float32, scale=True)
    with pytest.raises(TransformError, match="ColorJitter after RandomErasing"):
        T.Compose([T.Resize((8, 8)), f32, T.RandomErasing(), T.ColorJitter(0.2)])
    with pytest.raises(TransformError, match="Normalize after RandomErasing"):
        T.Compose([T.Resize((8, 8)), f32, T.Normalize(MEAN, STD), T.RandomErasing(), T.Normalize(MEAN, STD)])
    with pytest.raises(TransformError, match="Normalize after RandomErasing"):
        T.Compose([T.Resize((8, 8)), T.RandomErasing(), T.Normalize(MEAN, STD)])
