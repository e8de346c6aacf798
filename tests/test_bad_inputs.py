"""The bad-input corpus: damaged shards, gzip streams, images, labels and tensor samples,
each with its exact outcome under on_error="raise" and "skip": the exception type and
the shard and key it names, exactly which samples are delivered (bit-identical to a
clean run), and what `skipped` lists. (Faults of the process itself, Ctrl-C, exit and
concurrent iterators, are in test_lifecycle.py; remote faults in test_remote_faults.py.)

Shards hold 8 samples s00..s07 (a real photo crop as JPEG, s05 as PNG, and a .cls
label); the damage is done to s03 or to the tar around it.
"""
from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from PIL import Image

from gpudecode import DecodeError, LabelError, Loader, ShardFormatError, ShardReader, ShardReadError
from gpudecode import transforms as T
from gpudecode.tensors import encode_npy

import tarcorpus as tc
from conftest import encode, make_shard

KEYS = [f"s{i:02d}" for i in range(8)]
BAD = "s03"


def clean_samples(photos) -> list[dict]:
    names = list(photos)
    out = []
    for i, key in enumerate(KEYS):
        img = photos[names[i % len(names)]]
        h, w = 40 + 7 * i, 52 + 5 * i
        crop = np.ascontiguousarray(img[10 * i:10 * i + h, 12 * i:12 * i + w])
        ext, data = ("png", encode(crop, "PNG")) if i == 5 else ("jpg", encode(crop, "JPEG", quality=90))
        out.append({"__key__": key, ext: data, "cls": str(i % 5).encode()})
    return out


def tar_bytes(samples: list[dict], *, end: bool = True) -> bytes:
    """ustar members written by hand (tests/tarcorpus.py), each sample's fields in order."""
    out = b""
    for s in samples:
        for ext, data in s.items():
            if ext != "__key__":
                out += tc.member(f"{s['__key__']}.{ext}".encode(), data)
    return out + (tc.END if end else b"")


def offset_of(data: bytes, name: str) -> int:
    """Where the header of member `name` starts in a tar made by tar_bytes."""
    pos = 0
    while pos < len(data):
        hdr = data[pos:pos + 512]
        n = hdr[:100].split(b"\0")[0].decode()
        size = int(hdr[124:136].split(b"\0")[0] or b"0", 8)
        if n == name:
            return pos
        pos += 512 + (size + 511) // 512 * 512
    raise KeyError(name)


def mutate(samples, key=BAD, drop=(), **fields):
    out = []
    for s in samples:
        s = dict(s)
        if s["__key__"] == key:
            for d in drop:
                s.pop(d, None)
            s.update(fields)
        out.append(s)
    return out


@dataclass
class Case:
    name: str
    kind: str
    make: Callable[[list[dict]], bytes]  # clean samples -> the shard's bytes
    error: type | None  # under "raise" (None: nothing is wrong)
    key: str | None = BAD  # the key the error names
    raise_keys: list[str] = field(default_factory=lambda: KEYS[:3])  # delivered before the error
    skip_keys: list[str] = field(default_factory=lambda: [k for k in KEYS if k != BAD])
    level: str = "loader"  # "reader": ShardReader; "loader": Loader (decode, labels)
    suffix: str = ".tar"
    label_ext: str = "cls"
    changed: dict[str, object] = field(default_factory=dict)  # key -> its label (None: any) where it differs


def _cut(n):
    return lambda s: tar_bytes(s)[:n]


def _tar_case(name, make, key, raise_keys, skip_keys=None, error=ShardFormatError, **kw):
    return Case(name, "tar", make, error, key, raise_keys, raise_keys if skip_keys is None else skip_keys,
                level="reader", **kw)


def _cut_at(name, delta):
    def make(s):
        d = tar_bytes(s)
        return d[:offset_of(d, name) + delta]
    return make


def _flip(name, at):
    def make(s):
        d = bytearray(tar_bytes(s))
        d[offset_of(bytes(d), name) + at] ^= 0x41
        return bytes(d)
    return make


