"""Batches of images of their own sizes (Compose(ragged=True)): each sample at the top-left
of the batch's padded output, zeros around it, every op, flip and statistic seeing its own
size. The kernel against a launch of each sample alone (both targets); the Compose and the
Loader against torchvision v2 on real photographs."""
from __future__ import annotations

import io
import os
import json
import pickle

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from torchvision import tv_tensors

import gpudecode
from gpudecode import Boxes, Loader, RaggedBatch, TransformError
from gpudecode import transforms as T
from gpudecode.kernels import fused, ops

from conftest import make_shard
from test_boxes import random_boxes, tv_sanitized
from test_iou_crop import _rect_samples
from test_kernels import MEAN, STD, _case
from test_transforms import max_err_levels


def _program(rng, n):
    """Programs with each kind of statistic and a size-reading op: contrast (grey mean),
    autocontrast (range), equalize (histogram), sharpness (neighbours), an affine warp
    about the centre (its size), and the jitter's pixel ops."""
    width = 4
    order = np.full((n, width), -1, np.int32)
    args = np.zeros((n, width, fused.ARGS), np.float32)
    for k in range(n):
        pick = [ops.BRIGHTNESS, [ops.CONTRAST, ops.AUTOCONTRAST, ops.EQUALIZE, ops.SHARPNESS, ops.AFFINE][k % 5],
                ops.HUE]
        if k % 3 == 2:
            pick.append(ops.EQUALIZE)
        for j, op in enumerate(pick):
            order[k, j] = op
            if op == ops.AFFINE:  # a small rotation about the centre, bilinear, zeros outside
                a = np.deg2rad(rng.uniform(-20, 20))
                args[k, j, :10] = (np.cos(a), -np.sin(a), 0.05, np.sin(a), np.cos(a), -0.03, 1, np.nan, np.nan,
                                   np.nan)
            else:
                args[k, j, 0] = rng.uniform(0.6, 1.4) if op != ops.HUE else rng.uniform(-0.1, 0.1)
    return args, order


def _ragged(seed, n, chw=False):
    """A batch of samples, each with its own output size (OH, OW), and each sample's row
    with OH = 0 for a launch of it alone at that size."""
    rng = np.random.default_rng(seed)
    flats, geoms, sizes, off = [], [], [], 0
    for k in range(n):
        h, w = int(rng.integers(2, 30)), int(rng.integers(2, 30))
        oh, ow = int(rng.integers(1, 24)), int(rng.integers(1, 24))
        flat, g, _ = _case(rng, h, w, oh, ow, "rrc" if k % 2 else "resize", chw=chw and k % 2 == 1)
        g[fused.OFFSET] = off
        g[fused.OH], g[fused.OW] = oh, ow
        off += flat.size
        flats.append(flat)
        geoms.append(g)
        sizes.append((oh, ow))
    args, order = _program(rng, n)
    return np.concatenate(flats), np.stack(geoms), args, order, sizes


def _alone(run, src, geom, args, order, sizes, dtype):
    """Each sample launched alone at its own size (OH unset): what the batch must hold."""
    out = []
    for k, (oh, ow) in enumerate(sizes):
        g = geom[k:k + 1].copy()
        g[:, fused.OH:fused.OW + 1] = 0
        one = np.zeros((1, 3, oh, ow), dtype)
        run(src, g, args[k:k + 1], order[k:k + 1], one)
        out.append(one[0])
    return out


def _check(batch, alone, sizes):
    for k, ((oh, ow), a) in enumerate(zip(sizes, alone)):
        np.testing.assert_array_equal(batch[k, :, :oh, :ow], a, err_msg=f"sample {k}")
        rest = batch[k].copy()
        rest[:, :oh, :ow] = 0
        assert not rest.any(), f"sample {k}: not zero around its {oh}x{ow}"


@pytest.mark.parametrize("dtype,layout", [(np.float32, "NCHW"), (np.float32, "NHWC"), (np.uint8, "NCHW"),
                                          (np.float32, "strided")])
