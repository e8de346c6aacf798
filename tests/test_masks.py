"""Segmentation masks moved with their images (`Loader(..., fields={"png":
gpudecode.Mask(fill=255)})`, transforms/masks.py): against torchvision.transforms.v2,
which moves a tv_tensors.Mask beside its image with the same parameters (nearest
neighbour, the mask's own fill), on masks made from real photographs (SLIC superpixels,
as palette PNGs) and on synthetic ones; through the Loader (its draws replayed), several
views, the resident store (keep_size resizing the mask with its image), `even`, the
dataset; each bad mask its sample's FieldError; transforms a mask cannot follow refused."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from PIL import Image
from torchvision import tv_tensors

import gpudecode
from gpudecode import FieldError, Loader, Mask, TransformError
from gpudecode import transforms as T
from gpudecode.fields import decode_member, decode_mask
from gpudecode.pipeline import view_seed

from conftest import encode, make_shard

PLANS = {
    "rrc+flips": lambda: T.Compose([T.RandomResizedCrop(24, scale=(0.2, 1.0)), T.RandomHorizontalFlip(),
                                    T.RandomVerticalFlip()]),
    "resize+centercrop(pad)": lambda: T.Compose([T.Resize(30), T.CenterCrop(36), T.RandomHorizontalFlip()]),
    "randomcrop(padding)": lambda: T.Compose([T.RandomCrop(32, padding=4, pad_if_needed=True),
                                              T.RandomHorizontalFlip()]),
    # torchvision's segmentation reference: RandomResize, RandomCrop(pad_if_needed), flip (the
    # reference flips before the crop: the same distribution; the kernel flips its output)
    "segmentation-reference": lambda: T.Compose([T.RandomResize(20, 60), T.RandomCrop(40, pad_if_needed=True),
                                                 T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3),
                                                 T.Normalize([0.5] * 3, [0.2] * 3)]),
    "resize-exact-2x": lambda: T.Compose([T.Resize((64, 80))]),
    "no-geometry": lambda: T.Compose([T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)]),
    # a canvas that places the image (SSD's RandomZoomOut): the mask placed with it
    "zoomout+resize": lambda: T.Compose([T.RandomZoomOut(fill=0, side_range=(1.0, 2.5), p=0.7), T.Resize((40, 40)),
                                         T.RandomHorizontalFlip()]),
    "zoomout+rrc": lambda: T.Compose([T.RandomZoomOut(fill=0, side_range=(1.0, 3.0)),
                                      T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomVerticalFlip()]),
    # a window of RandomResizedCrop's output: inside it, and past it (padded with the mask's fill)
    "rrc+centercrop": lambda: T.Compose([T.RandomResizedCrop((26, 30)), T.CenterCrop((21, 24)),
                                         T.RandomHorizontalFlip()]),
    "rrc+randomcrop(padding)": lambda: T.Compose([T.RandomResizedCrop(24), T.RandomCrop(24, padding=(2, 3, 1, 0)),
                                                  T.RandomVerticalFlip()]),
}


def _padded_crop(m: torch.Tensor, box, fill: int) -> torch.Tensor:
    """F.crop of `box` (top, left, h, w), the part past the mask padded with `fill`."""
    t, l, h, w = box
    H, W = m.shape[-2:]
    pad = [max(0, -l), max(0, -t), max(0, l + w - W), max(0, t + h - H)]
    return F.crop(F.pad(m, pad, fill=fill), t + pad[1], l + pad[0], h, w)


def tv_mask(mask: torch.Tensor, p: dict, out_size, fill: int, frame=None) -> torch.Tensor:
    """torchvision.transforms.v2.functional on a tv_tensors.Mask with the image's params;
    `frame`: RandomResizedCrop's size where a crop of its output follows ("window")."""
    m = tv_tensors.Mask(mask[None])
    if "padding" in p:  # (RandomZoomOut's canvas, the mask's fill around it)
        m = F.pad(m, list(p["padding"]), fill=fill)
    if "resize" in p:
        m = F.resize(m, list(p["resize"]))
    if "crop" in p:
        t, l, h, w = p["crop"]
        if "window" in p:  # RandomResizedCrop, then a crop of its output
            m = _padded_crop(F.resized_crop(m, t, l, h, w, list(frame)), p["window"], fill)
        elif "resize" not in p and (h, w) != tuple(out_size):  # RandomResizedCrop
            m = F.resized_crop(m, t, l, h, w, list(out_size))
        else:  # a crop in the (resized) image's coordinates, padded with the mask's fill
            m = _padded_crop(m, p["crop"], fill)
    if p.get("flip"):
        m = F.horizontal_flip(m)
    if p.get("vflip"):
        m = F.vertical_flip(m)
    return m[0].as_subclass(torch.Tensor)


