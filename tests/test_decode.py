"""Decoders against Pillow: every encoding comes out RGB uint8 as documented; the DALI
pipeline (built with device "cpu") and torchvision's decoder agree with the CPU one."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

from gpudecode import _native
from gpudecode.decode import Request
from gpudecode.decode.cpu import CpuDecoder
from gpudecode import probe

from conftest import GPU_BACKENDS, decoded_image, encode, make_shard


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
    b = io.BytesIO()
    Image.fromarray(img[..., 0].astype(np.uint16) * 257 + 3).save(b, format="PNG")
    out["png-16"] = b.getvalue()
    return out


def test_cpu_decoder_equals_pillow(photos):
    dec = CpuDecoder(num_threads=2)
    encs = encodings(photos)
    names = [n for n in encs if n != "png-16"]  # Pillow clips 16-bit grey to 255 (test_16bit_png)
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


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255 ** 2 / mse))


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
    # the pixels, against an independent reference: Pillow's draft() asks libjpeg for the same
    # 1/8 DCT scaling (its IDCT and upsampling are the exact ones, so close, not equal)
    with Image.open(io.BytesIO(data)) as im:
        im.draft("RGB", (64, 64))
        assert im.size == (64, 64)
        scaled = np.asarray(im.convert("RGB"))
    assert psnr(_window(out, 0), scaled) > 30, psnr(_window(out, 0), scaled)
    assert psnr(_window(out, 1), pil_rgb(data)[10:110, 20:110]) > 35  # the window at full scale


def test_dct_scaling_only_where_the_kernel_resizes_the_box_down(photos, tmp_path):
    """fast_decode's DCT scaling is bounded by the size each box is resized to (the plan's
    decode_frame), not by the output: a crop read 1:1 (CenterCrop alone, a Pad) is never
    scaled, a Resize's box only down to its size, a RandomResizedCrop's to its output (its
    own size where a crop of it follows). Through the Loader, a CenterCrop(64) of a 512x512
    JPEG is the exact decode's but for the fast IDCT (it was an 8x upscale of a 1/8 decode)."""
    import torch

    import gpudecode
    from gpudecode import transforms as T

    frames = {(T.CenterCrop(64),): None, (T.Pad(2),): None, (): None, (T.Resize(128), T.CenterCrop(100)): (128, 128),
              (T.Resize((96, 80)), T.RandomCrop(64)): (96, 80), (T.RandomResizedCrop(64),): (64, 64),
              (T.RandomResizedCrop(256), T.CenterCrop(224)): (256, 256), (T.RandomShortestSize([64, 96]),
                                                                          T.RandomCrop(48)): None,
              (T.ColorJitter(0.2), T.RandomResizedCrop(64)): None}
    for steps, frame in frames.items():
        assert T.Compose(list(steps)).plan.decode_frame == frame, steps
    url = make_shard(tmp_path / "f-000000.tar", [{"__key__": "a", "jpg": encode(photos["astronaut"], "JPEG", quality=95),
                                                 "cls": b"1"}])
    tf = T.Compose([T.CenterCrop(64), T.ToDtype(torch.float32, scale=True)])
    fast, exact = (next(iter(gpudecode.Loader(url, batch_size=1, transform=tf, device="cpu", fast_decode=f))).images
                   for f in (True, False))
    err = (fast - exact).abs() * 255
    assert float(err.mean()) < 3.0, float(err.mean())  # (about 1.9 levels: the fast IDCT; 20.6 scaled by 1/8)