def test_cpu_twin_runs_each_sample_at_its_own_size(dtype, layout):
    """Bit for bit each sample alone at its size (the general path, the 1:1 path, the
    staged one of uint8 and strided outputs, NHWC), zeros around it, whatever the threads."""
    src, geom, args, order, sizes = _ragged(3, 11, chw=True)
    normalize = dtype != np.uint8

    def run(s, g, a, o, out):
        fused.fused_cpu(s, g, a, o, MEAN, STD, out, normalize=normalize, num_threads=2)

    oh, ow = max(s[0] for s in sizes) + 2, max(s[1] for s in sizes) + 1
    for fast in (True, False):
        if layout == "NHWC":
            full = np.full((len(sizes), oh, ow, 3), 7, dtype)
            batch = full.transpose(0, 3, 1, 2)
        elif layout == "strided":  # (not contiguous: each sample staged, then copied)
            batch = np.full((len(sizes), 3, oh, ow + 3), 7, dtype)[..., :ow]
        else:
            batch = np.full((len(sizes), 3, oh, ow), 7, dtype)
        fused.fused_cpu(src, geom, args, order, MEAN, STD, batch, normalize=normalize, num_threads=2,
                        fast_identity=fast)
        _check(batch, _alone(run, src, geom, args, order, sizes, dtype), sizes)


def test_identity_samples_of_their_own_size_spread_in_place():
    """Samples read 1:1 (no program: the 1:1 path), each its own size, written in place
    and spread to the batch's rows: the same as alone."""
    src, geom, args, order, sizes = _ragged(5, 9)
    order[:] = -1
    for k in range(len(sizes)):  # (a box of the sample's size, read 1:1)
        oh, ow = sizes[k]
        h, w = geom[k, fused.H], geom[k, fused.W]
        geom[k, fused.TOP:fused.BW + 1] = (0, 0, h, w)
        geom[k, fused.VH], geom[k, fused.VW] = h, w
        geom[k, fused.OY], geom[k, fused.OX] = 0, 0
    batch = np.full((len(sizes), 3, 25, 26), 7, np.float32)
    fused.fused_cpu(src, geom, args, order, MEAN, STD, batch, normalize=True)

    def run(s, g, a, o, out):
        fused.fused_cpu(s, g, a, o, MEAN, STD, out, normalize=True)

    _check(batch, _alone(run, src, geom, args, order, sizes, np.float32), sizes)


def test_cuda_kernels_run_each_sample_at_its_own_size():
    """Under the simulator: the CUDA kernels' batch equals each sample alone on CUDA, and
    the CPU twin's batch (its statistics over the sample's own pixels: kernel 1 and the
    barrier launches read OH and OW)."""
    src, geom, args, order, sizes = _ragged(7, 5)
    oh, ow = max(s[0] for s in sizes), max(s[1] for s in sizes) + 2

    def run(s, g, a, o, out):
        fused.fused_cuda(s, g, a, o, MEAN, STD, out, normalize=True)

    batch = np.full((len(sizes), 3, oh, ow), 7, np.float32)
    fused.fused_cuda(src, geom, args, order, MEAN, STD, batch, normalize=True)
    _check(batch, _alone(run, src, geom, args, order, sizes, np.float32), sizes)
    cpu = np.zeros_like(batch)
    fused.fused_cpu(src, geom, args, order, MEAN, STD, cpu, normalize=True)
    np.testing.assert_allclose(batch, cpu, atol=2e-5, rtol=0)


# --- the Compose and the Loader against torchvision v2 -----------------------------------------

FILL = (123, 117, 104)
# torchvision's detection reference presets (references/detection/presets.py), at a photograph crop's scale:
# each leaves every image a size of its own (the reference's collate keeps a tuple of them)
PRESETS = {
    "hflip": lambda: [T.RandomHorizontalFlip(0.5)],
    "multiscale": lambda: [T.RandomShortestSize((24, 32, 40, 48), max_size=70), T.RandomHorizontalFlip(0.5)],
    "ssdlite": lambda: [T.RandomIoUCrop(), T.RandomHorizontalFlip(0.5)],
    # (its RandomPhotometricDistort, which the preset runs first, after the flip here: where the kernel runs it)
    "ssd": lambda: [T.RandomZoomOut(fill=FILL), T.RandomIoUCrop(), T.RandomHorizontalFlip(0.5)],
}