def slic_mask(img: np.ndarray, n: int = 12) -> np.ndarray:
    """A segmentation of a real photograph: its SLIC superpixels, one class each (uint8)."""
    from skimage.segmentation import slic

    return slic(img, n_segments=n, start_label=0, channel_axis=-1).astype(np.uint8)


def centre(photo: np.ndarray, h: int, w: int) -> np.ndarray:
    """The h x w middle of a photograph (its corners are often flat: sky, black)."""
    top, left = (photo.shape[0] - h) // 2, (photo.shape[1] - w) // 2
    return np.ascontiguousarray(photo[top:top + h, left:left + w])


def palette_png(mask: np.ndarray) -> bytes:
    im = Image.fromarray(mask)  # (L, made P by its palette: the same indices)
    im.putpalette([c for i in range(256) for c in ((i * 37) % 256, (i * 91) % 256, (i * 13) % 256)])
    b = io.BytesIO()
    im.save(b, "PNG")
    return b.getvalue()


def png(mask: np.ndarray) -> bytes:
    b = io.BytesIO()
    Image.fromarray(mask).save(b, "PNG")
    return b.getvalue()


def npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def test_masks_move_as_torchvision_moves_a_mask(photos):
    """Compose.masks with the images' draws equals torchvision's functional ops on a
    tv_tensors.Mask with the same params, for every geometry (crops that pad, upscales,
    downscales, exact 2x, flips, none), with the fill given and a dtype asked for."""
    sizes = [(37, 41), (50, 33), (64, 64), (31, 70), (20, 20), (32, 40)]
    names = sorted(photos)
    masks = [torch.from_numpy(slic_mask(centre(photos[names[k % len(names)]], h, w))) for k, (h, w) in enumerate(sizes)]
    assert all(len(m.unique()) > 2 for m in masks)
    same = [torch.from_numpy(slic_mask(centre(photos[n], 32, 40))) for n in names[:4]]  # (no geometry: one size)
    for name, make in PLANS.items():
        tf = make()
        ms = same if name == "no-geometry" else masks
        sz = [tuple(m.shape) for m in ms]
        for seed in range(12):
            d = tf.draw_batch(sz, seed)
            out = tf.masks(ms, d, fill=255)
            assert out.dtype == torch.uint8 and out.shape[1:] == tf.output_size(sz), name
            for k, m in enumerate(ms):
                ref = tv_mask(m, d[k], out.shape[1:], 255,
                              frame=tf.plan.geometry[0].size if tf.plan.rrc_window else None)
                assert torch.equal(out[k], ref), (name, seed, k, d[k])
        wide = tf.masks(ms, d, fill=-1, dtype=torch.int64)
        assert wide.dtype == torch.int64 and torch.equal(wide[wide != -1], out[wide != -1].long())
    with pytest.raises(ValueError, match="fill -1 does not fit"):
        tf.masks(ms, d, fill=-1)
    with pytest.raises(ValueError, match="mask 1 is 33x50, its image 50x33"):
        rrc = PLANS["rrc+flips"]()
        rrc.masks([masks[0], masks[1].T], rrc.draw_batch(sizes[:2], 0))
    with pytest.raises(TransformError, match="TrivialAugmentWide moves pixels"):
        T.Compose([T.Resize((24, 24)), T.TrivialAugmentWide()]).masks(masks, rrc.draw_batch(sizes, 0))


