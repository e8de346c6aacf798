"""RandomPhotometricDistort, RandomChannelPermutation and GaussianNoise (issue 36's
remaining torchvision colour ops, each one class and at most one kernel formula): pixels
against torchvision's functional ops replaying the same parameters on real photographs,
draws (and the noise's values) distributed as torchvision's, conversion from torchvision's
objects, and refusals. (The CUDA kernel against the CPU twin: tests/test_augment.py's
simulator run holds all three.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from scipy import stats

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from tvref import torchvision_apply

OUT = (40, 44)
PERMS = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::3, ::2].transpose(2, 0, 1))))
    return out


def _theirs_photometric(x: torch.Tensor, p: dict) -> torch.Tensor:
    """torchvision's RandomPhotometricDistort.transform replaying our draw."""
    params = dict(p)
    perm = params["channel_permutation"]
    params["channel_permutation"] = None if perm is None else torch.tensor(perm)
    return tv.RandomPhotometricDistort().transform(x, params)


def _check_pixels(photo_batch, step, ref, seeds):
    tf = T.Compose([T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(), step, T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    seen = []
    for seed in seeds:
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, prm) in enumerate(zip(photo_batch, params)):
            want = ref(torchvision_apply(img, prm, OUT), prm).clamp(0, 1)
            err = float(((got[k] - want).abs() * 255).max())
            assert err <= 1.0 + 1e-3, (k, prm, err)
            seen.append(prm)
    return seen


def test_channel_permutation_matches_torchvision_on_real_photos(photo_batch):
    seen = _check_pixels(photo_batch, T.RandomChannelPermutation(),
                         lambda x, p: F.permute_channels(x, p["permutation"]), range(4))
    assert len({tuple(p["permutation"]) for p in seen}) >= 4  # (several permutations met)


@pytest.mark.parametrize("p", [1.0, 0.5])
def test_photometric_distort_matches_torchvision_on_real_photos(photo_batch, p):
    seen = _check_pixels(photo_batch, T.RandomPhotometricDistort(p=p), _theirs_photometric, range(6))
    # both places of the contrast, and (p=0.5) factors left out, were met
    assert {q["contrast_before"] for q in seen} == {True, False}
    if p < 1:
        assert any(q["hue_factor"] is None for q in seen) and any(q["channel_permutation"] is None for q in seen)


def test_photometric_distort_inside_a_recipe_with_other_ops(photo_batch):
    """With ColorJitter before it and a barrier (equalize) after: each op at its turn."""
    def ref(x, p):  # (torchvision_apply has run the ColorJitter of the params)
        return F.equalize(_theirs_photometric(x, p))

    tf = T.Compose([T.RandomResizedCrop(OUT), T.ColorJitter(0.3, 0.3, 0.3, 0.05), T.RandomPhotometricDistort(p=0.8),
                    T.RandomEqualize(1.0), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 3)
    got = tf(photo_batch, params)
    for k, (img, prm) in enumerate(zip(photo_batch, params)):
        want = ref(torchvision_apply(img, prm, OUT), prm)
        over = float(((got[k] - want).abs() * 255 > 1.0 + 1e-3).float().mean())
        assert over <= 0.01, (k, over)  # (equalize: a value an ulp from a bin edge may take the next level)


def test_draws_are_distributed_as_torchvisions():
    n = 3000
    img = torch.zeros((3, *OUT), dtype=torch.uint8)
    torch.manual_seed(0)
    ours = T.Compose([T.RandomChannelPermutation()]).make_params([OUT] * n, 1)
    theirs = [tuple(tv.RandomChannelPermutation().make_params([img])["permutation"].tolist()) for _ in range(n)]
    for perms in ([tuple(p["permutation"]) for p in ours], theirs):
        counts = [perms.count(q) for q in PERMS]
        assert stats.chisquare(counts).pvalue > 1e-3, counts

    step = T.RandomPhotometricDistort((0.7, 1.2), (0.4, 1.6), (0.5, 1.4), (-0.1, 0.08), p=0.4)
    ours = T.Compose([step]).make_params([OUT] * n, 2)
    tp = tv.RandomPhotometricDistort((0.7, 1.2), (0.4, 1.6), (0.5, 1.4), (-0.1, 0.08), p=0.4)
    theirs = [tp.make_params([img]) for _ in range(n)]
    for key in ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor"):
        a = [p[key] for p in ours if p[key] is not None]
        b = [p[key] for p in theirs if p[key] is not None]
        assert stats.binomtest(len(a), n, 0.4).pvalue > 1e-3, key
        assert stats.ks_2samp(a, b).pvalue > 1e-3, key
    assert stats.binomtest(sum(p["contrast_before"] for p in ours), n, 0.5).pvalue > 1e-3
    perms = [tuple(p["channel_permutation"]) for p in ours if p["channel_permutation"] is not None]
    assert stats.binomtest(len(perms), n, 0.4).pvalue > 1e-3
    assert stats.chisquare([perms.count(q) for q in PERMS]).pvalue > 1e-3
    assert set(theirs[0]) <= set(ours[0])  # torchvision's names for the parameters


def test_conversion_from_torchvision_and_refusals():
    ours = T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(32), tv.RandomPhotometricDistort(
        (0.8, 1.1), (0.6, 1.3), (0.7, 1.2), (-0.02, 0.03), p=0.3), tv.RandomChannelPermutation(), tv.ToDtype(
        torch.float32, scale=True)]))
    step = ours.transforms[1]
    assert isinstance(step, T.RandomPhotometricDistort) and isinstance(ours.transforms[2], T.RandomChannelPermutation)
    assert (step.brightness, step.contrast, step.saturation, step.hue, step.p) == (
        (0.8, 1.1), (0.6, 1.3), (0.7, 1.2), (-0.02, 0.03), 0.3)
    for bad in (dict(hue=(-0.6, 0.1)), dict(brightness=(1.2, 0.9)), dict(contrast=(-1.0, 1.0)), dict(saturation=1.5)):
        with pytest.raises(TransformError, match="RandomPhotometricDistort"):
            T.RandomPhotometricDistort(**bad)
    with pytest.raises(ValueError, match="probability"):
        T.RandomPhotometricDistort(p=1.5)
    # RandomOrder's own draw no longer shares RandomChannelPermutation's key
    T.Compose([T.RandomOrder([T.RandomInvert(1.0), T.RandomEqualize(1.0)]), T.RandomChannelPermutation()])
    with pytest.raises(TransformError, match="two RandomChannelPermutations"):
        T.Compose([T.RandomChannelPermutation(), T.RandomChannelPermutation()])


