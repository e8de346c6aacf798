"""RandomZoomOut (SSD's; torchvision's detection reference): each image padded onto a
canvas of its own size, before the geometry step that then reads the canvas. Pixels
against torchvision's functional pad and geometry replaying our parameters on real
photographs; through the Loader; the draws against torchvision's make_params; the plans
it cannot be part of refused with the reason. (The canvas is made with torch's ops on the
images' device, the same code on both targets: test_gpu.py compares CUDA with the CPU.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as tv
import torchvision.transforms.v2.functional as F
from scipy import stats

from gpudecode import transforms as T
from gpudecode.errors import TransformError

FILL = (123, 117, 104)  # (the detection reference's mean, in levels)


@pytest.fixture(scope="module")
def photo_batch(photos):
    out = [torch.from_numpy(np.ascontiguousarray(p[::6, ::5].transpose(2, 0, 1))) for p in photos.values()]
    out.append(torch.from_numpy(np.ascontiguousarray(photos["coffee"][::9, ::4].transpose(2, 0, 1))))
    return out


def _theirs(img: torch.Tensor, p: dict, geometry: str, size: tuple[int, int]) -> torch.Tensor:
    x = F.pad(img, p["padding"], fill=list(FILL)) if "padding" in p else img  # uint8, as torchvision pads it
    x = F.to_dtype(x, torch.float32, scale=True)
    if geometry == "rrc":
        x = F.resized_crop(x, *p["crop"], list(size), antialias=True)
    elif geometry == "resize":
        x = F.resize(x, list(size), antialias=True)
    else:  # CenterCrop, RandomCrop: (top, left, h, w) in the canvas (outside it: zeros)
        x = F.crop(x, *p["crop"]) if "crop" in p else F.center_crop(x, list(size))
    return F.horizontal_flip(x) if p["flip"] else x


@pytest.mark.parametrize("geometry,make", [
    ("rrc", lambda: T.RandomResizedCrop((40, 48))),
    ("resize", lambda: T.Resize((40, 48))),
    ("center", lambda: T.CenterCrop((72, 64))),
    ("random", lambda: T.RandomCrop((56, 60), pad_if_needed=True)),
])
def test_zoom_out_matches_torchvision_on_real_photos(photo_batch, geometry, make):
    tf = T.Compose([T.RandomZoomOut(FILL, (1.0, 3.0), p=0.7), make(), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.float32, scale=True)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    out = tf.out_size
    zoomed = plain = 0
    for seed in range(4):
        params = tf.make_params(sizes, seed)
        got = tf(photo_batch, params)
        assert tuple(got.shape[-2:]) == out
        for k, (img, p) in enumerate(zip(photo_batch, params)):
            want = _theirs(img, p, geometry, out)
            err = float(((got[k] - want.clamp(0, 1)).abs() * 255).max())
            assert err <= 1.0 + 1e-3, (geometry, k, p, err)
            if "padding" in p:
                zoomed += 1
                assert min(p["padding"]) >= 0
            else:
                plain += 1
    assert zoomed > plain > 0  # (p=0.7: both kinds met)


def test_zoom_out_with_ops_after_it_and_uint8_output(photo_batch):
    """A canvas under a colour op and a warp (their fill and the canvas's differ), uint8."""
    tf = T.Compose([T.RandomZoomOut(FILL, (1.2, 2.0), p=1.0), T.RandomResizedCrop(36), T.RandomInvert(1.0)])
    sizes = [tuple(im.shape[1:]) for im in photo_batch]
    params = tf.make_params(sizes, 5)
    got = tf(photo_batch, params)
    for k, (img, p) in enumerate(zip(photo_batch, params)):
        x = F.to_dtype(F.pad(img, p["padding"], fill=list(FILL)), torch.float32, scale=True)
        want = F.invert(F.resized_crop(x, *p["crop"], [36, 36], antialias=True))
        want = F.to_dtype(want.clamp(0, 1), torch.uint8, scale=True)
        assert (got[k].int() - want.int()).abs().max() <= 1, k


def test_canvas_is_torchvisions_pad_exactly(photo_batch):
    """The canvas (before any resampling) is F.pad's uint8 image, for grey and strided
    inputs too, an RGB fill and a grey one (set as memory), a canvas wider than the kept
    fill row (it grows): a CenterCrop of the canvas's own size (r fixed) reads it back
    unchanged; pickled (to a worker), the step keeps no fill row."""
    import pickle

    wide = photo_batch[3].repeat(1, 1, 8)[:, :12, :]  # (800 wide: a canvas of 1,200)
    for fill in (FILL, (9, 9, 9)):
        zoom = T.RandomZoomOut(fill, (1.5, 1.5), p=1.0)
        for im in (photo_batch[0][:, :30, :41], photo_batch[1][:1, :25, :33], photo_batch[2].permute(0, 2, 1), wide):
            h, w = im.shape[1:]
            tf = T.Compose([zoom, T.CenterCrop((int(h * 1.5), int(w * 1.5)))])
            for seed in range(3):
                p = tf.make_params([(h, w)], seed)[0]
                src = im.expand(3, -1, -1) if im.shape[0] == 1 else im
                assert torch.equal(tf([im], [p])[0], F.pad(src, p["padding"], fill=list(fill))), (tuple(im.shape), p)
        assert pickle.loads(pickle.dumps(zoom))._fill_rows == {}
    assert zoom._fill_rows == {} and FILL != (9, 9, 9)  # (a grey fill makes no row)


def test_draws_are_torchvisions():
    n, size = 4000, (50, 80)
    img = torch.zeros((3, *size), dtype=torch.uint8)
    ours = T.Compose([T.RandomZoomOut(0, (1.0, 4.0), p=0.5), T.Resize((8, 8))]).make_params([size] * n, 3)
    zoom = tv.RandomZoomOut(0, (1.0, 4.0), p=0.5)
    torch.manual_seed(0)
    theirs = [zoom.make_params([img])["padding"] for _ in range(n)]
    hits = [p["padding"] for p in ours if "padding" in p]
    assert stats.binomtest(len(hits), n, 0.5).pvalue > 1e-3
    for i in range(4):  # left, top, right, bottom
        assert stats.ks_2samp([h[i] for h in hits], [t[i] for t in theirs]).pvalue > 1e-3, i
    widths = [size[1] + h[0] + h[2] for h in hits]
    assert stats.ks_2samp(widths, [size[1] + t[0] + t[2] for t in theirs]).pvalue > 1e-3
    assert all(size[1] <= w < 4 * size[1] for w in widths)
    # the canvas keeps the image's aspect ratio as torchvision's does: one r for both sides
    for h in hits[:200]:
        ch, cw = size[0] + h[1] + h[3], size[1] + h[0] + h[2]
        r = cw / size[1]
        assert abs(ch - size[0] * r) <= 1 + size[0] / size[1], (h, ch, cw)


def test_from_torchvision_and_refusals():
    got = T.Compose.from_torchvision(tv.Compose([tv.RandomZoomOut(fill=[123, 117, 104], side_range=(1.0, 2.5), p=0.3),
                                                 tv.RandomResizedCrop(32), tv.ToDtype(torch.float32, scale=True)]))
    zoom = got.plan.canvas
    assert isinstance(zoom, T.RandomZoomOut) and zoom._fill == FILL and zoom.side_range == (1.0, 2.5) and zoom.p == 0.3
    assert got.native_spec is None  # (drawn by the Python path)
    with pytest.raises(TransformError, match="(?s)geometry step.*must follow it"):
        T.Compose([T.RandomZoomOut(), T.ColorJitter(0.2)])
    with pytest.raises(TransformError, match="(?s)comes first,.*before the geometry"):
        T.Compose([T.RandomResizedCrop(32), T.RandomZoomOut()])
    with pytest.raises(TransformError, match="(?s)geometry step.*must follow it"):  # (one canvas step)
        T.Compose([T.RandomZoomOut(), T.RandomZoomOut(), T.CenterCrop(8)])
    with pytest.raises(TransformError, match="whole level"):
        T.RandomZoomOut(fill=12.5)
    with pytest.raises(ValueError, match="side range"):
        T.RandomZoomOut(side_range=(0.5, 2.0))


def test_decoders_are_asked_for_the_part_of_the_image_the_crop_holds():
    """A crop of RandomZoomOut's canvas needs only the part of the image inside it decoded
    (one pixel where it holds none, only fill): decode_boxes says which, the rectangles'
    intersection; a canvas made otherwise (an expanded rotation) needs the whole image."""
    tf = T.Compose([T.RandomZoomOut(p=0.8, side_range=(1.0, 4.0)), T.RandomResizedCrop(16, scale=(0.02, 0.5))])
    sizes = [(40, 50), (33, 21), (64, 48), (20, 90)] * 50
    params = tf.make_params(sizes, 0)
    parts = fills = 0
    for (h, w), p, box in zip(sizes, params, tf.decode_boxes(params, sizes)):
        left, top = p.get("padding", (0, 0))[:2]
        t, l, ch, cw = p["crop"]
        ys, xs = range(max(t, top), min(t + ch, top + h)), range(max(l, left), min(l + cw, left + w))
        if not ys or not xs:
            assert box == (0, 0, 1, 1)
            fills += 1
        else:
            assert box == (ys.start - top, xs.start - left, len(ys), len(xs))
            parts += (len(ys), len(xs)) != (h, w)
    assert parts > 50 and fills > 3
    rot = T.Compose([T.RandomRotation(30, expand=True), T.RandomResizedCrop(16)])
    assert rot.decode_boxes(rot.make_params(sizes[:2], 0), sizes[:2]) == [(0, 0, 40, 50), (0, 0, 33, 21)]


def test_loader_gives_the_compose_on_the_decoded_images(tmp_path, photos):
    """Through the Loader (PNG shards, the decoder asked for whole images): the Compose
    called on Pillow's decode with the Loader's draws, value for value."""
    import io

    from PIL import Image

    import gpudecode
    from conftest import encode, make_shard

    imgs = [photos["astronaut"][::8, ::8], photos["coffee"][::7, ::9], photos["chelsea"][::5, ::6]]
    shard = make_shard(tmp_path / "z-000000.tar", [{"__key__": f"{i:03d}", "png": encode(a, "PNG"), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    tf = T.Compose([T.RandomZoomOut(FILL, (1.0, 2.0), p=0.6), T.RandomResizedCrop(24), T.ColorJitter(0.3, 0.3)])
    loader = gpudecode.Loader(shard, batch_size=3, transform=tf, device="cpu", shuffle=False, seed=7)
    loader.set_epoch(1)
    (images, labels), = list(loader)
    assert images.shape == (3, 3, 24, 24) and labels.tolist() == [1, 1, 1]
    decoded = [torch.from_numpy(np.array(Image.open(io.BytesIO(encode(a, "PNG"))).convert("RGB"))).permute(2, 0, 1)
               for a in imgs]
    params = tf.make_params([tuple(d.shape[1:]) for d in decoded], 7, epoch=1, indices=[0, 1, 2])
    assert torch.equal(images, tf([d.contiguous() for d in decoded], params))


def test_fast_decode_under_a_canvas_step_decodes_whole_images(tmp_path, photos):
    """fast_decode=True lets the JPEG decoder scale a decode down by the output's size; a
    canvas is made of the whole image at its size, so under a canvas step it does not
    scale (the Loader failed every batch, refusing the scaled decode): the batches those
    without fast_decode are, but for the fast IDCT's rounding, for RandomZoomOut and an
    expanded rotation."""
    import gpudecode
    from conftest import encode, make_shard

    imgs = [np.ascontiguousarray(photos[n][:300, :360]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    shard = make_shard(tmp_path / "f-000000.tar", [{"__key__": f"{i:03d}", "jpg": encode(a), "cls": b"1"}
                                                    for i, a in enumerate(imgs)])
    for canvas in (T.RandomZoomOut(FILL, (1.0, 2.0), p=1.0), T.RandomRotation(20, expand=True)):
        tf = T.Compose([canvas, T.RandomResizedCrop(24)])
        fast, plain = (list(gpudecode.Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False, seed=3,
                                              fast_decode=f)) for f in (True, False))
        assert len(fast) == 1 and fast[0].images.shape == plain[0].images.shape == (4, 3, 24, 24)
        assert (fast[0].images.float() - plain[0].images.float()).abs().mean() < 1.5, canvas