def _tv_chain(img: torch.Tensor, boxes: np.ndarray, mask: torch.Tensor, p: dict
              ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
    """torchvision's functional ops with our params on an image, its BoundingBoxes and its
    Mask (the image in float: resized as the kernel resizes; the mask padded with 255):
    (image, boxes kept by SanitizeBoundingBoxes, which of them, mask)."""
    x = tv_tensors.Image(F.to_dtype(img, torch.float32, scale=True))
    b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=tuple(img.shape[-2:]))
    m = tv_tensors.Mask(mask[None])
    if "padding" in p:
        x, b = F.pad(x, list(p["padding"]), fill=[v / 255 for v in FILL]), F.pad(b, list(p["padding"]))
        m = F.pad(m, list(p["padding"]), fill=255)
    if "crop" in p:
        x, b, m = F.crop(x, *p["crop"]), F.crop(b, *p["crop"]), F.crop(m, *p["crop"])
    if "inside" in p:
        b[~torch.from_numpy(p["inside"])] = 0
    if "resize" in p:
        x, b = F.resize(x, list(p["resize"]), antialias=True), F.resize(b, list(p["resize"]))
        m = F.resize(m, list(p["resize"]), interpolation=tv.InterpolationMode.NEAREST)
    if p["flip"]:
        x, b, m = F.horizontal_flip(x), F.horizontal_flip(b), F.horizontal_flip(m)
    kept, keep = tv_sanitized(b)
    return x.as_subclass(torch.Tensor), kept, keep.numpy(), m.as_subclass(torch.Tensor)[0]


def _photo_crops(photos, n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    names = sorted(photos)
    imgs, entries = [], []
    for i in range(n):
        h, w = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        src = photos[names[i % len(names)]]
        imgs.append(torch.from_numpy(np.ascontiguousarray(src[:h, :w])).permute(2, 0, 1).contiguous())
        boxes = random_boxes(rng, h, w, n=int(rng.integers(1, 6)))
        entries.append({"boxes": boxes, "labels": np.arange(len(boxes)) + 10 * i})
    return imgs, entries


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_detection_presets_as_written_match_torchvision(photos, preset):
    """Each preset on crops of photographs with boxes, as its recipe writes it (no resize
    to one size): a RaggedBatch of each image at its own size (views of one padded batch,
    zeros around each), within a level of torchvision's functional ops with our draws (1:1
    crops and flips exact), Compose.boxes its boxes, clamped to each image's own size, and
    Compose.masks its mask (a RaggedBatch too, the fill around each), exact."""
    tf = T.Compose([*PRESETS[preset](), T.ToDtype(torch.float32, scale=True)], ragged=True)
    imgs, entries = _photo_crops(photos, 16)
    sizes = [tuple(im.shape[-2:]) for im in imgs]
    gen = np.random.default_rng(2)
    masks = [torch.from_numpy(gen.integers(0, 5, (h, w), dtype=np.uint8)) for h, w in sizes]
    # (1:1 crops and flips: exact; the canvas's fill, levels / 255 in float32 against torchvision's: an ulp)
    shapes, levels = set(), {"hflip": 0.0, "ssdlite": 0.0, "ssd": 1e-3, "multiscale": 1.0}[preset]
    for seed in range(3):
        d = tf.draw_batch(sizes, seed, boxes=entries)
        got = tf(imgs, d)
        assert isinstance(got, RaggedBatch) and len(got) == len(imgs)
        assert got.padded.shape[2:] == tuple(got.sizes.max(0).values.tolist())
        targets = tf.boxes(entries, d)
        moved = tf.masks(masks, d, fill=255)
        assert isinstance(moved, RaggedBatch) and torch.equal(moved.sizes, got.sizes)
        for k, (img, e, p) in enumerate(zip(imgs, entries, d)):
            want, boxes, keep, mask = _tv_chain(img, e["boxes"], masks[k], p)
            assert torch.equal(moved[k], mask), (preset, seed, k, p)
            h, w = mask.shape
            assert (moved.padded[k, h:] == 255).all() and (moved.padded[k, :, w:] == 255).all()
            assert got[k].shape == want.shape and got[k].data_ptr() == got.padded[k].data_ptr()
            err = max_err_levels(got[k], want)
            assert err <= levels, (preset, seed, k, p, err)
            h, w = got.sizes[k].tolist()
            assert not got.padded[k, :, h:].any() and not got.padded[k, :, :, w:].any()
            torch.testing.assert_close(targets[k]["boxes"], boxes, rtol=0, atol=1e-4)
            assert targets[k]["labels"].tolist() == e["labels"][keep].tolist()
            shapes.add(tuple(want.shape))
    assert len(shapes) >= len(imgs)  # (sizes of their own)


def test_the_programs_statistics_are_each_images_own(photos):
    """ColorJitter's contrast (the grey mean), autocontrast, equalize, a rotation about the
    centre and RandomErasing's boxes (drawn in each image) on images of their own sizes: each image of the batch, and its boxes, are what
    the same steps without ragged give it alone (bit for bit), whatever sizes stand beside it."""
    steps = [T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.4, 0.3, 0.05), T.RandomAutocontrast(0.5),
             T.RandomEqualize(0.5), T.RandomRotation(15), T.Normalize([0.5] * 3, [0.25] * 3),
             T.RandomErasing(0.7, value="random")]
    tf = T.Compose(steps, ragged=True)
    alone = T.Compose(steps)
    imgs, entries = _photo_crops(photos, 10, seed=5)
    sizes = [tuple(im.shape[-2:]) for im in imgs]
    for seed in range(2):
        d = tf.draw_batch(sizes, seed)
        got = tf(imgs, d)
        targets = tf.boxes(entries, d)  # (the rotation's boxes about each image's own centre)
        for k, img in enumerate(imgs):
            torch.testing.assert_close(got[k], alone([img], [d[k]])[0], rtol=0, atol=0)
            want = alone.boxes([entries[k]], [d[k]], sizes=[sizes[k]])[0]
            assert torch.equal(targets[k]["boxes"], want["boxes"]) and torch.equal(targets[k]["labels"], want["labels"])
            h, w = sizes[k]
            assert not got.padded[k, :, h:].any() and not got.padded[k, :, :, w:].any()
    one = tf(imgs[0], seed=1)  # (one image: its tensor, at its size)
    assert isinstance(one, torch.Tensor) and one.shape == (3, *sizes[0])


