"""FiveCrop and TenCrop as views (gpudecode/transforms/crops.py) against torchvision's own,
called directly and through the Loader: pixel for pixel where the crops are all (uint8),
within a level with a Resize before them; their draws natively and in Python alike; the
refusals (a random step with them, a Lambda that stacks them, a Compose of them)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision.transforms as T1
import torchvision.transforms.v2 as T
from PIL import Image
from torchvision import tv_tensors

from conftest import encode, make_shard
from gpudecode import Loader
from gpudecode.errors import DecodeError, TransformError
from gpudecode.transforms import Compose, FiveCrop, Resize, TenCrop, Views

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _image(a: np.ndarray) -> tv_tensors.Image:
    # (an Image, not a plain tensor: torchvision v2 takes only the first plain tensor of its
    # input as the image, so the steps after its crop would convert the first crop alone)
    return tv_tensors.Image(torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1))


@pytest.mark.parametrize("vertical", [False, True])
def test_crops_equal_torchvisions_on_photographs(photos, vertical):
    """Every crop of TenCrop and FiveCrop, of photographs cut to odd sizes (the centre's
    rounding and its mirror's differ there), equal torchvision's, byte for byte; with a
    Resize before them and ToDtype + Normalize after, within one level."""
    for name, a in photos.items():
        for h, w in ((a.shape[0], a.shape[1]), (a.shape[0] - 1, a.shape[1] - 2), (77, 64)):
            img = _image(a[:h, :w])
            for tv in (T.Compose([T.TenCrop((min(h, 50), min(w, 41)), vertical_flip=vertical)]),
                       T.FiveCrop(min(h, w, 33))):
                want, got = tv(img), Views.from_torchvision(tv)(img)
                assert len(got) == len(want) == (10 if isinstance(tv, T.Compose) else 5)
                for k, (x, y) in enumerate(zip(got, want)):
                    assert torch.equal(x, y.as_subclass(torch.Tensor)), (name, (h, w), k)
        img = _image(a)
        tv = T.Compose([T.Resize(64), T.TenCrop(56, vertical_flip=vertical), T.ToDtype(torch.float32, scale=True),
                        T.Normalize(MEAN, STD)])
        want, got = tv(img), Views.from_torchvision(tv)(img)
        for x, y in zip(got, want):
            assert x.shape == y.shape == (3, 56, 56)
            err = ((x - y).abs() * torch.tensor(STD).view(3, 1, 1)).max() * 255
            assert err <= 1.0 + 1e-3, (name, float(err))


def test_views_of_batches_pil_and_v1():
    """A batch tensor gives each crop's batch, a PIL image what its tensor gives; v1's
    TenCrop (with ToTensor after it, which v1 itself cannot run on the tuple) converts as
    v2's does."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 3, 31, 29), dtype=np.uint8)
    batch = torch.from_numpy(a)
    tv = T.TenCrop(12)
    views = Views.from_torchvision(tv)
    got = views(batch)
    for k, im in enumerate(batch):
        want = tv(tv_tensors.Image(im))
        assert all(torch.equal(g[k], w.as_subclass(torch.Tensor)) for g, w in zip(got, want))
    pil = Image.fromarray(a[0].transpose(1, 2, 0))
    assert all(torch.equal(x, y) for x, y in zip(views(pil), views(batch[0])))
    v1 = Views.from_torchvision(T1.Compose([T1.TenCrop(12), T1.ToTensor()]))
    assert all(torch.allclose(x, y.float() / 255) for x, y in zip(v1(batch[0]), views(batch[0])))


def test_native_draws_equal_the_python_path():
    """The crops' offsets drawn natively (one call a batch) equal CornerCrop.offsets, for
    every corner and mirror, with a Resize before them or not; an image smaller than the
    crop is refused by both (the Python path's words)."""
    rng = np.random.default_rng(1)
    sizes = [tuple(int(v) for v in rng.integers(20, 90, 2)) for _ in range(40)]
    for steps in ([TenCrop((17, 20))], [TenCrop(19, vertical_flip=True)], [Resize(40), TenCrop((33, 25))],
                  [Resize((31, 45)), FiveCrop(30)]):
        for tf in Views.from_torchvision(steps):
            assert tf.native_spec is not None
            native = tf.draw_batch(sizes, 5)
            assert native.columns is not None
            assert native.dicts() == tf._python_params(sizes, 5)
    tf = Views.from_torchvision([TenCrop(30)])[7]
    with pytest.raises(ValueError, match="larger than the 29x80 image"):
        tf.draw_batch([(40, 40), (29, 80)], 0)


def test_refusals_name_the_step_and_the_way():
    """A random step before or after the crops (torchvision draws it once for all of an
    image's crops), two crop steps, a Compose holding one, and v1's Lambda that stacks the
    crops: each refused, saying why and what to write."""
    for tv, said in ((T.Compose([T.RandomResizedCrop(64), T.FiveCrop(32)]), "RandomResizedCrop before FiveCrop"),
                     (T.Compose([T.TenCrop(32), T.RandomHorizontalFlip()]), "RandomHorizontalFlip after TenCrop"),
                     (T.Compose([T.TenCrop(32), T.ColorJitter(0.4)]), "draws a step's parameters once"),
                     (T.Compose([T.CenterCrop(40), T.FiveCrop(32)]), "only a Resize may come before"),
                     (T.Compose([T.FiveCrop(32), T.TenCrop(16)]), "FiveCrop and TenCrop in one transform"),
                     (T1.Compose([T1.Resize(256), T1.TenCrop(224), T1.Lambda(lambda c: torch.stack(c))]),
                      "TenCrop's crops come as a list")):
        with pytest.raises(TransformError, match=said):
            Views.from_torchvision(tv)
    for make in (lambda: Compose([Resize(64), TenCrop(32)]),
                 lambda: Compose.from_torchvision(T.Compose([T.Resize(64), T.FiveCrop(32)]))):
        with pytest.raises(TransformError, match="Views.from_torchvision"):
            make()
    with pytest.raises(TransformError, match="Views takes"):
        Views([T.FiveCrop(3)])
    with pytest.raises(ValueError, match="cannot be negative"):
        TenCrop((4, -1))


@pytest.fixture(scope="module")
def png_shards(tmp_path_factory, photos):
    """Two shards of PNG photographs cut to varied sizes (lossless: the decoded pixels are
    Pillow's), the last image of the second too small for a 48-pixel crop."""
    d = tmp_path_factory.mktemp("crops")
    names = sorted(photos)
    samples = []
    for i in range(14):
        a = photos[names[i % len(names)]]
        h, w = 60 + 7 * i, 90 - 3 * i
        samples.append({"__key__": f"s{i:03d}", "png": encode(a[:h, :w], "PNG"), "cls": str(i % 3).encode()})
    samples.append({"__key__": "small", "png": encode(photos[names[0]][:40, :50], "PNG"), "cls": b"0"})
    urls = [make_shard(d / "a.tar", samples[:8]), make_shard(d / "b.tar", samples[8:])]
    return urls, samples


def _decoded(sample: dict) -> tv_tensors.Image:
    with Image.open(io.BytesIO(sample["png"])) as im:
        return _image(np.array(im.convert("RGB")))


def test_loader_gives_the_crops_as_dataloader_collates_them(png_shards):
    """A torchvision eval transform with TenCrop as the Loader's transform: `images` a list
    of ten batches, as DataLoader's default collate makes of the tuples, each equal to
    torchvision's crops of the decoded images (byte for byte; with a Resize before, within
    a level); an image smaller than the crop is skipped under on_error="skip", named by its
    shard and key, and raises otherwise; a resumed Loader gives the same batches."""
    urls, samples = png_shards
    by_key = {s["__key__"]: s for s in samples}
    tv = T.Compose([T.TenCrop(48, vertical_flip=True)])
    ld = Loader(urls, batch_size=4, transform=tv, device="cpu", shuffle=False, on_error="skip", num_workers=2)
    seen = []
    for b in ld:
        images, labels = b
        assert isinstance(images, list) and len(images) == 10
        assert all(x.shape == (len(b.keys), 3, 48, 48) and x.dtype == torch.uint8 for x in images)
        for i, k in enumerate(b.keys):
            want = tv(_decoded(by_key[k]))
            assert all(torch.equal(x[i], y.as_subclass(torch.Tensor)) for x, y in zip(images, want)), k
        seen += b.keys
    assert seen == [f"s{i:03d}" for i in range(14)]
    assert [(s.shard, s.key) for s in ld.skipped] == [(urls[1], "small")]
    assert "larger than the 40x50 image" in ld.skipped[0].reason
    with pytest.raises(DecodeError, match="small"):
        list(Loader(urls, batch_size=4, transform=tv, device="cpu", shuffle=False))

    tv = T.Compose([T.Resize(64), T.FiveCrop(56), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    ld = Loader(urls[:1], batch_size=4, transform=tv, device="cpu", shuffle=False, seed=1)
    first = list(ld)
    for b in first:
        for i, k in enumerate(b.keys):
            for x, y in zip(b.images, tv(_decoded(by_key[k]))):
                err = ((x[i] - y).abs() * torch.tensor(STD).view(3, 1, 1)).max() * 255
                assert err <= 1.0 + 1e-3, (k, float(err))
    assert ld.describe()["views"] == 5
    ld = Loader(urls[:1], batch_size=4, transform=tv, device="cpu", shuffle=False, seed=1)
    it = iter(ld)
    next(it)
    state = ld.state_dict()
    it.close()
    resumed = Loader(urls[:1], batch_size=4, transform=tv, device="cpu", shuffle=False, seed=1)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [b.keys for b in rest] == [b.keys for b in first[1:]]
    assert all(torch.equal(x, y) for a, b in zip(rest, first[1:]) for x, y in zip(a.images, b.images))


def test_views_call_seeds_each_view_apart():
    """Views of one's own (DINO's shape): view 0 draws as a one-view call with the seed,
    the others apart; the same seed, the same outputs."""
    g = Compose.from_torchvision(T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip()]))
    views = Views([g, g])
    img = torch.from_numpy(np.random.default_rng(2).integers(0, 256, (3, 40, 50), dtype=np.uint8))
    a, b = views(img, seed=7)
    assert torch.equal(a, g(img, seed=7)) and not torch.equal(a, b)
    assert all(torch.equal(x, y) for x, y in zip(views(img, seed=7), (a, b)))