def _grey(n=4, size=(40, 44), level=128):
    return torch.full((n, 3, *size), level, dtype=torch.uint8)


def test_noise_is_distributed_as_torchvisions_and_independent():
    """On a flat grey image (no clamp reached): each image's added values against
    N(mean, sigma) and against torchvision's own noise; channels and neighbours
    uncorrelated; images differ; the same seed gives the same noise."""
    imgs = _grey()
    tf = T.Compose([T.GaussianNoise(0.02, 0.1, clip=False), T.ToDtype(torch.float32, scale=True)])
    params = tf.make_params([(40, 44)] * 4, 7)
    got = tf(imgs, params) - 128 / 255
    x = imgs[0].float() / 255
    theirs = (F.gaussian_noise(x, 0.02, 0.1, clip=False) - x).flatten().numpy()
    for k in range(4):
        v = got[k].flatten().numpy()
        assert stats.kstest(v, "norm", args=(0.02, 0.1)).pvalue > 1e-3, k
        assert stats.ks_2samp(v, theirs).pvalue > 1e-3, k
        c = got[k].reshape(3, -1).numpy()
        assert abs(np.corrcoef(c[0], c[1])[0, 1]) < 0.1 and abs(np.corrcoef(c[1], c[2])[0, 1]) < 0.1
        row = got[k, 0].numpy()
        assert abs(np.corrcoef(row[:, :-1].ravel(), row[:, 1:].ravel())[0, 1]) < 0.1  # x neighbours
        assert abs(np.corrcoef(row[:-1].ravel(), row[1:].ravel())[0, 1]) < 0.1  # y neighbours
    assert not torch.equal(got[0], got[1])
    assert torch.equal(tf(imgs, params) - 128 / 255, got)  # (the noise is the parameters')
    assert len({p["gaussian_noise"] for p in params}) == 4