def test_nhwc_the_mask_and_pickling():
    imgs = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in ((20, 31), (33, 12), (7, 9))]
    tf = T.Compose([T.RandomHorizontalFlip()], layout="NHWC", ragged=True)
    got = tf(imgs, seed=0)
    nchw = T.Compose([T.RandomHorizontalFlip()], ragged=True)(imgs, seed=0)
    assert got.padded.shape == (3, 33, 31, 3) and [tuple(g.shape) for g in got] == [(20, 31, 3), (33, 12, 3), (7, 9, 3)]
    for a, b in zip(got, nchw):
        assert torch.equal(a.permute(2, 0, 1), b)
    mask = nchw.mask()
    assert mask.shape == (3, 33, 31) and mask.dtype == torch.bool
    assert (~mask).sum((1, 2)).tolist() == [20 * 31, 33 * 12, 7 * 9] and not mask[2, :7, :9].any()
    for bad, say in (([[3, 4], [-1, 2], [1, 1]], "negative"), ([[3, 4]], "1 sizes for a padded batch of 3"),
                     ([[34, 1], [1, 1], [1, 1]], "sizes up to")):
        with pytest.raises(ValueError, match=say):
            RaggedBatch(nchw.padded, bad)
    half = nchw.to(torch.float16)  # (one copy of the padded batch, the views over it)
    assert isinstance(half, RaggedBatch) and half.padded.dtype == torch.float16 and torch.equal(half.sizes, nchw.sizes)
    assert all(a.data_ptr() == half.padded[k].data_ptr() and a.shape == b.shape
               for k, (a, b) in enumerate(zip(half, nchw)))
    back = pickle.loads(pickle.dumps(nchw))
    assert isinstance(back, RaggedBatch) and all(torch.equal(a, b) for a, b in zip(back, nchw))
    assert "ragged=True" in repr(tf) and repr(T.Compose([T.RandomHorizontalFlip()], ragged=True)).endswith(
        "ragged=True)")


def test_torchvisions_presets_convert_with_ragged():
    """torchvision's presets as written convert with ragged=True; without it, each is refused
    with the way to take it."""
    hflip = tv.Compose([tv.RandomHorizontalFlip(0.5), tv.ToDtype(torch.float32, scale=True)])
    multiscale = tv.Compose([tv.RandomShortestSize((480, 512, 544), max_size=1333), tv.RandomHorizontalFlip(0.5),
                             tv.ToDtype(torch.float32, scale=True)])
    ssdlite = tv.Compose([tv.RandomIoUCrop(), tv.RandomHorizontalFlip(0.5), tv.ToDtype(torch.float32, scale=True),
                          tv.SanitizeBoundingBoxes()])
    for preset in (hflip, multiscale, ssdlite):
        ours = T.Compose.from_torchvision(preset, ragged=True)
        assert ours.ragged and ours.out_size is None
    for preset in (multiscale, ssdlite):
        with pytest.raises(TransformError, match=r"ragged=True"):
            T.Compose.from_torchvision(preset)
    with pytest.raises(ValueError, match=r"ragged=True"):  # (no geometry: refused at the batch of two sizes)
        T.Compose.from_torchvision(hflip)([torch.zeros((3, 4, 5), dtype=torch.uint8),
                                           torch.zeros((3, 5, 4), dtype=torch.uint8)])
    with pytest.raises(TransformError, match=r"ElasticTransform with ragged=True"):
        T.Compose([T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True), T.ElasticTransform()], ragged=True)
    with pytest.raises(ValueError, match="out= is not taken"):
        T.Compose([T.RandomHorizontalFlip()], ragged=True)([torch.zeros((3, 4, 5), dtype=torch.uint8)],
                                                            out=torch.zeros((1, 3, 4, 5)))


