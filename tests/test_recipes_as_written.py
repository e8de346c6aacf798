"""The recipes as people write them (issue 38, first part): objects that carry a Compose
(torchvision's reference presets), torchvision's weights' eval transforms
(ImageClassification), a Compose's `.transforms` list; each converted unchanged."""
from __future__ import annotations


import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as tv
from conftest import encode, make_shard

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
    return make_shard(d / "s.tar", [{"__key__": f"{i:03d}", "png": encode(im, "PNG"), "cls": b"%d" % (i % 3)}
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


class RandomMixUp(torch.nn.Module):
    """As torchvision's references/classification/transforms.py writes it (global
    generators: torch.rand, torch's Dirichlet)."""

    def __init__(self, num_classes: int, p: float = 0.5, alpha: float = 1.0) -> None:
        super().__init__()
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    def forward(self, batch, target):
        target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch_rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(batch_rolled)
        target_rolled.mul_(1.0 - lam)
        target.mul_(lam).add_(target_rolled)
        return batch, target


def test_the_references_mixup_as_written_is_seeded_per_batch(shard):
    """get_mixup_cutmix(use_v2=False): a v1 RandomChoice over the reference's own
    RandomMixUp. It runs as written, its draws seeded per batch: two Loaders with the same
    seed mix alike, a resumed one too, and the caller's generators are left as they were."""
    import random

    import torchvision.transforms as v1

    path, _ = shard
    tf = tv.Compose([tv.RandomResizedCrop(32), tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])
    mix = v1.RandomChoice([RandomMixUp(num_classes=3, p=1.0, alpha=0.2), RandomMixUp(num_classes=3, p=1.0, alpha=1.0)])

    def run(state=None):
        ld = gpudecode.Loader(path, batch_size=2, transform=tf, batch_transform=mix, device="cpu", seed=5)
        if state is not None:
            ld.load_state_dict(state)
        return [(b[0].clone(), b[1].clone()) for b in ld]

    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    a = run()
    after = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    assert (torch.equal(after[0], torch.rand(3)) and after[1] == random.random()
            and after[2] == np.random.rand())  # the caller's generators: as if nothing ran
    b = run()
    assert len(a) == 2 and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    assert all(x[1].shape == (2, 3) for x in a)  # one-hot, mixed by the reference's own code
    lams = [sorted(x[1].max(1).values.tolist()) for x in a]
    assert all(0.5 <= v < 1.0 for lam in lams for v in lam) and lams[0] != lams[1]  # mixed, each its own lambda
    ld = gpudecode.Loader(path, batch_size=2, transform=tf, batch_transform=mix, device="cpu", seed=5)
    it = iter(ld)
    next(it)
    state = ld.state_dict()
    it.close()
    c = run(state)
    assert len(c) == 1 and torch.equal(a[1][0], c[0][0]) and torch.equal(a[1][1], c[0][1])


def test_timms_create_transform_converts_or_is_refused_by_name(shard):
    """timm's eval transform converts with timm's numbers (against timm's own transform on
    the PIL image: within 1 level of 255 on real photographs, measured 0.97-1.0), its
    default train transform converts (its RandomResizedCropAndInterpolation is
    torchvision's draw with one interpolation); what has no fused form yet is refused with
    timm's own module and the reason."""
    import io as _io

    from PIL import Image

    timm = pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data import create_transform

    path, imgs = shard
    ev = create_transform(224, is_training=False)
    ld = gpudecode.Loader(path, batch_size=4, transform=ev, device="cpu", shuffle=False)
    assert ld.describe()["transform"] == ["Resize", "CenterCrop", "ToDtype", "Normalize"]
    std = torch.tensor(STD).view(3, 1, 1)
    for got, img in zip(next(iter(ld)).images, imgs):
        png = _io.BytesIO()
        Image.fromarray(img).save(png, "PNG")
        ref = ev(Image.open(png).convert("RGB"))
        assert ((got - ref) * std * 255).abs().max().item() <= 1.0 + 1e-3
    tr = gpudecode.transforms.Compose.from_torchvision(create_transform(224, is_training=True))
    assert [type(s).__name__ for s in tr.plan.steps] == ["RandomResizedCrop", "RandomHorizontalFlip", "ColorJitter",
                                                       "ToDtype", "Normalize"]
    assert tr.plan.geometry[0].scale == (0.08, 1.0)
    for kw, match in ((dict(re_prob=0.25, re_num_splits=2), r"RandomErasing with num_splits=2"),):
        with pytest.raises(TransformError, match=match):
            gpudecode.transforms.Compose.from_torchvision(create_transform(224, is_training=True, **kw))
    assert timm.__version__


def test_timms_bicubic_and_random_interpolation_convert(shard):
    """timm's interpolation: "bicubic" (most timm models' eval and train setting) converts
    in both transforms (the eval one within 1 level of timm's own on the PIL image in
    99.9% of pixels, measured 99.98-100%: PIL clips its first pass's overshoot to uint8,
    the kernel once at the end); "random" keeps both modes, one drawn an image."""
    import io as _io

    from PIL import Image

    pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data import create_transform

    path, imgs = shard
    ev = create_transform(224, is_training=False, interpolation="bicubic")
    ld = gpudecode.Loader(path, batch_size=4, transform=ev, device="cpu", shuffle=False)
    assert ld.pipeline.views[0].plan.cubic
    std = torch.tensor(STD).view(3, 1, 1)
    for got, img in zip(next(iter(ld)).images, imgs):
        png = _io.BytesIO()
        Image.fromarray(img).save(png, "PNG")
        ref = ev(Image.open(png).convert("RGB"))
        d = ((got - ref) * std * 255).abs()
        assert (d <= 1 + 1e-3).float().mean().item() >= 0.999 and d.max().item() <= 16
    tr = gpudecode.transforms.Compose.from_torchvision(create_transform(224, is_training=True,
                                                                       interpolation="bicubic"))
    assert tr.plan.cubic and tr.plan.geometry[0].interpolation == "bicubic"
    rnd = gpudecode.transforms.Compose.from_torchvision(create_transform(224, is_training=True,
                                                                        interpolation="random"))
    assert rnd.plan.geometry[0].interpolation == ("bilinear", "bicubic") and rnd.native_spec is None
    ld = gpudecode.Loader(path, batch_size=4, transform=rnd, device="cpu", seed=1)
    assert next(iter(ld)).images.shape == (4, 3, 224, 224)


@pytest.mark.parametrize("kw", [dict(crop_mode="border", interpolation="bicubic"), dict(crop_mode="squash"),
                                dict(img_size=(160, 224))])
def test_timms_other_eval_crops_convert(shard, kw):
    """timm's eval crop modes: "border" (ResizeKeepRatio(longest=1) + CenterCropOrPad with
    the mean colour), "squash", and a non-square size (ResizeKeepRatio(longest=0) +
    CenterCrop): within 1 level of timm's own on the PIL image on 99.9% of pixels."""
    import io as _io

    from PIL import Image

    pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data import create_transform

    path, imgs = shard
    kw = dict(kw)
    ev = create_transform(kw.pop("img_size", 224), is_training=False, **kw)
    ld = gpudecode.Loader(path, batch_size=4, transform=ev, device="cpu", shuffle=False)
    std = torch.tensor(STD).view(3, 1, 1)
    for got, img in zip(next(iter(ld)).images, imgs):
        png = _io.BytesIO()
        Image.fromarray(img).save(png, "PNG")
        ref = ev(Image.open(png).convert("RGB"))
        assert got.shape == ref.shape
        d = ((got - ref) * std * 255).abs()
        assert (d <= 1 + 1e-3).float().mean().item() >= 0.999 and d.max().item() <= 16


@pytest.mark.parametrize("mode", ["pixel", "const", "rand"])
def test_timms_random_erasing_converts_with_timms_draw(mode):
    """timm's RandomErasing (--reprob 0.25 --remode pixel, DeiT's and ConvNeXt's recipes)
    converts: the erased boxes' rate, area and aspect as timm draws them (timm's own
    RandomErasing on 4,000 images of zeros as the reference), noise a pixel in "pixel" mode,
    one normal colour a box in "rand", zeros in "const"."""
    import math
    import random

    pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data import create_transform
    from timm.data.random_erasing import RandomErasing as TimmErasing

    tr = gpudecode.transforms.Compose.from_torchvision(
        create_transform(64, is_training=True, re_prob=0.25, re_mode=mode, interpolation="bilinear"))
    er = tr.plan.steps[-1]
    assert type(er).__name__ == "RandomErasing" and er.p == 0.25
    assert ("value='random'" in repr(er)) == (mode != "const")  # noise, or a fixed value
    assert ("noise='box'" in repr(er)) == (mode == "rand")
    assert mode != "const" or list(er.value) in ([0.0], [0.0, 0.0, 0.0])
    view = torch.zeros(2, 3, 40, 48)
    params = [{"erase": {"i": 3, "j": 5, "h": 10, "w": 12, "noise": 11}}, {"erase": None}]
    if mode != "const":
        er.erase(view, params)
        box = view[0, :, 3:13, 5:17]
        outside = view[0].clone()
        outside[:, 3:13, 5:17] = 0
        assert box.abs().min() > 0 and view[1].abs().max() == 0 and outside.abs().max() == 0
        flat = box.reshape(3, -1)
        assert (flat.std(1).max() == 0) == (mode == "rand")  # one colour a channel, or noise a pixel
        batched = torch.zeros_like(view)
        er.erase(batched, params, batched=True)
        assert torch.equal(batched, view)
    ref = TimmErasing(probability=0.25, mode=mode, device="cpu")
    random.seed(0)
    torch.manual_seed(0)
    theirs, ours = [], []
    rng = random.Random(1)
    for _ in range(4000):
        x = torch.full((3, 40, 48), 7.0)
        ref(x)
        box = x[0] != 7.0
        if box.any():
            ys, xs = box.any(1).nonzero(), box.any(0).nonzero()
            theirs.append((int(ys.max() - ys.min() + 1), int(xs.max() - xs.min() + 1)))
        p = er.draw(rng, (40, 48))
        if p.get("erase") is not None:
            ours.append((p["erase"]["h"], p["erase"]["w"]))

    def summary(boxes):
        return (len(boxes) / 4000, np.mean([h * w for h, w in boxes]) / (40 * 48),
                np.mean([math.log(h / w) for h, w in boxes]))

    (r1, a1, l1), (r2, a2, l2) = summary(theirs), summary(ours)
    assert abs(r1 - r2) < 0.03 and abs(a1 - a2) < 0.025 and abs(l1 - l2) < 0.1, (summary(theirs), summary(ours))


@pytest.mark.parametrize("count", [(1, 3), (2, 2)])
def test_timms_random_erasing_with_several_boxes_erases_timms_boxes(count):
    """timm's --recount (min_count/max_count): the boxes timm's own RandomErasing erases,
    box for box: with Python's generator in the same state, our draw makes timm's calls
    in timm's order (the coin, the count, each box's tries), so in mode "const" the erased
    images are equal, on both erase paths (image by image, and the batched one that
    erases in rounds), over 300 seeds; overlapping boxes are erased in timm's order."""
    import math
    import random

    pytest.importorskip("timm", reason="timm is in the [test] extra")
    from timm.data import create_transform
    from timm.data.random_erasing import RandomErasing as TimmErasing

    lo, hi = count
    tr = gpudecode.transforms.Compose.from_torchvision(
        create_transform(64, is_training=True, re_prob=0.9, re_mode="const", re_count=hi, interpolation="bilinear"))
    assert tr.plan.steps[-1].count == (1, hi)  # create_transform's re_count is timm's max_count
    ref = TimmErasing(probability=0.9, mode="const", min_count=lo, max_count=hi, device="cpu")
    ours = gpudecode.transforms.RandomErasing(0.9, (ref.min_area, ref.max_area),
                                               tuple(math.exp(v) for v in ref.log_aspect_ratio), 0.0, count=(lo, hi))
    several = 0
    for seed in range(300):
        random.seed(seed)
        theirs = torch.full((3, 40, 48), 7.0)
        ref(theirs)
        p = ours.draw(random.Random(seed), (40, 48))
        several += len(p["erase_boxes"]) > 1
        mine = torch.full((2, 3, 40, 48), 7.0)
        ours.erase(mine, [p, {"erase": None, "erase_boxes": []}])
        assert torch.equal(mine[0], theirs), seed
        batched = torch.full((2, 3, 40, 48), 7.0)
        ours.erase(batched, [p, {"erase": None, "erase_boxes": []}], batched=True)
        assert torch.equal(batched, mine) and (mine[1] == 7.0).all(), seed
    assert several > 100  # (several boxes an image are what is tested)


@pytest.mark.filterwarnings("ignore:repeated_augs=:RuntimeWarning")  # (RASampler's 256-rounding, said: test_hostile_round4)
def test_repeated_augmentation_is_rasamplers(tmp_path, photos):
    """repeated_augs=k: per rank and epoch, the indices torchvision's/DeiT's RASampler
    gives (timm's RepeatAugSampler as the independent reference, seed 0, which seeds with
    the epoch alone), in its order; len() agrees; the copies of an image draw apart; a
    shard source is refused (it is read in order, not by index)."""
    timm_sampler = pytest.importorskip("timm.data.distributed_sampler", reason="timm is in the [test] extra")
    from gpudecode.io.reader import ShardReader

    n = 300
    small = np.ascontiguousarray(photos["coffee"][:24, :32])
    for i in range(n):
        (tmp_path / f"{i:03d}.png").write_bytes(encode(np.roll(small, i, axis=1), "PNG"))
    pairs = [(str(tmp_path / f"{i:03d}.png"), i % 7) for i in range(n)]
    for world, k, epoch in ((2, 3, 0), (3, 2, 5), (1, 3, 2)):
        for rank in range(world):
            ref = timm_sampler.RepeatAugSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=True,
                                                num_repeats=k)
            ref.set_epoch(epoch)
            rd = ShardReader(pairs, shuffle=True, seed=0, rank=rank, world_size=world, repeated_augs=k,
                             extensions=["cls"])
            rd.set_epoch(epoch)
            got = [s.index for s in rd]
            assert got == list(ref) and rd.samples_per_epoch() == len(ref)
    tf = tv.Compose([tv.RandomResizedCrop(16), tv.ToDtype(torch.float32, scale=True)])
    ld = gpudecode.Loader(pairs, batch_size=8, transform=tf, device="cpu", seed=0, repeated_augs=3)
    assert len(ld) == 256 // 8 and list(ld.sampler)[:6] == list(timm_sampler.RepeatAugSampler(
        list(range(n)), num_replicas=1, rank=0, num_repeats=3))[:6]
    first = next(iter(ld))
    keys = first.keys
    assert keys[0] == keys[1] == keys[2] and not torch.equal(first.images[0], first.images[1])  # one image, 3 draws
    with pytest.raises(ValueError, match="reads samples by index"):
        gpudecode.Loader(make_shard(tmp_path / "s.tar", [{"__key__": "a", "cls": b"0"}]), batch_size=2, transform=tf,
                         repeated_augs=3)