def test_the_noise_log_and_cosine_are_float32_accurate_over_every_input():
    """Box-Muller's log and cosine (kernels/_noise.py, plain float32 arithmetic so the CPU
    loop vectorizes) against float64's, at every value they are given: log(k / 2**24)
    for each k in [1, 2**24] within 3 float32 ulps, cos(2 pi j / 2**24) for each j in
    [0, 2**24) within 2.5e-7."""
    import numba

    from gpudecode.kernels import _compile

    ns = _compile.cpu_namespace()
    log24, cos2pi = ns["log_ratio24"], ns["cos2pi"]

    @numba.njit
    def worst():
        lo = 0.0  # in float32 ulps of the result
        co = 0.0  # absolute
        for k in range(1, 2 ** 24):
            ref = np.log(k / 2.0 ** 24)
            lo = max(lo, abs(float(log24(np.uint64(k))) - ref) / np.spacing(np.float32(-ref)))
        for j in range(2 ** 24):
            u = np.float32(j * (1.0 / 2 ** 24))
            co = max(co, abs(float(cos2pi(u)) - np.cos(2 * np.pi * float(u))))
        return lo, co

    lo, co = worst()
    assert lo < 3 and co < 2.5e-7, (lo, co)  # (measured: 2.5 ulps; 2.0e-7, the argument's float32 rounding)
    assert log24(np.uint64(2 ** 24)) == 0


def test_noise_clips_as_torchvision_and_follows_the_other_ops(photo_batch):
    """clip=True: the unclipped values clamped to [0, 1], the same noise (one key); after
    RandomResizedCrop and a ColorJitter on real photographs the clean image is torchvision's
    (the noise's mean over the image is about `mean`)."""
    noclip = T.Compose([T.RandomResizedCrop(OUT), T.ColorJitter(0.3, 0.3), T.GaussianNoise(0.05, 0.08, clip=False),
                        T.ToDtype(torch.float32, scale=True)])
    clip = T.Compose([T.RandomResizedCrop(OUT), T.ColorJitter(0.3, 0.3), T.GaussianNoise(0.05, 0.08),
                      T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = noclip.make_params(sizes, 5)
    a, b = noclip(photo_batch, params), clip(photo_batch, params)
    assert float(a.min()) < 0 or float(a.max()) > 1  # (something to clip)
    torch.testing.assert_close(b, a.clamp(0, 1), rtol=0, atol=1e-6)
    for k, (img, prm) in enumerate(zip(photo_batch, params)):
        clean = torchvision_apply(img, prm, OUT)  # (with the ColorJitter of the params)
        d = (a[k] - clean).flatten().numpy()
        assert abs(d.mean() - 0.05) < 0.01 and abs(d.std() - 0.08) < 0.01, (k, d.mean(), d.std())


def test_noise_converts_after_a_float_conversion_only():
    ours = T.Compose.from_torchvision(tv.Compose([tv.ToImage(), tv.RandomResizedCrop(32), tv.ToDtype(
        torch.float32, scale=True), tv.GaussianNoise(0.1, 0.2, clip=False), tv.Normalize([0.5] * 3, [0.2] * 3)]))
    step = next(t for t in ours.transforms if isinstance(t, T.GaussianNoise))
    assert (step.mean, step.sigma, step.clip) == (0.1, 0.2, False)
    with pytest.raises(TransformError, match="GaussianNoise on uint8 images"):
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(32), tv.GaussianNoise()]))
    with pytest.raises(ValueError, match="sigma shouldn't be negative"):
        T.GaussianNoise(sigma=-0.1)
