"""A nearest warp's canvas picked natively on the CPU (csrc/warp.h): the course recipe's
`[RandomRotation(30), RandomResizedCrop(224), ...]` and RandomAffine before the geometry
paint each image's canvas through it. It must pick torch's grid_sample's pixel for every
output pixel: against torch's own ops sampling the same grid (the path it replaces, kept
where the native one cannot be exact), on strided images, windows, fills and affine
matrices, at grid points placed on the rounding's ties; and against torchvision's F.rotate
and F.affine on a real photograph."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms.v2 import InterpolationMode

from gpudecode import _native
from gpudecode.errors import TransformError
from gpudecode.transforms import warped
from gpudecode.transforms.args import BILINEAR, NEAREST  # (the interpolation codes the warps hold)
from gpudecode.transforms.warps import inverse_affine, rotation_matrix

exact = pytest.mark.skipif(not warped.nearest_is_exact(), reason="the native nearest warp is not exact here (a CPU "
                           "without FMA, or a torch whose grid_sample rounds otherwise): torch's ops sample it")


def _torch_path(monkeypatch: pytest.MonkeyPatch, *args, **kw) -> torch.Tensor:
    with monkeypatch.context() as m:
        m.setattr(warped, "_NEAREST_EXACT", False)
        return warped.grid_warp(*args, **kw)


def _case(rng: random.Random) -> tuple:
    """A strided image, an affine inverse matrix, an output size, a window and a fill."""
    h, w = rng.randint(1, 300), rng.randint(1, 300)
    base = torch.randint(0, 256, (h + 2, w + 3, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
    chw = base[1:1 + h, 2:2 + w].permute(2, 0, 1)  # (HWC at the decoded batch's strides, read as [3, h, w])
    kind = rng.randrange(3)
    if kind == 0:
        m = rotation_matrix(rng.uniform(-180, 180), (h, w), None if rng.random() < 0.7 else [rng.uniform(0, w), rng.uniform(0, h)])
    else:  # (RandomAffine's: a scale of 2 or 0.5 puts many centres on ties)
        scale = rng.choice([2.0, 0.5, rng.uniform(0.3, 3.0)])
        m = inverse_affine([0.0, 0.0], rng.choice([0.0, rng.uniform(-45, 45)]), [float(rng.randint(-20, 20)),
                           float(rng.randint(-20, 20))], scale, [rng.choice([0.0, rng.uniform(-20, 20)]), 0.0])
    if m is None:
        m = inverse_affine([0.0, 0.0], 0.0, [0.0, 0.0], 2.0, [0.0, 0.0])
    oh, ow = (h, w) if rng.random() < 0.5 else (rng.randint(1, 320), rng.randint(1, 320))
    window = None
    if rng.random() < 0.5:
        t, l = rng.randrange(oh), rng.randrange(ow)
        window = (t, l, rng.randint(1, oh - t), rng.randint(1, ow - l))
    fill = rng.choice([None, 0, [0.0, 0.0, 0.0], [255.0], (10, 20, 30), 7.0])
    return chw, m, (oh, ow), window, fill


@exact
def test_the_native_pick_is_torchs_grid_sample_pick(monkeypatch):
    rng = random.Random(0)
    for k in range(300):
        chw, m, size, window, fill = _case(rng)
        got = warped.grid_warp(chw, m, size, NEAREST, fill, window)
        want = _torch_path(monkeypatch, chw, m, size, NEAREST, fill, window)
        assert torch.equal(got, want), (k, tuple(chw.shape), m, size, window, fill, int((got != want).sum()))


def _beside_edges(size: int, fused: bool) -> np.ndarray:
    """Grid points up to 4 floats either side of each place where the unnormalized
    coordinate is a half pixel; `fused`: only those where an unfused multiply and add
    ((g + 1) * size / 2, rounded, then - 0.5) round to another pixel than the fused one
    (emulated in extended precision)."""
    g = warped.edge_points(size)
    if not fused:
        return g
    half, one = np.float32(size / 2), np.float32(1)
    unfused = np.rint((g + one) * half - np.float32(0.5))
    exact = np.rint(((g + one).astype(np.longdouble) * half - 0.5).astype(np.float32))
    return g[unfused != exact]


@exact
def test_grid_points_beside_the_pixels_edges_pick_as_torch_picks():
    """Grid points a few floats either side of where the unnormalized coordinate is a
    half pixel, given straight as the grid (an identity scale), against torch's
    grid_sample of the same image: among them the points where a multiply and an add
    rounded apart (not fused, as torch fuses them) would pick another pixel."""
    gen = np.random.default_rng(1)
    sensitive = 0
    for h, w in ((194, 257), (97, 514), (673, 3), (375, 500), (1, 1)):  # (sizes with such points: 97, 194, 257, ...)
        img = torch.from_numpy(gen.integers(0, 256, (3, h, w), dtype=np.uint8))
        for fused in (False, True):
            xs, ys = _beside_edges(w, fused), _beside_edges(h, fused)
            if fused:  # (each with a few points of the other kind, so that neither is empty)
                sensitive += len(xs) + len(ys)
                xs = np.concatenate([xs, _beside_edges(w, False)[::max(1, w // 8)]])
                ys = np.concatenate([ys, _beside_edges(h, False)[::max(1, h // 8)]])
            else:
                ys = ys[::max(1, len(ys) // 200)]
            out = np.empty((3, len(ys), len(xs)), np.uint8)
            _native.warp_affine_nearest(img.numpy(), xs, ys, np.array([1, 0, 0, 1, 0, 0], np.float32),
                                        np.zeros(3, np.uint8), out)
            grid = torch.stack(torch.broadcast_tensors(torch.from_numpy(xs).view(1, -1), torch.from_numpy(ys).view(-1, 1)), -1)
            want = torch.nn.functional.grid_sample(img.float()[None], grid[None], mode="nearest", padding_mode="zeros",
                                                   align_corners=False)[0].to(torch.uint8)
            assert torch.equal(torch.from_numpy(out), want), (h, w, fused, int((torch.from_numpy(out) != want).sum()))
    assert sensitive >= 5, sensitive  # (the test would catch an unfused unnormalize: such points are rare)


@exact
def test_ties_round_as_torch_rounds(monkeypatch):
    """A zoom by 2 (and by 4) about the centre puts output centres on the image's half
    pixels: ties, rounded half to even after torch's fused unnormalize."""
    for h, w in ((7, 9), (64, 48), (37, 101)):
        img = torch.arange(h * w * 3, dtype=torch.int64).remainder(251).to(torch.uint8).view(h, w, 3).permute(2, 0, 1)
        for zoom in (2.0, 4.0, 0.5):
            m = inverse_affine([0.0, 0.0], 0.0, [0.0, 0.0], zoom, [0.0, 0.0])
            got = warped.grid_warp(img, m, (h, w), NEAREST, None)
            assert torch.equal(got, _torch_path(monkeypatch, img, m, (h, w), NEAREST, None)), (h, w, zoom)
            want = F.affine(img, angle=0.0, translate=[0.0, 0.0], scale=zoom, shear=[0.0, 0.0],
                            interpolation=InterpolationMode.NEAREST)
            assert torch.equal(got, want), (h, w, zoom)