def test_loader_dataset_has_imagefolders_classes(tmp_path, photos):
    """`loader.dataset.classes` / `.class_to_idx`, as torchvision's ImageFolder gives them:
    from a tree, and from shards through the class index `gpudecode shard` wrote."""
    from torchvision.datasets import ImageFolder

    from gpudecode.cli import main

    tree = tmp_path / "tree"
    for c in ("zebra", "ant", "mole"):
        (tree / c).mkdir(parents=True)
        (tree / c / "0.jpg").write_bytes(encode(np.ascontiguousarray(photos["coffee"][:24, :32])))
    ref = ImageFolder(str(tree))
    ld = gpudecode.Loader(str(tree), batch_size=1, transform=None, device="cpu")
    assert ld.dataset.classes == ref.classes and ld.dataset.class_to_idx == ref.class_to_idx
    assert main(["shard", str(tree), str(tmp_path / "sh" / "train-%06d.tar"), "--quiet"]) == 0
    ld = gpudecode.Loader(str(tmp_path / "sh" / "train-%06d.tar"), batch_size=1, transform=None, device="cpu")
    assert ld.dataset.classes == ref.classes and ld.dataset.class_to_idx == ref.class_to_idx


def test_to_pil_image_first_converts_as_the_pil_pipeline_it_begins(photos):
    """[ToPILImage(), ...PIL steps..., ToTensor(), Normalize] (a dataset of arrays or
    tensors made PIL images first, as many scripts write it): the steps before ToTensor
    take PIL's arithmetic, and the output equals torchvision's on the same tensor image
    (nearest: exactly; bilinear: within a level); ToPILImage after another step, after a
    float conversion, or of another mode is refused, naming it."""
    import torchvision.transforms as tv1

    from gpudecode.transforms import Compose

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    img = torch.from_numpy(photos["chelsea"]).permute(2, 0, 1).contiguous()
    for mode, most in ((tv.InterpolationMode.NEAREST, 1e-5), (tv.InterpolationMode.BILINEAR, 1.01 / 255)):
        for T in (tv, tv1):
            to_tensor = [T.ToTensor()] if T is tv1 else [tv.ToImage(), tv.ToDtype(torch.float32, scale=True)]
            steps = [T.ToPILImage(), T.Resize(131, interpolation=mode), T.CenterCrop((96, 112)), *to_tensor,
                     T.Normalize(mean, std)]
            ours = Compose.from_torchvision(T.Compose(steps))  # (as the steps after it, on PIL images)
            assert repr(ours.transforms) == repr(Compose.from_torchvision(T.Compose(steps[1:])).transforms)
            want = T.Compose(steps)(img)
            err = float(((ours(img) - want).abs() * torch.tensor(std).view(3, 1, 1)).max())
            assert err <= most, (T.__name__, mode, err)
    for steps, said in (([tv.CenterCrop(8), tv.ToPILImage()], "step 2 of 2"),
                        ([tv.ToDtype(torch.float32, scale=True), tv.ToPILImage()], "rounded down"),
                        ([tv.ToPILImage(mode="L"), tv.ToImage()], "only as the first step")):
        with pytest.raises(TransformError, match=said):
            Compose.from_torchvision(tv.Compose(steps))


