"""FixedSizeCrop, the crop of torchvision's detection reference ("lsj": ScaleJitter, then
FixedSizeCrop; references/detection/transforms.py, not in torchvision's package): its draws
are the reference's (one number for both offsets, none where the image fits), the image is
torchvision's functional crop and bottom-right pad, the boxes and a mask follow."""
from __future__ import annotations

import json

import numpy as np
import torch
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

import gpudecode
from gpudecode import Boxes, Loader
from gpudecode import transforms as T
from gpudecode.transforms import sample_rng

from conftest import encode, make_shard
from test_boxes import _rectangles
from test_masks import png
from test_transforms import max_err_levels


def _reference(h: int, w: int, th: int, tw: int, u: float) -> tuple[int, int, int, int]:
    """The reference's forward: (top, left, the crop's height and width), `u` its
    torch.rand(1)."""
    nh, nw = min(h, th), min(w, tw)
    if (nh, nw) == (h, w):
        return 0, 0, nh, nw
    r = torch.tensor([u], dtype=torch.float32)
    return int(max(h - th, 0) * r), int(max(w - tw, 0) * r), nh, nw


def test_the_draws_are_the_references():
    """Images larger, smaller and mixed against the crop: the window's offsets are the
    reference's from the same number; an image that fits draws none (its next step sees the
    sample's first number)."""
    tf = T.Compose([T.FixedSizeCrop((32, 40)), T.RandomHorizontalFlip()])
    sizes = [(50, 70), (20, 30), (50, 30), (20, 70), (32, 40), (33, 40)] * 20
    params = tf.make_params(sizes, 5)
    for i, ((h, w), p) in enumerate(zip(sizes, params)):
        rng = sample_rng(5, 0, i)
        fits = h <= 32 and w <= 40
        t, l, nh, nw = _reference(h, w, 32, 40, 0.0 if fits else rng.random())
        assert p["crop"] == (t, l, 32, 40), (h, w, p)
        assert p["flip"] == (rng.random() < 0.5)


def test_the_image_is_torchvisions_crop_and_bottom_right_pad(photos):
    """After a resize, on crops of photographs: the kernel's output within a level of
    torchvision's functional resize, crop and pad (right and bottom, with the fill), in
    float as the kernel computes."""
    tf = T.Compose([T.Resize((45, 30)), T.FixedSizeCrop((36, 36), fill=(10, 200, 30)),
                    T.ToDtype(torch.float32, scale=True)])
    imgs = [torch.from_numpy(np.ascontiguousarray(photos[n][:60, :80])).permute(2, 0, 1).contiguous()
            for n in sorted(photos)]
    d = tf.draw_batch([tuple(i.shape[-2:]) for i in imgs], 3)
    got = tf(imgs, d)
    assert any(p["crop"][0] > 0 for p in d)  # (45 rows for 36: the window moves down by the draw)
    for k, (img, p) in enumerate(zip(imgs, d)):
        x = F.resize(F.to_dtype(img, torch.float32, scale=True), [45, 30], antialias=True)
        t, l, _, _ = p["crop"]
        x = F.crop(x, t, l, min(45, 36), min(30, 36))
        x = F.pad(x, [0, 0, 36 - x.shape[-1], 36 - x.shape[-2]], fill=[10 / 255, 200 / 255, 30 / 255])
        assert max_err_levels(got[k], x) <= 1.0, (k, p)


def test_boxes_and_a_mask_follow_it_through_the_loader(tmp_path):
    """Large-scale jitter as the reference writes it (ScaleJitter, FixedSizeCrop, flip):
    each kept box bounds its rectangle's pixels in the moved mask, to a pixel, and the
    boxes equal torchvision's functional moves of a BoundingBoxes with the Loader's draws
    (crop, clamp, pad)."""
    samples, boxes = [], {}
    for i in range(16):
        img, box = _rectangles(i, 60 + (i % 4) * 9, 70 + (i % 3) * 13)
        samples.append({"__key__": f"r{i:03d}", "png": encode(img, "PNG"),
                        "seg.png": png((img[..., 0] > 0).astype(np.uint8)), "json": json.dumps(box.tolist()).encode()})
        boxes[f"r{i:03d}"] = (box, img.shape[:2])
    url = make_shard(tmp_path / "lsj-000000.tar", samples)
    tf = T.Compose([T.ScaleJitter((64, 64), scale_range=(0.3, 2.0)), T.FixedSizeCrop(64, fill=(124, 116, 104)),
                    T.RandomHorizontalFlip()])
    ld = Loader([url], batch_size=8, transform=tf, device="cpu", seed=1, labels=False, image_ext="png", shuffle=False,
                fields={"seg.png": gpudecode.Mask(fill=0), "json": Boxes(min_size=2, min_area=4)})
    checked = pos = 0
    for images, masks, targets in ld:
        keys = [f"r{k:03d}" for k in range(pos, pos + len(images))]
        d = tf.draw_batch([boxes[k][1] for k in keys], 1, indices=list(range(pos, pos + len(images))))
        for k, m, t, p in zip(keys, masks, targets, d):
            box, size = boxes[k]
            x = tv_tensors.BoundingBoxes(torch.from_numpy(box), format="XYXY", canvas_size=size)
            x = F.resize(x, list(p["resize"]))
            top, left, _, _ = p["crop"]
            x = F.crop(x, top, left, min(p["resize"][0], 64), min(p["resize"][1], 64))
            x = F.pad(x, [0, 0, 64 - x.canvas_size[1], 64 - x.canvas_size[0]])
            if p["flip"]:
                x = F.horizontal_flip(x)
            ref = x.as_subclass(torch.Tensor)
            if not len(t["boxes"]):
                continue
            torch.testing.assert_close(t["boxes"], ref, rtol=0, atol=1e-4)
            ys, xs = torch.nonzero(m, as_tuple=True)
            (x0, y0, x1, y1), = t["boxes"].tolist()
            assert np.allclose([float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1],
                               [x0, y0, x1, y1], atol=1.0)
            checked += 1
        pos += len(images)
    assert pos == 16 and checked > 8
    assert repr(T.FixedSizeCrop(64, fill=(124, 116, 104))) == "FixedSizeCrop(size=(64, 64), fill=[124, 116, 104])"
