"""RandomRotation(expand=True): a canvas step (first, before the geometry), the whole
image rotated onto its bounding box as torchvision's F.rotate(expand=True) makes it,
then the geometry step. Against torchvision replaying our angles on real photographs
(the canvas itself, and through crops and resizes), the angles' distribution against
torchvision's make_params, and the places it cannot stand refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from scipy import stats

from gpudecode import transforms as T
from gpudecode.transforms import canvas
from gpudecode.errors import TransformError

NEAREST, BILINEAR = tv.InterpolationMode.NEAREST, tv.InterpolationMode.BILINEAR


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p[::6, ::5].transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::9, ::4].transpose(2, 0, 1))))
    return out


@pytest.mark.parametrize("interpolation,fill,center", [
    ("nearest", 0, None), ("bilinear", 0, None), ("bilinear", (200, 30, 90), None), ("bilinear", None, None),
    ("nearest", (10, 20, 30), (12.0, 30.0)),
])
def test_the_canvas_is_torchvisions_rotate_expand(photo_batch, interpolation, fill, center):
    """A CenterCrop of the canvas's own size reads it back unchanged, so the output is the
    canvas: F.rotate(expand=True)'s uint8 image, bit for bit (the same torch ops)."""
    mode = NEAREST if interpolation == "nearest" else BILINEAR
    rot = T.RandomRotation(40, interpolation, expand=True, center=center, fill=fill)
    for img in photo_batch[:3] + [photo_batch[1][:1]]:  # (the last: grey, read as RGB)
        size = tuple(img.shape[1:])
        for seed in range(3):
            params = T.Compose([rot, T.CenterCrop(8)]).make_params([size], seed)  # (the angle, drawn as ours draw it)
            angle = params[0]["rotation"]["angle"]
            src = img.expand(3, -1, -1)
            want = F.rotate(src, angle, mode, expand=True, center=list(center) if center else None,
                            fill=list(fill) if isinstance(fill, tuple) else fill)
            tf = T.Compose([rot, T.CenterCrop(tuple(want.shape[1:]))])
            got = tf([img], tf.make_params([size], seed))[0]
            assert got.shape == want.shape
            assert torch.equal(got, want), (angle, int((got.int() - want.int()).abs().max()))  # (the same torch ops)


def test_quarter_turns_take_torchvisions_exact_path(photo_batch):
    img = photo_batch[0]
    for angle in (0.0, 90.0, 180.0, 270.0, -90.0):
        rot = T.RandomRotation((angle, angle), expand=True)
        want = F.rotate(img, angle, expand=True)
        tf = T.Compose([rot, T.CenterCrop(tuple(want.shape[1:]))])
        assert torch.equal(tf([img], seed=0)[0], want), angle