def test_a_centre_crop_then_a_resize_as_celebas_recipes_write_it(photos, tmp_path):
    """[CenterCrop(c), Resize(s)] (CelebA's GAN and VAE recipes): the centre crop resized,
    as torchvision's, within a level on photographs, square and not, its mask and boxes
    moved as v2 moves them; the decoder is asked for the crop alone; an image smaller than the crop is that image's error, named by its
    key through the Loader (torchvision would pad it: not done here, said)."""
    from torchvision import tv_tensors

    from gpudecode.transforms import Compose

    for crop, size in ((148, 64), ((150, 120), 64), (100, (50, 70))):
        tv_tf = tv.Compose([tv.CenterCrop(crop), tv.Resize(size), tv.ToDtype(torch.float32, scale=True)])
        ours = Compose.from_torchvision(tv_tf)
        for a in photos.values():
            img = tv_tensors.Image(torch.from_numpy(np.ascontiguousarray(a[:218, :178])).permute(2, 0, 1))
            want, got = tv_tf(img), ours(img)
            assert got.shape == want.shape, (crop, size)
            assert float((got - want).abs().max()) * 255 <= 1.0 + 1e-3, (crop, size)
        d = ours.draw_batch([(218, 178)], 0)
        ch, cw = (crop, crop) if isinstance(crop, int) else crop
        assert d.boxes().tolist() == [[int(round((218 - ch) / 2)), int(round((178 - cw) / 2)), ch, cw]]
        # a mask and boxes beside the image move as torchvision's v2 moves a Mask and BoundingBoxes
        mask = torch.from_numpy(np.random.default_rng(0).integers(0, 5, (218, 178)).astype(np.uint8))
        moved = tv.Compose([tv.CenterCrop(crop), tv.Resize(size)])
        assert torch.equal(ours.masks([mask], d)[0], moved(tv_tensors.Mask(mask)).as_subclass(torch.Tensor))
        box = torch.tensor([[10.0, 20.0, 150.0, 200.0]])
        want_box = moved(tv_tensors.BoundingBoxes(box, format="XYXY", canvas_size=(218, 178)))
        got_box = ours.boxes([box.numpy()], d, min_size=0, min_area=0)[0]["boxes"]
        torch.testing.assert_close(got_box, want_box.as_subclass(torch.Tensor), atol=1e-4, rtol=0)
    samples = [{"__key__": f"s{i}", "png": encode(photos["astronaut"][:218 - 80 * i, :178], "PNG"), "cls": b"1"}
               for i in range(2)]
    url = make_shard(tmp_path / "celeba.tar", samples)
    ld = gpudecode.Loader([url], batch_size=2, device="cpu", shuffle=False, on_error="skip",
                          transform=tv.Compose([tv.CenterCrop(148), tv.Resize(64), tv.ToDtype(torch.float32, scale=True)]))
    batches = list(ld)
    assert [b.keys for b in batches] == [["s0"]] and batches[0].images.shape == (1, 3, 64, 64)
    assert [s.key for s in ld.skipped] == ["s1"] and "larger than the 138x178 image" in ld.skipped[0].reason