@exact
def test_rotate_and_affine_as_torchvision_makes_them(photos):
    img = torch.from_numpy(np.ascontiguousarray(photos["astronaut"][::3, ::2])).permute(2, 0, 1)
    h, w = img.shape[1:]
    for angle in (30.0, -12.25, 45.0, 89.999, 135.0, 0.001):
        for fill in (None, [40, 50, 60]):
            m = rotation_matrix(angle, (h, w), None)
            want = F.rotate(img, angle, InterpolationMode.NEAREST, fill=fill)
            assert torch.equal(warped.grid_warp(img, m, (h, w), NEAREST, fill), want), (angle, fill)
    for angle, translate, scale, shear in ((10.0, [3.0, -7.0], 1.3, [5.0, -2.0]), (0.0, [0.0, 0.0], 2.0, [0.0, 0.0]),
                                           (-25.0, [12.0, 4.0], 0.8, [0.0, 11.0])):
        m = inverse_affine([0.0, 0.0], angle, translate, scale, shear)
        want = F.affine(img, angle=angle, translate=translate, scale=scale, shear=shear,
                        interpolation=InterpolationMode.NEAREST)
        assert torch.equal(warped.grid_warp(img, m, (h, w), NEAREST, 0), want), (angle, translate, scale, shear)


@exact
def test_it_writes_into_the_canvas_given(monkeypatch):
    """`out`: the canvas's own memory written (no copy), or a non-contiguous one filled
    through a copy; the bytes the same either way."""
    rng = random.Random(3)
    chw, m, size, window, fill = _case(rng)
    oh, ow = size if window is None else window[2:]
    out = torch.full((3, oh, ow), 1, dtype=torch.uint8)
    assert warped.grid_warp(chw, m, size, NEAREST, fill, window, out=out) is out
    want = _torch_path(monkeypatch, chw, m, size, NEAREST, fill, window)
    assert torch.equal(out, want)
    strided = torch.zeros((oh, ow, 3), dtype=torch.uint8).permute(2, 0, 1)
    assert warped.grid_warp(chw, m, size, NEAREST, fill, window, out=strided) is strided
    assert torch.equal(strided, want)