def _seg_samples(photos, n, start=0):
    """JPEG crops of the photographs with their SLIC segmentation as a palette PNG and a
    class; a few as an 8-bit grey PNG, a 16-bit grey PNG and an .npy instead."""
    names = sorted(photos)
    out = []
    for i in range(start, start + n):
        h, w = 36 + (i * 7) % 30, 40 + (i * 11) % 30
        img = centre(photos[names[i % len(names)]], h, w)
        mask = slic_mask(img)
        data = (palette_png(mask) if i % 4 == 0 else png(mask) if i % 4 == 1
                else png(mask.astype(np.uint16) * 300) if i % 4 == 2 else npy(mask.astype(np.int32)))
        out.append({"__key__": f"s{i:03d}", "jpg": encode(img), "cls": str(i % 5), "seg": data})
    return out


def _reference_masks(samples):
    """{key: the mask as Pillow (or numpy) reads the member}, as int32."""
    out = {}
    for s in samples:
        data = s["seg"]
        a = np.load(io.BytesIO(data)) if data[:6] == b"\x93NUMPY" else np.array(Image.open(io.BytesIO(data)))
        out[s["__key__"]] = torch.from_numpy(a.astype(np.int32))
    return out


@pytest.fixture(scope="module")
def seg_shards(tmp_path_factory, photos):
    d = tmp_path_factory.mktemp("masks")
    samples = _seg_samples(photos, 40)
    return [make_shard(d / "seg-000000.tar", samples[:22]), make_shard(d / "seg-000001.tar", samples[22:])], samples


SEG = Mask(fill=255, dtype=torch.int32)


def _replay(tf, refs, keys, seed, epoch, positions, fill=255):
    sizes = [tuple(refs[k].shape) for k in keys]
    d = tf.draw_batch(sizes, seed, epoch=epoch, indices=positions)
    return torch.stack([tv_mask(refs[k], d[i], tf.output_size(sizes), fill) for i, k in enumerate(keys)])


def test_the_loaders_masks_are_torchvisions_with_the_loaders_draws(seg_shards):
    """Each batch's masks equal torchvision's moves of the mask as Pillow reads it (palette
    indices, grey, 16-bit grey, .npy) with the draws the Loader made for its images; the
    images are what they are without masks."""
    urls, samples = seg_shards
    refs = _reference_masks(samples)
    tf = PLANS["segmentation-reference"]()
    ld = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=5, num_workers=2,
                fields={"seg": SEG})
    plain = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=5, num_workers=2)
    ld.set_epoch(2)
    plain.set_epoch(2)
    pos = 0
    for b, p in zip(ld, plain):
        images, labels, masks = b
        assert b._fields == ("images", "labels", "seg") and masks.dtype == torch.int32
        assert masks.shape == (len(b.keys), 40, 40) and torch.equal(images, p.images)
        assert torch.equal(masks, _replay(tf, refs, b.keys, 5, 2, list(range(pos, pos + len(b.keys)))))
        assert (masks == 255).any() or pos  # (RandomCrop pads the small ones: the fill shows)
        pos += len(b.keys)
    assert pos == 40 and ld.describe()["batch"] == ["images", "labels", "seg"]