def test_a_flip_after_randaugment_as_scripts_write_it(shard):
    """`[RandomResizedCrop, RandAugment(), RandomHorizontalFlip(), ...]` (the flip after
    the policy, as many scripts write it) through the Loader: each batch is torchvision's
    crop, policy, then flip, replaying the Loader's draws, within a level (nearest warps
    to the pixel: the kernel mirrors them on flipped samples)."""
    from test_augment import _policy_ref
    from tvref import torchvision_apply

    from gpudecode.transforms import Compose

    path, imgs = shard
    steps = tv.Compose([tv.RandomResizedCrop(48), tv.RandAugment(3, 12), tv.RandomHorizontalFlip(),
                        tv.ToDtype(torch.float32, scale=True)])
    ours = Compose.from_torchvision(steps)
    assert ours.plan.flip_at == (1, 0)
    ref_policy = _policy_ref(tv.RandAugment(3, 12))
    tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im in imgs]
    flipped, pos = 0, 0
    for seed in range(3):
        pos = 0
        for b in gpudecode.Loader(path, batch_size=2, transform=steps, device="cpu", shuffle=False, seed=seed):
            batch = tensors[pos:pos + len(b.keys)]
            params = ours.make_params([tuple(t.shape[1:]) for t in batch], seed, indices=list(range(pos, pos + len(batch))))
            for got, img, p in zip(b.images, batch, params):
                x = ref_policy(torchvision_apply(img, {**p, "flip": False}, (48, 48)), p["rand_augment"]).clamp(0, 1)
                want = torch.flip(x, [-1]) if p["flip"] else x
                assert float((got - want).abs().max()) * 255 <= 1.0 + 1e-3, (seed, pos, p)
                flipped += bool(p["flip"]) and any(o[0] in ("ShearX", "ShearY", "TranslateX", "Rotate")
                                                   for o in p["rand_augment"])
            pos += len(batch)
    assert pos == 4 and flipped >= 2


