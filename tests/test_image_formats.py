"""The formats data sets hold (issue 39): WebP and TIFF (Pillow's own), AVIF (Pillow's own
where its wheel has libavif), HEIC and JPEG XL (the [formats] extra's plugins), each decoded
by the Loader to Pillow's pixels on a real photograph; a plugin format without its plugin is
that sample's error, naming the format and the package."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import make_shard
from PIL import Image

import gpudecode
from gpudecode.decode._base import PLUGIN_FORMATS, pillow_formats, sniff_plugin_format

HERE = os.path.dirname(os.path.abspath(__file__))
# (Pillow's save format, the shard field, save options): lossless where the format has it
FORMATS = [("WEBP", "webp", {"lossless": True}), ("WEBP", "webp", {"quality": 80}), ("TIFF", "tiff", {}),
           ("TIFF", "tif", {"compression": "tiff_lzw"}), ("AVIF", "avif", {"quality": 80}),
           ("HEIF", "heic", {"quality": 80}), ("JXL", "jxl", {"lossless": True})]


def _encode(img: np.ndarray, fmt: str, opts: dict) -> bytes:
    b = io.BytesIO()
    Image.fromarray(img).save(b, fmt, **opts)
    return b.getvalue()


@pytest.mark.parametrize("fmt,ext,opts", FORMATS, ids=[f"{f[1]}-{i}" for i, f in enumerate(FORMATS)])
def test_each_format_decodes_to_pillows_pixels(tmp_path, photos, fmt, ext, opts):
    pillow_formats()  # the plugins registered, as the decoders do
    if fmt not in Image.SAVE:
        pytest.skip(f"Pillow here cannot write {fmt} (pip install 'gpudecode[formats]')")
    img = np.ascontiguousarray(photos["astronaut"][100:164, 120:200])
    data = _encode(img, fmt, opts)
    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"{i:03d}", ext: data, "cls": b"2"} for i in range(3)])
    images, labels = next(iter(gpudecode.Loader(shard, batch_size=3, transform=None, device="cpu")))
    ref = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
    assert images.shape == (3, 3, 64, 80) and labels.tolist() == [2, 2, 2]
    assert torch.equal(images[1], torch.from_numpy(ref).permute(2, 0, 1))
    if opts.get("lossless") or fmt == "TIFF":
        assert np.array_equal(ref, img)  # and the format kept the photograph's pixels


def test_signatures_name_the_plugin_formats(photos):
    img = np.ascontiguousarray(photos["coffee"][:32, :48])
    for fmt in PLUGIN_FORMATS:
        if fmt in pillow_formats() and fmt in Image.SAVE:
            assert sniff_plugin_format(_encode(img, fmt, {})) == fmt
    assert sniff_plugin_format(_encode(img, "PNG", {})) is None
    assert sniff_plugin_format(_encode(img, "JPEG", {})) is None


def test_a_plugin_format_without_its_plugin_is_refused_by_name(tmp_path, photos):
    """With the plugins hidden, a HEIC and a JPEG XL sample are each their own error naming
    the format and the package; the JPEG beside them is delivered."""
    pillow_formats()
    have = [f for f in ("HEIF", "JXL") if f in Image.SAVE]
    if not have:
        pytest.skip("neither pillow-heif nor pillow-jxl-plugin is installed here")
    img = np.ascontiguousarray(photos["coffee"][:32, :48])
    samples = [{"__key__": "000", "jpg": _encode(img, "JPEG", {}), "cls": b"0"}]
    samples += [{"__key__": f"{i + 1:03d}", {"HEIF": "heic", "JXL": "jxl"}[f]: _encode(img, f, {}), "cls": b"0"}
                for i, f in enumerate(have)]
    shard = make_shard(tmp_path / "s.tar", samples)
    code = f"""
import gpudecode
ld = gpudecode.Loader({shard!r}, batch_size=1, transform=None, device="cpu", on_error="skip")
n = sum(len(x) for x, _ in ld)
print("delivered", n)
for s in ld.skipped:
    print("skipped", s.key, s.reason)
"""
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "bench", "_hide"), GPUDECODE_HIDE="pillow_heif,pillow_jxl")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "delivered 1" in r.stdout
    if "HEIF" in have:
        assert "a HEIC/HEIF image, and Pillow has no HEIC/HEIF support here: pip install 'gpudecode[formats]' " \
               "(pillow-heif)" in r.stdout
    if "JXL" in have:
        assert "(pillow-jxl-plugin)" in r.stdout and "a JPEG XL image" in r.stdout


def test_bench_make_data_writes_every_format(tmp_path):
    """`gpudecode bench make-data --formats ...` writes each format as shards and files that
    Pillow reads back to the image made (lossless ones exactly)."""
    from gpudecode.bench.data import ALL_FORMATS, EXT, make_data

    pillow_formats()
    have = [f for f in ALL_FORMATS if f == "tensor" or {"heic": "HEIF", "jxl": "JXL", "jpg": "JPEG"}.get(
        f, f.upper()) in Image.SAVE]
    doc = make_data(tmp_path / "d", count=3, size=32, formats=have, show_progress=False)
    for f in have:
        assert doc["bytes_per_image"][f] > 0 and doc["shards"][f]
        files = sorted((tmp_path / "d" / doc["files"][f]).rglob(f"*.{EXT[f]}"))
        assert len(files) == 3
        if f != "tensor":
            with Image.open(files[0]) as im:
                assert im.size == (32, 32)
