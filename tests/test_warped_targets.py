"""Boxes and masks through the warps (transforms/warped.py): RandomRotation (expanded or
not, quarter turns, a centre given), RandomAffine (translation, scale, both shears, a
centre), RandomPerspective, each inside RandomApply and RandomOrder, and ElasticTransform
(first, on the decoded image; last, on the kernel's output). Against
torchvision.transforms.v2, which moves a tv_tensors.BoundingBoxes (its corners, the box
around them) and a tv_tensors.Mask (nearest neighbour, the mask's fill) with the same
params; through the Loader (its draws replayed), streamed and resident; and against the
kernel's own images, independent of torchvision: a rectangle lies in its box, a block
image agrees with its mask."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

from gpudecode import Boxes, Loader, Mask, TransformError
from gpudecode import transforms as T
from gpudecode.transforms.containers import SampleRandomChoice
from gpudecode.transforms.warped import nearest_sample

from conftest import encode, make_shard
from test_boxes import random_boxes, tv_moved, tv_sanitized
from test_masks import _agree, centre, png, slic_mask, tv_mask

WARPS = {
    "rrc+flip+rotation": lambda: T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                                            T.RandomRotation(35)]),
    "resize+crop+affine(centre)": lambda: T.Compose([T.Resize(30), T.CenterCrop(28), T.RandomAffine(
        25, (0.15, 0.1), (0.8, 1.2), (-8, 8, -5, 5), center=(10, 14))]),
    "randomcrop+perspective": lambda: T.Compose([T.RandomCrop(32, padding=4, pad_if_needed=True),
                                                 T.RandomPerspective(0.4, p=0.8)]),
    "quarter turn (not square)": lambda: T.Compose([T.Resize((24, 30)), T.RandomRotation((90, 90))]),
    "half turn, rotation about a point": lambda: T.Compose([T.Resize((28, 28)), T.RandomApply(
        [T.RandomRotation((180, 180))], p=0.5), T.RandomAffine(0, translate=(0.2, 0.2))]),
    "containers": lambda: T.Compose([T.RandomResizedCrop(26), T.RandomVerticalFlip(), T.RandomApply(
        [T.RandomRotation(20, center=(5, 7))], p=0.6), T.RandomOrder([T.RandomAffine(10, shear=6),
                                                                      T.RandomPerspective(0.3, p=0.8)]),
                                     T.ColorJitter(0.2), T.Normalize([0.5] * 3, [0.2] * 3)]),
    "expanded rotation": lambda: T.Compose([T.RandomRotation(35, expand=True), T.Resize((32, 32)),
                                            T.RandomHorizontalFlip()]),
    "elastic first": lambda: T.Compose([T.ElasticTransform(30.0, 3.0), T.Resize((30, 30)), T.RandomHorizontalFlip()]),
    "elastic last": lambda: T.Compose([T.RandomResizedCrop(28, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                                       T.RandomRotation(15), T.ElasticTransform(40.0, 4.0)]),
}
SIZES = [(37, 41), (50, 33), (64, 64), (31, 70), (28, 28), (40, 40)]


def tv_warps(x, step, p: dict, fill=None):
    """torchvision's functional ops for `step` of a Compose's program on a tv_tensor `x`
    (BoundingBoxes or Mask), with an image's params: the warps in the order drawn."""
    if isinstance(step, T.RandomApply):
        for t in step.transforms:
            x = tv_warps(x, t, p, fill)
    elif isinstance(step, SampleRandomChoice):
        x = tv_warps(x, step.transforms[p["choice"]], p, fill)
    elif isinstance(step, T.RandomOrder):
        for k in p["random_order"]:
            x = tv_warps(x, step.transforms[k], p, fill)
    elif isinstance(step, T.RandomRotation) and "rotation" in p:
        x = F.rotate(x, p["rotation"]["angle"], center=step.center, fill=fill)
    elif isinstance(step, T.RandomAffine) and "affine" in p:
        a = p["affine"]
        x = F.affine(x, a["angle"], list(a["translate"]), a["scale"], list(a["shear"]), center=step.center, fill=fill)
    elif isinstance(step, T.RandomPerspective) and "perspective" in p:
        x = F.perspective(x, None, None, coefficients=p["perspective"]["coefficients"], fill=fill)
    return x


