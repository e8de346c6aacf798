"""The per-sample ops beyond ColorJitter (autocontrast, equalize, sharpness, Gaussian blur,
rotations and affine warps, TrivialAugmentWide, RandAugment, AutoAugment, RandomChoice and
RandomOrder) against torchvision v2: the kernel's pixels against torchvision's functional
ops replaying the same parameters on real photographs, the CUDA kernel (simulator)
against the CPU twin, and the draws against torchvision's own draws."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from scipy import stats

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from simulator import run_code
from tvref import torchvision_apply

OUT = (40, 40)


def chw(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [chw(p) for p in photos.values()]
    out.append(chw(np.ascontiguousarray(photos["coffee"][::3, ::2])))  # odd size, downscaled
    return out


def _policy_ref(tv_policy):
    """torchvision's own op application of a policy, for (name, magnitude) lists."""
    def apply(x, ops):
        for name, m in ops:
            x = tv_policy._apply_image_or_video_transform(x, name, m, interpolation=tv_policy.interpolation,
                                                          fill=tv_policy._fill)
        return x
    return apply


def _augmix_ref(tv_augmix):
    """torchvision's AugMix mixing, with its own op application, replaying our draws:
    mix = m0 * x, then mix += w_i * chain_i(x)."""
    ops = _policy_ref(tv_augmix)

    def apply(x, a):
        mix = a["m"] * x
        for w, chain in zip(a["weights"], a["chains"]):
            mix.add_(w * ops(x, chain))
        return mix
    return apply


def _fill01(fill):
    return None if fill is None else [v / 255.0 for v in fill]