def test_the_native_path_is_taken_only_where_it_is_exact():
    img = torch.zeros((3, 8, 8), dtype=torch.uint8)
    here = warped.nearest_is_exact()
    assert (warped.native_nearest(img, NEAREST, None) is not None) == here
    if here:
        assert warped.native_nearest(img, NEAREST, None).tolist() == [0, 0, 0]
        assert warped.native_nearest(img, NEAREST, 9).tolist() == [9, 9, 9]
        assert warped.native_nearest(img, NEAREST, (1, 2, 3)).tolist() == [1, 2, 3]
    assert warped.native_nearest(img, BILINEAR, None) is None  # (bilinear: native_warp's other kind)
    assert (warped.native_warp(BILINEAR, None) == (BILINEAR, None)) == warped.bilinear_is_exact()
    assert warped.native_warp(BILINEAR, [300.0]) is None and warped.native_warp(2.0, None) is None
    assert warped.native_nearest(img, NEAREST, 12.5) is None  # (a fill torch rounds after the blend)
    assert warped.native_nearest(img, NEAREST, [300.0]) is None
    assert warped.native_nearest(img, NEAREST, [1.0, 2.0]) is None
    assert warped.native_nearest(img.float(), NEAREST, None) is None
    assert warped.native_nearest(img.to("meta"), NEAREST, None) is None  # (another device: torch's ops there)


def test_the_native_call_refuses_what_does_not_fit():
    src = np.zeros((3, 4, 5), np.uint8)
    xs, ys = np.zeros(6, np.float32), np.zeros(2, np.float32)
    scale, fill = np.zeros(6, np.float32), np.zeros(3, np.uint8)
    _native.warp_affine_nearest(src, xs, ys, scale, fill, np.empty((3, 2, 6), np.uint8))
    for bad in (dict(out=np.empty((3, 6, 2), np.uint8)), dict(src=np.zeros((4, 4, 5), np.uint8)),
                dict(src=np.zeros((3, 0, 5), np.uint8)), dict(fill=np.zeros(2, np.uint8)),
                dict(scale=np.zeros(4, np.float32)), dict(src=np.zeros((3, 4, 5), np.float32))):
        args = dict(src=src, xs=xs, ys=ys, scale=scale, fill=fill, out=np.empty((3, 2, 6), np.uint8)) | bad
        with pytest.raises(ValueError):
            _native.warp_affine_nearest(**args)


def _part_case(rng: random.Random) -> tuple:
    """An image, a warp's matrix, its canvas size and a window of the canvas."""
    h, w = rng.randint(1, 120), rng.randint(1, 120)
    img = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
    if rng.random() < 0.5:
        m = rotation_matrix(rng.uniform(-180, 180), (h, w), None if rng.random() < 0.7 else [rng.uniform(0, w), rng.uniform(0, h)])
    else:
        m = inverse_affine([0.0, 0.0], rng.uniform(-40, 40), [float(rng.randint(-9, 9)), 0.0], rng.choice([0.5, 1.0, 2.5]),
                           [rng.uniform(-15, 15), 0.0])
    canvas = (h, w) if rng.random() < 0.6 else (rng.randint(1, 170), rng.randint(1, 170))  # (an expanded one's)
    t, l = rng.randrange(canvas[0]), rng.randrange(canvas[1])
    return img, m, canvas, (t, l, rng.randint(1, canvas[0] - t), rng.randint(1, canvas[1] - l))


