"""RandomChoice over geometries of one output size (`RandomChoice([RandomResizedCrop(224),
CenterCrop(224)])` after a Resize, as public fine-tuning scripts write it; refused before):
each image draws one option, whose crop and resize the kernel's columns then hold. Pixels
against torchvision's functional ops replaying each image's draws on real photographs;
the draws' frequencies against p; the recipes as written; boxes against torchvision's
BoundingBoxes; the Loader against the Compose with its draws; the refusals."""
from __future__ import annotations

import copy
import textwrap
import pickle

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F

from gpudecode import transforms as T
from gpudecode.errors import TransformError
from conftest import loader_is_compose
from test_boxes import random_boxes, tv_boxes
from test_masks import centre, slic_mask, tv_mask

OUT = (40, 44)
f32 = tv.ToDtype(torch.float32, scale=True)


@pytest.fixture(scope="module")
def photo_batch(photos):
    """Each photograph twice, cut to differ in shape (every option drawn somewhere)."""
    out = []
    for k, p in enumerate(photos.values()):
        out.append(torch.from_numpy(np.ascontiguousarray(p.transpose(2, 0, 1))))
        out.append(torch.from_numpy(np.ascontiguousarray(p[k % 3::2, ::3].transpose(2, 0, 1))))
    return out


def _option_of(img: torch.Tensor, k: int, p: dict) -> torch.Tensor:
    """torchvision on the float image (the kernel resamples in float) for option k of CHOICE."""
    x = f32(img)
    if k == 0:  # RandomResizedCrop
        return F.resized_crop(x, *p["crop"], list(OUT), antialias=True)
    if k == 1:  # Resize(60), CenterCrop
        x = F.resize(x, [60], antialias=True)
        assert tuple(p["resize"]) == tuple(x.shape[1:])
        return F.center_crop(x, list(OUT))
    if k == 2:  # CenterCrop (padded where the image is smaller)
        return F.center_crop(x, list(OUT))
    x = F.resize(x, [52, 70], antialias=True)  # Resize((52, 70)), RandomCrop(padding=3)
    t, l, h, w = p["crop"]
    return F.crop(x, t, l, h, w)  # (torchvision's crop pads with zeros past the image)


def _choice(p=None):
    return T.RandomChoice([T.RandomResizedCrop(OUT), T.Compose([T.Resize(60), T.CenterCrop(OUT)]), T.CenterCrop(OUT),
                           T.Compose([T.Resize((52, 70)), T.RandomCrop(OUT, padding=3)])], p)