def test_the_loaders_masks_with_a_flip_before_the_geometry(seg_shards):
    """A flip before the geometry (flip, RandomResize, RandomCrop): each mask is
    torchvision's flip of the mask, then its resize and crop, with the Loader's draws
    (nearest neighbours picked in the flipped mask, not mirrored from the unflipped)."""
    urls, samples = seg_shards
    refs = _reference_masks(samples)
    tf = T.Compose([T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomResize(20, 60),
                    T.RandomCrop(40, pad_if_needed=True)])
    assert tf.plan.mirror == (True, True)
    ld = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=3, fields={"seg": SEG})
    pos, flips = 0, set()
    for _, _, masks in ld:
        keys = list(range(pos, pos + len(masks)))
        sizes = [tuple(refs[samples[k]["__key__"]].shape) for k in keys]
        d = tf.draw_batch(sizes, 3, indices=keys)
        for i, k in enumerate(keys):
            p = d[i]
            m = refs[samples[k]["__key__"]]
            m = m.flip(-1) if p["flip"] else m
            m = m.flip(-2) if p["vflip"] else m
            assert torch.equal(masks[i], tv_mask(m, {**p, "flip": False, "vflip": False}, (40, 40), 255)), (k, p)
            flips.add((p["flip"], p["vflip"]))
        pos += len(masks)
    assert pos == 40 and len(flips) == 4