# Every GPU backend built for the CPU gives the CPU decoder's pixels bit for bit, on crop
# windows too, for every encoding here (measured: CMYK, palette, grey+alpha, WebP, 16-bit
# PNG included) but one: DALI scales 16-bit PNG samples to 8 bits with rounding where the
# CPU decoder keeps the high byte (1 level apart at most).
_DIFFERS = {"nvimgcodec": set(), "dali": {"png-16"}, "torchcodec": set()}


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backends_on_cpu_equal_the_cpu_decoder(photos, backend):
    from conftest import cpu_built_decoder, decoded_image

    encs = encodings(photos)
    names = [n for n in encs if n not in _DIFFERS[backend]]
    rng = np.random.default_rng(1)
    reqs = []
    for n in names:
        r = req(encs[n])
        if n.startswith("jpeg") and r.height > 8:  # crop windows: ROI decoding where the backend has it
            h, w = int(rng.integers(1, r.height)), int(rng.integers(1, r.width))
            r.box = (int(rng.integers(0, r.height - h + 1)), int(rng.integers(0, r.width - w + 1)), h, w)
        reqs.append(r)
    a = CpuDecoder().decode(reqs)
    b = cpu_built_decoder(backend).decode(reqs)
    for k, n in enumerate(names):
        assert a.errors[k] is None and b.errors[k] is None, (n, a.errors[k], b.errors[k])
        np.testing.assert_array_equal(decoded_image(a, k), decoded_image(b, k), err_msg=n)
    if _DIFFERS[backend]:  # where it differs, by how much
        bad = [req(encs[n]) for n in _DIFFERS[backend]]
        a, b = CpuDecoder().decode(bad), cpu_built_decoder(backend).decode(bad)
        for k in range(len(bad)):
            assert np.abs(decoded_image(a, k).astype(int) - decoded_image(b, k)).max() <= 1


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backends_name_bad_images(photos, backend):
    """A bad image is that image's error (the batch goes on), over-limit ones are refused
    before decoding, and a tensor sample comes out as exactly its window."""
    from conftest import cpu_built_decoder, decoded_image

    from gpudecode.tensors import encode_npy

    good = encode(np.ascontiguousarray(photos["rocket"][:120, :160]), "JPEG")
    img = np.ascontiguousarray(photos["coffee"][:90, :100])
    reqs = [req(good[: len(good) // 2]), Request(b"not an image at all", "other", 4, 4, (0, 0, 4, 4)), req(good),
            Request(encode_npy(img), "npy", 90, 100, (7, 9, 40, 50)),
            Request(encode(np.zeros((600, 600, 3), np.uint8)), "jpeg", 600, 600, (0, 0, 600, 600))]
    out = cpu_built_decoder(backend, max_pixels=200_000).decode(reqs)
    assert out.errors[0] is not None and out.errors[1] is not None, out.errors
    assert out.errors[2] is None and out.errors[3] is None
    assert "over the limit" in out.errors[4]
    np.testing.assert_array_equal(decoded_image(out, 3), img[7:47, 9:59])
    np.testing.assert_array_equal(decoded_image(out, 2), pil_rgb(good))


def test_unknown_and_removed_decoder_names():
    from gpudecode.decode import make_decoder

    with pytest.raises(ValueError, match="torchcodec"):
        make_decoder("nvjpeg", device="cpu", num_threads=1, max_pixels=0)
    with pytest.raises(ValueError, match="unknown decoder"):
        make_decoder("pillow", device="cpu", num_threads=1, max_pixels=0)


def test_missing_backend_names_the_extra(monkeypatch):
    import sys

    from gpudecode import BackendUnavailableError
    from gpudecode.decode import make_decoder

    for mod in ("nvidia.dali", "torchcodec", "torchcodec.decoders", "nvidia.nvimgcodec"):
        monkeypatch.setitem(sys.modules, mod, None)  # importing it now fails, as if not installed
    for backend, extra in (("dali", "gpudecode[dali]"), ("torchcodec", "gpudecode[gpu]"),
                           ("nvimgcodec", "gpudecode[gpu]")):
        with pytest.raises(BackendUnavailableError, match=re.escape(extra)):
            make_decoder(backend, device="cpu", num_threads=1, max_pixels=0)


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
    for zero_copy in (True, False):  # read in place (a view over the samples' bytes), or copied
        out = CpuDecoder(num_threads=2, zero_copy=zero_copy).decode(reqs)
        for k, (t, l, bh, bw) in enumerate(boxes):
            assert out.errors[k] is None
            np.testing.assert_array_equal(_window(out, k), img[t:t + bh, l:l + bw])
        assert out.errors[3] is None
        np.testing.assert_array_equal(_window(out, 3), pil_rgb(jpg)[5:45, 6:56])  # Pillow's pixels
        assert out.errors[4] is not None and "truncated" in out.errors[4]
        if zero_copy:  # the pixels are the sample's own bytes
            base = out.pixels.data_ptr() + int(out.offsets[0])
            assert base == np.frombuffer(npy, np.uint8).ctypes.data + 128


def _window(out, k):
    """Image k's box read through the DecodedBatch contract: offsets, strides, boxes."""
    t, l, bh, bw = (int(v) for v in out.boxes[k])
    sy, sx, sc = (int(v) for v in out.strides[k])
    start = int(out.offsets[k]) + t * sy + l * sx
    return out.pixels[start:].as_strided((bh, bw, 3), (sy, sx, sc)).numpy().copy()



def test_pillow_opens_only_image_formats(tmp_path, monkeypatch):
    """EPS bytes named .jpg never reach Pillow's EPS plugin (which runs Ghostscript where
    it is installed): Pillow is given the image formats of training sets only, and the
    sample is a DecodeError naming it, under every path that calls Pillow."""
    from PIL import EpsImagePlugin, Image

    from gpudecode import DecodeError, Loader
    from gpudecode import transforms as T
    from gpudecode.decode._base import PILLOW_FORMATS
    from gpudecode.folder import image_extension

    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n0 0 moveto 16 16 lineto stroke\nshowpage\n%%EOF\n"
    assert EpsImagePlugin._accept(eps)  # Pillow would take it for EPS
    opened = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: opened.append(1))
    shard = make_shard(tmp_path / "eps.tar", [{"__key__": "ps", "jpg": eps, "cls": b"0"}])
    with pytest.raises(DecodeError, match="not a readable image") as e:
        list(Loader(shard, batch_size=1, transform=T.Compose([T.Resize((8, 8))]), device="cpu"))
    assert e.value.key == "ps"
    assert image_extension(eps) is None
    assert opened == []
    Image.init()
    assert "EPS" not in PILLOW_FORMATS and set(PILLOW_FORMATS) <= set(Image.OPEN)


def _many_scans(n_extra: int) -> bytes:
    """A progressive JPEG (Pillow's) with its last scan repeated `n_extra` times: valid
    markers throughout, each repeat a full pass (libjpeg warns of a bogus progression and
    decodes it): the shape of the known scan-count denial of service."""
    import io as _io

    from PIL import Image

    b = _io.BytesIO()
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), np.uint8)).save(b, "JPEG", progressive=True, quality=90)
    data = b.getvalue()
    last_sos = data.rfind(b"\xff\xda")
    assert data.endswith(b"\xff\xd9") and last_sos > 0
    scan = data[last_sos:-2]
    return data[:last_sos] + scan * (1 + n_extra) + b"\xff\xd9"