def test_each_image_takes_the_option_it_drew_as_torchvisions_ops(photo_batch):
    """Every option's pixels, within float rounding of torchvision's ops on the float image
    replaying the image's draws, then the flip; the decoders asked for the crop where the
    option is a crop resized, else the whole image; all four options drawn."""
    tf = T.Compose([_choice(), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    assert tf.out_size == OUT and tf.plan.native_spec is None
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    seen = set()
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        boxes = tf.decode_boxes(params, sizes)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            c = p["geometry_choice"]
            want = _option_of(img, c, p)
            want = F.horizontal_flip(want) if p["flip"] else want
            assert got[k].shape == want.shape and float((got[k] - want).abs().max()) * 255 < 1e-3, (seed, k, c)
            assert boxes[k] == (tuple(p["crop"]) if c == 0 else (0, 0, *sizes[k]))
            seen.add(c)
    assert seen == {0, 1, 2, 3}


def test_crops_after_the_choice_end_each_option(photo_batch):
    """Geometry steps after the choice end each of its options, with the same draws:
    multi-scale training's `[RandomChoice([Resize(48), Resize(64), Resize(80)]),
    RandomCrop(40)]` (options of their own sizes, one after the crop), and a choice of
    filters, `[RandomChoice([Resize((52, 70)), Resize((52, 70), bicubic)]), CenterCrop]`
    (each image's filter in its row): as torchvision's ops replaying the draws."""
    scales = T.Compose([T.RandomChoice([T.Resize(48), T.Resize(64), T.Resize(80)]), T.RandomCrop(40),
                        T.ToDtype(torch.float32, scale=True)])
    modes = T.Compose([T.RandomChoice([T.Resize((52, 70)), T.Resize((52, 70), interpolation="bicubic")]),
                       T.CenterCrop(OUT), T.ToDtype(torch.float32, scale=True)])
    assert scales.out_size == (40, 40) and modes.out_size == OUT
    sizes, seen = [tuple(i.shape[1:]) for i in photo_batch], set()
    for tf, of in ((scales, lambda p: ([(48, 64, 80)[p["geometry_choice"]]], "bilinear")),
                   (modes, lambda p: ([52, 70], ("bilinear", "bicubic")[p["geometry_choice"]]))):
        params = tf.make_params(sizes, 6)
        got = tf(photo_batch, params)
        assert len({p["geometry_choice"] for p in params}) == len(tf.plan.geometry[0].options)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            size, mode = of(p)
            x = F.resize(f32(img), size, interpolation=tv.InterpolationMode(mode), antialias=True)
            assert tuple(p["resize"]) == tuple(x.shape[1:])
            want = F.crop(x, *p["crop"]).clamp(0, 1)  # (the kernel clips bicubic's overshoot, once, at the end)
            assert float((got[k] - want).abs().max()) * 255 < 1e-3, (k, p)
            seen.add(mode)
    assert seen == {"bilinear", "bicubic"}


def test_the_options_are_drawn_with_their_probabilities():
    """p as torchvision's RandomChoice takes it (weights, normalized): 6,000 draws within
    four standard errors of each; the same seed draws the same options."""
    tf = T.Compose([_choice([1, 2, 3, 4])])
    params = tf.make_params([(80, 90)] * 6000, 11)
    counts = np.bincount([p["geometry_choice"] for p in params], minlength=4)
    for n, p in zip(counts, np.array([1, 2, 3, 4]) / 10):
        assert abs(n / 6000 - p) < 4 * np.sqrt(p * (1 - p) / 6000), counts
    assert tf.make_params([(80, 90)] * 6000, 11) == params


@pytest.mark.parametrize("v1", [True, False])
def test_the_recipe_as_written_converts(photo_batch, v1):
    """`[Resize(255), RandomChoice([RandomResizedCrop(224), CenterCrop(224)]), flip, ToTensor,
    Normalize]` (a public fine-tuning script's, at smaller sizes), v1 on PIL images and v2:
    the Resize of each whole image first (torchvision's uint8 resize, bit for bit), then
    the option each image drew, as torchvision's ops on it."""
    m = tv1 if v1 else tv
    steps = [m.Resize(60), m.RandomChoice([m.RandomResizedCrop(40), m.CenterCrop(40)]), m.RandomHorizontalFlip()]
    tail = [tv1.ToTensor()] if v1 else [tv.ToImage(), tv.ToDtype(torch.float32, scale=True)]
    ours = T.Compose.from_torchvision(m.Compose([*steps, *tail, m.Normalize([0.5] * 3, [0.25] * 3)]))
    assert isinstance(ours.plan.first[0], T.Resize) and ours.out_size == (40, 40)
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = ours.make_params(sizes, 4)
    got = ours(photo_batch, params)
    assert {p["geometry_choice"] for p in params} == {0, 1}
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        resized = F.resize(img, [60], antialias=True)
        assert tuple(p["first_resize"]) == tuple(resized.shape[1:])
        x = f32(resized)
        x = F.resized_crop(x, *p["crop"], [40, 40], antialias=True) if p["geometry_choice"] == 0 else \
            F.center_crop(x, [40, 40])
        want = F.normalize(F.horizontal_flip(x) if p["flip"] else x, [0.5] * 3, [0.25] * 3)
        assert float((got[k] - want).abs().max()) * 255 * 0.25 < 1e-3, k


def test_boxes_and_masks_follow_the_option_each_image_drew(photos):
    """Compose.boxes and Compose.masks with a choice: each image's boxes and mask as
    torchvision's functional ops move a BoundingBoxes and a Mask under its option and draws
    (a crop resized clamps boxes to the crop, a crop of the resized image does not; masks
    resized by nearest neighbour, padded with the fill), the same boxes kept."""
    rng = np.random.default_rng(1)
    window = T.Compose([T.RandomResizedCrop((36, 40)), T.CenterCrop(OUT)])  # (a window past the resized crop)
    tf = T.Compose([T.RandomChoice([*(T.Compose(list(o)) for o in _choice().options), window]),
                    T.RandomHorizontalFlip()])
    sizes = [(37, 61), (50, 47), (64, 64), (31, 70), (45, 45), (52, 40)] * 4
    params = tf.make_params(sizes, 2)
    assert {p["geometry_choice"] for p in params} == {0, 1, 2, 3, 4}
    boxes = [random_boxes(rng, h, w) for h, w in sizes]
    got = tf.boxes(boxes, params, sizes=sizes)
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    moved = tf.masks(masks, params, fill=255)
    for k, (b, p, size) in enumerate(zip(boxes, params, sizes)):
        frame = (36, 40) if p["geometry_choice"] == 4 else None
        want, _ = tv_boxes(b, "XYXY", size, p, OUT, frame)
        assert torch.allclose(got[k]["boxes"], want, atol=1e-4), (k, p["geometry_choice"])
        assert torch.equal(moved[k], tv_mask(masks[k], p, OUT, 255, frame)), (k, p["geometry_choice"])


@pytest.mark.parametrize("keep", [None, "ram"])
def test_the_loader_gives_the_composes_images_and_copies_keep_it(tmp_path, photos, keep):
    """Through the Loader (a PNG shard, two epochs, streamed and kept in RAM): the Compose
    called on Pillow's decode with the Loader's draws, value for value; describe() names
    the choice as torchvision's; pickle and deepcopy give the same draws."""
    imgs = [np.ascontiguousarray(photos[n][::4, ::3]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    tf = T.Compose([_choice(), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader = loader_is_compose(tmp_path, imgs, tf, 5, keep=keep)
    assert loader.describe()["transform"] == ["RandomChoice", "RandomHorizontalFlip", "ColorJitter", "Normalize"]
    for again in (copy.deepcopy(tf), pickle.loads(pickle.dumps(tf))):
        assert repr(again) == repr(tf) and again.make_params([(70, 80)] * 5, 3) == tf.make_params([(70, 80)] * 5, 3)


def test_what_a_choice_of_geometries_refuses():
    """Options of other sizes, an option with a colour step, a flip before the choice, a
    crop padded by reflection, options that differ in antialias: each refused, saying why."""
    with pytest.raises(TransformError, match=r"outputs\s+of\s+40x44\s+and\s+32x32,[\s\S]*\[RandomChoice, RandomHorizontalFlip\]"):
        T.Compose([T.RandomChoice([T.RandomResizedCrop(OUT), T.CenterCrop(32)]), T.RandomHorizontalFlip()])
    with pytest.raises(TransformError, match=r"outputs\s+of\s+40x44\s+and\s+each\s+image's\s+own\s+size,"):
        T.Compose([T.RandomChoice([T.RandomResizedCrop(OUT), T.Resize(32)])])
    with pytest.raises(TransformError, match=r"not\s+a\s+geometry;"):
        T.Compose([T.RandomChoice([T.RandomResizedCrop(OUT), T.Compose([T.CenterCrop(OUT), T.ColorJitter(0.2)])])])
    with pytest.raises(TransformError, match=r"after\s+a\s+flip\s+cannot\s+be\s+fused"):
        T.Compose([T.RandomHorizontalFlip(), T.RandomChoice([T.RandomResizedCrop(OUT), T.CenterCrop(OUT)])])
    with pytest.raises(TransformError, match=r"pads\s+by\s+reflection"):
        T.Compose([T.RandomChoice([T.RandomResizedCrop(OUT), T.RandomCrop(OUT, padding=2, padding_mode="reflect")])])
    with pytest.raises(TransformError, match=r"differ\s+in\s+antialias"):
        T.Compose([T.RandomChoice([T.RandomResizedCrop(OUT), T.RandomResizedCrop(OUT, antialias=False)])])
    with pytest.raises(TransformError, match=r"RandomRotation.*not a geometry|cannot be fused"):
        T.Compose.from_torchvision(tv.RandomChoice([tv.RandomResizedCrop(40), tv.RandomRotation([-180, 180])]))


def test_a_choice_of_fixed_rotations(photo_batch):
    """`[flip, vflip, RandomChoice([RandomRotation((a, a)) for a in (0, 90, 180, 270)])]`
    (satellite, microscopy and pathology scripts; refused before: its options all draw
    "rotation", and one of them draws an image): torchvision's flips and rotation of the
    uint8 image, bit for bit, on square and oblong photographs; every angle drawn, about
    a quarter each; two rotations in a row still refused."""
    tf = T.Compose.from_torchvision(tv1.Compose([
        tv1.RandomHorizontalFlip(), tv1.RandomVerticalFlip(),
        tv1.RandomChoice([tv1.RandomRotation((a, a)) for a in (0, 90, 180, 270)])]))
    square = [x[:, :48, :48].contiguous() for x in photo_batch]
    oblong = [x[:, :40, :56].contiguous() for x in photo_batch]
    angles = []
    for batch in (square, oblong):
        for seed in range(6):
            params = tf.make_params([tuple(x.shape[1:]) for x in batch], seed)
            got = tf(batch, params)
            for k, (img, p) in enumerate(zip(batch, params)):
                x = F.horizontal_flip(img) if p["flip"] else img
                x = F.vertical_flip(x) if p["vflip"] else x
                angle = p["rotation"]["angle"]
                assert torch.equal(got[k], F.rotate(x, angle)), (seed, k, angle)
                angles.append(angle)
    counts = np.unique(angles, return_counts=True)
    assert counts[0].tolist() == [0, 90, 180, 270] and counts[1].min() > len(angles) / 8, counts
    with pytest.raises(TransformError, match="two RandomRotations"):
        T.Compose([T.RandomRotation(10), T.RandomChoice([T.RandomRotation((90, 90)), T.RandomInvert()])])


def test_the_new_geometries_on_the_cuda_kernel_under_the_simulator():
    """The kernel rows these recipes make (a choice whose images differ in box, frame, window,
    filter and padding within one launch; a crop of a crop; the re-id recipe's padded crop
    mirrored in the resize; RandomApply's crop or none, the flip after the resize; a flip
    drawn in a RandomChoice after a rotation, the rotation mirrored) through the CUDA kernel
    under the simulator, each the CPU twin's (the Compose's call) within float rounding, on
    crops of real photographs."""
    from simulator import run_code

    code = textwrap.dedent("""
        import numpy as np, torch
        from gpudecode import transforms as T
        from gpudecode.kernels import fused
        from skimage import data
        from tvref import pack_hwc
        photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()] * 2
        imgs = [torch.from_numpy(np.ascontiguousarray(p[60 + 5 * k:84 + 3 * k, 90:118 - k].transpose(2, 0, 1)))
                for k, p in enumerate(photos)]
        f32 = T.ToDtype(torch.float32, scale=True)
        plans = {
            "choice": T.Compose([T.RandomChoice([T.RandomResizedCrop((12, 14)),
                                                 T.Compose([T.Resize(16, interpolation="bicubic"), T.CenterCrop((12, 14))]),
                                                 T.RandomCrop((12, 14), padding=3, fill=(9, 80, 200)),
                                                 T.Compose([T.RandomResizedCrop((16, 18)), T.CenterCrop((12, 14))])]),
                                 T.RandomHorizontalFlip(), f32]),
            "crop of a crop": T.Compose([T.Resize(20), T.CenterCrop(20), T.RandomCrop((12, 14)), f32]),
            "re-id": T.Compose([T.Resize((14, 12)), T.RandomHorizontalFlip(), T.Pad(2), T.RandomCrop((14, 12)), f32]),
            "applied": T.Compose([T.RandomApply([T.RandomCrop(9)]), T.RandomHorizontalFlip(), T.Resize((12, 14)), f32]),
            "a flip in a choice": T.Compose([T.Resize((12, 14)), T.RandomRotation(30),
                                             T.RandomChoice([T.RandomHorizontalFlip(p=1.0), T.RandomVerticalFlip(p=1.0)]),
                                             f32]),
        }
        for name, tf in plans.items():
            sizes = [tuple(i.shape[1:]) for i in imgs]
            params = tf.make_params(sizes, 0)
            if name == "choice":
                assert {p["geometry_choice"] for p in params} == {0, 1, 2, 3}, params
            if name != "crop of a crop":  # (both flips drawn: a mirrored rotation, a flip after a resize)
                assert {bool(p.get("flip")) for p in params} == {False, True}, (name, params)
            cpu = tf(imgs, params).numpy()
            geom, args, order = tf.encode(params, sizes)
            src = pack_hwc(imgs, geom, sizes)
            mean, std = tf._norm_arrays()
            out = np.zeros(cpu.shape, np.float32)
            fused.fused_cuda(src, geom, args, order, mean, std, out, normalize=True)
            assert np.abs(out - cpu).max() < 1e-5, (name, np.abs(out - cpu).max())
        print("ok")
        """)
    run_code(code, timeout=600)
