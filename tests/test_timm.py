"""timm's RandAugment as create_transform builds it (rand-m9-mstd0.5-inc1 and its other
configs), against timm's own: each op's pixels replaying the same argument on a real
photograph, the policy's draws by distribution, the whole train transform converted."""
from __future__ import annotations

import collections
import random

import numpy as np
import pytest
import torch
from scipy import stats

from gpudecode import TransformError
from gpudecode import transforms as T
from gpudecode.transforms.timm_augment import WARPS, TimmRandAugment, level_arg

timm = pytest.importorskip("timm", reason="timm is in the [test] extra")
aa = pytest.importorskip("timm.data.auto_augment")

FILL = (124, 116, 104)  # create_transform's img_mean for ImageNet's mean
HP = dict(translate_const=100, img_mean=FILL)
EXTRA = ["Posterize", "PosterizeOriginal", "Solarize", "Color", "Contrast", "Brightness", "Sharpness", "TranslateX",
         "TranslateY"]


def _cases():
    out = []
    for name in list(aa._RAND_INCREASING_TRANSFORMS) + EXTRA:
        for m in (3.0, 9.0):
            v = level_arg(name, m, random.Random(int(m)), HP)
            for mode in (("bilinear", "bicubic") if name in WARPS else (None,)):
                out.append((name, v, mode))
    return out


def _photo(photos):
    return np.ascontiguousarray(photos["astronaut"][::6, ::5][:80, :96])


def test_each_op_matches_timms_own_on_a_photograph(photos):
    """Every op of timm's RandAugment sets (and the non-increasing variants) at two
    magnitudes, warps bilinear and bicubic, against timm's op function on the PIL image:
    within 1 level of 255 everywhere, except the enhance ops (Color, Sharpness) within 2
    levels with at most 1% of pixels over 1. Measured: warps, posterize, contrast and
    brightness within 1 (PIL truncates each result to a level, the kernel keeps floats),
    solarize, solarize-add, invert, autocontrast and equalize exact, Color and Sharpness
    at most 2 on up to 0.7% (PIL's integer luma)."""
    from PIL import Image

    img = _photo(photos)
    h, w, _ = img.shape
    x = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    tf = T.Compose([TimmRandAugment([(n, 1.0, 9.0, {}) for n in aa._RAND_INCREASING_TRANSFORMS], 1,
                                    ("bilinear", "bicubic"), FILL)])
    base = tf.make_params([(h, w)], seed=0)[0]
    cases = _cases()
    params = [{**base, "timm_rand_augment": [c]} for c in cases]
    got = tf(torch.stack([x] * len(cases)), params=params)
    pil = Image.fromarray(img)
    for k, (name, v, mode) in enumerate(cases):
        kw = dict(fillcolor=FILL, resample=Image.BICUBIC if mode == "bicubic" else Image.BILINEAR)
        args = () if v is None else ((int(v),) if name.startswith(("Posterize", "Solarize")) else (v,))
        ref = np.asarray(aa.NAME_TO_OP[name](pil, *args, **kw)).astype(float)
        d = np.abs(got[k].permute(1, 2, 0).numpy().astype(float) - ref)
        enhance = name.replace("Increasing", "") in ("Color", "Sharpness")
        assert d.max() <= (2 if enhance else 1), (name, v, mode, d.max())
        assert (d > 1).mean() <= 0.01, (name, v, mode)
        if name in ("SolarizeAdd", "SolarizeIncreasing", "Solarize", "Invert", "AutoContrast", "Equalize"):
            assert d.max() == 0, name