@exact
def test_the_part_warp_read_box_says_gives_the_whole_images_window():
    """A decoder asked for warp_read_box's part only: the window painted from that part is
    the window painted from the whole image, byte for byte (no pick falls outside it)."""
    _parts_paint_the_whole_images_window(random.Random(5), 400, NEAREST)


def _parts_paint_the_whole_images_window(rng: random.Random, count: int, interpolation: float) -> None:
    """`count` random cases: the window painted from warp_read_box's part is the whole
    image's window (a fill of (1, 2, 3))."""
    for k in range(count):
        img, m, canvas, window = _part_case(rng)
        if m is None:
            continue
        h, w = img.shape[:2]
        t, l, ph, pw = warped.warp_read_box(m, (h, w), canvas, window)
        assert 0 <= t and 0 <= l and ph >= 1 and pw >= 1 and t + ph <= h and l + pw <= w
        whole = warped.grid_warp(img.permute(2, 0, 1), m, canvas, interpolation, (1, 2, 3), window)
        part = img[t:t + ph, l:l + pw].permute(2, 0, 1)
        got = warped.grid_warp(part, m, canvas, interpolation, (1, 2, 3), window, part=(t, l, h, w))
        assert torch.equal(got, whole), (k, (h, w), m, canvas, window, (t, l, ph, pw))


@exact
@pytest.mark.parametrize("interpolation", [NEAREST, BILINEAR])
def test_a_part_that_misses_picks_is_refused(interpolation):
    img = torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8)
    m = rotation_matrix(30.0, (40, 50), None)
    with pytest.raises(TransformError, match=r"read \d+ pixels outside the part \(10, 10, 40, 50\)"):
        warped.grid_warp(img[:, 10:20, 10:20], m, (40, 50), interpolation, 0, part=(10, 10, 40, 50))


def test_a_part_where_the_native_warp_cannot_run_is_refused(monkeypatch):
    """torch's ops sample the whole image: given a part, it says so."""
    img = torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8)
    m = rotation_matrix(30.0, (40, 50), None)
    monkeypatch.setattr(warped, "_NEAREST_EXACT", False)
    for interpolation in (NEAREST, BILINEAR):
        with pytest.raises(TransformError, match="needs the whole image here"):
            warped.grid_warp(img[:, 5:30, 5:30], m, (40, 50), interpolation, 0, part=(5, 5, 40, 50))
        assert warped.grid_warp(img, m, (40, 50), interpolation, 0, part=(0, 0, 40, 50)).shape == (3, 40, 50)


@pytest.mark.skipif(not warped.bilinear_is_exact(), reason="the native bilinear warp is not torch's here")
def test_the_native_bilinear_warp_is_torchs(monkeypatch, photos):
    """Bilinear: the native warp (the taps' weights and sum as torch's kernel forms them,
    the fill blended by the coverage, rounded) against torch's ops on the same grid, on
    random strided images, windows, fills and affine matrices, and against torchvision's
    F.rotate and F.affine on a photograph; from a part, the whole image's window."""
    rng = random.Random(11)
    for k in range(200):
        chw, m, size, window, fill = _case(rng)
        fill = fill if rng.random() < 0.7 else (12.5, 200.25, 0.75)  # (fractional levels: blended as floats)
        got = warped.grid_warp(chw, m, size, BILINEAR, fill, window)
        want = _torch_path(monkeypatch, chw, m, size, BILINEAR, fill, window)
        assert torch.equal(got, want), (k, tuple(chw.shape), m, size, window, fill, int((got != want).sum()))
    img = torch.from_numpy(np.ascontiguousarray(photos["coffee"][::3, ::2])).permute(2, 0, 1)
    h, w = img.shape[1:]
    for angle, fill in ((30.0, None), (-12.25, [40, 50, 60]), (100.0, 0)):
        want = F.rotate(img, angle, InterpolationMode.BILINEAR, fill=fill)
        assert torch.equal(warped.grid_warp(img, rotation_matrix(angle, (h, w), None), (h, w), BILINEAR, fill),
                           want), (angle, fill)
    m = inverse_affine([0.0, 0.0], 10.0, [3.0, -7.0], 1.3, [5.0, -2.0])
    want = F.affine(img, angle=10.0, translate=[3.0, -7.0], scale=1.3, shear=[5.0, -2.0],
                    interpolation=InterpolationMode.BILINEAR)
    assert torch.equal(warped.grid_warp(img, m, (h, w), BILINEAR, None), want)  # (F.affine's fill: None)
    _parts_paint_the_whole_images_window(rng, 150, BILINEAR)