def test_a_jpeg_with_too_many_scans_is_refused(tmp_path):
    """More than 256 scans: a DecodeError naming the sample (from the probe, before any
    decoder; the CPU decoder holds the same limit), not minutes of decoding; a few
    repeated scans still decode (libjpeg tolerates the bogus progression)."""
    from gpudecode import DecodeError, Loader
    from gpudecode import transforms as T

    from conftest import make_shard

    ok = _many_scans(5)
    bomb = _many_scans(1200)
    shard = make_shard(tmp_path / "scans.tar", [{"__key__": "fine", "jpg": ok, "cls": b"0"},
                                                {"__key__": "bomb", "jpg": bomb, "cls": b"0"}])
    tf = T.Compose([T.Resize((16, 16))])
    with pytest.raises(DecodeError, match="progressive JPEG of more than 256 scans") as e:
        list(Loader(shard, batch_size=2, transform=tf, device="cpu", shuffle=False))
    assert e.value.key == "bomb"
    ld = Loader(shard, batch_size=2, transform=tf, device="cpu", shuffle=False, on_error="skip")
    assert [k for b in ld for k in b.keys] == ["fine"] and [s.key for s in ld.skipped] == ["bomb"]


# -- a decode stopped from another thread (Loader.close(), Ctrl-C) --------------------------

