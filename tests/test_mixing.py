"""Batch transforms (MixUp, CutMix, RandomChoice) against torchvision v2's: the same
numbers for the same parameters, draws distributed as torchvision's, and through the
Loader on real photographs (seeded, resumable, refused where they cannot work)."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats

from gpudecode import Loader, TransformError
from gpudecode import transforms as T
from gpudecode.mixing import batch_rng

from conftest import encode, make_shard

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLASSES = 7


def tv():
    from torchvision.transforms import v2

    return v2


@pytest.fixture(scope="module")
def photo_batch(photos):
    """8 normalized crops of scikit-image's photographs and their labels."""
    imgs = []
    for name in sorted(photos)[:8]:
        a = photos[name][:40, :48].astype(np.float32) / 255
        imgs.append((torch.from_numpy(a).permute(2, 0, 1) - torch.tensor(MEAN)[:, None, None])
                    / torch.tensor(STD)[:, None, None])
    while len(imgs) < 8:
        imgs.append(imgs[len(imgs) % 3].flip(-1))
    return torch.stack(imgs).contiguous(), torch.tensor([k % CLASSES for k in range(8)])


def _torchvision_with(tf, images, labels, params):
    """torchvision's own transform() of images and labels with the given parameters."""
    full = {"labels": labels, "batch_size": labels.shape[0], **params}
    return tf.transform(images, full), tf.transform(labels, full)


@pytest.mark.parametrize("seed,n", [(s, 8) for s in range(6)] + [(6, 1), (7, 2), (8, 3)])
def test_mixup_and_cutmix_equal_torchvision_for_the_same_params(photo_batch, seed, n):
    images, labels = photo_batch[0][:n], photo_batch[1][:n]
    rng = random.Random(seed)
    for ours, theirs in ((T.MixUp(alpha=0.2, num_classes=CLASSES), tv().MixUp(alpha=0.2, num_classes=CLASSES)),
                         (T.CutMix(alpha=1.0, num_classes=CLASSES), tv().CutMix(alpha=1.0, num_classes=CLASSES))):
        params = ours.make_params(tuple(images.shape), rng)
        got_i, got_l = ours.apply(images.clone(), labels.clone(), params)
        want_i, want_l = _torchvision_with(theirs, images.clone(), labels.clone(), params)
        assert torch.equal(got_i, want_i) and torch.equal(got_l, want_l), (type(ours).__name__, params)
        assert got_l.shape == (n, CLASSES) and torch.allclose(got_l.sum(1), torch.ones(n))
    # soft labels in (from an earlier mix): mixed again as torchvision mixes them
    images, labels = photo_batch
    soft = torch.nn.functional.one_hot(labels, CLASSES).float() * 0.7 + 0.3 / CLASSES
    params = {"lam": 0.25}
    got = T.MixUp(num_classes=CLASSES).apply(images.clone(), soft.clone(), params)[1]
    assert torch.equal(got, _torchvision_with(tv().MixUp(num_classes=CLASSES), images.clone(), soft.clone(), params)[1])


def test_the_draws_are_distributed_as_torchvision_draws_them():
    """lam ~ Beta(alpha, alpha) and CutMix's box: two-sample KS tests against torchvision's
    own make_params (torch's generator), 4000 draws each; RandomChoice's picks against p."""
    torch.manual_seed(0)
    rng = random.Random(1)
    shape = (4, 3, 60, 80)
    x = torch.zeros(shape)
    for alpha in (0.2, 1.0):
        ours = [T.MixUp(alpha=alpha, num_classes=3).make_params(shape, rng)["lam"] for _ in range(4000)]
        theirs = [tv().MixUp(alpha=alpha, num_classes=3).make_params([x])["lam"] for _ in range(4000)]
        assert stats.ks_2samp(ours, theirs).pvalue > 1e-3, alpha
        cm, tcm = T.CutMix(alpha=alpha, num_classes=3), tv().CutMix(alpha=alpha, num_classes=3)
        ours_c = [cm.make_params(shape, rng) for _ in range(4000)]
        theirs_c = [tcm.make_params([x]) for _ in range(4000)]
        for key in (lambda p: p["lam_adjusted"], lambda p: p["box"][0], lambda p: p["box"][3] - p["box"][1]):
            assert stats.ks_2samp([key(p) for p in ours_c], [key(p) for p in theirs_c]).pvalue > 1e-3, alpha
    choice = T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=3)], p=[0.25, 0.75])
    picks = [choice.make_params(shape, rng)["index"] for _ in range(4000)]
    assert stats.binomtest(picks.count(1), 4000, 0.75).pvalue > 1e-3