def _photo_shard(tmp_path, photos) -> str:
    from conftest import encode, make_shard

    imgs = [photos[n][::3, ::3] for n in ("astronaut", "coffee", "chelsea")] * 3
    return make_shard(tmp_path / "warp-000000.tar", [{"__key__": f"{i:03d}", "jpg": encode(np.ascontiguousarray(a)),
                                                      "cls": b"1"} for i, a in enumerate(imgs)])


@pytest.mark.parametrize("first", [
    "RandomRotation(30)", "RandomRotation(45, fill=(10, 20, 30))", "RandomRotation(25, expand=True)",
    "RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10)",
    "RandomRotation(15, interpolation=v1.InterpolationMode.BILINEAR)",
])
def test_the_loader_decodes_only_the_part_each_window_picks(tmp_path, photos, monkeypatch, first):
    """`[RandomRotation(30), RandomResizedCrop(...), ...]` through the Loader on the CPU: each
    JPEG decoded only where its crop's window picks (warp_read_box), the batches byte for
    byte those of whole images painted by torch's ops; kept in RAM, the same again."""
    import torchvision.transforms as v1

    import gpudecode
    from gpudecode.transforms import canvas, draws

    shard = _photo_shard(tmp_path, photos)
    tf = v1.Compose([eval(f"v1.{first}"), v1.RandomResizedCrop(48), v1.RandomHorizontalFlip(), v1.ToTensor()])
    painted = []
    real = canvas._paint_from_part
    monkeypatch.setattr(canvas, "_paint_from_part", lambda *a: painted.append(1) or real(*a))

    def epochs(**kw) -> list:
        loader = gpudecode.Loader(shard, batch_size=4, transform=tf, device="cpu", seed=7, num_workers=2, **kw)
        out = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            out += [b.images.clone() for b in loader]
        return out

    parts = epochs()
    if warped.nearest_is_exact():
        assert len(painted) > 9  # (most windows: a part; a window that needs all of it, the whole image)
    kept = epochs(keep="ram")
    with monkeypatch.context() as m:  # (whole images, torch's ops)
        m.setattr(warped, "_NEAREST_EXACT", False)
        m.setattr(draws, "reads_parts", lambda plan: False)
        whole = epochs()
    assert len(parts) == len(whole) == len(kept) == 6
    for a, b, c in zip(parts, whole, kept):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_views_decode_the_union_of_their_parts(tmp_path, photos, monkeypatch):
    """Two views of each image (the course recipe's and a plain crop's): the decoder gives
    the box around both views' parts, each view paints from its own part inside it; the
    batches byte for byte those of whole images."""
    import torchvision.transforms as v1

    import gpudecode
    from gpudecode.transforms import draws

    shard = _photo_shard(tmp_path, photos)
    views = [v1.Compose([v1.RandomRotation(30), v1.RandomResizedCrop(40), v1.ToTensor()]),
             v1.Compose([v1.RandomResizedCrop(32, scale=(0.05, 0.2)), v1.ToTensor()])]

    def batches() -> list:
        loader = gpudecode.Loader(shard, batch_size=3, transform=views, device="cpu", seed=2, num_workers=2)
        return [[v.clone() for v in b.images] for b in loader]

    parts = batches()
    with monkeypatch.context() as m:
        m.setattr(warped, "_NEAREST_EXACT", False)
        m.setattr(draws, "reads_parts", lambda plan: False)
        whole = batches()
    assert len(parts) == len(whole) == 3
    for a, b in zip(parts, whole):
        assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b))