# (our step, torchvision replaying make_params on the float image, share of values allowed over 1 level)
CASES = {
    "autocontrast": (lambda: T.RandomAutocontrast(1.0), lambda x, p: F.autocontrast(x), 0.0),
    # equalize bins the float image to uint8 levels: a value an ulp from a level's edge may
    # land in the neighbouring bin (the resize's rounding differs by an ulp from torchvision's)
    "equalize": (lambda: T.RandomEqualize(1.0), lambda x, p: F.equalize(x), 0.01),
    "sharpness-2": (lambda: T.RandomAdjustSharpness(2.0, 1.0), lambda x, p: F.adjust_sharpness(x, 2.0), 0.0),
    "sharpness-0.3": (lambda: T.RandomAdjustSharpness(0.3, 1.0), lambda x, p: F.adjust_sharpness(x, 0.3), 0.0),
    "blur-5": (lambda: T.GaussianBlur(5, (0.1, 2.0)), lambda x, p: F.gaussian_blur(x, [5, 5], p["sigma"]), 0.0),
    "blur-7x3": (lambda: T.GaussianBlur((7, 3), (0.5, 3.0)), lambda x, p: F.gaussian_blur(x, [7, 3], p["sigma"]), 0.0),
    "blur-23": (lambda: T.GaussianBlur(23, (0.1, 2.0)), lambda x, p: F.gaussian_blur(x, [23, 23], p["sigma"]), 0.0),
    # nearest warps: a source coordinate within float32 rounding of a half may round the
    # other way than torchvision's (its grid is computed in another order)
    "rotate-nearest": (lambda: T.RandomRotation(30), lambda x, p: F.rotate(x, p["rotation"]["angle"], fill=0.0),
                       0.005),
    "rotate-bilinear-fill": (lambda: T.RandomRotation((-40, 40), "bilinear", fill=(255, 0, 128), center=(5, 30)),
                             lambda x, p: F.rotate(x, p["rotation"]["angle"], tv.InterpolationMode.BILINEAR,
                                                   center=[5, 30], fill=_fill01((255, 0, 128))), 0.0),
    "affine-nearest": (lambda: T.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5)),
                       lambda x, p: F.affine(x, **p["affine"], fill=0.0), 0.005),
    "affine-bilinear": (lambda: T.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), 8, "bilinear", fill=None),
                        lambda x, p: F.affine(x, **p["affine"], interpolation=tv.InterpolationMode.BILINEAR), 0.0),
    "perspective-bilinear": (lambda: T.RandomPerspective(0.5, 1.0),
                             lambda x, p: F.perspective(x, None, None, tv.InterpolationMode.BILINEAR, fill=0.0,
                                                        coefficients=p["perspective"]["coefficients"]), 0.0),
    "perspective-nearest-fill": (lambda: T.RandomPerspective(0.8, 1.0, "nearest", fill=(255, 0, 128)),
                                 lambda x, p: F.perspective(x, None, None, tv.InterpolationMode.NEAREST,
                                                            fill=_fill01((255, 0, 128)),
                                                            coefficients=p["perspective"]["coefficients"]), 0.005),
    "trivial-augment": (lambda: T.TrivialAugmentWide(),
                        lambda x, p: _policy_ref(tv.TrivialAugmentWide())(x, p["trivial_augment"]), 0.01),
    "trivial-augment-bilinear-fill": (
        lambda: T.TrivialAugmentWide(interpolation="bilinear", fill=[10, 200, 30]),
        lambda x, p: _policy_ref(tv.TrivialAugmentWide(interpolation=tv.InterpolationMode.BILINEAR,
                                                       fill=_fill01([10, 200, 30])))(x, p["trivial_augment"]), 0.01),
    "rand-augment": (lambda: T.RandAugment(3, 9),
                     lambda x, p: _policy_ref(tv.RandAugment(3, 9))(x, p["rand_augment"]), 0.01),
    "auto-augment": (lambda: T.AutoAugment(), lambda x, p: _policy_ref(tv.AutoAugment())(x, p["auto_augment"]),
                     0.01),
    **{f"auto-augment-{policy.value}": (
        lambda policy=policy: T.AutoAugment(policy),
        lambda x, p, policy=policy: _policy_ref(tv.AutoAugment(policy))(x, p["auto_augment"]), 0.01)
       for policy in (tv.AutoAugmentPolicy.CIFAR10, tv.AutoAugmentPolicy.SVHN)},
    "augmix": (lambda: T.AugMix(), lambda x, p: _augmix_ref(tv.AugMix())(x, p["augmix"]), 0.01),
    "augmix-nearest-depth2": (lambda: T.AugMix(severity=5, mixture_width=2, chain_depth=2, all_ops=False,
                                               interpolation="nearest"),
                              lambda x, p: _augmix_ref(tv.AugMix(5, 2, 2, all_ops=False,
                                                                 interpolation=tv.InterpolationMode.NEAREST)
                                                       )(x, p["augmix"]), 0.01),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_torchvision_on_real_photos(photo_batch, case):
    """RandomResizedCrop, a flip, then the op, against torchvision's functional op on the
    same float image with the same parameters: at most 1 level off (1/255), but for the
    few values the case names (rounding at a half or a bin edge)."""
    make, ref, share = CASES[case]
    tf = T.Compose([T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(), make(), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    worst = 0.0
    for seed in range(3 if share else 1):  # the policies: several draws per photo
        params = tf.make_params(sizes, 100 + seed)
        got = tf(photo_batch, params)
        for k, (img, prm) in enumerate(zip(photo_batch, params)):
            want = ref(torchvision_apply(img, prm, OUT), prm).clamp(0, 1)
            err = (got[k] - want).abs() * 255
            over = float((err > 1.0 + 1e-3).float().mean())
            worst = max(worst, over)
            assert over <= share, (case, k, prm, float(err.max()), over)
    print(f"{case}: worst share of values over 1 level {worst:.4f}")


def test_programs_with_many_barriers_match_torchvision(photo_batch):
    """Several ops that need the whole image or a neighbourhood in one program (each a
    barrier between CUDA launches), with jitter and per-pixel ops around them, in the
    Compose's order (flip after ColorJitter, pixel ops before a blur)."""
    tf = T.Compose([T.RandomResizedCrop(OUT), T.RandomGrayscale(0.3), T.RandomAdjustSharpness(1.7, 1.0),
                    T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomHorizontalFlip(), T.RandomEqualize(1.0),
                    T.GaussianBlur(3, (0.5, 1.5)), T.RandomAutocontrast(1.0), T.RandomRotation(10, "bilinear"),
                    T.Normalize([0.5] * 3, [0.25] * 3)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 7)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = torchvision_apply(img, {"crop": p["crop"], "flip": p["flip"]}, OUT)
        if p["grayscale"]:
            x = F.rgb_to_grayscale(x, num_output_channels=3)
        x = F.adjust_sharpness(x, 1.7)
        for op in p["order"]:
            name, fn = [("brightness", F.adjust_brightness), ("contrast", F.adjust_contrast),
                        ("saturation", F.adjust_saturation), ("hue", F.adjust_hue)][op]
            x = fn(x, p[name])
        x = F.autocontrast(F.gaussian_blur(F.equalize(x), [3, 3], p["sigma"]))
        x = F.rotate(x, p["rotation"]["angle"], tv.InterpolationMode.BILINEAR, fill=0.0)
        want = F.normalize(x, [0.5] * 3, [0.25] * 3)
        err = (got[k] - want).abs() * 255 * 0.25  # back to levels
        assert float((err > 1.0).float().mean()) <= 0.01, (k, float(err.max()))


def test_rotation_fast_paths_are_exact_permutations():
    """torchvision rotates by 90, 180 and 270 degrees (square images) by permuting pixels:
    so does the kernel (an integer map), bit for bit."""
    rng = np.random.default_rng(5)
    img = torch.from_numpy(rng.integers(0, 256, (3, 24, 24), dtype=np.uint8))
    for angle in (90.0, 180.0, 270.0, -90.0, 0.0):
        tf = T.Compose([T.RandomRotation((angle, angle), "bilinear", fill=(1, 2, 3)), T.ToDtype(torch.float32, scale=True)])
        got = tf(img)
        want = F.rotate(F.to_dtype(img, torch.float32, scale=True), angle, tv.InterpolationMode.BILINEAR,
                        fill=[1 / 255, 2 / 255, 3 / 255])
        assert torch.equal(got, want), angle


def test_cuda_kernel_equals_cpu_twin_under_the_simulator():
    """Every new op, and programs of several barriers (two equalizes, blur after affine,
    RandAugment's three ops; the warps before the flips mirrored), through the CUDA kernels (simulator: kernel 1 and one
    segment launch per barrier level) and the CPU twin, on crops of real photographs."""
    code = textwrap.dedent("""
        import numpy as np, torch
        from gpudecode import transforms as T
        from gpudecode.kernels import fused
        from gpudecode.kernels.ops import OPS
        from skimage import data
        from tvref import pack_hwc
        photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.astronaut(), data.coffee()]
        imgs = [torch.from_numpy(np.ascontiguousarray(p[60 + 9 * k:80 + 10 * k, 90:113].transpose(2, 0, 1)))
                for k, p in enumerate(photos)]
        steps = [T.RandomResizedCrop((12, 14)), T.RandomAutocontrast(0.5),
                 T.RandomEqualize(0.5), T.RandAugment(3, 12), T.RandomAdjustSharpness(1.8, 0.5),
                 T.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 5, "bilinear", fill=(30, 60, 90)), T.GaussianBlur(5),
                 T.RandomApply([T.RandomRotation(20)], 0.5), T.AugMix(mixture_width=2, chain_depth=2),
                 T.RandomPerspective(0.5, 0.5, "bilinear", fill=(20, 40, 60)),
                 T.RandomHorizontalFlip(), T.RandomVerticalFlip(),  # (after the warps: each mirrored, mirrors.mirror_ops)
                 T.RandomPhotometricDistort(p=0.7), T.RandomChannelPermutation(), T.GaussianNoise(sigma=0.05),
                 T.Normalize([0.5] * 3, [0.25] * 3)]
        for out_dtype, n in (("float32", 6), ("uint8", 2)):  # (uint8: the output's rounding, on fewer images)
            tf = T.Compose(steps if out_dtype == "float32" else steps[:-1])
            sizes = [tuple(i.shape[1:]) for i in imgs[:n]]
            params = tf.make_params(sizes, 11)
            cpu = tf(imgs[:n], params).numpy().astype(np.float32)
            geom, args, order = tf.encode(params, sizes)
            assert fused.barrier_levels(order) >= 4, order
            warps = np.isin(order, [OPS.index(o) for o in OPS if o.name in ("AFFINE", "PERSPECTIVE")])
            modes = set(args[..., 6][warps].tolist())  # (the mirrored nearest warps: -1 x, -2 y, -3 both)
            assert out_dtype == "uint8" or ({-2.0, -3.0} <= modes and {0.0, 1.0} <= modes), modes
            src = pack_hwc(imgs[:n], geom, sizes)
            mean, std = tf._norm_arrays()
            out = np.zeros((n, 3, 12, 14), np.dtype(out_dtype))
            fused.fused_cuda(src, geom, args, order, mean, std, out, normalize=out_dtype == "float32")
            diff = np.abs(out.astype(np.float32) - cpu)
            # equalize: a value an ulp from a bin edge (the two targets sum the blur in
            # another order) may take the next level; uint8: truncation of such values
            big = diff > (1e-4 if out_dtype == "float32" else 1.0)
            assert big.mean() <= 0.01, (out_dtype, diff.max(), big.mean())
        print("ok")
        """)
    run_code(code, timeout=600)


# ---- the draws, against torchvision's ---------------------------------------------------------

def _tv_policy_draws(policy, n: int, size=(40, 40)) -> list[list[tuple[str, float]]]:
    """torchvision's own choices: its forward, with the op application recorded."""
    seen: list[list[tuple[str, float]]] = []

    class Recorder(type(policy)):  # type: ignore[misc]
        def _apply_image_or_video_transform(self, image, transform_id, magnitude, interpolation, fill):
            seen[-1].append((transform_id, magnitude))
            return image

    rec = Recorder.__new__(Recorder)
    rec.__dict__.update(policy.__dict__)
    img = torch.zeros((3, *size), dtype=torch.uint8)
    torch.manual_seed(0)
    for _ in range(n):
        seen.append([])
        rec(img)
    return seen


def _contingency(a: list, b: list) -> float:
    keys = sorted(set(a) | set(b), key=str)
    table = np.array([[a.count(k) for k in keys], [b.count(k) for k in keys]])
    return float(stats.chi2_contingency(table).pvalue)


@pytest.mark.parametrize("ours,theirs,key", [
    (lambda: T.TrivialAugmentWide(), lambda: tv.TrivialAugmentWide(), "trivial_augment"),
    (lambda: T.RandAugment(2, 9), lambda: tv.RandAugment(2, 9), "rand_augment"),
    (lambda: T.AutoAugment(), lambda: tv.AutoAugment(), "auto_augment"),
    (lambda: T.AutoAugment(tv.AutoAugmentPolicy.CIFAR10), lambda: tv.AutoAugment(tv.AutoAugmentPolicy.CIFAR10),
     "auto_augment"),
    (lambda: T.AutoAugment("svhn"), lambda: tv.AutoAugment(tv.AutoAugmentPolicy.SVHN), "auto_augment"),
])
def test_policy_draws_are_distributed_as_torchvision(ours, theirs, key):
    """Which ops, how many per image, which magnitudes and signs: ours (seeded per
    sample) against torchvision's (recorded from its forward), 3000 images each."""
    n = 3000
    tf = T.Compose([ours()])
    mine = [p[key] for p in tf.make_params([OUT] * n, 4)]
    ref = _tv_policy_draws(theirs(), n, OUT)
    assert _contingency([len(d) for d in mine], [len(d) for d in ref]) > 1e-3
    names_a = [name for d in mine for name, _ in d]
    names_b = [name for d in ref for name, _ in d]
    assert _contingency(names_a, names_b) > 1e-3
    # magnitudes: the same set of values, alike in frequency (rounded to float32's 6 digits)
    mags_a = [round(m, 4) for d in mine for _, m in d]
    mags_b = [round(float(m), 4) for d in ref for _, m in d]
    assert set(mags_a) <= set(mags_b) | {0.0} and len(set(mags_a)) >= len(set(mags_b)) * 0.8
    assert stats.ks_2samp(mags_a, mags_b).pvalue > 1e-3


def test_augmix_draws_are_distributed_as_torchvision():
    """AugMix's chains (how deep, which ops, magnitudes and signs) and its mixing weights
    (Beta for the image's share, Dirichlet for the chains') against torchvision's own,
    recorded from its forward, 2,000 images each."""
    n = 2000
    mine = [p["augmix"] for p in T.Compose([T.AugMix()]).make_params([OUT] * n, 8)]
    seen: list[list] = []
    weights: list = []

    class Recorder(tv.AugMix):
        def _apply_image_or_video_transform(self, image, transform_id, magnitude, interpolation, fill):
            seen[-1].append((transform_id, magnitude))
            return image

        def _sample_dirichlet(self, params):
            out = super()._sample_dirichlet(params)
            weights.append(out)
            return out

    rec = Recorder()
    img = torch.zeros((3, *OUT), dtype=torch.uint8)
    torch.manual_seed(3)
    for _ in range(n):
        seen.append([])
        rec(img)
    names_a = [name for a in mine for c in a["chains"] for name, _ in c]
    names_b = [name for d in seen for name, _ in d]
    # ops per image (torchvision's record does not mark where a chain ends): the chains' depths together
    assert stats.ks_2samp([len(d) for d in seen], [sum(len(c) for c in a["chains"]) for a in mine]).pvalue > 1e-3
    assert _contingency(names_a, names_b) > 1e-3
    mags_a = [round(m, 4) for a in mine for c in a["chains"] for _, m in c]
    mags_b = [round(float(m), 4) for d in seen for _, m in d]
    assert stats.ks_2samp(mags_a, mags_b).pvalue > 1e-3
    m0_theirs = [float(w[0, 0]) for w in weights[0::2]]
    assert stats.ks_2samp([a["m"] for a in mine], m0_theirs).pvalue > 1e-3
    w0_theirs = [float(w[0, 0]) * (1 - m) for w, m in zip(weights[1::2], m0_theirs)]
    assert stats.ks_2samp([a["weights"][0] for a in mine], w0_theirs).pvalue > 1e-3


def test_warp_blur_and_wrapper_draws_are_distributed_as_torchvision():
    n = 2000
    img = torch.zeros((3, *OUT), dtype=torch.uint8)
    torch.manual_seed(1)
    rot = [p["rotation"]["angle"] for p in T.Compose([T.RandomRotation((-30, 50))]).make_params([OUT] * n, 1)]
    ref = [tv.RandomRotation((-30, 50)).make_params([img])["angle"] for _ in range(n)]
    assert stats.ks_2samp(rot, ref).pvalue > 1e-3
    ours = T.Compose([T.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5))]).make_params([OUT] * n, 2)
    theirs = [tv.RandomAffine(20, (0.1, 0.2), (0.8, 1.2), (-10, 10, -5, 5)).make_params([img]) for _ in range(n)]
    for get in (lambda p: p["angle"], lambda p: p["translate"][0], lambda p: p["translate"][1], lambda p: p["scale"],
                lambda p: p["shear"][0], lambda p: p["shear"][1]):
        assert stats.ks_2samp([get(p["affine"]) for p in ours], [get(p) for p in theirs]).pvalue > 1e-3
    size = (37, 52)  # (odd, so the bounds' halves round down as torchvision's)
    ours = [p.get("perspective") for p in T.Compose([T.RandomPerspective(0.6, 0.7)]).make_params([size] * n, 6)]
    tp = tv.RandomPerspective(0.6, 0.7)
    theirs = [tp.make_params([torch.zeros((3, *size), dtype=torch.uint8)]) if float(torch.rand(1)) < 0.7 else None
              for _ in range(n)]
    assert stats.binomtest(sum(p is not None for p in ours), n, 0.7).pvalue > 1e-3
    for k in range(8):  # each coefficient: a function of the four corners drawn alike
        assert stats.ks_2samp([p["coefficients"][k] for p in ours if p],
                              [p["coefficients"][k] for p in theirs if p]).pvalue > 1e-3, k
    sig = [p["sigma"][0] for p in T.Compose([T.GaussianBlur(5, (0.1, 2.0))]).make_params([OUT] * n, 3)]
    ref = [tv.GaussianBlur(5, (0.1, 2.0)).make_params([img])["sigma"][0] for _ in range(n)]
    assert stats.ks_2samp(sig, ref).pvalue > 1e-3
    choice = T.Compose([T.RandomChoice([T.RandomEqualize(1.0), T.RandomAutocontrast(1.0), T.RandomInvert(1.0)],
                                       p=[0.2, 0.3, 0.5])]).make_params([OUT] * n, 4)
    counts = np.bincount([p["choice"] for p in choice], minlength=3)
    assert stats.chisquare(counts, np.array([0.2, 0.3, 0.5]) * n).pvalue > 1e-3
    order = T.Compose([T.RandomOrder([T.RandomEqualize(1.0), T.RandomAutocontrast(1.0), T.RandomInvert(1.0)])]
                      ).make_params([OUT] * n, 5)
    perms = [tuple(p["random_order"]) for p in order]
    assert len(set(perms)) == 6 and stats.chisquare([perms.count(q) for q in set(perms)]).pvalue > 1e-3


def test_wrappers_run_their_steps_as_drawn(photo_batch):
    """RandomChoice runs the chosen step only, RandomOrder its steps in the drawn order,
    RandomApply all or none: against torchvision's functional ops."""
    tf = T.Compose([T.RandomResizedCrop(OUT),
                    T.RandomOrder([T.RandomAdjustSharpness(2.5, 1.0), T.RandomInvert(1.0), T.GaussianBlur(3, 1.0)]),
                    T.RandomChoice([T.RandomEqualize(1.0), T.RandomPosterize(2, 1.0)]),
                    T.RandomApply([T.RandomAutocontrast(1.0), T.RandomSolarize(100, 1.0)], p=0.5),
                    T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 9)
    got = tf(photo_batch, params)
    steps = [lambda x: F.adjust_sharpness(x, 2.5), F.invert, lambda x: F.gaussian_blur(x, [3, 3], [1.0, 1.0])]
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = torchvision_apply(img, {"crop": p["crop"]}, OUT)
        for i in p["random_order"]:
            x = steps[i](x)
        x = F.equalize(x) if p["choice"] == 0 else F.posterize(x, 2)
        if p.get("autocontrast"):
            x = F.solarize(F.autocontrast(x), 100 / 255)
        assert float(((got[k] - x).abs() * 255 > 1.0).float().mean()) <= 0.01, (k, p)


def test_a_compose_inside_a_container_stays_one_item(photo_batch):
    """torchvision's RandomChoice([Compose([a, b]), c]) runs a then b, or c; RandomOrder
    shuffles the Compose as one item: converted, and written with our Compose, they keep
    it whole (its steps were spread out, so RandomOrder shuffled a, b and c), against
    torchvision's functional ops for the drawn choice and order."""
    their = tv.Compose([tv.RandomResizedCrop(OUT),
                        tv.RandomOrder([tv.Compose([tv.RandomEqualize(1.0), tv.RandomPosterize(3, 1.0)]),
                                        tv.RandomInvert(1.0)]),
                        tv.RandomChoice([tv.Compose([tv.RandomAutocontrast(1.0), tv.RandomSolarize(100, 1.0)]),
                                         tv.RandomAdjustSharpness(2.5, 1.0)]),
                        tv.ToDtype(torch.float32, scale=True)])
    ours = T.Compose([T.RandomResizedCrop(OUT),
                      T.RandomOrder([T.Compose([T.RandomEqualize(1.0), T.RandomPosterize(3, 1.0)]),
                                     T.RandomInvert(1.0)]),
                      T.RandomChoice([T.Compose([T.RandomAutocontrast(1.0), T.RandomSolarize(100, 1.0)]),
                                      T.RandomAdjustSharpness(2.5, 1.0)]),
                      T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    order = [lambda x: F.posterize(F.equalize(x), 3), F.invert]
    choice = [lambda x: F.solarize(F.autocontrast(x), 100 / 255), lambda x: F.adjust_sharpness(x, 2.5)]
    for tf in (T.Compose.from_torchvision(their), ours):
        assert [len(step.transforms) for step in tf.plan.program] == [2, 2], tf
        params = tf.make_params(sizes * 4, 5)
        assert {tuple(p["random_order"]) for p in params} == {(0, 1), (1, 0)}
        assert {p["choice"] for p in params} == {0, 1}
        got = tf(photo_batch * 4, params)
        for k, (img, p) in enumerate(zip(photo_batch * 4, params)):
            x = torchvision_apply(img, {"crop": p["crop"]}, OUT)
            for i in p["random_order"]:
                x = order[i](x)
            x = choice[p["choice"]](x)
            assert float(((got[k] - x).abs() * 255 > 1.0).float().mean()) <= 0.01, (k, p)
    assert repr(ours) == repr(eval(repr(ours), {"T": T, "torch": torch, **vars(T)}))  # (its repr makes it again)


def test_a_compose_inside_a_compose_is_its_steps_in_place(photo_batch):
    """Compose([Compose([Resize, CenterCrop]), flip, ...]) as torchvision runs it: the inner
    steps in its place, the same images as the flat Compose's for a seed; options belong
    to the outermost Compose; a Compose of an op and Normalize in RandomApply, or a choice
    of an op and Normalize, is refused with its reason (a choice among crops, or RandomApply
    over them, is the geometry: test_geometry_choice.py, test_applied_geometry.py)."""
    inner = T.Compose([T.Resize(44), T.CenterCrop(OUT)])
    nested = T.Compose([inner, T.RandomHorizontalFlip(), T.Compose([T.ColorJitter(0.4, 0.4)]),
                        T.Normalize([0.5] * 3, [0.25] * 3)])
    flat = T.Compose([T.Resize(44), T.CenterCrop(OUT), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4),
                      T.Normalize([0.5] * 3, [0.25] * 3)])
    assert repr(nested) == repr(flat)
    assert torch.equal(nested(photo_batch, seed=4), flat(photo_batch, seed=4))
    with pytest.raises(TransformError, match="outermost"):
        T.Compose([T.Compose([T.Resize(44)], layout="NHWC"), T.CenterCrop(OUT)])
    applied = T.RandomApply([T.Compose([T.Resize(44), T.CenterCrop(OUT)])])  # (crops: the geometry, its steps or
    assert [type(t) for t in applied.applied] == [T.Resize, T.CenterCrop]  # none: test_applied_geometry.py)
    with pytest.raises(TransformError, match=r"Compose\(\['ColorJitter', 'Normalize'\]\) inside a container cannot"):
        T.RandomApply([T.Compose([T.ColorJitter(0.2), T.Normalize([0.5] * 3, [0.25] * 3)])])
    with pytest.raises(TransformError, match=r"Normalize in a choice would\s+give\s+each\s+image"):
        T.Compose.from_torchvision(tv.RandomChoice([tv.RandomInvert(), tv.Normalize([0.5] * 3, [0.2] * 3)]))


# ---- the recipes, converted --------------------------------------------------------------------

def test_reference_timm_and_dino_recipes_convert(photo_batch):
    """torchvision's reference recipe (TrivialAugmentWide, RandomErasing), a timm-style
    RandAugment recipe and DINO's views (GaussianBlur in RandomApply, solarize) convert
    unchanged from torchvision and run."""
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    reference = tv.Compose([tv.RandomResizedCrop(40, antialias=True), tv.RandomHorizontalFlip(0.5),
                            tv.TrivialAugmentWide(interpolation=tv.InterpolationMode.BILINEAR), tv.PILToTensor(),
                            tv.ToDtype(torch.float, scale=True), tv.Normalize(mean, std), tv.RandomErasing(0.1),
                            tv.ToPureTensor()])
    timm_like = tv.Compose([tv.RandomResizedCrop(40), tv.RandomHorizontalFlip(), tv.RandAugment(2, 9),
                            tv.ColorJitter(0.4, 0.4, 0.4), tv.ToDtype(torch.float32, scale=True),
                            tv.Normalize(mean, std), tv.RandomErasing(0.25)])
    flip_and_jitter = tv.Compose([tv.RandomHorizontalFlip(p=0.5),
                                  tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                                  tv.RandomGrayscale(p=0.2)])
    norm = tv.Compose([tv.ToImage(), tv.ToDtype(torch.float32, scale=True), tv.Normalize(mean, std)])
    dino_global1 = tv.Compose([tv.RandomResizedCrop(40, scale=(0.4, 1.0)), flip_and_jitter,
                               tv.RandomApply([tv.GaussianBlur(9, (0.1, 2.0))], p=1.0), norm])
    dino_global2 = tv.Compose([tv.RandomResizedCrop(40, scale=(0.4, 1.0)), flip_and_jitter,
                               tv.RandomApply([tv.GaussianBlur(9, (0.1, 2.0))], p=0.1), tv.RandomSolarize(128, 0.2),
                               norm])
    dino_local = tv.Compose([tv.RandomResizedCrop(24, scale=(0.05, 0.4)), flip_and_jitter,
                             tv.RandomApply([tv.GaussianBlur(9, (0.1, 2.0))], p=0.5), norm])
    for src in (reference, timm_like, dino_global1, dino_global2, dino_local):
        tf = T.Compose.from_torchvision(src)
        out = tf(photo_batch, seed=3)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
    ta = T.Compose.from_torchvision(reference).plan.program[0]
    assert isinstance(ta, T.TrivialAugmentWide) and ta.interpolation == 1.0


def test_refusals_name_what_is_supported():
    with pytest.raises(TransformError, match="expand=True"):
        T.Compose.from_torchvision(tv.RandomRotation(10, expand=True))
    with pytest.raises(TransformError, match="the policies are imagenet, cifar10, svhn"):
        T.AutoAugment("cifar100")
    with pytest.raises(TransformError, match="kernel sides up to 63"):
        T.GaussianBlur(65)
    with pytest.raises(TransformError, match="half the kernel"):
        T.Compose([T.RandomResizedCrop(8), T.GaussianBlur(17)])
    with pytest.raises(TransformError, match="RandomHorizontalFlip after ElasticTransform"):
        T.Compose([T.RandomResizedCrop(8), T.ElasticTransform(), T.RandomHorizontalFlip()])
    with pytest.raises(TransformError, match="two TrivialAugmentWides"):
        T.Compose([T.TrivialAugmentWide(), T.TrivialAugmentWide()])
    with pytest.raises(TransformError, match="nearest or bilinear"):
        T.RandomRotation(10, "bicubic")
    with pytest.raises(TransformError, match=r"(?s)RandomZoomOut\(.*after\s+other\s+steps\s+cannot") as e:
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(8), tv.RandomZoomOut()]))
    assert "comes first" in " ".join(str(e.value).split())
    with pytest.raises(TransformError, match=r"(?s)ColorJitter\s+after\s+ElasticTransform"):  # (it warps the output)
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(8), tv.ElasticTransform(), tv.ColorJitter(0.1)]))
    with pytest.raises(TransformError, match="RandomApply is fused over|RandomApply is fused around"):
        T.Compose.from_torchvision(tv.RandomApply([tv.Normalize([0.5] * 3, [0.2] * 3)], p=0.5))