def test_warps_and_solarize_add_under_the_cuda_simulator_equal_the_cpu(photos):
    """PIL's warps (bilinear, bicubic, the fill) and SolarizeAdd on the CUDA kernel (the
    simulator) against the CPU twin, on a 24x32 crop of a photograph."""
    from gpudecode.kernels import fused

    img = np.ascontiguousarray(_photo(photos)[:24, :32])
    x = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    tf = T.Compose([TimmRandAugment([("Rotate", 1.0, 9.0, {})], 1, ("bilinear", "bicubic"), FILL),
                    T.ToDtype(torch.float32, scale=True)])
    base = tf.make_params([(24, 32)], seed=0)[0]
    cases = [("Rotate", 17.0, "bicubic"), ("ShearX", -0.2, "bilinear"), ("TranslateYRel", 0.3, "bicubic"),
             ("SolarizeAdd", 90.0, None)]
    params = [{**base, "timm_rand_augment": [c]} for c in cases]
    cpu = tf(torch.stack([x] * len(cases)), params=params)
    geom, args, order = tf.encode(params, [(24, 32)] * len(cases))
    geom[:, fused.OFFSET] = 0
    geom[:, fused.SY], geom[:, fused.SX], geom[:, fused.SC] = 96, 3, 1
    out = np.zeros((len(cases), 3, 24, 32), np.float32)
    fused.fused_cuda(img.reshape(-1), geom, args, order, np.zeros(3, np.float32), np.ones(3, np.float32), out,
                     normalize=False)
    np.testing.assert_allclose(out, cpu.numpy(), atol=2e-5, rtol=0)


def _timm_draws(config, n, hparams):
    """What timm's RandAugment draws for n images: its ops' functions replaced by
    recorders (names, arguments, the interpolation picked), its own generators seeded."""
    ra = aa.rand_augment_transform(config, dict(hparams))
    log: list = []
    _recorders(ra.ops, log)
    random.seed(0)
    np.random.seed(0)
    for _ in range(n):
        log.append([])
        ra(None)
    return ra, log


def test_the_policys_draws_match_timms():
    """rand-m9-mstd0.5-inc1 over 6,000 images, ours (make_params) against timm's own
    (its op functions replaced by recorders): the number of ops applied an image and each
    op's share (chi-square), Rotate's degrees and ColorIncreasing's factor (KS), the
    bicubic share of warps (binomial): p-values over 1e-3."""
    n = 6000
    hp = dict(HP, interpolation=None)
    hp.pop("interpolation")
    ra, theirs = _timm_draws("rand-m9-mstd0.5-inc1", n, hp)
    ours_t = T.Compose.from_torchvision(ra)
    step = ours_t.plan.program[0]
    assert isinstance(step, TimmRandAugment)
    ours = [p["timm_rand_augment"] for p in ours_t.make_params([(224, 224)] * n, seed=3)]
    a = collections.Counter(len(x) for x in ours)
    b = collections.Counter(len(x) for x in theirs)
    assert stats.chi2_contingency([[a[k] for k in range(3)], [b[k] for k in range(3)]]).pvalue > 1e-3
    names = sorted(set(aa._RAND_INCREASING_TRANSFORMS))
    ca = collections.Counter(op[0] for x in ours for op in x)
    cb = collections.Counter(op[0] for x in theirs for op in x)
    assert stats.chi2_contingency([[ca[k] for k in names], [cb[k] for k in names]]).pvalue > 1e-3
    for name in ("Rotate", "ColorIncreasing", "ShearX"):
        va = [op[1] for x in ours for op in x if op[0] == name]
        vb = [op[1] for x in theirs for op in x if op[0] == name]
        assert stats.ks_2samp(va, vb).pvalue > 1e-3, name
    for name in ("SolarizeIncreasing", "PosterizeIncreasing", "SolarizeAdd"):  # few values: chi-square
        va = collections.Counter(op[1] for x in ours for op in x if op[0] == name)
        vb = collections.Counter(op[1] for x in theirs for op in x if op[0] == name)
        keys = sorted(set(va) | set(vb))
        keys = [k for k in keys if va[k] + vb[k] >= 10]
        assert stats.chi2_contingency([[va[k] for k in keys], [vb[k] for k in keys]]).pvalue > 1e-3, name
    wa = [op[2] == "bicubic" for x in ours for op in x if op[0] in WARPS]
    wb = [op[2] == "bicubic" for x in theirs for op in x if op[0] in WARPS]
    assert stats.chi2_contingency([[sum(wa), len(wa) - sum(wa)], [sum(wb), len(wb) - sum(wb)]]).pvalue > 1e-3


