"""The native header probe against Pillow, on real photos and on every encoding Pillow writes."""
import io

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from gpudecode import DecodeError, probe
from gpudecode import probe_batch

from conftest import encode

SUBSAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}


@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("progressive", [False, True])
def test_jpeg_matches_pillow(photos, subsampling, progressive):
    for name, img in photos.items():
        data = encode(img, "JPEG", quality=90, subsampling=subsampling, progressive=progressive)
        info = probe(data)
        with Image.open(io.BytesIO(data)) as im:
            assert (info.width, info.height) == im.size, name
            assert info.format == "jpeg" and im.format == "JPEG"
            assert info.channels == len(im.getbands()) == 3
            assert info.subsampling == SUBSAMPLING[JpegImagePlugin.get_sampling(im)]
            assert info.progressive == bool(im.info.get("progressive", 0)) == progressive
        assert info.color_space == "ycbcr" and info.bit_depth == 8


def test_jpeg_gray_and_cmyk(photos):
    img = photos["chelsea"]
    gray = probe(encode(img, "JPEG", mode="L"))
    assert (gray.channels, gray.subsampling, gray.color_space) == (1, "gray", "gray")
    cmyk_bytes = encode(img, "JPEG", mode="CMYK")
    cmyk = probe(cmyk_bytes)
    with Image.open(io.BytesIO(cmyk_bytes)) as im:
        assert im.mode == "CMYK" and (cmyk.width, cmyk.height) == im.size
    assert cmyk.channels == 4 and cmyk.color_space in ("cmyk", "ycck")


@pytest.mark.parametrize("mode,channels,depth,ctype", [
    ("1", 1, 1, 0), ("L", 1, 8, 0), ("LA", 2, 8, 4), ("P", 1, 8, 3), ("RGB", 3, 8, 2),
    ("RGBA", 4, 8, 6), ("I;16", 1, 16, 0),
])
def test_png_matches_pillow(photos, mode, channels, depth, ctype):
    img = photos["coffee"]
    im = Image.fromarray(img)
    if mode == "I;16":
        im = Image.fromarray((img[..., 0].astype(np.uint16) * 257))
    elif mode == "P":
        im = im.quantize(256)
    else:
        im = im.convert(mode)
    b = io.BytesIO()
    im.save(b, format="PNG")
    info = probe(b.getvalue())
    with Image.open(io.BytesIO(b.getvalue())) as ref:
        assert (info.width, info.height) == ref.size
    assert (info.format, info.channels, info.bit_depth, info.color_type) == ("png", channels, depth, ctype)
    assert info.subsampling is None and not info.interlaced


def test_odd_sizes():
    for h, w in [(1, 1), (1, 300), (300, 1), (17, 33)]:
        img = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
        for fmt in ("JPEG", "PNG"):
            info = probe(encode(img, fmt))
            assert (info.height, info.width) == (h, w)


@pytest.mark.parametrize("data,match", [
    (b"", "empty"),
    (b"GIF89a" + bytes(20), "not a JPEG or PNG"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "truncated"),
    (b"\x89PNG\r\n\x1a\n" + bytes(10), "truncated PNG"),
])
def test_errors_are_clear(data, match):
    with pytest.raises(DecodeError, match=match) as ei:
        probe(data, shard="s.tar", key="k1")
    assert "s.tar" in str(ei.value) and "k1" in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_truncated_real_jpeg(photos):
    data = encode(photos["rocket"], "JPEG")
    sof = data.find(b"\xff\xc0")
    with pytest.raises(DecodeError):
        probe(data[:sof + 4])
    assert probe(data[:sof + 30]).width == photos["rocket"].shape[1]  # header alone is enough


def test_batch(photos):
    items = [encode(photos["astronaut"]), b"junk", encode(photos["camera"], "PNG")]
    out = probe_batch(items, num_threads=2)
    assert out[0].format == "jpeg" and isinstance(out[1], str) and out[2].format == "png"


def test_probe_sizes_agrees_with_probe_batch(photos):
    """probe_sizes is probe_batch's (format, height, width): the same on JPEG, PNG, a tensor
    sample and junk (the same message)."""
    import numpy as np

    from gpudecode import _native
    from gpudecode.tensors import encode_npy

    items = [encode(photos["astronaut"]), b"junk", encode(photos["camera"], "PNG"),
             encode_npy(np.zeros((7, 9, 3), np.uint8)), b"", encode(photos["coffee"], "JPEG")[:40]]
    full = _native.probe_batch(items, 2)
    short = _native.probe_sizes(items, 2)
    assert len(full) == len(short) == len(items)
    for f, s in zip(full, short):
        if isinstance(f, str):
            assert s == f
        else:
            assert s == (f["format"], f["height"], f["width"])
    assert short[3] == ("npy", 7, 9)