@pytest.mark.parametrize("second", ["center", "center-larger", "random-padded", "random-reflect"])
def test_a_crop_of_a_random_resized_crop_as_scripts_write_it(shard, second):
    """`[RandomResizedCrop(s), CenterCrop(c)]` or `RandomCrop(c, padding=...)` (a window of
    the resized crop, inside it or padded past it): each image is torchvision's resized
    crop, then its crop, with the same draws, within a level on photographs; the decoder
    is asked for the first crop alone; through the Loader, each batch is the Compose's call
    with the Loader's draws."""
    from torchvision import tv_tensors
    import torchvision.transforms.v2.functional as F

    from gpudecode.transforms import Compose

    crop = {"center": tv.CenterCrop((40, 44)), "center-larger": tv.CenterCrop(56),
            "random-padded": tv.RandomCrop(48, padding=(2, 5, 3, 1), fill=(10, 200, 30)),
            "random-reflect": tv.RandomCrop((44, 48), padding=3, padding_mode="reflect")}[second]
    steps = tv.Compose([tv.RandomResizedCrop((46, 50)), crop, tv.ToDtype(torch.float32, scale=True)])
    ours = Compose.from_torchvision(steps)
    path, imgs = shard
    tensors = [tv_tensors.Image(torch.from_numpy(im).permute(2, 0, 1).contiguous()) for im in imgs]
    sizes = [tuple(t.shape[1:]) for t in tensors]
    params = ours.make_params(sizes * 4, 11)
    got = ours(tensors * 4, params)
    for k, (img, p) in enumerate(zip(tensors * 4, params)):
        x = F.resized_crop(F.to_dtype(img, torch.float32, scale=True), *p["crop"], [46, 50], antialias=True)
        if isinstance(crop, tv.CenterCrop):
            assert p["window"][2:] == tuple(crop.size)
            want = F.center_crop(x, list(crop.size))
        else:  # (torchvision's RandomCrop: the padding, then the window at the drawn place in the padded image)
            left, top, right, bottom = (2, 5, 3, 1) if second == "random-padded" else (3, 3, 3, 3)
            fill = [10 / 255, 200 / 255, 30 / 255] if second == "random-padded" else 0
            padded = F.pad(x, [left, top, right, bottom], fill=fill, padding_mode=crop.padding_mode)
            want = F.crop(padded, p["window"][0] + top, p["window"][1] + left, *crop.size)
        assert got[k].shape == want.shape
        assert float((got[k] - want).abs().max()) * 255 <= 1.0 + 1e-3, (k, p)
    assert ours.decode_boxes(params, sizes * 4) == [p["crop"] for p in params]
    ld = gpudecode.Loader(path, batch_size=2, transform=steps, device="cpu", shuffle=False, seed=3)
    pos = 0
    for b in ld:
        batch = tensors[pos:pos + len(b.keys)]
        drawn = ours.make_params([tuple(t.shape[1:]) for t in batch], 3, indices=list(range(pos, pos + len(batch))))
        torch.testing.assert_close(b.images, ours(batch, drawn), atol=0, rtol=0)
        pos += len(batch)
    assert pos == 4


