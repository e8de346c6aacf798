"""The native PNG decoder (libpng, GIL released) against pyspng (what it replaces) and
Pillow, on real photographs in every colour type, bit depth and interlacing, full images
and crop windows; damaged data is an error, never altered pixels."""
from __future__ import annotations

import io
import json
import struct
import zlib

import numpy as np
import pyspng
import pytest
from PIL import Image

from gpudecode import _native
from gpudecode.decode import Request
from gpudecode.decode.cpu import CpuDecoder

pytestmark = pytest.mark.skipif(not _native.has_png, reason="gpudecode._native was built without libpng")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bytes(px: np.ndarray, *, color: int, depth: int = 8, interlace: bool = False,
              plte: bytes = b"", trns: bytes = b"") -> bytes:
    """A PNG written by hand (filter 0 rows, optional Adam7), so interlaced files, low bit
    depths and tRNS can be made: px is [H, W, C] of the stored samples."""
    h, w = px.shape[:2]

    def rows(a: np.ndarray) -> bytes:
        out = b""
        for r in a:
            flat = r.reshape(-1)
            if depth == 16:
                data = flat.astype(">u2").tobytes()
            elif depth == 8:
                data = flat.astype(np.uint8).tobytes()
            else:  # 1, 2, 4 bits, packed high bits first
                data = np.packbits(np.unpackbits(flat.astype(np.uint8)[:, None], axis=1)[:, 8 - depth:].reshape(-1)
                                   ).tobytes()
            out += b"\0" + data
        return out

    if interlace:
        raw = b""
        for y0, x0, dy, dx in ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
                               (1, 0, 2, 1)):
            sub = px[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += rows(sub)
    else:
        raw = rows(px)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, int(interlace))
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
    if plte:
        out += _chunk(b"PLTE", plte)
    if trns:
        out += _chunk(b"tRNS", trns)
    return out + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def native(data: bytes, box=None, max_pixels: int = 0) -> np.ndarray:
    w, h = struct.unpack(">II", data[16:24])
    t, l, bh, bw = box or (0, 0, h, w)
    out = np.zeros(bh * bw * 3, np.uint8)
    err = _native.decode_batch([data], np.ones(1, np.uint8), np.array([[t, l, bh, bw]], np.int32),
                               np.ones(1, np.int32), np.zeros(1, np.int64), out, False, max_pixels, 1)
    if err[0]:
        raise ValueError(err[0])
    return out.reshape(bh, bw, 3)