@pytest.fixture(scope="module")
def rects(tmp_path_factory):
    d = tmp_path_factory.mktemp("ragged")
    return make_shard(d / "rects-000000.tar", _rect_samples(24, mask=True))


@pytest.mark.parametrize("preset,keep", [("ssdlite", None), ("multiscale", None), ("ssd", "ram")])
def test_the_loader_gives_ragged_batches_with_their_boxes(rects, preset, keep):
    """Through the Loader (streamed, and resident): each batch a RaggedBatch equal to the
    Compose's on the decoded images with the Loader's draws (bit for bit), its targets
    Compose.boxes', every box inside its own image, its masks (a Mask field) Compose.masks';
    a batch kept is not written again."""
    from PIL import Image

    samples = {s["__key__"]: s for s in _rect_samples(24, mask=True)}
    tf = T.Compose([*PRESETS[preset](), T.ToDtype(torch.float32, scale=True)], ragged=True)
    ld = Loader([rects], batch_size=8, transform=tf, device="cpu", seed=4, labels=False, image_ext="png",
                keep=keep, shuffle=False, fields={"json": Boxes(), "seg.png": gpudecode.Mask(fill=255)})
    held = []
    for epoch in range(2):
        ld.set_epoch(epoch)
        pos = 0
        for images, targets, masks in ld:
            assert isinstance(images, RaggedBatch) and isinstance(masks, RaggedBatch)
            keys = [f"r{k:03d}" for k in range(pos, pos + len(images))]
            entries = [json.loads(samples[k]["json"]) for k in keys]
            decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(samples[k]["png"])))).permute(2, 0, 1)
                       .contiguous() for k in keys]
            d = tf.draw_batch([tuple(im.shape[-2:]) for im in decoded], 4, epoch=epoch,
                              indices=list(range(pos, pos + len(images))), boxes=entries)
            want = tf(decoded, d)
            assert torch.equal(images.sizes, want.sizes) and torch.equal(images.padded, want.padded)
            segs = [torch.from_numpy(np.array(Image.open(io.BytesIO(samples[k]["seg.png"])))) for k in keys]
            moved = tf.masks(segs, d, fill=255)
            assert torch.equal(masks.sizes, want.sizes) and torch.equal(masks.padded, moved.padded)
            for img, t, w in zip(images, targets, tf.boxes(entries, d)):
                torch.testing.assert_close(t["boxes"], w["boxes"], rtol=0, atol=0)
                h, wd = img.shape[-2:]
                assert (t["boxes"][:, 2] <= wd).all() and (t["boxes"][:, 3] <= h).all()
            held.append((images, images.padded.clone()))
            pos += len(images)
        assert pos == 24
    assert all(torch.equal(images.padded, copy) for images, copy in held)  # (yours: never written again)
    assert len({tuple(im.shape) for images, _ in held for im in images}) > 10


def test_what_ragged_does_not_take_in_the_loader_is_refused(rects):
    tf = T.Compose([T.RandomIoUCrop(), T.RandomHorizontalFlip()], ragged=True)
    kw = dict(device="cpu", labels=False, image_ext="png", fields={"json": Boxes()})
    with pytest.raises(TransformError, match="several views"):
        Loader([rects], batch_size=4, transform=[tf, tf], **kw)
    with pytest.raises(TransformError, match="mixes a batch tensor"):
        Loader([rects], batch_size=4, transform=T.Compose([T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)],
                                                          ragged=True),
               batch_transform=T.MixUp(num_classes=3), device="cpu", image_ext="png")