def _blocks(seed: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """An image of flat coloured blocks and its mask (the block's class), made so that a
    misplaced, misflipped or misscaled mask cannot agree with its image."""
    rng = np.random.default_rng(seed)
    ys = np.sort(rng.choice(np.arange(6, h - 6), 3, replace=False))
    xs = np.sort(rng.choice(np.arange(6, w - 6), 3, replace=False))
    mask = (np.searchsorted(ys, np.arange(h), side="right")[:, None] * 4
            + np.searchsorted(xs, np.arange(w), side="right")[None, :]).astype(np.uint8)
    return PALETTE[mask], mask


PALETTE = np.array([[(i * 53) % 256, (i * 101 + 40) % 256, (i * 29 + 90) % 256] for i in range(16)], np.uint8)


def _agree(images: torch.Tensor, masks: torch.Tensor) -> float:
    """The share of interior pixels (a mask's 7x7 neighbourhood of one class, inside the
    output) whose colour is nearest to their mask's class colour. (Not only 3x3: torchvision
    resizes a mask by nearest neighbour, floor(dst * scale), which is up to a scale's width
    from the centre its bilinear image samples.)"""
    img = images.permute(0, 2, 3, 1).reshape(-1, 3).float()
    m = masks.long()
    pad = torch.nn.functional.pad(m.float()[:, None], (3, 3, 3, 3), value=-1.0)
    lo = -torch.nn.functional.max_pool2d(-pad, 7, 1)[:, 0]
    hi = torch.nn.functional.max_pool2d(pad, 7, 1)[:, 0]
    inner = ((lo == hi) & (m < 16)).reshape(-1)
    pal = torch.from_numpy(PALETTE).float()
    nearest = torch.cdist(img[inner], pal).argmin(1)
    return float((nearest == m.reshape(-1)[inner]).float().mean())


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_mask_lies_on_its_image_through_every_geometry(block_shards, keep):
    """Images of flat blocks and their masks: inside each block the image's colour is its
    mask's class, through crops, resizes, padding and both flips, streamed and resident
    (keep_size resizing the stored image and its mask together)."""
    for name in ("rrc+flips", "randomcrop(padding)", "segmentation-reference"):
        tf = PLANS[name]()
        tf = T.Compose([t for t in tf.transforms if not isinstance(t, (T.ColorJitter, T.Normalize))])
        ld = Loader(block_shards, batch_size=8, transform=tf, device="cpu", seed=1, num_workers=2, keep=keep,
                    keep_size=40 if keep else None, fields={"mask.png": Mask(fill=99)}, image_ext="png")
        mirrored = []  # (the test tells: a mirrored image does not lie on its mask)
        for epoch in range(2):
            ld.set_epoch(epoch)
            for images, _, masks in ld:
                assert _agree(images, masks) > 0.995, name
                mirrored.append(_agree(images.flip(-1), masks))
                assert not ((masks == 99) & (images.sum(1) > 0)).any()  # padding is padding in both
        assert np.mean(mirrored) < 0.8, name
        if keep:
            assert ld.describe()["keep"]["tier"] == "ram"


def test_each_mask_format_reads_as_pillow_and_numpy_read_it():
    """Palette indices (not colours), grey of 1, 2, 4, 8 and 16 bits, 16-bit big-endian
    .npy and bool .npy: each as Pillow's np.array or np.load gives it (unsigned 16-bit
    as int32, the rest in their own dtype)."""
    rng = np.random.default_rng(0)
    m = rng.integers(0, 4, (9, 13), dtype=np.uint8)
    for data, want in [(palette_png(m), m), (png(m * 60), m * 60), (png(m.astype(bool)), m.astype(bool)),
                       (png(m.astype(np.uint16) * 4000), m.astype(np.int32) * 4000),
                       (npy(m.astype(">u2")), m.astype(np.int32)), (npy(m.astype(bool)), m.astype(bool)),
                       (npy(m.astype(np.int64) - 2), m.astype(np.int64) - 2)]:
        got = decode_mask(data)
        assert got.dtype == torch.from_numpy(want).dtype and torch.equal(got, torch.from_numpy(want))
    for bits in (2, 4):  # (palette PNGs of fewer bits: their indices)
        b = io.BytesIO()
        im = Image.fromarray(m)
        im.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
        im.save(b, "PNG", bits=bits)
        assert torch.equal(decode_mask(b.getvalue()), torch.from_numpy(m))
    assert decode_member("seg.png", png(m)) == png(m)  # (without Mask, a field is the member's bytes)


def test_every_one_channel_png_kind_reads_as_pillow_reads_it_natively_where_it_can(photos):
    """Every grey and palette PNG kind (bit depths 1-16, tRNS, Adam7: test_png's
    hand-written variants of a photograph; Pillow's own grey PNG with its adaptive row
    filters): decode_mask equals Pillow's np.array; the CPU decoder's native samples path
    decides each one not interlaced (the GIL released), Pillow reads the interlaced ones;
    the kinds of several channels are refused by name."""
    from test_png import variants

    from gpudecode import _native

    img = centre(photos["chelsea"], 37, 45)
    kinds = variants(img)
    kinds["pillow-grey"] = png(img[..., 1])
    kinds["pillow-grey-16"] = png(img[..., 1].astype(np.uint16) * 257)
    read = 0
    for name, data in kinds.items():
        with Image.open(io.BytesIO(data)) as im:
            mode, ref = im.mode, np.array(im)
        if mode not in ("P", "L", "1", "I;16", "I;16B", "I"):
            with pytest.raises(ValueError, match=f"is a PNG of mode {mode}: a mask has one channel"):
                decode_mask(data)
            continue
        got = decode_mask(data)
        assert got.shape == ref.shape and np.array_equal(got.numpy().astype(np.int64), ref.astype(np.int64)), name
        out = np.empty(ref.shape, np.int32 if ref.dtype == np.uint16 else ref.dtype)
        assert _native.png_samples(data, 0, out) == ("adam7" not in name), name
        read += 1
    assert read == 21  # (9 kinds, each plain and Adam7; Pillow's palette, grey and 16-bit grey)
    strided = np.empty((img.shape[0], 2 * img.shape[1]), np.uint8)[:, ::2]  # (the right size, not contiguous)
    with pytest.raises(TypeError, match="C-contiguous"):
        _native.png_samples(kinds["gray"], 0, strided)


def test_each_bad_mask_is_its_samples_error_and_skipped_alone(tmp_path, photos):
    """An RGB PNG, a JPEG, a mask of another size, a cut PNG, a PNG failing its CRC, an
    .npy of floats, a missing mask and one over max_pixels: each its sample's FieldError
    naming shard and key, skipped alone; the others keep their masks."""
    good = _seg_samples(photos, 12)
    m = slic_mask(np.ascontiguousarray(photos["astronaut"][:40, :40]))
    whole = palette_png(m)
    crc = bytearray(whole)
    crc[29] ^= 1  # (IHDR's CRC)
    bad = {"s000": png(np.stack([m] * 3, -1)), "s001": encode(np.stack([m] * 3, -1)), "s002": palette_png(m[:20]),
           "s003": whole[:len(whole) // 2], "s004": bytes(crc), "s005": npy(m.astype(np.float32)), "s006": None}
    why = {"s000": "is a PNG of mode RGB: a mask has one channel", "s001": "is not a mask: a mask is a PNG or an .npy",
           "s002": "is a mask of 20x40, its image", "s003": "is not a PNG that decodes",
           "s004": "is not a PNG that decodes", "s005": "is not a mask: a mask is \\[H, W\\] of class indices",
           "s006": "no field .seg"}
    for s in good:
        if s["__key__"] in bad:
            s["jpg"] = encode(np.ascontiguousarray(photos["astronaut"][:40, :40]))
            if bad[s["__key__"]] is None:
                del s["seg"]
            else:
                s["seg"] = bad[s["__key__"]]
    url = make_shard(tmp_path / "bad-000000.tar", good)
    refs = _reference_masks([s for s in good if s["__key__"] not in bad])
    tf = PLANS["rrc+flips"]()
    ld = Loader([url], batch_size=6, transform=tf, device="cpu", shuffle=False, seed=2, on_error="skip",
                fields={"seg": SEG})
    seen = {}
    for b in ld:
        for k, mk in zip(b.keys, b[2]):
            seen[k] = mk
    assert sorted(seen) == sorted(refs)
    skipped = {s.key: s for s in ld.skipped}
    assert sorted(skipped) == sorted(bad)
    for key, text in why.items():
        s = skipped[key]
        assert s.shard == url and s.error == "FieldError" and re.search(text, s.reason), (key, s.reason)
    # a mask over max_pixels (its image under it) is refused from its header, before a pixel is read
    big = {"__key__": "big", "jpg": encode(centre(photos["astronaut"], 40, 40)), "cls": "0",
           "seg": png(np.zeros((100, 100), np.uint8))}
    url = make_shard(tmp_path / "big-000000.tar", [big])
    with pytest.raises(FieldError, match="100x100 pixels is over the limit of 2000 pixels") as e:
        next(iter(Loader([url], batch_size=6, transform=tf, device="cpu", max_pixels=2000, fields={"seg": SEG})))
    assert e.value.shard == url and e.value.key == "big"


def test_what_a_mask_cannot_follow_is_refused_when_the_loader_is_made(seg_shards):
    urls, _ = seg_shards
    for tf, what in [(T.Compose([T.Resize((24, 24)), T.TrivialAugmentWide()]), "TrivialAugmentWide moves pixels"),
                     (T.Compose([T.Resize((24, 24)), T.RandomApply([T.RandomRotation(9), T.AutoAugment()])]),
                      "AutoAugment moves pixels"),
                     (T.Compose([T.Resize((24, 24)), T.RandomChoice([T.RandAugment(), T.ColorJitter(0.2)])]),
                      "RandAugment moves pixels")]:
        with pytest.raises(TransformError, match=what):
            Loader(urls, batch_size=4, transform=tf, device="cpu", fields={"seg": Mask()})
    with pytest.raises(TransformError, match="mixes images"):
        Loader(urls, batch_size=4, transform=PLANS["segmentation-reference"](), device="cpu", fields={"seg": Mask()},
               batch_transform=T.CutMix(num_classes=5))
    with pytest.raises(ValueError, match="does not fit torch.uint8"):
        Mask(fill=256, dtype=torch.uint8)
    with pytest.raises(TypeError, match="Mask\\(dtype=\\) is one of"):
        Mask(dtype=torch.float32)
    with pytest.raises(TypeError, match="a class index"):
        Mask(fill=0.5)  # type: ignore[arg-type]
    # a fill the decoded mask cannot hold: each sample's error, saying what to give
    ld = Loader(urls, batch_size=4, transform=PLANS["rrc+flips"](), device="cpu", fields={"seg": Mask(fill=-1)})
    with pytest.raises(FieldError, match="cannot hold the fill -1: give Mask\\(dtype=\\)"):
        for _ in ld:  # (the 8-bit PNGs' masks: the .npy and 16-bit ones are int32, which holds it)
            pass


def test_views_even_and_the_dataset_carry_the_masks(seg_shards):
    """Several views: a list of mask batches, one a view, each torchvision's with that
    view's draws; a batch made up under even repeats the masks with their images; the
    dataset's item holds its mask."""
    urls, samples = seg_shards
    refs = _reference_masks(samples)
    views = [PLANS["rrc+flips"](), PLANS["rrc+flips"](), T.Compose([T.RandomResizedCrop(12), T.RandomHorizontalFlip()])]
    ld = Loader(urls, batch_size=8, transform=views, device="cpu", shuffle=False, seed=4, fields={"seg": SEG})
    ld.set_epoch(1)
    pos = 0
    for b in ld:
        images, labels, masks = b
        assert isinstance(masks, list) and [tuple(x.shape[1:]) for x in masks] == [(24, 24), (24, 24), (12, 12)]
        for v, (tf, mk) in enumerate(zip(views, masks)):
            assert torch.equal(mk, _replay(tf, refs, b.keys, view_seed(4, v), 1, list(range(pos, pos + len(b.keys)))))
        pos += len(b.keys)
    assert pos == 40
    item = ld.dataset[3]
    assert len(item) == 3 and isinstance(item[2], list) and [tuple(x.shape) for x in item[2]] == [(24, 24)] * 2 + [(12, 12)]
    one = Loader(urls, batch_size=8, transform=views[0], device="cpu", shuffle=False, seed=4, fields={"seg": SEG})
    image, label, mask = one.dataset[5]
    assert torch.equal(mask, _replay(views[0], refs, ["s005"], 4, 0, [5])[0])


def test_a_made_up_batch_repeats_its_masks(tmp_path, photos):
    samples = _seg_samples(photos, 6)
    for s in samples[3:]:
        s["jpg"] = b"not an image"
    url = make_shard(tmp_path / "even-000000.tar", samples)
    ld = Loader([url], batch_size=3, transform=PLANS["rrc+flips"](), device="cpu", shuffle=False, on_error="skip",
                even="pad", rank=0, world_size=1, fields={"seg": SEG})
    first, made = list(ld)
    assert made.keys == first.keys and torch.equal(made[2], first[2]) and torch.equal(made.images, first.images)


def test_a_mask_from_a_parquet_image_column(tmp_path, photos):
    """A Hugging Face segmentation set's annotation column ({"bytes": PNG, "path": ...},
    its Image feature as Parquet keeps it) is a Mask field by the column's name."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    samples = _seg_samples(photos, 10)
    refs = {s["__key__"]: np.array(Image.open(io.BytesIO(palette_png(_mask_of(s))))) for s in samples}
    image = pa.array([{"bytes": s["jpg"], "path": f"{s['__key__']}.jpg"} for s in samples],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    ann = pa.array([{"bytes": palette_png(_mask_of(s)), "path": None} for s in samples],
                   pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    path = tmp_path / "seg.parquet"
    pq.write_table(pa.table({"image": image, "annotation": ann, "label": [0] * len(samples)}), path)
    tf = PLANS["rrc+flips"]()
    ld = Loader(str(path), batch_size=5, transform=tf, device="cpu", shuffle=False, seed=3,
                fields={"annotation": Mask(fill=255)})
    got = [(k, m) for b in ld for k, m in zip(b.keys, b[-1])]
    assert len(got) == 10
    sizes = [refs[s["__key__"]].shape for s in samples]
    d = tf.draw_batch(sizes[:5], 3, indices=list(range(5)))
    first = tf.masks([torch.from_numpy(refs[s["__key__"]]) for s in samples[:5]], d, fill=255)
    assert all(torch.equal(m, first[i]) for i, (_, m) in enumerate(got[:5]))


def _mask_of(s: dict) -> np.ndarray:
    img = np.array(Image.open(io.BytesIO(s["jpg"])))
    return slic_mask(img)


def test_gpudecode_mask_is_exported():
    assert gpudecode.Mask is Mask and "Mask" in dir(gpudecode)