def test_loader_runs_the_reference_recipe_from_torchvision(photos, tmp_path):
    """A Loader given torchvision's reference Compose (TrivialAugmentWide, RandomErasing)
    and its MixUp/CutMix converts both and trains: the same batches for the same seed,
    another epoch draws anew, soft labels, and describe() names what ran fused and after."""
    from conftest import encode, make_shard

    from gpudecode import Loader

    names = sorted(photos)
    samples = [{"__key__": f"k{i:03d}", "jpg": encode(np.ascontiguousarray(photos[names[i % len(names)]][:90, :120])),
                "cls": b"%d" % (i % 3)} for i in range(24)]
    shard = make_shard(tmp_path / "r.tar", samples)
    recipe = tv.Compose([tv.RandomResizedCrop(32, antialias=True), tv.RandomHorizontalFlip(0.5),
                         tv.TrivialAugmentWide(interpolation=tv.InterpolationMode.BILINEAR), tv.PILToTensor(),
                         tv.ToDtype(torch.float, scale=True), tv.Normalize([0.5] * 3, [0.25] * 3),
                         tv.RandomErasing(0.1), tv.ToPureTensor()])
    mix = tv.RandomChoice([tv.MixUp(alpha=0.2, num_classes=3), tv.CutMix(alpha=1.0, num_classes=3)])
    kw = dict(batch_size=8, transform=recipe, batch_transform=mix, device="cpu", seed=3, num_workers=2)
    ld = Loader(shard, **kw)
    first = [(b.images.clone(), b.labels.clone()) for b in ld]
    again = [(b.images.clone(), b.labels.clone()) for b in Loader(shard, **kw)]
    assert len(first) == 3 and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert all(torch.isfinite(x).all() and y.shape == (8, 3) for x, y in first)
    ld.set_epoch(1)
    assert not torch.equal(next(iter(ld)).images, first[0][0])
    d = ld.describe()
    assert "TrivialAugmentWide" in d["transform"] and "MixUp" in d["after"][0]