def test_torchvisions_v2_getting_started_recipe_as_written(shard):
    """torchvision's v2 docs' classification pipeline, as they print it: ToImage, then
    `ToDtype(torch.uint8, scale=True)` ("optional, most input are already uint8") before the
    crop. On the uint8 images a Compose takes that is no step: the plan and every batch are
    those of the Compose without it; the steps are named as written."""
    path, imgs = shard
    docs = tv.Compose([tv.ToImage(), tv.ToDtype(torch.uint8, scale=True), tv.RandomResizedCrop(size=(40, 40), antialias=True),
                       tv.RandomHorizontalFlip(p=0.5), tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])
    plain = tv.Compose([tv.RandomResizedCrop(size=(40, 40), antialias=True), tv.RandomHorizontalFlip(p=0.5),
                        tv.ToDtype(torch.float32, scale=True), tv.Normalize(MEAN, STD)])
    ours = gpudecode.transforms.Compose.from_torchvision(docs)
    assert repr(ours.plan) == repr(gpudecode.transforms.Compose.from_torchvision(plain).plan)
    a, b = _batches(path, docs), _batches(path, plain)
    assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b))
    ld = gpudecode.Loader(path, batch_size=2, transform=docs, device="cpu")
    assert ld.describe()["transform"][:2] == ["ToDtype", "RandomResizedCrop"]
    # torchvision's own pixels, with our draws: the same crop and flip of each image
    params = ours.make_params([im.shape[:2] for im in imgs], 3)
    got = ours([torch.from_numpy(im).permute(2, 0, 1) for im in imgs], params)
    for k, (im, p) in enumerate(zip(imgs, params)):
        x = tv.functional.resized_crop(torch.from_numpy(im).permute(2, 0, 1), *p["crop"], [40, 40], antialias=True)
        x = tv.functional.horizontal_flip(x) if p["flip"] else x
        want = tv.functional.normalize(tv.functional.to_dtype(x, torch.float32, scale=True), MEAN, STD)
        assert float((got[k] - want).abs().max()) * 255 * min(STD) <= 1 + 1e-3, k  # (a level: torchvision rounds)
    with pytest.raises(TransformError, match="geometry comes first"):  # (after a float conversion it is one)
        gpudecode.transforms.Compose([gpudecode.transforms.ToDtype(torch.float32, scale=True),
                                      gpudecode.transforms.ToDtype(torch.uint8),
                                      gpudecode.transforms.RandomResizedCrop(8)])