def tv_canvas(tf, x, p: dict, size, fill=None):
    """torchvision's op for a Compose's canvas step (an expanded rotation, an elastic warp
    first) on a tv_tensor of an image of `size`, or `x` as it is."""
    canvas = tf.plan.canvas
    if isinstance(canvas, T.RandomRotation):
        return F.rotate(x, p["rotation"]["angle"], expand=True, fill=fill)
    if isinstance(canvas, T.ElasticTransform):
        return F.elastic(x, canvas.displacement(p, tuple(size)), fill=fill)
    return x


def tv_post(tf, x, p: dict, out_size, fill=None):
    """torchvision's elastic warp last (on the kernel's output), where the Compose has one."""
    if tf.plan.post is None:
        return x
    return F.elastic(x, tf.plan.post.displacement(p, tuple(out_size)), fill=fill)


def tv_warped_mask(tf, mask: torch.Tensor, p: dict, out_size, fill: int) -> torch.Tensor:
    """torchvision's moves of a mask under a Compose with warps, with an image's params."""
    mask = tv_canvas(tf, tv_tensors.Mask(mask[None]), p, mask.shape, fill)[0]
    m = tv_tensors.Mask(tv_mask(mask.as_subclass(torch.Tensor), p, out_size, fill)[None])
    for step in tf.plan.program:
        m = tv_warps(m, step, p, fill)
    return tv_post(tf, m, p, out_size, fill)[0].as_subclass(torch.Tensor)


def tv_warped_boxes(tf, boxes: np.ndarray, size, p: dict, out_size) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's moves of boxes (XYXY) under a Compose with warps (program warps only),
    then SanitizeBoundingBoxes' choice: (the boxes kept, which were kept). The boxes are
    clamped to the output before the warps (ours are: torchvision's Resize alone leaves a
    box reaching out of its image unclamped, and rotates it whole)."""
    x = tv_canvas(tf, tv_tensors.BoundingBoxes(torch.as_tensor(boxes), format="XYXY", canvas_size=tuple(size)), p,
                  size)
    x = F.clamp_bounding_boxes(tv_moved(x, p, out_size))
    for step in tf.plan.program:
        x = tv_warps(x, step, p)
    return tv_sanitized(tv_post(tf, x, p, out_size))


def test_boxes_through_the_warps_move_as_torchvisions():
    """Compose.boxes with the images' draws equals torchvision's functional ops with the
    same params (each box's corners through the warp, the box around them, clamped after
    each step), then SanitizeBoundingBoxes' choice, for every warp plan but the expanded
    rotation (its own test below): the same boxes kept, with their labels, at the same
    places (float32)."""
    rng = np.random.default_rng(0)
    kept = dropped = 0
    for name, make in WARPS.items():
        tf = make()
        if isinstance(tf.plan.canvas, T.RandomRotation):  # (its boxes follow the image: the test below)
            continue
        warped = 0
        for seed in range(12):
            entries = [{"boxes": random_boxes(rng, h, w), "labels": np.arange(7) * 3} for h, w in SIZES]
            d = tf.draw_batch(SIZES, seed)
            out = tf.boxes(entries, d, sizes=SIZES)
            osz = tf.output_size(SIZES)
            for k, (e, got) in enumerate(zip(entries, out)):
                ref, keep = tv_warped_boxes(tf, e["boxes"], SIZES[k], d[k], osz)
                assert got["labels"].tolist() == (torch.nonzero(keep)[:, 0] * 3).tolist(), (name, seed, k)
                torch.testing.assert_close(got["boxes"], ref, rtol=0, atol=1e-4)
                kept, dropped = kept + len(ref), dropped + int((~keep).sum())
                warped += any(key in d[k] for key in ("rotation", "affine", "perspective", "displacement_seed"))
        assert warped > 30, name  # (the warps drawn, often)
    assert kept > 1500 and dropped > 200


def test_masks_through_the_warps_move_as_torchvisions(photos):
    """Compose.masks with the images' draws equals torchvision's functional ops on a
    tv_tensors.Mask with the same params (nearest neighbour, the fill outside) for every
    warp plan, the expanded rotation included, to a pixel in 10,000: torchvision makes its
    sampling grid with a BLAS product (bmm), whose sums round as the machine's BLAS rounds
    them, and ours sums the same float32 terms in one fixed order, so a point that falls
    within a rounding of the half-way between two pixels may take the other one (on this
    corpus about 1 in 200,000, each a lone pixel). An int64 mask keeps values past
    float32's integers."""
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(SIZES)]
    pixels = differ = 0
    for name, make in WARPS.items():
        tf = make()
        for seed in range(8):
            d = tf.draw_batch(SIZES, seed)
            out = tf.masks(masks, d, fill=255)
            assert out.shape[1:] == tf.output_size(SIZES)
            for k, m in enumerate(masks):
                ref = tv_warped_mask(tf, m, d[k], out.shape[1:], 255)
                n = int((out[k] != ref).sum())
                assert n <= 1, (name, seed, k, n)
                pixels, differ = pixels + ref.numel(), differ + n
    assert pixels > 200_000 and differ <= pixels // 10_000, (pixels, differ)
    # class indices past 2 ** 24 (where torchvision's float32 copy would round them) gathered exactly
    big = [(m.long() + 2 ** 40) for m in masks]
    tf = WARPS["rrc+flip+rotation"]()
    d = tf.draw_batch(SIZES, 3)
    wide = tf.masks(big, d, fill=-1)
    small = tf.masks(masks, d, fill=255)
    assert wide.dtype == torch.int64 and torch.equal(wide[small != 255] - 2 ** 40, small[small != 255].long())
    assert ((wide == -1) == (small == 255)).all()