def test_create_transform_with_rand_augment_converts_unchanged(photos, tmp_path):
    """timm's create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
    re_prob=0.25, re_mode="pixel", interpolation="random") and its eval transform convert
    as they are and run in the Loader; the RandAugment keeps timm's numbers (ops, m, mstd,
    fill = the mean colour, both interpolations)."""
    import gpudecode
    from conftest import encode, make_shard
    from timm.data import create_transform

    tr = create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
                          re_mode="pixel", interpolation="random")
    ev = create_transform(224, is_training=False, interpolation="bicubic")  # ("random" is train-only in timm)
    fused = T.Compose.from_torchvision(tr)
    assert [type(s).__name__ for s in fused.plan.steps] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                                          "TimmRandAugment", "ToDtype", "Normalize", "RandomErasing"]
    ra = fused.plan.program[0]
    assert ra.num_layers == 2 and ra.modes == ("bilinear", "bicubic") and ra.fill == FILL
    assert [o[0] for o in ra.ops] == list(aa._RAND_INCREASING_TRANSFORMS)
    assert all(o[1] == 0.5 and o[2] == 9 and o[3]["magnitude_std"] == 0.5 for o in ra.ops)
    path = make_shard(tmp_path / "s.tar", [{"__key__": f"{i:03d}", "jpg": encode(photos[n]), "cls": b"1"}
                                           for i, n in enumerate(["astronaut", "coffee", "chelsea", "rocket"])])
    for t in (tr, ev):
        b = next(iter(gpudecode.Loader(path, batch_size=4, transform=t, device="cpu", seed=1)))
        assert b.images.shape == (4, 3, 224, 224) and torch.isfinite(b.images).all()


def _recorders(ops, log):
    for op in ops:
        def record(img, *args, _name=op.name, **kw):
            resample = aa._interpolation(dict(kw)) if _name in WARPS else None  # (timm's own pick, in its op)
            mode = None if _name not in WARPS else ("bicubic" if int(resample) == 3 else "bilinear")
            log[-1].append((_name, args[0] if args else None, mode))
            return img
        op.aug_fn = record


def test_timms_auto_augment_draws_match_timms():
    """timm's AutoAugment (policy v0 with mstd 0.5, timm's default AutoAugment config):
    over 6,000 images the ops applied (name shares and count an image, chi-square) as
    timm's own draws them (its ops' functions replaced by recorders)."""
    n = 6000
    t = aa.auto_augment_transform("v0-mstd0.5", dict(HP))
    ours = T.Compose.from_torchvision(t)
    assert type(ours.plan.program[0]).__name__ == "TimmAutoAugment" and len(ours.plan.program[0].policy) == 25
    log: list = []
    _recorders([op for sub in t.policy for op in sub], log)
    random.seed(1)
    for _ in range(n):
        log.append([])
        t(None)
    mine = [p["timm_auto_augment"] for p in ours.make_params([(224, 224)] * n, seed=4)]
    a = collections.Counter(len(x) for x in mine)
    b = collections.Counter(len(x) for x in log)
    assert stats.chi2_contingency([[a[k] for k in range(3)], [b[k] for k in range(3)]]).pvalue > 1e-3
    ca = collections.Counter(op[0] for x in mine for op in x)
    cb = collections.Counter(op[0] for x in log for op in x)
    names = sorted(set(ca) | set(cb))
    assert stats.chi2_contingency([[ca[k] for k in names], [cb[k] for k in names]]).pvalue > 1e-3