def test_a_random_order_of_the_two_flips_as_scripts_write_it(shard):
    """`RandomOrder([RandomHorizontalFlip(), RandomVerticalFlip()])` (a public script's
    recipe, refused before): mirrors commute, so every order gives one image and it is
    those flips in a row, each with its own coin: torchvision's own Compose, run as
    written, gives our pixels bit for bit where the flips are sure, and each image is one of
    torchvision's four where they are drawn (within a level: torchvision rounds the resized
    crop to uint8). A RandomOrder of a flip and another step is
    refused, saying what fuses."""
    path, imgs = shard
    T = gpudecode.transforms
    as_written = tv.Compose([tv.CenterCrop(40), tv.RandomOrder([tv.RandomHorizontalFlip(1.0), tv.RandomVerticalFlip(1.0)]),
                             tv.ToDtype(torch.float32, scale=True)])
    ours = T.Compose.from_torchvision(as_written)
    assert [type(t).__name__ for t in ours.transforms] == ["CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip",
                                                           "ToDtype"]
    tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im in imgs]
    got = ours(tensors)
    assert all(torch.equal(g, as_written(x)) for g, x in zip(got, tensors))
    drawn = tv.Compose([tv.RandomResizedCrop(40), tv.RandomOrder([tv.RandomHorizontalFlip(), tv.RandomVerticalFlip(0.3)]),
                        tv.ToDtype(torch.float32, scale=True)])
    plain = tv.Compose([tv.RandomResizedCrop(40), tv.RandomHorizontalFlip(), tv.RandomVerticalFlip(0.3),
                        tv.ToDtype(torch.float32, scale=True)])
    assert repr(T.Compose.from_torchvision(drawn).plan) == repr(T.Compose.from_torchvision(plain).plan)
    a, b = _batches(path, drawn), _batches(path, plain)
    assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b))
    ours, seen = T.Compose.from_torchvision(drawn), set()
    for seed in range(8):
        params = ours.make_params([im.shape[:2] for im in imgs], seed)
        for g, x, p in zip(ours(tensors, params), tensors, params):
            crop = tv.functional.to_dtype(tv.functional.resized_crop(x, *p["crop"], [40, 40], antialias=True),
                                          torch.float32, scale=True)
            four = {(h, v): torch.flip(crop, [d for d, on in ((-1, h), (-2, v)) if on]) if h or v else crop
                    for h in (False, True) for v in (False, True)}
            dist = {k: float((g - want).abs().max()) * 255 for k, want in four.items()}
            assert min(dist, key=dist.get) == (p["flip"], p["vflip"]) and min(dist.values()) <= 1 + 1e-3, (seed, dist)
            seen.add((p["flip"], p["vflip"]))
    assert len(seen) == 4  # (each flip its own coin: all four outcomes drawn)
    with pytest.raises(TransformError, match=r"RandomOrder\(\['RandomHorizontalFlip', 'RandomRotation'\]\) cannot\s+be\s+"
                                             r"fused:\s+a\s+flip\s+and\s+a\s+warp\s+in\s+a\s+random\s+order"):
        T.Compose.from_torchvision(tv.Compose([tv.RandomOrder([tv.RandomHorizontalFlip(), tv.RandomRotation(10)]),
                                               tv.CenterCrop(20)]))


def test_a_random_order_pickles_and_copies_as_it_did():
    """RandomOrder's own constructor (which gives flips alone as a Compose) still lets pickle
    and deepcopy remake an instance over other steps (a Loader's transform sent to Ray, or
    copied): they call it with no argument, then set its state."""
    import copy
    import pickle

    T = gpudecode.transforms
    tf = T.Compose([T.RandomResizedCrop(24), T.RandomOrder([T.RandomInvert(0.3), T.RandomEqualize(0.2)])])
    for again in (copy.deepcopy(tf), pickle.loads(pickle.dumps(tf))):
        assert isinstance(again.transforms[1], T.RandomOrder) and repr(again) == repr(tf)
        assert again.make_params([(30, 40)], 5) == tf.make_params([(30, 40)], 5)