def variants(img: np.ndarray) -> dict[str, bytes]:
    """Every PNG colour type and bit depth, from one photograph."""
    rng = np.random.default_rng(0)
    g = img[..., 1]
    h, w = g.shape
    pal_img = Image.fromarray(img).quantize(200)
    idx = np.asarray(pal_img)
    plte = bytes(pal_img.getpalette()[:600])
    out = {}
    for interlace in (False, True):
        s = "-adam7" if interlace else ""
        out["rgb" + s] = png_bytes(img, color=2, interlace=interlace)
        out["rgba" + s] = png_bytes(np.dstack([img, rng.integers(0, 256, (h, w), np.uint8)]), color=6,
                                    interlace=interlace)
        out["gray" + s] = png_bytes(g[..., None], color=0, interlace=interlace)
        out["gray-alpha" + s] = png_bytes(np.dstack([g, g // 3]), color=4, interlace=interlace)
        out["palette" + s] = png_bytes(idx[..., None], color=3, plte=plte, interlace=interlace)
        out["palette-trns" + s] = png_bytes(idx[..., None], color=3, plte=plte, trns=bytes(range(0, 200, 2)),
                                            interlace=interlace)
        for d in (1, 2, 4):
            out[f"gray{d}" + s] = png_bytes((g >> (8 - d))[..., None], color=0, depth=d, interlace=interlace)
        out["palette4" + s] = png_bytes((idx % 16)[..., None], color=3, depth=4, plte=plte[:48], interlace=interlace)
        out["gray16" + s] = png_bytes((g.astype(np.uint16) * 257 + 3)[..., None], color=0, depth=16,
                                      interlace=interlace)
        out["rgb16" + s] = png_bytes(img.astype(np.uint16) * 251 + 7, color=2, depth=16, interlace=interlace)
        out["rgba16" + s] = png_bytes(np.dstack([img.astype(np.uint16) * 256, g.astype(np.uint16)]), color=6,
                                      depth=16, interlace=interlace)
        out["gray-trns" + s] = png_bytes(g[..., None], color=0, trns=struct.pack(">H", int(g[0, 0])),
                                         interlace=interlace)
    out["pillow-rgb"] = _pil(img)
    out["pillow-palette"] = _pil(pal_img)
    return out


def _pil(im) -> bytes:
    b = io.BytesIO()
    (im if isinstance(im, Image.Image) else Image.fromarray(im)).save(b, format="PNG")
    return b.getvalue()


@pytest.fixture(scope="module")
def pngs(photos):
    img = np.ascontiguousarray(photos["chelsea"][:61, :83])  # odd sizes: partial Adam7 blocks
    return variants(img)


def test_every_variant_equals_pyspng(pngs):
    for name, data in pngs.items():
        got = native(data)
        want = pyspng.load(data, format="RGB")
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_8bit_variants_equal_pillow(pngs):
    for name, data in pngs.items():
        if "16" in name:  # Pillow clips 16-bit grey to 255; we keep the high byte (as pyspng)
            continue
        with Image.open(io.BytesIO(data)) as im:
            want = np.asarray(im.convert("RGB")) if im.mode != "P" or "trns" not in name else \
                np.asarray(im.convert("RGBA"))[..., :3]  # palette + tRNS: transparency dropped, not composited
        np.testing.assert_array_equal(native(data), want, err_msg=name)


def test_crop_windows_equal_the_full_image_cropped(pngs):
    rng = np.random.default_rng(1)
    for name, data in pngs.items():
        full = native(data)
        h, w = full.shape[:2]
        for _ in range(6):
            t, l = int(rng.integers(0, h)), int(rng.integers(0, w))
            bh, bw = int(rng.integers(1, h - t + 1)), int(rng.integers(1, w - l + 1))
            np.testing.assert_array_equal(native(data, (t, l, bh, bw)), full[t:t + bh, l:l + bw], err_msg=name)
        np.testing.assert_array_equal(native(data, (5, 0, 7, w)), full[5:12], err_msg=name)  # rows written in place


def test_photographs_through_the_cpu_decoder(photos):
    """Mixed JPEG and PNG requests in one batch, crop windows: the PNGs equal Pillow's."""
    reqs, want = [], []
    for i, name in enumerate(sorted(photos)[:4]):
        img = photos[name]
        h, w = img.shape[:2]
        box = (h // 5, w // 7, h // 2, w // 2)
        data = _pil(img)
        reqs.append(Request(data, "png", h, w, box, "s.tar", f"k{i}"))
        want.append(img[box[0]:box[0] + box[2], box[1]:box[3] + box[1]])
        jpg = io.BytesIO()
        Image.fromarray(img).save(jpg, format="JPEG")
        reqs.append(Request(jpg.getvalue(), "jpeg", h, w, box, "s.tar", f"j{i}"))
        want.append(None)
    dec = CpuDecoder(num_threads=2)
    out = dec.decode(reqs)
    assert all(e is None for e in out.errors)
    pix = out.pixels.numpy()
    for k, wnt in enumerate(want):
        if wnt is None:
            continue
        h, w = out.shapes[k]
        got = pix[out.offsets[k]:out.offsets[k] + h * w * 3].reshape(h, w, 3)
        np.testing.assert_array_equal(got, wnt)
    dec.close()


def _idat_span(data: bytes) -> tuple[int, int]:
    pos = 8
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] == b"IDAT":
            return pos + 8, pos + 8 + n
        pos += 12 + n
    raise AssertionError("no IDAT")


def _with_idat(data: bytes, body: bytes) -> bytes:
    a, b = _idat_span(data)
    return data[:a - 8] + _chunk(b"IDAT", body) + data[b + 4:]


@pytest.mark.parametrize("interlace", [False, True])
def test_damaged_data_is_an_error_never_other_pixels(photos, interlace):
    img = np.ascontiguousarray(photos["astronaut"][:64, :64])
    good = png_bytes(img, color=2, interlace=interlace)
    a, b = _idat_span(good)
    body = good[a:b]
    raw = zlib.decompress(body)
    cases = {
        "bad IDAT CRC": good[:b] + bytes([good[b] ^ 1]) + good[b + 1:],
        # the zlib stream's own checksum wrong (chunk CRC made right): only the adler32 says
        "bad zlib checksum": _with_idat(good, body[:-4] + bytes([body[-4] ^ 0x40]) + body[-3:]),
        "pixels changed, checksum kept": _with_idat(good, zlib.compress(raw[:-4] + b"\1\1\1\1")[:-4] + body[-4:]),
        "too little data": _with_idat(good, zlib.compress(raw[:len(raw) // 2])),
        "stream cut off": _with_idat(good, body[:len(body) // 2]),
        "file cut off": good[:b - 100],
        "no IDAT": good[:a - 8] + _chunk(b"IEND", b""),
    }
    for name, data in cases.items():
        for box in (None, (0, 0, 8, 8)):  # even a window above the damage
            try:
                native(data, box)
            except ValueError as e:
                assert "libpng" in str(e), (name, str(e))
            else:
                pytest.fail(f"{name}: decoded without an error")
    np.testing.assert_array_equal(native(good), img)


def test_limits_and_boxes():
    data = png_bytes(np.zeros((20, 30, 3), np.uint8), color=2)
    with pytest.raises(ValueError, match="over the limit"):
        native(data, max_pixels=599)
    assert native(data, max_pixels=600).shape == (20, 30, 3)
    for box in ((0, 0, 21, 30), (0, 1, 20, 30), (19, 29, 2, 1), (0, 0, 20, 31)):
        with pytest.raises(ValueError, match="outside"):
            native(data, box)
    big = png_bytes(np.zeros((1, 1, 3), np.uint8), color=2)
    big = big[:16] + struct.pack(">II", 1 << 20, 1 << 20) + big[24:]
    big = big[:8] + _chunk(b"IHDR", big[16:29]) + big[33:]
    with pytest.raises(ValueError):
        native(big, (0, 0, 1, 1), max_pixels=1 << 30)


def test_ancillary_damage_is_tolerated_as_pyspng_does(photos):
    """A bad CRC on an ancillary chunk (a comment) leaves the pixels whole: decoded, as
    pyspng decodes it (Pillow refuses the file when it opens it)."""
    img = np.ascontiguousarray(photos["coffee"][:32, :32])
    good = png_bytes(img, color=2)
    a, _ = _idat_span(good)
    text = _chunk(b"tEXt", b"Comment\0hello")
    data = good[:a - 8] + text[:-1] + bytes([text[-1] ^ 1]) + good[a - 8:]
    np.testing.assert_array_equal(native(data), img)
    np.testing.assert_array_equal(pyspng.load(data, format="RGB"), img)


_IMPORT_ORDER = r"""
import json, sys
if sys.argv[1] == "torchvision first":
    import torchvision.io  # loads the libpng16.so.16 torchvision bundles
from gpudecode import _native
data = open(sys.argv[2], "rb").read()
err, px, path = _native.decode_png(data, (0, 0, 16, 16), 0, False)
print(json.dumps({"libpng": _native.libpng, "err": err, "pixels": px.hex(), "path": path}))
"""


def test_the_libpng_that_decides_does_not_depend_on_what_was_imported_first(tmp_path):
    """A shared libpng is found by its SONAME: torchvision bundles a newer libpng16.so.16,
    and a process that imported torchvision first would have the CPU decoder run that one.
    The two disagree on what they refuse (the newer refuses a chunk name with its reserved
    bit set, a name the PNG specification tells decoders to take as unknown, as Pillow
    does). The build links libpng in (CMakeLists.txt): the same libpng, and the same verdict
    on that file, whatever the process loaded before."""
    import subprocess
    import sys

    img = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    good = png_bytes(img, color=2)
    a, _ = _idat_span(good)
    path = tmp_path / "reserved.png"
    path.write_bytes(good[:a - 8] + _chunk(b"cccc", b"hi") + good[a - 8:])
    seen = {}
    for order in ("gpudecode first", "torchvision first"):
        done = subprocess.run([sys.executable, "-c", _IMPORT_ORDER, order, str(path)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        seen[order] = json.loads(done.stdout)
    first, second = seen["gpudecode first"], seen["torchvision first"]
    assert first["libpng"]["linked_in"], first["libpng"]  # (a build that found libpng16.a: make sysdeps)
    assert first["libpng"] == second["libpng"] and first["libpng"]["running"] == first["libpng"]["built"]
    assert first["err"] is None and second["err"] is None, (first["err"], second["err"])
    assert first["path"] == second["path"] == "libpng"
    pixels = np.frombuffer(bytes.fromhex(second["pixels"]), np.uint8).reshape(16, 16, 3)
    np.testing.assert_array_equal(pixels, img)
    np.testing.assert_array_equal(np.asarray(Image.open(path).convert("RGB")), img)  # Pillow takes it too


# ---- the direct path (csrc/png_decode.cpp): most PNGs decoded without libpng ----

def _direct_and_libpng(data: bytes, box: tuple[int, int, int, int]):
    """(error, pixels, path) of the CPU decoder's PNG decode, then of libpng alone."""
    return _native.decode_png(data, box, 0, True), _native.decode_png(data, box, 0, False)


def _with_cinfo(z: bytes, cinfo: int) -> bytes:
    """The zlib stream `z` with another declared window (CINFO), its header check made right."""
    cmf, flg = (cinfo << 4) | 8, z[1] & 0xE0
    return bytes([cmf, flg | (31 - ((cmf << 8 | flg) % 31))]) + z[2:]


def test_the_direct_path_equals_libpng_on_every_kind_filter_and_box(pngs, photos):
    """The CPU decoder decodes a PNG without libpng (its zlib stream inflated whole, each
    row unfiltered by a loop for its filter type) where the result is sure to be libpng's:
    the same pixels on every colour type, bit depth and filter, photographs with each filter
    forced, crop windows; interlaced images (and a stream declaring a window under 32 KiB
    that its data outgrows) go to libpng."""
    from test_png_halves import FILTERS, KINDS, _idats, _rebuild, _samples, idat_after_the_stream, write_png

    rng = np.random.default_rng(13)
    datas = dict(pngs)
    for color, depth in KINDS:
        for fname, f in FILTERS.items():
            pal = rng.integers(0, 256, (1 << min(depth, 8), 3)) if color == 3 else None
            datas[f"type{color}-{depth}bit-{fname}"] = write_png(_samples(rng, 19, 29, color, depth), color, depth, f,
                                                                 palette=pal)
    photo = np.ascontiguousarray(photos["chelsea"][:40, :57])
    for fname in ("sub", "up", "average", "paeth", "each-row"):
        datas[f"photo-{fname}"] = write_png(photo, 2, 8, FILTERS[fname])
        datas[f"photo-rgba-{fname}"] = write_png(np.dstack([photo, photo[..., :1]]), 6, 8, FILTERS[fname])
    datas["idat-after-the-stream"] = idat_after_the_stream(datas["photo-paeth"])
    a, b = _idat_span(datas["photo-paeth"])  # (6,880 bytes of image data)
    datas["small-window"] = _with_idat(datas["photo-paeth"], _with_cinfo(datas["photo-paeth"][a:b], 5))  # (8 KiB)
    small = zlib.compressobj(9, zlib.DEFLATED, 9)  # a 512-byte window, which the image data outgrows
    datas["outgrown-window"] = _rebuild(datas["photo-paeth"], small.compress(zlib.decompress(
        b"".join(_idats(datas["photo-paeth"])))) + small.flush())
    for name, data in datas.items():
        w, h = struct.unpack(">II", data[16:24])
        boxes = [(0, 0, h, w), (h // 3, 0, h - h // 3, w), (1, w // 4, h // 2, w // 2), (h - 1, w - 1, 1, 1)]
        for box in boxes:
            (err, px, path), (ref_err, ref, _) = _direct_and_libpng(data, box)
            assert err is None and ref_err is None, (name, err, ref_err)
            assert px == ref, (name, box)
            assert path == ("libpng" if "adam7" in name or name == "outgrown-window" else "direct"), (name, path)
        if not ("adam7" in name or "16" in name or "trns" in name):  # Pillow reads 16 bits and tRNS otherwise
            want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            np.testing.assert_array_equal(np.frombuffer(_direct_and_libpng(data, boxes[0])[0][1], np.uint8)
                                          .reshape(h, w, 3), want, err_msg=name)


def test_what_libpng_refuses_the_direct_path_leaves_to_libpng(photos):
    """A PNG libpng refuses is never decoded by the direct path: each malformed stream goes
    to libpng, which refuses it in its own words (the same error as libpng alone). Among
    them, the two the direct path must see for itself: bytes after the zlib stream in its
    IDAT chunk (whole IDAT chunks after it are not read, as libpng reads none), and a
    stream that reaches past the window it declares (a whole-buffer inflate would take it;
    libpng, inflating a row at a time, does not)."""
    from test_png_halves import _broken, idat_after_the_stream

    h, w = 64, 64
    top = np.ascontiguousarray(photos["astronaut"][:h // 2, :w])
    far = png_bytes(np.concatenate([top, top]), color=2)  # the bottom half repeats the top: distances of 32 rows
    a, b = _idat_span(far)
    cases = {name: data for name, (data, _) in _broken().items()}
    cases["bytes after the stream in its chunk"] = idat_after_the_stream(_pil(top), b"\0")
    cases["a distance past the declared window"] = _with_idat(far, _with_cinfo(zlib.compress(
        zlib.decompress(far[a:b]), 9), 1))
    for name, data in cases.items():
        for box in ((0, 0, 1, 1), (0, 0, 2, 3)):
            (err, _, path), (ref_err, _, _) = _direct_and_libpng(data, box)
            assert ref_err is not None, name  # (libpng refuses every one)
            assert err == ref_err and path == "libpng", (name, err, ref_err, path)


def test_what_follows_the_image_data_is_decided_as_libpng_decides_it(photos):
    """After the first IDAT chunk libpng reads only as far as the zlib stream asks: a cut,
    a bad CRC or a broken chunk header past the stream's end changes nothing. The direct
    path decides the PNGs whose image data ended cleanly (a chunk of another kind, whatever
    it holds) and leaves those with a fault after their first IDAT chunk to libpng: the same
    error, or the same pixels, as libpng alone."""
    from test_png_halves import after_the_image_data

    top = np.ascontiguousarray(photos["astronaut"][:24, :31])
    for name, (data, fault, refused) in after_the_image_data(_pil(top)).items():
        for box in ((0, 0, 24, 31), (3, 5, 10, 7)):
            (err, px, path), (ref_err, ref, _) = _direct_and_libpng(data, box)
            assert (ref_err is not None) == refused, (name, ref_err)
            assert err == ref_err and px == ref, (name, err, ref_err)
            assert path == ("libpng" if fault else "direct"), (name, path)
        if not refused:
            assert _direct_and_libpng(data, (0, 0, 24, 31))[0][1] == top.tobytes(), name


def _fixed_block(data: bytes, tail: tuple[int, int, int]) -> bytes:
    """A Deflate stream of one block of fixed codes (RFC 1951 3.2.6): `data` but its last 258
    bytes as literals, then one match of those 258 bytes written as `tail` = (length symbol,
    distance symbol, the distance's extra bits); no encoder writes symbols past 285 or 29."""
    bits: list[int] = [1, 1, 0]  # BFINAL, BTYPE 01 (LSB first)

    def code(value: int, n: int) -> None:  # a Huffman code, its most significant bit first
        bits.extend((value >> (n - 1 - i)) & 1 for i in range(n))

    def extra(value: int, n: int) -> None:  # extra bits, least significant first
        bits.extend((value >> i) & 1 for i in range(n))

    def literal_or_length(sym: int) -> None:
        if sym < 144:
            code(0x30 + sym, 8)
        elif sym < 256:
            code(0x190 + sym - 144, 9)
        elif sym < 280:
            code(sym - 256, 7)
        else:
            code(0xC0 + sym - 280, 8)

    for b in data[:-258]:
        literal_or_length(b)
    length_sym, dist_sym, dist_extra = tail
    literal_or_length(length_sym)
    code(dist_sym, 5)
    extra(dist_extra, 13)
    literal_or_length(256)
    bits.extend([0] * (-len(bits) % 8))
    return bytes(sum(bit << i for i, bit in enumerate(bits[k:k + 8])) for k in range(0, len(bits), 8))


def fixed_code_pngs() -> dict[str, bytes]:
    """A 300x100 grey PNG whose stream is one block of fixed codes ending in a match of 258
    bytes at a distance of 24,677, written three ways: as any encoder would (length symbol 285,
    distance symbol 29), with length symbol 286, and with distance symbol 30. libdeflate reads
    all three alike; zlib refuses the last two."""
    w, h = 300, 100
    rng = np.random.default_rng(23)
    rows = rng.integers(0, 5, (h, w + 1)).astype(np.uint8)  # (filter types 0-4 wherever the match lands)
    data = rows.tobytes()
    dist = 24577 + 100  # distance symbol 29: 24577 and 13 extra bits
    data = data[:-258] + bytes(data[len(data) - 258 - dist + k] for k in range(258))

    def png(tail: tuple[int, int, int]) -> bytes:
        z = b"\x78\x01" + _fixed_block(data, tail) + struct.pack(">I", zlib.adler32(data))
        return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + _chunk(b"IDAT", z) + _chunk(b"IEND", b""))

    out = {"as encoders write it": png((285, 29, 100)), "length symbol 286": png((286, 29, 100)),
           "distance symbol 30": png((285, 30, 100))}
    assert zlib.decompress(out["as encoders write it"][41:-16]) == data  # (the stream is what it says: zlib reads it)
    return out


def test_deflate_symbols_zlib_refuses_are_read_as_libdeflate_reads_them_or_refused_as_libpng_refuses_them():
    """The one difference the direct path keeps from libpng, where libdeflate inflates (the list
    in csrc/png_decode.cpp): Deflate readings zlib calls invalid and libdeflate takes. A length
    symbol 286 reads as 258, as 285 does, and a distance symbol 30 as 29: each such stream gives
    the pixels of the stream with 285 and 29, whose Adler-32 it carries; libpng refuses it in
    zlib's words. Where zlib inflates, the direct path leaves it to libpng, as every other."""
    pngs = fixed_code_pngs()
    box = (0, 0, 100, 300)
    (err, want, path), (ref_err, ref, _) = _direct_and_libpng(pngs["as encoders write it"], box)
    assert err is None and ref_err is None and want == ref and path == "direct"
    for name, zlib_says in (("length symbol 286", "invalid literal/length code"),
                            ("distance symbol 30", "invalid distance code")):
        (err, px, path), (ref_err, _, _) = _direct_and_libpng(pngs[name], box)
        assert ref_err == f"libpng: IDAT: {zlib_says}", ref_err
        if _native.png_inflater == "libdeflate":
            assert err is None and px == want and path == "direct", (name, err)
        else:
            assert err == ref_err and path == "libpng", (name, err)