def test_a_cuda_launchs_arrays_say_ragged_and_run_it():
    """cuda_launch.launch_arrays (a Loader's CUDA launch) on a batch of samples of their own
    sizes, under the simulator: OH, OW sent for every row (the batch's where a row left them
    0), the ragged segment kernel chosen, and the result the CPU twin's."""
    from gpudecode.kernels import cuda_launch
    from gpudecode.kernels.workspace import Workspace

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("the simulator's form of a launch (on a GPU, tests/test_gpu.py launches for real)")
    src, geom, args, order, sizes = _ragged(11, 4)
    geom[0, fused.OH:fused.OW + 1] = 0  # (a row of the batch's size)
    oh, ow = max(s[0] for s in sizes[1:]), max(s[1] for s in sizes[1:])
    sizes[0] = (oh, ow)
    got = torch.full((4, 3, oh, ow), float("nan"))
    arrays, levels = cuda_launch.launch_arrays(torch.from_numpy(src), geom, args, order, MEAN, STD, got, Workspace(),
                                               lambda t: t.numpy())
    assert arrays[11] is True and (arrays[1][:, fused.OH:fused.OW + 1] == np.asarray(sizes)).all()
    fused.fused_cuda(*arrays[:7], normalize=True, scratch=arrays[7], stats=arrays[8], hist=arrays[9], aux=arrays[10],
                     levels=levels, ragged=arrays[11])
    cpu = np.zeros((4, 3, oh, ow), np.float32)
    fused.fused_cpu(src, geom, args, order, MEAN, STD, cpu, normalize=True)
    np.testing.assert_allclose(got.numpy(), cpu, atol=2e-5, rtol=0)
    _check(cpu, _alone(lambda s, g, a, o, out: fused.fused_cpu(s, g, a, o, MEAN, STD, out, normalize=True),
                       src, geom, args, order, sizes, np.float32), sizes)


def test_the_dataset_item_and_evens_made_up_batch_keep_their_sizes(rects, tmp_path):
    """Loader.dataset's item is its image at its own size as the batch gives it; under
    even="pad" a batch whose every image failed is made of the batch before's images,
    their sizes and targets (a RaggedBatch too)."""
    tf = T.Compose([T.RandomIoUCrop(), T.RandomHorizontalFlip()], ragged=True)
    kw = dict(transform=tf, device="cpu", shuffle=False, seed=6, labels=False, image_ext="png",
              fields={"json": Boxes()})
    images, targets = next(iter(Loader([rects], batch_size=8, **kw)))
    ld = Loader([rects], batch_size=8, **kw)
    for i in (0, 5):
        image, t = ld.dataset[i]
        assert torch.equal(image, images[i]) and torch.equal(t["boxes"], targets[i]["boxes"])
    part = _rect_samples(6)
    for s in part[3:]:
        s["png"] = b"not an image"
    url = make_shard(tmp_path / "even-000000.tar", part)
    first, made = list(Loader([url], batch_size=3, on_error="skip", even="pad", rank=0, world_size=1, **kw))
    assert isinstance(made.images, RaggedBatch) and made.keys == first.keys
    assert torch.equal(made.images.sizes, first.images.sizes) and torch.equal(made.images.padded, first.images.padded)
    assert made.images.padded.data_ptr() != first.images.padded.data_ptr()
    assert all(torch.equal(a["boxes"], b["boxes"]) for a, b in zip(made[1], first[1]))


def test_an_nhwc_loader_gives_the_same_images_and_reuse_buffers_reuses_the_slot(rects):
    """layout="NHWC" through the Loader: each batch the NCHW Loader's, permuted (the slot's
    buffer viewed [N, H, W, 3]); with reuse_buffers=True the ring overwrites a slot held
    (FFCV's way) instead of taking new memory."""
    steps = [T.RandomShortestSize((30, 40, 50), max_size=90), T.RandomHorizontalFlip(), T.ColorJitter(0.2, 0.3)]
    kw = dict(batch_size=8, device="cpu", seed=3, labels=False, image_ext="png", shuffle=False)
    nchw = [b.images for b in Loader([rects], transform=T.Compose(steps, ragged=True), **kw)]
    nhwc = [b.images for b in Loader([rects], transform=T.Compose(steps, layout="NHWC", ragged=True), **kw)]
    for a, b in zip(nchw, nhwc, strict=True):
        assert b.layout == "NHWC" and torch.equal(a.sizes, b.sizes)
        assert torch.equal(a.padded, b.padded.permute(0, 3, 1, 2)) and torch.equal(a[1], b[1].permute(2, 0, 1))
    ld = Loader([rects], transform=T.Compose(steps, ragged=True), reuse_buffers=True, prefetch_factor=1, **kw)
    kept = [b.images for b in ld]
    assert ld.pipeline.ring.fresh_slots == 0 and len({b.padded.untyped_storage().data_ptr() for b in kept}) <= 4
