"""A torchvision detection pipeline converted as written (transforms/targets.py): its
SanitizeBoundingBoxes, ConvertBoundingBoxFormat and ClampBoundingBoxes change no pixel and
set what the Boxes field hands out. Held to the Loader given the same settings on its
Boxes field (the same batches), and to torchvision's own pipeline on one sample's draws;
a field that says otherwise, box steps without a Boxes field, a SanitizeBoundingBoxes
before a step that moves boxes, and a labels_getter other than the default are refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torchvision import tv_tensors

from gpudecode import Boxes, Loader, TransformError
from gpudecode import transforms as T

from conftest import make_shard
from test_boxes import _det_samples, random_boxes


def lsj(size: int = 48, min_size: float = 3.0):
    """torchvision's detection reference's large-scale-jitter preset (at `size`), as its
    presets.py writes it: the boxes converted to XYXY and sanitized at the end."""
    return v2.Compose([v2.ScaleJitter((size, size)), v2.RandomCrop(size, pad_if_needed=True),
                       v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                       v2.ConvertBoundingBoxFormat("XYXY"), v2.SanitizeBoundingBoxes(min_size=min_size),
                       v2.ClampBoundingBoxes()])


@pytest.fixture(scope="module")
def coco(tmp_path_factory, photos):
    samples = _det_samples(photos, 24)
    return [make_shard(tmp_path_factory.mktemp("box-steps") / "det-000000.tar", samples)]


def test_a_torchvision_detection_pipeline_converts_and_sets_the_boxes(coco):
    """The LSJ preset converts as written; its plan says XYXY and min_size 3; the Loader
    with a plain Boxes field hands out what the same Loader gives with those settings on
    the field and the box steps left out: the same images, the same boxes and labels."""
    tf = T.Compose.from_torchvision(lsj())
    assert tf.plan.box_format == "XYXY" and tf.plan.box_sizes == (3.0, 1.0)
    assert [type(t).__name__ for t in tf.transforms][-3:] == ["ConvertBoundingBoxFormat", "SanitizeBoundingBoxes",
                                                             "ClampBoundingBoxes"]
    plain = T.Compose(tf.transforms[:-3])
    kw = dict(batch_size=6, device="cpu", shuffle=True, seed=4, labels=False)
    a = Loader(coco, transform=tf, fields={"boxes": Boxes("XYWH")}, **kw)
    b = Loader(coco, transform=plain, fields={"boxes": Boxes("XYWH", out_format="XYXY", min_size=3)}, **kw)
    n = 0
    for x, y in zip(a, b):
        assert x.keys == y.keys and torch.equal(x.images, y.images)
        for s, t in zip(x[1], y[1]):
            assert torch.equal(s["boxes"], t["boxes"]) and s.keys() == t.keys()
            if "labels" in s:
                assert torch.equal(s["labels"], t["labels"])
            w = s["boxes"][:, 2:] - s["boxes"][:, :2]
            assert (w >= 3).all()  # (XYXY, none under min_size)
        n += len(x.keys)
    assert n == 24
    # a box the crop leaves 2 px wide: kept at the default, dropped under min_size 3
    few = T.Compose([T.CenterCrop(20)])
    d = few.draw_batch([(40, 40)], 0)
    box = np.array([[28, 5, 40, 15]], np.float32)  # (x 28..40: 2 px of it inside the centre 20)
    assert len(few.boxes([box], d)[0]["boxes"]) == 1
    sanitized = T.Compose([T.CenterCrop(20), T.SanitizeBoundingBoxes(min_size=3)])
    assert len(sanitized.boxes([box], d)[0]["boxes"]) == 0


def test_the_boxes_are_torchvisions_with_the_pipelines_own_steps():
    """One sample through torchvision's pipeline (its draws given to ours): its boxes and
    labels after SanitizeBoundingBoxes and ConvertBoundingBoxFormat equal Compose.boxes',
    which takes those settings from the Compose. With the conversion before the sanitizing,
    torchvision drops a box more now and then: converted to CXCYWH and back, a box on the
    image's edge comes back a rounding outside it (x1 = cx - w / 2 below 0, or x1 + w past
    the side), which its sanitizing takes for a box outside the image; ours are sanitized
    as XYXY, where they were clamped, and keep it."""
    rng = np.random.default_rng(3)
    more = 0
    for first in ("sanitize", "convert"):
        steps = [v2.SanitizeBoundingBoxes(min_size=4, min_area=30), v2.ConvertBoundingBoxFormat("CXCYWH")]
        tv = v2.Compose([v2.CenterCrop(30), v2.RandomHorizontalFlip(1.0), *(steps if first == "sanitize" else steps[::-1])])
        ours = T.Compose.from_torchvision(tv)
        for seed in range(30):
            h, w = int(rng.integers(30, 60)), int(rng.integers(30, 60))
            boxes = random_boxes(rng, h, w, n=8)
            labels = torch.arange(8)
            img = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
            _, out = tv(img, {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(h, w)),
                              "labels": labels})
            got = ours.boxes([{"boxes": boxes, "labels": labels.numpy()}], ours.draw_batch([(h, w)], seed))[0]
            if first == "sanitize":
                torch.testing.assert_close(got["boxes"], out["boxes"].as_subclass(torch.Tensor), rtol=0, atol=1e-4)
                assert torch.equal(got["labels"], out["labels"])
                continue
            theirs = set(out["labels"].tolist())
            assert theirs <= set(got["labels"].tolist())
            for k, label in enumerate(got["labels"].tolist()):
                if label not in theirs:  # (dropped by torchvision alone: its round trip put a side out)
                    c, wh = got["boxes"][k, :2], got["boxes"][k, 2:]
                    lo = c - wh / 2
                    assert (lo < 0).any() or (lo + wh > 30).any(), got["boxes"][k]
                    more += 1
    assert more > 0  # (the difference met, and only there)


def test_what_the_box_steps_refuse(coco):
    """A Boxes field that says otherwise than the transform; box steps without a Boxes
    field; SanitizeBoundingBoxes before a step that moves boxes; a labels_getter other
    than the default: each refused by name. Steps that agree, ClampBoundingBoxes alone,
    and a step after SanitizeBoundingBoxes that moves no pixel are taken."""
    kw = dict(batch_size=6, device="cpu", labels=False)
    tf = T.Compose.from_torchvision(lsj())
    with pytest.raises(TransformError, match=r"hands its boxes out as CXCYWH, and the\s+transform's\s+"
                                             r"ConvertBoundingBoxFormat as XYXY"):
        Loader(coco, transform=tf, fields={"boxes": Boxes("XYWH", out_format="CXCYWH")}, **kw)
    with pytest.raises(TransformError, match=r"drops boxes under min_size=2, min_area=1, and\s+the\s+transform's\s+"
                                             r"SanitizeBoundingBoxes\s+under\s+3,\s+1"):
        Loader(coco, transform=tf, fields={"boxes": Boxes("XYWH", min_size=2)}, **kw)
    Loader(coco, transform=tf, fields={"boxes": Boxes("XYWH", out_format="XYXY", min_size=3, min_area=1)}, **kw)
    with pytest.raises(TransformError, match=r"ConvertBoundingBoxFormat and SanitizeBoundingBoxes set what a\s+"
                                             r"gpudecode.Boxes field hands out, and no field is one"):
        Loader(coco, transform=tf, fields="boxes", **kw)
    Loader(coco, transform=T.Compose([T.Resize((32, 32)), T.ClampBoundingBoxes()]), **kw)
    for after in (T.RandomHorizontalFlip(), T.RandomRotation(10)):
        with pytest.raises(TransformError, match=rf"{type(after).__name__} after SanitizeBoundingBoxes cannot\s+be\s+fused"):
            T.Compose([T.Resize((32, 32)), T.SanitizeBoundingBoxes(), after])
    T.Compose([T.Resize((32, 32)), T.SanitizeBoundingBoxes(), T.ColorJitter(0.2), T.Normalize([0.5] * 3, [0.2] * 3)])
    with pytest.raises(TransformError, match=r"labels_getter=None\) cannot\s+be\s+fused"):
        T.Compose.from_torchvision(v2.Compose([v2.Resize((32, 32)), v2.SanitizeBoundingBoxes(labels_getter=None)]))
    # (RandomIoUCrop converts, first in the geometry: test_iou_crop.py; after a resize it is refused)
    with pytest.raises(TransformError, match=r"unsupported\s+geometry\s+\['Resize',\s+'RandomIoUCrop'\]"):
        T.Compose.from_torchvision(v2.Compose([v2.Resize((32, 32)), v2.RandomIoUCrop()]))