def test_nearest_sample_is_grid_sample_nearest():
    """The gather a mask is warped by equals grid_sample's nearest (zeros outside) on the
    same grid, half-way points and points outside included."""
    rng = np.random.default_rng(2)
    mask = torch.from_numpy(rng.integers(1, 200, (13, 17)).astype(np.float32))
    grid = torch.from_numpy(rng.uniform(-1.3, 1.3, (1, 20, 21, 2)).astype(np.float32))
    grid[0, 0, :17, 0] = torch.from_numpy((2 * np.arange(17) + 1) / 17 - 1 + 1 / 17).float()  # (x exactly half-way)
    grid[0, 1, :3] = torch.tensor([[np.nan, 0.0], [np.inf, 0.0], [0.0, -np.inf]])
    ref = torch.nn.functional.grid_sample(mask[None, None], grid, mode="nearest", padding_mode="zeros",
                                          align_corners=False)[0, 0]
    got = nearest_sample(mask, (grid[0, ..., 0], grid[0, ..., 1]), 0)
    assert torch.equal(got, ref)


def test_an_expanded_rotations_boxes_lie_on_its_image():
    """An expanded rotation's boxes lie where the rotated image puts its rectangle: the box's
    centre within 0.05 px of the centre of the rectangle's pixels in torchvision's rotated
    image (the rectangle's centre), where torchvision's own boxes lie up to a pixel off (it
    shifts them by the least of the moved corners and clamps them to a canvas it works out
    anew); the box's corners are the rectangle's moved corners' bounds."""
    tf = T.Compose([T.RandomRotation(40, expand=True), T.CenterCrop((200, 200))])
    ours, theirs = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        x0, y0 = int(rng.integers(3, w // 2)), int(rng.integers(3, h // 2))
        x1, y1 = int(rng.integers(x0 + 8, w - 2)), int(rng.integers(y0 + 8, h - 2))
        img = torch.zeros(1, h, w)
        img[0, y0:y1, x0:x1] = 1
        p = tf.draw_batch([(h, w)], seed)[0]
        angle = p["rotation"]["angle"]
        rot = F.rotate(img, angle, expand=True, interpolation=F.InterpolationMode.BILINEAR)[0]
        centre_of_mass = torch.stack([(rot * (torch.arange(rot.shape[1]) + 0.5)).sum(),
                                      (rot * (torch.arange(rot.shape[0])[:, None] + 0.5)).sum()]) / rot.sum()
        box = torch.from_numpy(tf.plan.canvas.drawn(p, (h, w))[0].boxes(np.array([[x0, y0, x1, y1]], np.float32))[0])
        tv = F.rotate(tv_tensors.BoundingBoxes([[x0, y0, x1, y1]], format="XYXY", canvas_size=(h, w)), angle,
                      expand=True)[0].as_subclass(torch.Tensor)
        for b, into in ((box, ours), (tv, theirs)):
            into.append(float((torch.stack([b[0] + b[2], b[1] + b[3]]) / 2 - centre_of_mass).abs().max()))
        # the box's extent is the rotated rectangle's: its half-diagonals' projections
        c, s = abs(np.cos(np.radians(angle))), abs(np.sin(np.radians(angle)))
        bw, bh = (x1 - x0) * c + (y1 - y0) * s, (x1 - x0) * s + (y1 - y0) * c
        assert abs(float(box[2] - box[0]) - bw) < 1e-3 and abs(float(box[3] - box[1]) - bh) < 1e-3
    assert max(ours) < 0.05 and max(theirs) > 0.3, (max(ours), max(theirs))


def _bounds(images: torch.Tensor) -> list[torch.Tensor | None]:
    """Each image's bright pixels' bounds (x0, y0, x1, y1, pixel edges), None where none."""
    out = []
    for img in images:
        ys, xs = torch.nonzero(img.float().mean(0) > 60, as_tuple=True)
        out.append(None if not len(xs) else torch.stack([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]).float())
    return out


LOADER_PLANS = ("rrc+flip+rotation", "resize+crop+affine(centre)", "randomcrop+perspective", "containers",
                "expanded rotation")
ELASTIC = ("elastic first", "elastic last")  # (masks follow the field exactly; boxes by an approximate inverse)


def _plain(name: str) -> T.Compose:
    """The plan without its colour steps (the rectangle and blocks keep their colours)."""
    return T.Compose([t for t in WARPS[name]().transforms if not isinstance(t, (T.ColorJitter, T.Normalize))])


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_box_bounds_its_rotated_rectangle_in_the_kernels_image(rect_shards, keep):
    """Images of one coloured rectangle and its box, through rotations, affine and
    perspective warps (and containers of them), streamed and resident: the rectangle's
    pixels in the kernel's image lie in the box (a pixel and a half for the filter) and
    reach each of its sides (2.5 px: a rotated corner's tip is thin), and a box is dropped
    only where little of the rectangle is left; a mirrored image does not fit its box."""
    for name in LOADER_PLANS:
        tf = _plain(name)
        ld = Loader(rect_shards, batch_size=8, transform=tf, device="cpu", seed=1, num_workers=2, keep=keep,
                    keep_size=48 if keep else None, labels=False, image_ext="png",
                    fields={"json": Boxes(min_size=3, min_area=9)})
        n, fits, mirrored = 0, 0, []
        for epoch in range(2):
            ld.set_epoch(epoch)
            for images, targets in ld:
                for b, mb, t in zip(_bounds(images), _bounds(images.flip(-1)), targets):
                    if not len(t["boxes"]):
                        assert b is None or float(min(b[2] - b[0], b[3] - b[1])) <= 3 + 2, (name, b)  # (min_size 3)
                        continue
                    box = t["boxes"][0]
                    assert b is not None, name
                    inside = bool((b[:2] >= box[:2] - 1.5).all() and (b[2:] <= box[2:] + 1.5).all())
                    reaches = bool(((b - box).abs() <= 2.5).all())
                    assert inside, (name, b, box)
                    fits += reaches
                    n += 1
                    mirrored.append(mb is not None and bool(((mb - box).abs() <= 2.5).all()))
        assert n > 30 and fits >= 0.95 * n and np.mean(mirrored) < 0.7, (name, n, fits, np.mean(mirrored))


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_mask_lies_on_its_warped_image(block_shards, keep):
    """Images of flat blocks and their masks, through the warps, streamed and resident:
    inside each block the kernel's image has its mask's class colour; where the mask is its
    fill the image is black (two pixels or more from the image's edge: the bilinear image
    and the antialiased resize blend there); a mirrored image does not lie on its mask."""
    for name in LOADER_PLANS + ELASTIC:
        tf = _plain(name)
        ld = Loader(block_shards, batch_size=8, transform=tf, device="cpu", seed=1, num_workers=2, keep=keep,
                    keep_size=48 if keep else None, fields={"mask.png": Mask(fill=99)}, image_ext="png")
        mirrored = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            for images, _, masks in ld:
                assert _agree(images, masks) > 0.99, name
                mirrored.append(_agree(images.flip(-1), masks))
                near = torch.nn.functional.max_pool2d((masks != 99).float()[:, None], 5, 1, 2)[:, 0] > 0
                deep = (masks == 99) & ~near  # (the fill two pixels or more from the image's edge)
                assert deep.any() or name != "expanded rotation"
                assert not (deep & (images.float().mean(1) > 40)).any(), name
        assert np.mean(mirrored) < 0.8, name


def test_the_loaders_warped_targets_are_compose_s_with_its_draws(tmp_path, photos):
    """A Loader with a Mask and Boxes through the warps hands out, for each batch, what
    Compose.masks and Compose.boxes give with the draws it made (the seed, the epoch and
    each sample's position: draw_batch), which the tests above hold to torchvision's; the
    images are those of a Loader without fields."""
    names = sorted(photos)
    rng = np.random.default_rng(4)
    samples, sizes, masks, boxes = [], {}, {}, {}
    for i in range(20):
        h, w = 36 + (i * 7) % 30, 40 + (i * 11) % 30
        img = centre(photos[names[i % len(names)]], h, w)
        key = f"s{i:03d}"
        sizes[key], masks[key], boxes[key] = (h, w), slic_mask(img), random_boxes(rng, h, w, n=i % 5)
        samples.append({"__key__": key, "jpg": encode(img), "cls": "0", "seg.png": png(masks[key]),
                        "json": json.dumps({"boxes": boxes[key].tolist(), "labels": list(range(i % 5))}).encode()})
    urls = [make_shard(tmp_path / "warp-000000.tar", samples)]
    for name in ("containers", "expanded rotation", "elastic first"):
        tf = WARPS[name]()
        fields = {"seg.png": Mask(fill=255), "json": Boxes()}
        ld = Loader(urls, batch_size=6, transform=tf, device="cpu", shuffle=False, seed=7, fields=fields)
        plain = Loader(urls, batch_size=6, transform=tf, device="cpu", shuffle=False, seed=7)
        ld.set_epoch(1)
        plain.set_epoch(1)
        pos = 0
        for b, p in zip(ld, plain):
            images, _, got_masks, targets = b
            assert torch.equal(images, p.images), name
            keys = list(b.keys)
            sz = [sizes[k] for k in keys]
            d = tf.draw_batch(sz, 7, epoch=1, indices=list(range(pos, pos + len(keys))))
            ref_masks = tf.masks([torch.from_numpy(masks[k]) for k in keys], d, fill=255)
            assert torch.equal(got_masks, ref_masks), name
            ref_boxes = tf.boxes([{"boxes": boxes[k], "labels": np.arange(len(boxes[k]))} for k in keys], d)
            for t, r in zip(targets, ref_boxes):
                torch.testing.assert_close(t["boxes"], r["boxes"], rtol=0, atol=0)
                assert torch.equal(t["labels"], r["labels"])
            pos += len(keys)
        assert pos == 20, name


def test_each_view_warps_its_own_masks(block_shards):
    """Several views, each with its own warps (a rotation, an elastic field first, an affine
    warp in a container): a list of mask batches, one a view, each Compose.masks' with that
    view's draws; and each lies on its view's images."""
    from gpudecode.pipeline import view_seed

    from test_masks import _blocks

    views = [_plain("rrc+flip+rotation"), _plain("elastic first"), _plain("containers")]
    ld = Loader(block_shards, batch_size=8, transform=views, device="cpu", shuffle=False, seed=4,
                fields={"mask.png": Mask(fill=99)}, image_ext="png")
    ld.set_epoch(1)
    pos = 0
    for b in ld:
        images, _, masks = b
        assert isinstance(masks, list) and len(masks) == 3
        sizes = [_blocks(int(k[1:]), 60 + (int(k[1:]) % 5) * 9, 70 + (int(k[1:]) % 3) * 13)[1] for k in b.keys]
        for v, (tf, mk, im) in enumerate(zip(views, masks, images)):
            d = tf.draw_batch([m.shape for m in sizes], view_seed(4, v), epoch=1, indices=list(range(pos, pos + len(b.keys))))
            assert torch.equal(mk, tf.masks([torch.from_numpy(m) for m in sizes], d, fill=99)), v
            assert _agree(im, mk) > 0.99, v
        pos += len(b.keys)
    assert pos == 24


def test_boxes_under_a_weak_and_a_strong_view(tmp_path, photos):
    """Two views (a weak one: crop and flip; a strong one: crop, flip, a rotation and
    colour): a batch's targets are a list of two target lists, each Compose.boxes' with
    that view's draws; the dataset's item holds one target a view; a batch made up under
    even repeats them, view by view; and the views' box steps must agree."""
    from gpudecode.fields import Views
    from gpudecode.pipeline import view_seed

    from test_boxes import _det_samples, _reference, made_up

    samples = _det_samples(photos, 12)
    url = make_shard(tmp_path / "det-000000.tar", samples)
    refs = _reference(samples)
    sizes = {s["__key__"]: (36 + (i * 7) % 30, 40 + (i * 11) % 30) for i, s in enumerate(samples)}
    views = [T.Compose([T.RandomResizedCrop(24, scale=(0.5, 1.0)), T.RandomHorizontalFlip()]),
             T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(20),
                        T.ColorJitter(0.4, 0.4)])]
    ld = Loader([url], batch_size=6, transform=views, device="cpu", shuffle=False, seed=4, labels=False,
                fields={"boxes": Boxes()})
    ld.set_epoch(1)
    pos = seen = 0
    for b in ld:
        images, targets = b
        assert isinstance(targets, Views) and len(targets) == 2 and all(len(t) == len(b.keys) for t in targets)
        sz = [sizes[k] for k in b.keys]
        for v, (tf, ts) in enumerate(zip(views, targets)):
            d = tf.draw_batch(sz, view_seed(4, v), epoch=1, indices=list(range(pos, pos + len(b.keys))))
            ref = tf.boxes([{"boxes": refs[k][0], **({} if refs[k][1] is None else {"labels": refs[k][1]})}
                            for k in b.keys], d)
            for t, r in zip(ts, ref):
                assert torch.equal(t["boxes"], r["boxes"]) and t.keys() == r.keys()
                seen += len(t["boxes"])
        pos += len(b.keys)
    assert pos == 12 and seen > 20
    image, item = ld.dataset[5]
    assert isinstance(item, list) and len(item) == 2 and all(isinstance(t, dict) for t in item)
    first, made = made_up(tmp_path, samples, views)
    assert made.keys == first.keys and isinstance(made[1], Views)
    for a, b in zip(made[1], first[1]):
        assert all(torch.equal(x["boxes"], y["boxes"]) and x["boxes"] is not y["boxes"] for x, y in zip(a, b))
    with pytest.raises(TransformError, match="the views' SanitizeBoundingBoxes and ConvertBoundingBoxFormat differ"):
        Loader([url], batch_size=6, transform=[views[0], T.Compose([*views[1].transforms, T.SanitizeBoundingBoxes(4)])],
               device="cpu", labels=False, fields={"boxes": Boxes()})