def test_timms_augmix_mixes_as_timm_and_draws_as_timm(photos):
    """timm's AugMixAugment (augmix-m5-w3-d-1, timm's --aa augmix): the pixels of a
    replayed draw against timm's own ops mixed by timm's formula ((1 - m) image + m sum
    w_i chain_i, on PIL images) within 3 levels, the mean difference between 0 and 1.5
    levels (measured: at most 3, 1.5-17% of pixels over 1, the kernel 0.3-1 level above on
    average: timm truncates to a level after each op of a chain, after the sum and after
    the blend; the kernel keeps floats and rounds once); and chain depths and op shares
    over 3,000 images as timm's own draws them (chi-square)."""
    from PIL import Image

    t = aa.augment_and_mix_transform("augmix-m5-w3", dict(HP))
    tf = T.Compose([T.Compose.from_torchvision(t).plan.program[0]])
    mix = tf.plan.program[0]
    assert type(mix).__name__ == "TimmAugMix" and mix.width == 3 and mix.depth == -1
    img = _photo(photos)
    h, w, _ = img.shape
    params = tf.make_params([(h, w)] * 3, seed=7)
    got = tf(torch.stack([torch.from_numpy(img).permute(2, 0, 1).contiguous()] * 3), params=params)
    pil = Image.fromarray(img)
    for k, p in enumerate(params):
        a = p["timm_augmix"]
        mixed = np.zeros(img.shape, np.float32)
        for wt, chain in zip(a["weights"], a["chains"]):
            im = pil
            for name, v, mode in chain:
                args = () if v is None else ((int(v),) if name.startswith(("Posterize", "Solarize")) else (v,))
                kw = dict(fillcolor=FILL, resample=Image.BICUBIC if mode == "bicubic" else Image.BILINEAR)
                im = aa.NAME_TO_OP[name](im, *args, **kw)
            mixed += np.float32(wt) * np.asarray(im, np.float32)
        ref = np.asarray(Image.blend(pil, Image.fromarray(np.clip(mixed, 0, 255).astype(np.uint8)), a["m"]), float)
        signed = got[k].permute(1, 2, 0).numpy().astype(float) - ref
        assert np.abs(signed).max() <= 3 and 0 <= signed.mean() <= 1.5, (k, np.abs(signed).max(), signed.mean())
    n = 3000
    log: list = []
    _recorders(t.ops, log)
    np.random.seed(2)
    random.seed(2)
    depths_b, names_b = collections.Counter(), collections.Counter()
    for _ in range(n):
        log.append([])
        t(Image.new("RGB", (4, 4)))
    for x in log:
        for op in x:
            names_b[op[0]] += 1
    mine = [p["timm_augmix"] for p in tf.make_params([(8, 8)] * n, seed=5)]
    names_a = collections.Counter(op[0] for x in mine for c in x["chains"] for op in c)
    keys = sorted(set(names_a) | set(names_b))
    assert stats.chi2_contingency([[names_a[k] for k in keys], [names_b[k] for k in keys]]).pvalue > 1e-3
    total_a = sum(len(c) for x in mine for c in x["chains"])
    assert abs(total_a / (3 * n) - 2.0) < 0.05 and abs(sum(names_b.values()) / (3 * n) - 2.0) < 0.05
    assert depths_b == collections.Counter()  # (timm's depths are seen through the op count above)


def test_what_has_no_fused_form_is_refused_by_timms_name():
    with pytest.raises(TransformError, match="weighted op choice"):
        T.Compose.from_torchvision(aa.rand_augment_transform("rand-m9-tweights", dict(HP)))
    with pytest.raises(TransformError, match="op 'Desaturate' cannot be fused"):
        T.Compose.from_torchvision(aa.rand_augment_transform("rand-m9-t3a", dict(HP)))
    with pytest.raises(TransformError, match=r"^timm\.data\.AutoAugment with op '(Desaturate|GaussianBlurRand)'"):
        T.Compose.from_torchvision(aa.auto_augment_transform("3a", dict(HP)))
    with pytest.raises(TransformError, match="blended=True"):
        T.Compose.from_torchvision(aa.augment_and_mix_transform("augmix-m5-b1", dict(HP)))
