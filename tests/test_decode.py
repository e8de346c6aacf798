"""Decoders against Pillow: every encoding comes out RGB uint8 as documented; the DALI
pipeline (built with device "cpu") and torchvision's decoder agree with the CPU one."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from gpudecode import _native
from gpudecode.decode import Request
from gpudecode.decode.cpu import CpuDecoder
from gpudecode import probe

from conftest import encode


def pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def req(data: bytes, box=None) -> Request:
    try:
        info = probe(data)
        fmt, h, w = info.format, info.height, info.width
    except ValueError:
        with Image.open(io.BytesIO(data)) as im:
            fmt, (w, h) = "other", im.size
    return Request(data, fmt, h, w, box or (0, 0, h, w), "s.tar", "k")


def encodings(photos) -> dict[str, bytes]:
    img = photos["chelsea"]
    out = {
        "jpeg-420": encode(img, "JPEG", quality=90),
        "jpeg-444": encode(img, "JPEG", quality=95, subsampling=0),
        "jpeg-422": encode(img, "JPEG", quality=85, subsampling=1),
        "jpeg-progressive": encode(img, "JPEG", quality=90, progressive=True),
        "jpeg-gray": encode(img, "JPEG", mode="L"),
        "jpeg-cmyk": encode(img, "JPEG", mode="CMYK"),
        "png-rgb": encode(img, "PNG"),
        "png-rgba": encode(img, "PNG", mode="RGBA"),
        "png-gray": encode(img, "PNG", mode="L"),
        "png-la": encode(img, "PNG", mode="LA"),
        "webp": encode(img, "WEBP", quality=90),
        "odd-jpeg": encode(np.ascontiguousarray(img[:37, :101]), "JPEG"),
        "tiny-jpeg": encode(np.ascontiguousarray(img[:1, :1]), "JPEG"),
    }
    b = io.BytesIO()
    Image.fromarray(img).quantize(64).save(b, format="PNG")
    out["png-palette"] = b.getvalue()
    return out


def test_cpu_decoder_equals_pillow(photos):
    dec = CpuDecoder(num_threads=2)
    encs = encodings(photos)
    names = list(encs)
    out = dec.decode([req(encs[n]) for n in names])
    for k, n in enumerate(names):
        assert out.errors[k] is None, (n, out.errors[k])
        h, w = out.shapes[k]
        got = out.pixels[out.offsets[k]:out.offsets[k] + h * w * 3].numpy().reshape(h, w, 3)
        np.testing.assert_array_equal(got, pil_rgb(encs[n]), err_msg=n)


def test_crop_windows_are_exact(photos):
    """Exact mode: the crop window equals Pillow's full decode cropped, for every
    subsampling, on random boxes."""
    rng = np.random.default_rng(0)
    dec = CpuDecoder(num_threads=2)
    for name in ("astronaut", "coffee", "rocket"):
        for sub in (0, 1, 2):
            data = encode(photos[name], "JPEG", quality=90, subsampling=sub)
            full = pil_rgb(data)
            H, W = full.shape[:2]
            reqs = []
            for _ in range(15):
                h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
                t, l = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
                reqs.append(req(data, (t, l, h, w)))
            out = dec.decode(reqs)
            for k, r in enumerate(reqs):
                t, l, h, w = r.box
                got = out.pixels[out.offsets[k]:out.offsets[k] + h * w * 3].numpy().reshape(h, w, 3)
                np.testing.assert_array_equal(got, full[t:t + h, l:l + w], err_msg=f"{name} {sub} {r.box}")


def test_png_named_jpg_and_16bit(photos):
    img = photos["coffee"]
    data = encode(img, "PNG")  # stored as .jpg in a shard: the bytes decide
    r = req(data)
    assert r.format == "png"
    out = CpuDecoder().decode([r])
    assert out.errors == [None]
    g16 = (img[..., 1].astype(np.uint16) * 257 + 3)
    b = io.BytesIO()
    Image.fromarray(g16).save(b, format="PNG")
    out = CpuDecoder().decode([req(b.getvalue())])
    got = out.pixels[: g16.size * 3].numpy().reshape(*g16.shape, 3)
    np.testing.assert_array_equal(got[..., 0], (g16 >> 8).astype(np.uint8))  # the high byte


def test_bad_images_and_bombs(photos):
    good = encode(np.ascontiguousarray(photos["rocket"][:200, :300]), "JPEG")
    cut = good[: len(good) // 2]
    dec = CpuDecoder(max_pixels=100_000)
    big = encode(np.zeros((400, 400, 3), np.uint8), "JPEG")
    out = dec.decode([req(cut), req(big), req(encode(photos["camera"][:50, :50], "JPEG"))])
    assert "premature end" in out.errors[0].lower(), out.errors[0]  # never grey-filled rows
    assert "over the limit" in out.errors[1]
    assert out.errors[2] is None


def test_fast_mode_psnr(photos):
    """Fast mode (fast IDCT, plain upsampling) against exact mode: the PSNR it costs."""
    exact, fast = CpuDecoder(), CpuDecoder(fast=True)
    psnrs = []
    for name in ("astronaut", "coffee", "chelsea", "rocket"):
        data = encode(photos[name], "JPEG", quality=90)
        a, b = exact.decode([req(data)]), fast.decode([req(data)])
        x = a.pixels[: a.shapes[0].prod() * 3].numpy().astype(float)
        y = b.pixels[: b.shapes[0].prod() * 3].numpy().astype(float)
        psnrs.append(10 * np.log10(255 ** 2 / np.mean((x - y) ** 2)))
    assert min(psnrs) > 35, psnrs  # measured about 41-45 dB on these photos


def test_dct_scaling_window(photos):
    data = encode(photos["astronaut"], "JPEG", quality=90)  # 512 x 512
    dec = CpuDecoder(fast=True)
    dec.out_size = (64, 64)
    out = dec.decode([req(data, (0, 0, 512, 512)), req(data, (10, 20, 100, 90))])
    assert tuple(out.shapes[0]) == (64, 64)  # 1/8 scaling: box 8x the output
    assert tuple(out.shapes[1]) == (100, 90)  # too small to scale


def test_dali_cpu_pipeline_equals_cpu_decoder(photos):
    pytest.importorskip("nvidia.dali")
    from gpudecode.decode.dali import DaliDecoder

    encs = encodings(photos)
    names = [n for n in encs if n not in ("webp", "png-la", "jpeg-cmyk")]  # DALI's own conversions differ there
    rng = np.random.default_rng(1)
    reqs = []
    for n in names:
        r = req(encs[n])
        if n.startswith("jpeg") and r.height > 8:
            h, w = int(rng.integers(1, r.height)), int(rng.integers(1, r.width))
            r.box = (int(rng.integers(0, r.height - h + 1)), int(rng.integers(0, r.width - w + 1)), h, w)
        reqs.append(r)
    a = CpuDecoder().decode(reqs)
    b = DaliDecoder(device="cpu", num_threads=1, max_batch_size=8).decode(reqs)
    for k, n in enumerate(names):
        assert a.errors[k] is None and b.errors[k] is None, (n, a.errors[k], b.errors[k])
        assert tuple(a.shapes[k]) == tuple(b.shapes[k]), n
        size = int(a.shapes[k].prod() * 3)
        x = a.pixels[a.offsets[k]:a.offsets[k] + size].numpy()
        y = b.pixels[b.offsets[k]:b.offsets[k] + size].numpy()
        np.testing.assert_array_equal(x, y, err_msg=n)


def test_torchvision_decoder_on_cpu(photos):
    from gpudecode.decode.nvjpeg import NvjpegDecoder

    encs = encodings(photos)
    names = ["jpeg-420", "jpeg-444", "jpeg-progressive", "jpeg-gray", "png-rgb", "odd-jpeg"]
    out = NvjpegDecoder(device="cpu").decode([req(encs[n]) for n in names])
    assert out.chw
    for k, n in enumerate(names):
        h, w = out.shapes[k]
        got = out.pixels[out.offsets[k]:out.offsets[k] + h * w * 3].numpy().reshape(3, h, w).transpose(1, 2, 0)
        assert np.abs(got.astype(int) - pil_rgb(encs[n])).max() <= 1, n


def test_native_batch_validates_arguments():
    with pytest.raises(ValueError, match="scale_denom"):
        _native.decode_jpeg_batch([b"x"], np.zeros((1, 4), np.int32) + 1, np.array([3], np.int32),
                                  np.zeros(1, np.int64), np.zeros(10, np.uint8))
    with pytest.raises(ValueError, match="too small"):
        _native.decode_jpeg_batch([b"x"], np.array([[0, 0, 10, 10]], np.int32), np.array([1], np.int32),
                                  np.zeros(1, np.int64), np.zeros(10, np.uint8))


def test_tensor_samples_decode_to_their_windows(photos):
    """.npy tensor samples (gpudecode precache) next to JPEGs in one batch: each comes
    out as exactly its window; a corrupt one is that sample's error, not the batch's."""
    from gpudecode.tensors import encode_npy

    img = photos["coffee"]
    npy = encode_npy(img)
    jpg = encode(img, "JPEG", quality=95)
    h, w = img.shape[:2]
    boxes = [(0, 0, h, w), (17, 33, 101, 57), (h - 1, w - 1, 1, 1)]
    reqs = [Request(npy, "npy", h, w, b) for b in boxes] + [req(jpg, (5, 6, 40, 50)),
                                                          Request(npy[:-10], "npy", h, w, (0, 0, 4, 4))]
    out = CpuDecoder(num_threads=2).decode(reqs)
    for k, (t, l, bh, bw) in enumerate(boxes):
        assert out.errors[k] is None
        got = out.pixels[out.offsets[k]:out.offsets[k] + bh * bw * 3].numpy().reshape(bh, bw, 3)
        np.testing.assert_array_equal(got, img[t:t + bh, l:l + bw])
    assert out.errors[3] is None
    assert out.errors[4] is not None and "truncated" in out.errors[4]