def test_a_perspective_that_collapses_its_image_leaves_no_box():
    """A perspective drawn for a side of one pixel puts its four corners on one line, and
    its coefficients cannot be inverted (torchvision raises moving boxes by it): every box
    is left empty and dropped (kept, at the origin, with min_size=0), the mask follows the
    image as ever (found by the boxes fuzzer)."""
    tf = T.Compose([T.Resize((8, 1)), T.RandomPerspective(1.0, p=1.0)])
    d = tf.draw_batch([(20, 10)], 0)
    c = d[0]["perspective"]["coefficients"]
    assert c[0] * c[4] - c[1] * c[3] == 0
    with pytest.raises(RuntimeError, match="can not be inverted"):
        F.perspective(tv_tensors.BoundingBoxes([[1, 1, 5, 5]], format="XYXY", canvas_size=(8, 1)), None, None,
                      coefficients=c)
    assert tf.boxes([np.array([[1, 1, 5, 5]], np.float32)], d)[0]["boxes"].shape == (0, 4)
    kept = tf.boxes([np.array([[1, 1, 5, 5]], np.float32)], d, min_size=0, min_area=0)[0]["boxes"]
    assert kept.tolist() == [[0.0, 0.0, 0.0, 0.0]]
    assert tf.masks([torch.ones(20, 10, dtype=torch.uint8)], d, fill=7).shape == (1, 8, 1)


def test_what_still_cannot_be_followed_is_refused():
    """The policies' geometric ops (torchvision's AutoAugment family refuses boxes and masks
    too) are refused, with the step named, inside a container too."""
    sizes = [(30, 30)]
    for tf, what in [(T.Compose([T.Resize((24, 24)), T.RandomOrder([T.RandomRotation(5), T.TrivialAugmentWide()])]),
                      "TrivialAugmentWide moves pixels"),
                     (T.Compose([T.Resize((24, 24)), T.RandomApply([T.AutoAugment()])]), "AutoAugment moves pixels")]:
        with pytest.raises(TransformError, match=what):
            tf.masks([torch.zeros(30, 30, dtype=torch.uint8)], tf.draw_batch(sizes, 0))
        with pytest.raises(TransformError, match=what):
            tf.boxes([np.zeros((0, 4))], tf.draw_batch(sizes, 0))