def _big_images() -> dict[str, bytes]:
    """Images whose native decode takes a good fraction of a second, cheap to store: a
    4000x4000 PNG (plain and Adam7) and a progressive JPEG of noise."""
    rng = np.random.default_rng(5)
    smooth = np.zeros((4000, 4000, 3), np.uint8)
    smooth[:, :, 0] = (np.arange(4000) * 7) % 256
    smooth[:, :, 1] = (np.arange(4000)[:, None] * 3) % 256
    noise = rng.integers(0, 256, (1500, 1500, 3), dtype=np.uint8)
    return {"png": encode(smooth, "PNG", compress_level=1),
            "png-adam7": _interlaced_png(smooth[:2000, :2000]),
            "jpeg-progressive": encode(noise, "JPEG", quality=95, progressive=True)}


def _interlaced_png(img: np.ndarray) -> bytes:
    import zlib

    h, w = img.shape[:2]
    passes = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]
    raw = b"".join(b"".join(b"\0" + img[y, x0::dx].tobytes() for y in range(y0, h, dy))
                   for y0, x0, dy, dx in passes if y0 < h and x0 < w)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 1])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def big_images():
    return _big_images()


def _native_decode(data: bytes, copies: int, stop=None) -> list[str]:
    h, w = probe(data).height, probe(data).width
    kinds = np.full(copies, 0 if data[:2] == b"\xff\xd8" else 1, np.uint8)
    out = np.empty(64 * 64 * 3, np.uint8)  # every item decodes all its rows, keeps a 64x64 corner
    boxes = np.tile(np.array([[h - 64, w - 64, 64, 64]], np.int32), (copies, 1))
    return _native.decode_batch([data] * copies, kinds, boxes, np.ones(copies, np.int32), np.zeros(copies, np.int64),
                                out, num_threads=1, stop=stop)


@pytest.mark.parametrize("kind", ["png", "png-adam7", "jpeg-progressive"])
def test_a_stop_set_from_another_thread_ends_the_native_decode(big_images, kind):
    import threading
    import time

    data = big_images[kind]
    if kind.startswith("png") and not _native.has_png:
        pytest.skip("this build has no libpng")
    one = float("inf")
    for _ in range(3):  # one decode, warm (the first call pays for its allocations: it ran 1.5x slower)
        t0 = time.perf_counter()
        assert _native_decode(data, 1) == [""]
        one = min(one, time.perf_counter() - t0)
    copies = max(4, int(12.0 / max(one, 1e-3)))  # about 12 s of work on one native thread
    stop = np.zeros(1, np.uint8)
    timer = threading.Timer(0.2, lambda: stop.__setitem__(0, 1))
    t0 = time.perf_counter()
    timer.start()
    errs = _native_decode(data, copies, stop)
    took = time.perf_counter() - t0
    timer.join()
    # the image in progress ends within a row or scan, the rest are never started
    # (a watchdog, not a timing target: the stop is checked between rows, so it ends in milliseconds;
    # a loaded CI machine may take seconds, an ignored stop would take copies x one)
    assert took < 6.0 + one / 2, (took, one, copies)
    assert errs[-1] == _native.STOPPED and set(errs) <= {"", _native.STOPPED}
    assert errs.count("") <= 1.5 * 0.2 / one + 1  # those done before the stop, no more (with room for noise)
    assert _native_decode(data, 2, stop) == [_native.STOPPED] * 2  # set before: nothing starts
    stop[0] = 0
    assert _native_decode(data, 2, stop) == ["", ""]


def test_the_stop_flag_must_be_the_callers_own_uint8_array(big_images):
    with pytest.raises(TypeError, match="uint8 array"):
        _native_decode(big_images["jpeg-progressive"], 1, np.zeros(1, np.int32))  # a converted copy is never set
    with pytest.raises(TypeError, match="uint8 array"):
        _native_decode(big_images["jpeg-progressive"], 1, np.zeros(0, np.uint8))


def test_an_interrupted_cpu_decoder_raises_cancelled_until_resumed(photos):
    from gpudecode.errors import Cancelled

    dec = CpuDecoder(num_threads=1)
    r = req(encode(photos["chelsea"]))
    dec.interrupt()
    with pytest.raises(Cancelled, match="interrupted"):
        dec.decode([r])
    dec.resume()
    out = dec.decode([r])
    assert out.errors == [None]
    np.testing.assert_array_equal(decoded_image(out, 0), pil_rgb(r.data))
    dec.close()