def _replace_header(name, **kw):
    def make(s):
        d = tar_bytes(s)
        o = offset_of(d, name)
        old = d[o:o + 512]
        size = int(old[124:136].split(b"\0")[0], 8)
        new = tc.header(old[:100].split(b"\0")[0], size, **kw)
        return d[:o] + new + d[o + 512:]
    return make


def _insert_before(name, blob):
    def make(s):
        d = tar_bytes(s)
        o = offset_of(d, name)
        return d[:o] + blob + d[o:]
    return make


def _gz(make=None, level=6, post=lambda b: b):
    return lambda s: post(gzip.compress((make or tar_bytes)(s), level))


def _flip_stored_gzip(b: bytes) -> bytes:
    b = bytearray(b)
    b[len(b) // 2] ^= 0x01  # inside a stored block: the deflate stream stays valid, the CRC does not
    return bytes(b)


def _zero_header(name):
    def make(s):
        d = tar_bytes(s)
        o = offset_of(d, name)
        return d[:o] + bytes(512) + d[o + 512:]
    return make


def _gif_header(w: int, h: int) -> bytes:
    """A GIF declaring w x h pixels (and a 1x1 frame): Pillow reads the size from it."""
    screen = w.to_bytes(2, "little") + h.to_bytes(2, "little") + b"\x00\x00\x00"
    frame = b"\x2c" + bytes(4) + (1).to_bytes(2, "little") * 2 + b"\x00" + b"\x02\x02\x4c\x01\x00"
    return b"GIF89a" + screen + frame + b"\x3b"


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _image(fmt, size, **kw):
    b = io.BytesIO()
    Image.new("RGB" if fmt != "GIF" else "P", size).save(b, fmt, **kw)
    return b.getvalue()


def _header_only_jpeg(h, w):
    return (b"\xff\xd8\xff\xc0\x00\x11\x08" + h.to_bytes(2, "big") + w.to_bytes(2, "big")
            + b"\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01\xff\xd9")


def _png_huge(h, w):
    ihdr = h.to_bytes(4, "big")
    body = w.to_bytes(4, "big") + ihdr + b"\x08\x02\x00\x00\x00"
    chunk = b"IHDR" + body
    return b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + chunk + zlib.crc32(chunk).to_bytes(4, "big")


def _corrupt_scan(jpeg: bytes) -> bytes:
    sos = jpeg.index(b"\xff\xda")
    mid = sos + (len(jpeg) - sos) // 2
    return jpeg[:mid] + b"\xff\xd0" + jpeg[mid + 2:]


AFTER = KEYS[4:]


def cases() -> list[Case]:
    C: list[Case] = []
    img = lambda s: s[3]["jpg"]  # noqa: E731  (s03's clean JPEG)

    # --- tar ---------------------------------------------------------------------------------
    # one case per kind of outcome through the Loader and its policies; the many header
    # defects behind each (sizes, checksums, pax records, member types) are the corpus's
    # (tests/tarcorpus.py), checked on every read path by test_tar_semantics.py
    C.append(_tar_case("cut inside an image", _cut_at("s03.jpg", 700), BAD, KEYS[:3]))
    C.append(_tar_case("cut inside a header", _cut_at("s03.cls", 100), BAD, KEYS[:3]))
    C.append(_tar_case("cut between two samples", _cut_at("s04.jpg", 0), BAD, KEYS[:3]))
    C.append(_tar_case("cut between fields of one sample", _cut_at("s03.cls", 0), BAD, KEYS[:3]))
    C.append(_tar_case("no end-of-archive block", lambda s: tar_bytes(s, end=False), "s07", KEYS[:7]))
    C.append(_tar_case("bad header checksum", _flip("s03.cls", 20), BAD, KEYS[:3]))
    C.append(_tar_case("size beyond the file", _replace_header("s03.cls", size_field=b"\x80" + bytes(7)
                                                               + (10**9).to_bytes(4, "big")), BAD, KEYS[:3]))
    # an extended header (a GNU long name) whose checksum holds but whose size is refused: the
    # archive is whole up to it and it begins the next member: the sample before is delivered
    C.append(_tar_case("extended header over 1 MiB", _insert_before("s03.jpg", tc.header(b"@L", 2 << 20, b"L")),
                       None, KEYS[:3]))
    # a refused header whose checksum holds names its own sample: the one before is whole
    C.append(_tar_case("GNU sparse member", _replace_header("s03.jpg", type_=b"S"), BAD, KEYS[:3]))
    C.append(_tar_case("size out of range, checksum valid", _replace_header("s03.jpg", size_field=b"\xff" * 12),
                       BAD, KEYS[:3]))
    # a pax size record that is not a number: the header after it names the member
    C.append(_tar_case("pax size not a number", _insert_before("s03.jpg", tc.pax({b"size": b"12a"})), BAD,
                       KEYS[:3]))
    C.append(_tar_case("pax size wraps", _insert_before("s03.jpg", tc.pax({b"size": b"18446744073709551000"})), BAD,
                       KEYS[:3]))
    C.append(_tar_case("not a tar at all", lambda s: bytes(range(256)) * 40, None, []))
    # faults after an end-of-archive block: every sample before it is whole and delivered
    C.append(_tar_case("two archives concatenated", lambda s: tar_bytes(s[:4]) + tar_bytes(s[4:]), None, KEYS[:4]))
    C.append(_tar_case("zeroed header mid-archive", _zero_header("s04.jpg"), None, KEYS[:4]))
    C.append(_tar_case("junk after the end blocks", lambda s: tar_bytes(s) + bytes(700) + b"junk", None, KEYS))
    # sample-level faults: the rest of the shard goes on under skip
    C.append(_tar_case("repeated extension", lambda s: tar_bytes(s[:3], end=False) + tc.member(b"s03.jpg", img(s))
                       + tc.member(b"s03.JPG", img(s)) + tc.member(b"s03.cls", b"3") + tar_bytes(s[4:]), BAD,
                       KEYS[:3], [k for k in KEYS if k != BAD]))
    C.append(_tar_case("symbolic link member", lambda s: tar_bytes(s[:3], end=False) + tc.header(b"s03.jpg", 0, b"2",
                       linkname=b"s00.jpg") + tc.member(b"s03.cls", b"3") + tar_bytes(s[4:]), BAD, KEYS[:3],
                       [k for k in KEYS if k != BAD]))
    C.append(_tar_case("hard link member", lambda s: tar_bytes(s[:3], end=False) + tc.header(b"s03.jpg", 0, b"1",
                       linkname=b"s00.jpg") + tc.member(b"s03.cls", b"3") + tar_bytes(s[4:]), BAD, KEYS[:3],
                       [k for k in KEYS if k != BAD]))
    # odd but valid: everything is delivered
    ok = dict(error=None, key=None, raise_keys=KEYS, skip_keys=KEYS, level="reader")
    C.append(Case("metadata and extensionless members", "tar", lambda s: tc.member(b"__index__", b"x")
                  + tc.member(b"README", b"x") + tc.member(b"dir/.hidden", b"x") + tar_bytes(s), **ok))
    C.append(Case("directories and devices", "tar", lambda s: tc.header(b"d/", 0, b"5") + tc.header(b"fifo", 0, b"6")
                  + tar_bytes(s), **ok))
    C.append(Case("pax and GNU long names", "tar", lambda s: tar_bytes(s[:3], end=False) + tc.pax({b"path": b"s03.jpg"})
                  + tc.member(b"ignored.jpg", s[3]["jpg"]) + tc.gnu_long(b"s03.cls") + tc.member(b"x.cls", b"3")
                  + tar_bytes(s[4:]), **ok))
    C.append(Case("signed header checksum", "tar", lambda s: tar_bytes(s[:3], end=False)
                  + tc.member(b"s03.jpg", s[3]["jpg"], signed=True) + tc.member(b"s03.cls", b"3")
                  + tar_bytes(s[4:]), **ok))
    C.append(Case("one end block and record padding", "tar", lambda s: tar_bytes(s, end=False) + bytes(512 + 9000),
                  **ok))

    # --- gzip --------------------------------------------------------------------------------
    gz = dict(level="reader", suffix=".tar.gz", key=None, raise_keys=[], skip_keys=[])
    C.append(Case("gzip: one byte flipped (CRC)", "gzip", _gz(level=0, post=_flip_stored_gzip), ShardFormatError,
                  **gz))
    C.append(Case("gzip: deflate data damaged", "gzip", _gz(post=lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:]),
                  ShardFormatError, **gz))
    C.append(Case("gzip: cut off", "gzip", _gz(post=lambda b: b[:len(b) * 2 // 3]), ShardFormatError, **gz))
    C.append(Case("gzip: length field wrong", "gzip", _gz(post=lambda b: b[:-4] + (1).to_bytes(4, "little")),
                  ShardFormatError, **gz))
    C.append(Case("gzip: junk after the stream", "gzip", _gz(post=lambda b: b + b"junk"), ShardFormatError, **gz))
    C.append(Case("gzip: bad header", "gzip", _gz(post=lambda b: b[:2] + b"\x07" + b[3:]), ShardFormatError, **gz))
    C.append(Case("gzip: truncated tar inside", "gzip", _gz(_cut_at("s03.jpg", 700)), ShardFormatError, BAD,
                  KEYS[:3], KEYS[:3], level="reader", suffix=".tar.gz"))
    C.append(Case("gzip: zero padding after the stream", "gzip", _gz(post=lambda b: b + bytes(100)), None, None,
                  KEYS, KEYS, level="reader", suffix=".tar.gz"))
    C.append(Case("gzip: two members", "gzip", lambda s: (lambda d: gzip.compress(d[:5000]) + gzip.compress(d[5000:]))
                  (tar_bytes(s)), None, None, KEYS, KEYS, level="reader", suffix=".tar.gz"))

    # --- images --------------------------------------------------------------------------------
    def bad_image(name, data, ext="jpg", **kw):
        C.append(Case(name, "image", lambda s: tar_bytes(mutate(s, drop=("jpg",), **{ext: data(s)})), DecodeError,
                      **kw))  # noqa: B023 (called at once, in the loop that defines it)

    bad_image("JPEG cut off", lambda s: img(s)[:len(img(s)) // 2])
    bad_image("JPEG header only", lambda s: img(s)[:200])
    bad_image("JPEG with a marker inside the scan", lambda s: _corrupt_scan(img(s)))
    bad_image("progressive JPEG cut off", lambda s: encode(np.zeros((64, 64, 3), np.uint8) + 99, "JPEG",
                                                           progressive=True)[:300])
    bad_image("JPEG of width 0", lambda s: _header_only_jpeg(20, 0))
    bad_image("JPEG declaring 65000x65000", lambda s: _header_only_jpeg(65000, 65000))
    bad_image("PNG declaring 2^30 x 2^30", lambda s: _png_huge(1 << 30, 1 << 30), "png")
    bad_image("PNG cut off", lambda s: encode(np.zeros((40, 40, 3), np.uint8) + 7, "PNG")[:60], "png")
    bad_image("PNG with a bad CRC", lambda s: (lambda p: p[:33] + bytes([p[33] ^ 1]) + p[34:])(
        encode(np.random.default_rng(0).integers(0, 255, (30, 30, 3), np.uint8), "PNG")), "png")
    bad_image("GIF of 50000x50000 named .jpg", lambda s: _gif_header(50000, 50000))
    bad_image("BMP of 30000x30000 named .jpg", lambda s: b"BM" + (54).to_bytes(4, "little") + bytes(4)
              + (54).to_bytes(4, "little") + (40).to_bytes(4, "little") + (30000).to_bytes(4, "little")
              + (30000).to_bytes(4, "little") + (1).to_bytes(2, "little") + (24).to_bytes(2, "little") + bytes(24))
    bad_image("TIFF cut off named .jpg", lambda s: _image("TIFF", (64, 64))[:100])
    bad_image("WebP cut off", lambda s: _image("WEBP", (64, 64))[:40], "webp")
    bad_image("text named .jpg", lambda s: b"this is not an image")
    bad_image("empty image field", lambda s: b"")
    C.append(Case("no image field", "image", lambda s: tar_bytes(mutate(s, drop=("jpg",))), DecodeError))
    good_img: dict = dict(error=None, key=None, raise_keys=KEYS, skip_keys=KEYS)
    grey, cmyk = np.full((30, 40, 3), 90, np.uint8), np.full((30, 40, 3), 60, np.uint8)
    C.append(Case("grey, CMYK and 16-bit PNG images", "image", lambda s: tar_bytes(
        mutate(mutate(mutate(s, "s01", jpg=encode(grey, "JPEG", mode="L")), "s02", jpg=encode(cmyk, "JPEG", mode="CMYK")),
               "s03", drop=("jpg",), png=_png16())), changed={"s01": None, "s02": None, "s03": None}, **good_img))
    C.append(Case("1x1 image", "image", lambda s: tar_bytes(mutate(s, jpg=encode(np.full((1, 1, 3), 200, np.uint8)))),
                  changed={"s03": None}, **good_img))

    # --- labels --------------------------------------------------------------------------------
    def bad_label(name, data, ext="cls"):
        C.append(Case(name, "label", lambda s: tar_bytes(mutate(s, **{ext: data})), LabelError,
                      label_ext="json;cls" if ext == "json" else "cls"))

    C.append(Case("no label", "label", lambda s: tar_bytes(mutate(s, drop=("cls",))), LabelError))
    for name, data in [("float", b"3.7"), ("boolean", b"true"), ("beyond int64", b"9223372036854775808"),
                       ("empty", b""), ("non-ASCII digits", "٣".encode()), ("underscore", b"1_0"),
                       ("two numbers", b"1 2"), ("hex", b"0x10"), ("huge", b"9" * 5000)]:
        bad_label(f".cls {name}", data)
    for name, data in [("float", b'{"label": 3.7}'), ("integral float", b'{"label": 3.0}'),
                       ("boolean", b'{"label": true}'), ("1e400", b'{"label": 1e400}'),
                       ("string", b'{"label": "3"}'), ("null", b'{"label": null}'), ("no label key", b'{"cls": 3}'),
                       ("not JSON", b"{label: 3"), ("a list", b"[3]"), ("nested 100000 deep", b"[" * 100000),
                       ("5000-digit int", b'{"label": ' + b"9" * 5000 + b"}"), ("beyond int64", b'{"label": -9223372036854775809}'),
                       ("not UTF-8", b'{"label": "\xff"}')]:
        bad_label(f".json {name}", data, "json")
    C.append(Case("odd but valid labels", "label", lambda s: tar_bytes(mutate(mutate(
        s, "s01", cls=b" 7\n"), "s02", cls=b"+9223372036854775807")), None, None, KEYS, KEYS,
        changed={"s01": 7, "s02": 2**63 - 1}))
    # silent edges made errors: CrossEntropyLoss's ignore_index, a key given twice
    bad_label(".cls -1 (ignore_index)", b"-1")
    bad_label(".cls -100 (ignore_index)", b"-100")
    bad_label(".json -100", b'{"label": -100}', "json")
    bad_label('.json "label" twice', b'{"label": 3, "label": 4}', "json")

    # --- tensor samples (.npy) -----------------------------------------------------------------------
    def bad_npy(name, data):
        C.append(Case(name, "tensor", lambda s: tar_bytes(mutate(s, drop=("jpg",), npy=data)), DecodeError))

    px = np.random.default_rng(1).integers(0, 255, (20, 24, 3), np.uint8)
    bad_npy(".npy float32", _npy(px.astype(np.float32)))
    bad_npy(".npy 4 channels", _npy(np.zeros((20, 24, 4), np.uint8)))
    bad_npy(".npy 2-D", _npy(np.zeros((20, 24), np.uint8)))
    bad_npy(".npy pixels cut off", encode_npy(px)[:-10])
    bad_npy(".npy Fortran order", _npy(np.asfortranarray(px)))
    bad_npy(".npy pickled objects", _npy(np.array([{"a": 1}], dtype=object)))
    bad_npy(".npy 0x0", _npy(np.zeros((0, 0, 3), np.uint8)))
    bad_npy(".npy declaring 10^6 x 10^6", encode_npy(px).replace(b"(20, 24, 3)", b"(1000000, 1000000, 3)"))
    bad_npy(".npy junk header", b"\x93NUMPY\x01\x00\x10\x00{junk: junk}    \n" + bytes(100))
    bad_npy(".npy unknown version", b"\x93NUMPY\x09\x00" + bytes(200))
    C.append(Case(".npy valid", "tensor", lambda s: tar_bytes(mutate(s, drop=("jpg",), npy=encode_npy(px))), None,
                  None, KEYS, KEYS, changed={"s03": None}))
    return C


def _png16() -> bytes:
    b = io.BytesIO()
    Image.fromarray((np.arange(30 * 40, dtype=np.uint16).reshape(30, 40) * 50)).save(b, "PNG")
    return b.getvalue()


CASES = cases()


def test_the_corpus_is_large_and_varied():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 60 and kinds == {"tar", "gzip", "image", "label", "tensor"}
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def clean(photos):
    return clean_samples(photos)


TF = T.Compose([T.Resize((24, 24))])


def _independent_pixels(url: str, key: str):
    """What TF (Resize to 24x24) makes of sample `key`'s image, by other hands: tarfile
    reads the member, Pillow (or numpy for .npy) decodes it, torchvision resizes it. A
    16-bit PNG keeps each sample's high byte (the documented reading; Pillow would clip)."""
    import tarfile

    import torch
    import torchvision.transforms.v2.functional as F

    with tarfile.open(url) as t:
        m = next(m for m in t.getmembers() if m.name.split(".", 1)[0] == key
                 and m.name.rsplit(".", 1)[1] in ("jpg", "png", "npy"))
        data = t.extractfile(m).read()  # type: ignore[union-attr]
    if m.name.endswith(".npy"):
        rgb = np.load(io.BytesIO(data))
    else:
        with Image.open(io.BytesIO(data)) as im:
            if im.mode in ("I;16", "I;16B", "I"):
                hi = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
                rgb = np.stack([hi] * 3, axis=-1)
            else:
                rgb = np.asarray(im.convert("RGB"))
    chw = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)
    return F.resize(chw, [24, 24], antialias=True)


def _loader(url, on_error, label_ext="cls"):
    return Loader(url, batch_size=1, transform=TF, device="cpu", shuffle=False, num_threads=1, on_error=on_error,
                  label_ext=label_ext)


@pytest.fixture(scope="module")
def reference(clean, tmp_path_factory):
    """Each clean sample as the reader and the Loader deliver it."""
    path = tmp_path_factory.mktemp("clean") / "clean.tar"
    path.write_bytes(tar_bytes(clean))
    fields = {s.key: s.fields for s in ShardReader(str(path))}
    with _loader(str(path), "raise") as ld:
        out = {b.keys[0]: (b[0][0].clone(), int(b[1][0])) for b in ld}
    assert list(fields) == KEYS == list(out)
    return fields, out


def _deliver(case, url, on_error):
    """(delivered [(key, what)], exception or None, skipped) under on_error."""
    got: list = []
    err = None
    if case.level == "reader":
        r = ShardReader(url, on_error=on_error)
        try:
            for s in r:
                got.append((s.key, s.fields))
        except Exception as e:
            err = e
        return got, err, r.skipped
    ld = _loader(url, on_error, case.label_ext)
    try:
        for b in ld:
            got.append((b.keys[0], (b[0][0].clone(), int(b[1][0]))))
    except Exception as e:
        err = e
    finally:
        ld.close()
    return got, err, ld.skipped


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_bad_input(case, on_error, clean, reference, tmp_path):
    url = str(tmp_path / f"shard{case.suffix}")
    Path(url).write_bytes(case.make(clean))
    fields, outputs = reference
    got, err, skipped = _deliver(case, url, on_error)
    keys = [k for k, _ in got]
    if case.error is None or on_error == "skip":
        assert err is None, f"{type(err).__name__}: {err}"
    if case.error is None:
        assert keys == case.raise_keys and not skipped
    elif on_error == "raise":
        assert isinstance(err, case.error), f"{type(err).__name__}: {err}"
        assert err.shard == url and err.key == case.key, str(err)
        assert keys == case.raise_keys
    else:
        assert keys == case.skip_keys
        assert [(s.shard, s.key, s.error) for s in skipped] == [(url, case.key, case.error.__name__)]
    # whatever was delivered is bit-identical to the clean shard's
    for key, what in got:
        if case.level == "reader":
            assert what == fields[key], key
        elif key in case.changed:  # a different but valid sample: its label where given, its pixels
            assert case.changed[key] is None or what[1] == case.changed[key]
            if case.level in ("image", "tensor"):
                expected = _independent_pixels(url, key)
                assert what[0].shape == expected.shape, key
                assert (what[0].int() - expected.int()).abs().max() <= 1, key
        else:
            assert torch.equal(what[0], outputs[key][0]) and what[1] == outputs[key][1], key


def test_gzip_damage_delivers_nothing_unverified(clean, tmp_path):
    """A flipped byte inside a gzip shard is caught by its CRC before any sample of that
    shard is delivered: nothing altered reaches the trainer, and the next shard is whole."""
    bad = tmp_path / "a.tar.gz"
    bad.write_bytes(_flip_stored_gzip(gzip.compress(tar_bytes(clean), 0)))
    good = tmp_path / "b.tar.gz"
    good.write_bytes(gzip.compress(tar_bytes(clean)))
    r = ShardReader([str(bad), str(good)], on_error="skip")
    assert [s.key for s in r] == KEYS
    assert [(s.shard, s.error) for s in r.skipped] == [(str(bad), "ShardFormatError")]
    assert "gzip" in r.skipped[0].reason


def test_errors_pickle_with_their_location(clean, tmp_path):
    import pickle

    url = str(tmp_path / "s.tar")
    Path(url).write_bytes(_cut_at("s03.jpg", 700)(clean))
    with pytest.raises(ShardFormatError) as ei:
        list(ShardReader(url))
    e2 = pickle.loads(pickle.dumps(ei.value))
    assert (type(e2), e2.shard, e2.key, e2.offset) == (ShardFormatError, url, BAD, ei.value.offset)


def test_missing_shard(tmp_path):
    url = str(tmp_path / "nope.tar")
    with pytest.raises(ShardReadError) as ei:
        list(ShardReader(url))
    assert ei.value.shard == url and ei.value.key is None


def test_labels_json_reference():
    """The label rule against json itself: what json reads as an int64 integer is the label."""
    from gpudecode.labels import parse_label

    for text in [b'{"label": 5}', b'{"label": -3, "x": [1, 2]}', b'{"label": 9223372036854775807}']:
        assert parse_label({"json": text}, ["json"], shard="s", key="k", allow_negative=True) == json.loads(text)["label"]


def test_negative_labels_and_num_classes_through_the_loader(tmp_path):
    """-1 / -100 (CrossEntropyLoss's ignore_index) are a LabelError naming the sample unless
    allow_negative_labels=True; num_classes= bounds labels from above; Loader.dataset
    follows the same rule."""
    samples = [{"__key__": f"k{i}", "jpg": encode(np.full((16, 16, 3), 40 * i, np.uint8)), "cls": str(c).encode()}
               for i, c in enumerate([0, 4, -100, 2])]
    shard = make_shard(tmp_path / "l.tar", samples)
    tf = T.Compose([T.Resize((8, 8))])
    with pytest.raises(LabelError, match=r"label .cls = -100 is negative .*ignore_index") as e:
        list(Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False))
    assert e.value.key == "k2"
    ld = Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False, allow_negative_labels=True)
    assert [lab for b in ld for lab in b.labels.tolist()] == [0, 4, -100, 2]
    with pytest.raises(LabelError, match="= 4 is not below num_classes=4") as e:
        list(Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False, num_classes=4,
                    allow_negative_labels=True))
    assert e.value.key == "k1"
    with pytest.raises(LabelError, match="is negative"):
        Loader(shard, batch_size=4, transform=tf, device="cpu", shuffle=False).dataset[2]
    with pytest.raises(ValueError, match="num_classes must be a positive int"):
        Loader(shard, batch_size=4, transform=tf, device="cpu", num_classes=0)