@pytest.mark.parametrize("geometry", ["rrc", "resize"])
def test_rotate_expand_then_the_geometry_matches_torchvision(photo_batch, geometry):
    geo = T.RandomResizedCrop((40, 48)) if geometry == "rrc" else T.Resize((40, 48))
    tf = T.Compose([T.RandomRotation(30, "bilinear", expand=True, fill=(123, 117, 104)), geo,
                    T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for seed in range(3):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = F.rotate(img, p["rotation"]["angle"], BILINEAR, expand=True, fill=[123, 117, 104])
            x = F.to_dtype(x, torch.float32, scale=True)
            x = (F.resized_crop(x, *p["crop"], [40, 48], antialias=True) if geometry == "rrc"
                 else F.resize(x, [40, 48], antialias=True))
            if p["flip"]:
                x = F.horizontal_flip(x)
            err = (got[k] - x.clamp(0, 1)).abs() * 255
            assert float(err.max()) <= 1.0 + 1e-3, (k, float(err.max()))


def test_angles_are_drawn_as_torchvisions():
    n, size = 3000, (30, 40)
    img = torch.zeros((3, *size), dtype=torch.uint8)
    ours = [p["rotation"]["angle"] for p in
            T.Compose([T.RandomRotation((-20, 50), expand=True), T.Resize((8, 8))]).make_params([size] * n, 4)]
    torch.manual_seed(0)
    theirs = [tv.RandomRotation((-20, 50), expand=True).make_params([img])["angle"] for _ in range(n)]
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3
    assert min(ours) >= -20 and max(ours) <= 50


def test_where_it_stands():
    got = T.Compose.from_torchvision(tv.Compose([tv.RandomRotation(15, expand=True, fill=[1, 2, 3]),
                                                 tv.RandomResizedCrop(32), tv.ToDtype(torch.float32, scale=True)]))
    assert got.plan.canvas is not None and got.plan.canvas.expand and got.plan.program == ()
    assert T.Compose([T.RandomResizedCrop(16), T.RandomRotation(10)]).plan.program  # (expand=False: a program step)
    with pytest.raises(TransformError, match="(?s)expand=True.*comes first"):
        T.Compose([T.RandomResizedCrop(16), T.RandomRotation(10, expand=True)])
    with pytest.raises(TransformError, match=r"(?s)inside\s+RandomApply"):
        T.Compose([T.RandomResizedCrop(16), T.RandomApply([T.RandomRotation(10, expand=True)], 0.5)])
    with pytest.raises(TransformError, match="(?s)geometry step.*must follow it"):
        T.Compose([T.RandomRotation(10, expand=True)])
    # a canvas step and a later one drawing under one key would share one draw: refused
    with pytest.raises(TransformError, match=r"(?s)RandomRotation first and RandomRotation after the geometry both\s+draw "
                                             r"'rotation'"):
        T.Compose([T.RandomRotation(10, expand=True), T.Resize((16, 16)), T.RandomApply([T.RandomRotation(5)])])
    with pytest.raises(TransformError, match="both draw 'displacement_seed'"):
        T.Compose([T.ElasticTransform(), T.Resize((16, 16)), T.ElasticTransform()])
    ok = T.Compose([T.RandomRotation(10, expand=True), T.Resize((16, 16)), T.RandomAffine(5)])
    assert ok.plan.canvas is not None and len(ok.plan.program) == 1


# -- expand=False first, before the geometry (`[RandomRotation(30), RandomResizedCrop(224), ...]`) ---------------

@pytest.mark.parametrize("interpolation,fill,center", [
    ("nearest", 0, None), ("bilinear", (200, 30, 90), None), ("nearest", (10, 20, 30), (12.0, 30.0)),
])
def test_a_rotation_before_the_geometry_rotates_the_whole_image(photo_batch, interpolation, fill, center):
    """RandomRotation(expand=False) first, then a geometry step: a canvas of the image's
    size, F.rotate's uint8 image bit for bit (a CenterCrop of the whole canvas reads it
    back), then the crop of it, as torchvision's Compose rotates the whole image and then
    crops; quarter turns of oblong images by the affine grid, as F.rotate's."""
    mode = NEAREST if interpolation == "nearest" else BILINEAR
    rot = T.RandomRotation(40, interpolation, center=center, fill=fill)
    assert T.Compose([rot, T.RandomResizedCrop(8)]).plan.canvas is rot
    for img in photo_batch[:3]:
        size = tuple(img.shape[1:])
        tf = T.Compose([rot, T.CenterCrop(size)])
        for seed in range(3):
            params = tf.make_params([size], seed)
            want = F.rotate(img, params[0]["rotation"]["angle"], mode, center=list(center) if center else None,
                            fill=list(fill) if isinstance(fill, tuple) else fill)
            assert torch.equal(tf([img], params)[0], want)
    oblong = photo_batch[0]
    assert oblong.shape[1] != oblong.shape[2]
    for angle in (90.0, 180.0, 270.0):
        tf = T.Compose([T.RandomRotation((angle, angle)), T.CenterCrop(tuple(oblong.shape[1:]))])
        assert torch.equal(tf([oblong], seed=0)[0], F.rotate(oblong, angle)), angle


def test_the_udacity_recipe_as_written_matches_torchvision(photo_batch):
    """The recipe many courses teach, `[RandomRotation(30), RandomResizedCrop(224),
    RandomHorizontalFlip(), ToTensor(), Normalize]`, converted: torchvision's functional
    ops replaying its draws (rotate the whole image, crop, flip) within a level."""
    import torchvision.transforms as v1

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    tf = T.Compose.from_torchvision(v1.Compose([v1.RandomRotation(30), v1.RandomResizedCrop(40),
                                                v1.RandomHorizontalFlip(), v1.ToTensor(), v1.Normalize(mean, std)]))
    assert isinstance(tf.plan.canvas, T.RandomRotation) and tf.plan.program == ()
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    for seed in range(2):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            x = F.to_dtype(F.rotate(img, p["rotation"]["angle"], NEAREST), torch.float32, scale=True)
            x = F.resized_crop(x, *p["crop"], [40, 40], antialias=True)
            x = F.normalize(F.horizontal_flip(x) if p["flip"] else x, mean, std)
            err = (got[k] - x).abs() * torch.tensor(std).view(3, 1, 1) * 255
            assert (err > 1 + 1e-3).float().mean() <= 0.001 and float(err.max()) <= 16, (k, float(err.max()))


def targets_follow(img, tf, warp) -> None:
    """A mask and boxes of `img` through `tf` (warps, then a RandomCrop): torchvision's ops
    on the tv_tensors (`warp(x, p)`, then its crop) with the same draws, six draws."""
    from torchvision import tv_tensors

    h, w = img.shape[1:]
    sizes = [(h, w)] * 6
    params = tf.make_params(sizes, 3)
    mask = (img[0] // 40).to(torch.uint8)
    got = tf.masks([mask] * 6, params)
    boxes = np.array([[4.0, 6.0, 30.0, 28.0], [20.0, 10.0, w - 2.0, h - 3.0]], np.float32)
    moved = tf.boxes([boxes] * 6, params, sizes=sizes, min_size=0.0, min_area=0.0)
    for k, p in enumerate(params):
        m = warp(tv_tensors.Mask(mask[None]), p)
        assert torch.equal(got[k], F.crop(m, *p["crop"])[0].as_subclass(torch.Tensor)), k
        b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(h, w))
        b = F.crop(warp(b, p), *p["crop"])  # (empty ones kept: min_size=0)
        torch.testing.assert_close(moved[k]["boxes"], b.as_subclass(torch.Tensor).float(), atol=1e-3, rtol=0)


def test_masks_and_boxes_follow_a_rotation_before_the_geometry(photo_batch):
    """A mask and boxes through the rotation canvas and the crop: torchvision's F.rotate of
    the tv_tensors, then its crop, with the same draws."""
    targets_follow(photo_batch[1], T.Compose([T.RandomRotation(25), T.RandomCrop((40, 44))]),
                   lambda x, p: F.rotate(x, p["rotation"]["angle"]))


def _affine(img, p, mode, fill):
    a = p["affine"]
    return F.affine(img, a["angle"], list(a["translate"]), a["scale"], list(a["shear"]), mode, fill=fill)


def _perspective(img, p, mode, fill):
    d = p.get("perspective")  # (absent where the coin said no: the image as it is)
    return img if d is None else F.perspective(img, None, None, mode, fill, coefficients=d["coefficients"])


WARPS = {"affine": (lambda i, f: T.RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-5, 5, -3, 3),
                                                interpolation=i, fill=f), _affine),
         "perspective": (lambda i, f: T.RandomPerspective(0.6, 0.75, i, f), _perspective)}