@pytest.fixture(scope="module")
def shard(photos, tmp_path_factory):
    names = sorted(photos)
    samples = [{"__key__": f"k{i:03d}", "jpg": encode(np.ascontiguousarray(photos[names[i % len(names)]][:90, :120])),
                "cls": b"%d" % (i % CLASSES)} for i in range(40)]
    return make_shard(tmp_path_factory.mktemp("mix") / "m.tar", samples)


def _tf():
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])


def test_the_loader_mixes_each_finished_batch_as_torchvision_does(shard):
    """torchvision's recipe objects passed as they are: each batch equals torchvision's
    transform of the unmixed batch (same seed) with the batch's own seeded draws, and two
    runs (or a resumed one) mix alike."""
    choice = tv().RandomChoice([tv().MixUp(alpha=0.2, num_classes=CLASSES), tv().CutMix(alpha=1.0, num_classes=CLASSES)])
    kw = dict(batch_size=8, transform=_tf(), device="cpu", seed=5, shuffle=False, num_workers=1)
    plain = [(b.images.clone(), b.labels.clone()) for b in Loader(shard, **kw)]
    mixed_ld = Loader(shard, batch_transform=choice, **kw)
    mixed = [(b.images.clone(), b.labels.clone()) for b in mixed_ld]
    ours = T.RandomChoice([T.MixUp(alpha=0.2, num_classes=CLASSES), T.CutMix(alpha=1.0, num_classes=CLASSES)])
    used = set()
    for k, ((x, y), (mx, my)) in enumerate(zip(plain, mixed)):
        params = ours.make_params(tuple(x.shape), batch_rng(5, 0, 0, 8 * k))
        used.add(params["index"])
        theirs = choice.transforms[params["index"]]
        want_x, want_y = _torchvision_with(theirs, x.clone(), y.clone(), params["params"])
        assert torch.equal(mx, want_x) and torch.equal(my, want_y), k
        assert my.dtype == torch.float32 and my.shape == (8, CLASSES)
    assert used == {0, 1}  # both were drawn over the epoch's 5 batches
    again = [(b.images.clone(), b.labels.clone()) for b in Loader(shard, batch_transform=choice, **kw)]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(mixed, again))
    # resumed after 2 batches: the rest mixes as the first run did
    ld = Loader(shard, batch_transform=choice, **kw)
    it = iter(ld)
    next(it), next(it)
    state = ld.state_dict()
    it.close()
    ld2 = Loader(shard, batch_transform=choice, **kw)
    ld2.load_state_dict(state)
    rest = [(b.images.clone(), b.labels.clone()) for b in ld2]
    assert len(rest) == 3 and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                  for a, b in zip(mixed[2:], rest))
    assert mixed_ld.describe()["after"] and "MixUp" in mixed_ld.describe()["after"][0]


def test_a_callable_runs_after_the_kernel_as_it_is(shard):
    def halve(images, labels):
        return images * 0.5, labels + 100

    kw = dict(batch_size=8, transform=_tf(), device="cpu", seed=5, shuffle=False, num_workers=1)
    plain = [(b.images.clone(), b.labels.clone()) for b in Loader(shard, **kw)]
    got = [(b.images.clone(), b.labels.clone()) for b in Loader(shard, batch_transform=halve, **kw)]
    assert all(torch.equal(g[0], p[0] * 0.5) and torch.equal(g[1], p[1] + 100) for g, p in zip(got, plain))


def test_batch_transforms_that_cannot_work_are_refused_at_construction(shard):
    kw = dict(batch_size=8, device="cpu")
    with pytest.raises(TransformError, match=r"end it\s+with Normalize or ToDtype"):
        Loader(shard, transform=T.Compose([T.RandomResizedCrop(32)]), batch_transform=T.MixUp(num_classes=3), **kw)
    with pytest.raises(TransformError, match="needs labels=True"):
        Loader(shard, transform=_tf(), batch_transform=T.CutMix(num_classes=3), labels=False, **kw)
    with pytest.raises(TransformError, match="give it num_classes="):
        Loader(shard, transform=_tf(), batch_transform=T.RandomChoice([T.MixUp(), T.CutMix()]), **kw)
    with pytest.raises(TransformError, match="not a batch transform"):
        Loader(shard, transform=_tf(), batch_transform=tv().RandomErasing(), **kw)
    mine = T.MixUp()
    ld = Loader(shard, transform=_tf(), batch_transform=mine, num_classes=CLASSES, **kw)
    assert mine.num_classes is None and ld.batch_transform.num_classes == CLASSES  # the caller's object untouched
    assert next(iter(ld)).labels.shape == (8, CLASSES)
    with pytest.raises(TransformError, match="alpha must be > 0"):
        T.MixUp(alpha=0)