@pytest.mark.parametrize("interpolation,fill", [("nearest", 0), ("bilinear", (30, 60, 90)), ("bilinear", None)])
@pytest.mark.parametrize("kind", list(WARPS))
def test_a_warp_before_the_geometry_warps_the_whole_image(photo_batch, kind, interpolation, fill):
    """RandomAffine or RandomPerspective first, then a geometry step: a canvas of the
    image's size, F.affine's or F.perspective's uint8 image bit for bit (read back whole by
    a CenterCrop of its size; the perspective's grid made with torchvision's float32 ops),
    then cropped as torchvision's Compose crops it."""
    mode = NEAREST if interpolation == "nearest" else BILINEAR
    make, replay = WARPS[kind]
    warp, tv_fill = make(interpolation, fill), list(fill) if isinstance(fill, tuple) else fill
    for img in photo_batch[:3]:
        size = tuple(img.shape[1:])
        tf = T.Compose([warp, T.CenterCrop(size)])
        assert tf.plan.canvas is warp and tf.plan.program == ()
        for seed in range(4):
            params = tf.make_params([size], seed)
            assert torch.equal(tf([img], params)[0], replay(img, params[0], mode, tv_fill)), (seed, params[0])
    tf = T.Compose([warp, T.RandomResizedCrop(24), T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes * 2, 1)
    assert kind == "affine" or len({"perspective" in p for p in params}) == 2  # (the coin both ways)
    got = tf(photo_batch * 2, params)
    for k, (img, p) in enumerate(zip(photo_batch * 2, params)):
        x = F.to_dtype(replay(img, p, mode, tv_fill), torch.float32, scale=True)
        x = F.resized_crop(x, *p["crop"], [24, 24], antialias=True)
        assert float((got[k] - x).abs().max()) * 255 <= 1.0 + 1e-3, k


def test_a_window_of_a_warp_canvas_is_that_part_of_the_whole_canvas(photo_batch):
    """A crop of a rotation's or affine's canvas paints only the crop's window (a
    RandomResizedCrop reads about half its image): each window bit for bit the whole
    canvas's part, for both interpolations, fills, expand and quarter turns."""
    import random

    from gpudecode.transforms.warps import grid_warp, rotation_matrix

    img = photo_batch[2]
    h, w = img.shape[1:]
    rng = random.Random(0)
    for interpolation, fill in (("nearest", 0), ("bilinear", (9, 80, 200)), ("bilinear", None)):
        for angle in (13.7, -41.0, 90.0, 180.0):
            for expand in (False, True):
                rot = T.RandomRotation((angle, angle), interpolation, expand=expand, fill=fill)
                p = {"rotation": {"angle": angle}}
                ch, cw = rot.canvas_size(p, (h, w))
                whole = torch.empty(3, ch, cw, dtype=torch.uint8)
                rot.paint(whole, img.permute(1, 2, 0), p)
                for _ in range(3):
                    t, l = rng.randrange(ch), rng.randrange(cw)
                    window = (t, l, rng.randint(1, ch - t), rng.randint(1, cw - l))
                    part = torch.empty(3, window[2], window[3], dtype=torch.uint8)
                    rot.paint(part, img.permute(1, 2, 0), p, window=window)
                    assert torch.equal(part, whole[:, t:t + window[2], l:l + window[3]]), (angle, expand, window)
    m = rotation_matrix(21.0, (h, w), None)
    assert torch.equal(grid_warp(img, m, (h, w), 1.0, 0, (5, 7, 30, 41)), grid_warp(img, m, (h, w), 1.0, 0)[:, 5:35, 7:48])


def test_a_rotation_first_recipe_kept_resident_gives_the_streamed_batches(photo_batch):
    """The Loader with a rotation canvas before the crop: keep="ram" gives the streamed
    batches bit for bit (the same draws, the same canvases' windows)."""
    from torch.utils.data import TensorDataset

    import gpudecode

    imgs = torch.stack([im[:, :48, :60] for im in photo_batch[:3]] * 4)
    ds = TensorDataset(imgs, torch.arange(len(imgs)))
    steps = tv.Compose([tv.RandomRotation(20), tv.RandomResizedCrop(24), tv.RandomHorizontalFlip(),
                        tv.ToDtype(torch.float32, scale=True)])
    streamed, kept = (torch.cat([b for b, _ in gpudecode.Loader(ds, transform=steps, batch_size=4, seed=1,
                                                                 **kw)]) for kw in ({}, {"keep": "ram"}))
    assert streamed.shape == (len(imgs), 3, 24, 24) and torch.equal(streamed, kept)


def test_canvases_and_post_warps_on_several_threads_are_one_threads(photo_batch, monkeypatch):
    """On the CPU the canvases (a rotation's, before the geometry) and the warps after the
    kernel (ElasticTransform's) are shared out to the call's threads, an image or a run of
    samples each: the same bytes as on one thread, whatever the count; a paint that fails
    is raised, once every thread has stopped."""
    before = torch.get_num_threads()
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    recipes = [T.Compose([T.RandomRotation(35, "bilinear", expand=True, fill=(9, 80, 200)), T.RandomResizedCrop(24)]),
               T.Compose([T.RandomRotation(20), T.RandomResizedCrop(20), T.RandomHorizontalFlip(), norm]),
               T.Compose([T.RandomResizedCrop(24), T.ElasticTransform(30.0, 3.0), norm])]
    try:
        for tf in recipes:
            got = {}
            for threads in (1, 2, 3, 7):
                torch.set_num_threads(threads)  # (a direct call runs on torch.get_num_threads() threads)
                got[threads] = tf(photo_batch, seed=11)
            for threads in (2, 3, 7):
                assert all(torch.equal(a, b) for a, b in zip(got[1], got[threads])), (tf, threads)
        torch.set_num_threads(3)
        paint = T.RandomRotation.paint
        calls = []

        def failing(self, out, image, params, **kw):
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("painting failed")
            return paint(self, out, image, params, **kw)

        monkeypatch.setattr(T.RandomRotation, "paint", failing)
        with pytest.raises(RuntimeError, match="painting failed"):
            recipes[1](photo_batch, seed=11)
        # (after it, no thread takes another image: those in hand, or just taken, are all)
        assert len(calls) <= 2 + 2 * 2 < len(photo_batch)
    finally:
        torch.set_num_threads(before)


# -- a Resize before the warp (`[Resize(256), RandomRotation(15), CenterCrop(224)]`) ---------------------------

@pytest.mark.parametrize("kind", ["rotation", *WARPS])
def test_a_resize_then_a_warp_then_a_crop_as_fine_tuning_recipes_write_it(photo_batch, kind):
    """A Resize, a warp, then a crop (v1, as fine-tuning recipes write it): each whole
    image resized in the first pass (F.resize of a uint8 image), warped whole at its new
    size (the warp's draws for that size: RandomAffine's translation), then cropped;
    torchvision's functional ops replaying the draws, bit for bit; the same through a
    Pad and a RandomCrop. The decoders decode whole images."""
    import torchvision.transforms as v1

    warp, replay, mode = {  # (v1's interpolations: nearest, but the perspective's bilinear)
        "rotation": (v1.RandomRotation(25), lambda x, p, m, f: F.rotate(x, p["rotation"]["angle"], m, fill=f),
                     NEAREST),
        "affine": (v1.RandomAffine(20, translate=(0.1, 0.2), shear=(-5, 5)), _affine, NEAREST),
        "perspective": (v1.RandomPerspective(0.6, 1.0), _perspective, BILINEAR)}[kind]
    tf = T.Compose.from_torchvision(v1.Compose([v1.Resize(40), warp, v1.CenterCrop(32), v1.RandomHorizontalFlip(),
                                                v1.PILToTensor()]))
    assert isinstance(tf.plan.first[0], T.Resize) and tf.plan.canvas is not None and tf.plan.program == ()
    sizes = [tuple(i.shape[1:]) for i in photo_batch]
    params = tf.make_params(sizes * 2, 6)
    assert tf.decode_boxes(params, sizes * 2) == [(0, 0, h, w) for h, w in sizes * 2]
    got = tf(photo_batch * 2, params)
    for k, (img, p) in enumerate(zip(photo_batch * 2, params)):
        x = replay(F.resize(img, [40], antialias=True), p, mode, [0.0] * 3)  # (v1's fill=0: a fill given)
        x = F.center_crop(x, [32, 32])
        assert torch.equal(got[k], F.horizontal_flip(x) if p["flip"] else x), (k, p)
    assert {p["flip"] for p in params} == {False, True}
    geom = tf.encode(params, sizes * 2)[0]  # (a rotation's and an affine's canvas: only the crop's part painted)
    assert (canvas.windows(tf.plan, geom, (32, 32)) is not None) == (kind != "perspective")
    crop = T.Compose.from_torchvision(v1.Compose([v1.Resize(40), warp, v1.RandomCrop((30, 34)), v1.PILToTensor()]))
    params = crop.make_params(sizes, 2)
    for img, p, out in zip(photo_batch, params, crop(photo_batch, params)):
        x = replay(F.resize(img, [40], antialias=True), p, mode, [0.0] * 3)
        assert torch.equal(out, F.crop(x, *p["crop"])), p
    pad = T.Compose([T.Resize((30, 36)), T.Pad(4, fill=(9, 80, 200)), T.RandomCrop(32)])
    assert not pad.plan.first and pad.plan.canvas is None  # (the Pad is the crop's padding: one pass, as
    # `[Resize((30, 36)), RandomCrop(32, padding=4)]`: within a level of torchvision's uint8 resize)
    centred = T.Compose([T.Resize(24), T.Pad((3, 5)), T.CenterCrop(30)])
    for tf, pads in ((pad, [4, 4, 4, 4]), (centred, [3, 5, 3, 5])):
        params = tf.make_params(sizes, 2)
        for img, p, out in zip(photo_batch, params, tf(photo_batch, params)):
            x = F.pad(F.resize(img, list(p.get("first_resize", p.get("resize"))), antialias=True), pads,
                      fill=[9, 80, 200] if tf is pad else 0)
            t, l, h, w = p["crop"]  # (RandomCrop's offsets in the image before its padding)
            want = F.crop(x, t + 4, l + 4, h, w) if tf is pad else F.center_crop(x, [30, 30])
            assert torch.equal(out, want) if tf is centred else int((out.int() - want.int()).abs().max()) <= 1, p
