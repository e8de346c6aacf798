"""PNG in two halves (gpudecode/decode/png.py, kernels/png.py; issue 56): the host's chunk
walk, the inflate, and the unfilter + RGB kernels (their CPU twin here; the CUDA kernels
under numba's simulator and as PTX through ptxas) against libpng (the CPU decoder) and
Pillow's RGB conversion, on every colour type and bit depth, each filter forced per row,
zlib levels 0-9, and real photographs; malformed streams are each image's own error."""
from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import decoded_image
from gpudecode import _native
from gpudecode.decode import Request
from gpudecode.decode.cpu import CpuDecoder
from gpudecode.decode.png import PngDecoder, PngError, read_png
from gpudecode.kernels import png as K

pytestmark = pytest.mark.skipif(not _native.has_png, reason="gpudecode._native was built without libpng (the reference)")

# ---- an independent PNG writer: every filter type chosen per row --------------------------


def _chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    c = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", c)


def _filter_row(kind: int, row: bytes, prev: bytes, bpp: int) -> bytes:
    out = bytearray(len(row))
    for x in range(len(row)):
        a = row[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        if kind == 0:
            p = 0
        elif kind == 1:
            p = a
        elif kind == 2:
            p = b
        elif kind == 3:
            p = (a + b) // 2
        else:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            p = a if pa <= pb and pa <= pc else b if pb <= pc else c
        out[x] = (row[x] - p) & 255
    return bytes(out)


def write_png(samples: np.ndarray, color: int, depth: int, filters, level: int = 6, palette=None,
              extra: bytes = b"", trns: bytes | None = None) -> bytes:
    """A PNG of `samples` (h, w, channels) at `depth`, each row filtered by filters(y)."""
    h, w = samples.shape[:2]
    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    s = samples.reshape(h, w * ch).astype(np.uint32)
    rows = []
    for y in range(h):
        if depth == 16:
            row = b"".join(struct.pack(">H", int(v)) for v in s[y])
        elif depth == 8:
            row = bytes(int(v) for v in s[y])
        else:  # packed from the high bit
            bits = "".join(format(int(v), f"0{depth}b") for v in s[y])
            bits += "0" * (-len(bits) % 8)
            row = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        rows.append(row)
    bpp = max(1, ch * depth // 8)
    raw, prev = bytearray(), bytes(len(rows[0]))
    for y, row in enumerate(rows):
        f = filters(y)
        raw += bytes([f]) + _filter_row(f, row, prev, bpp)
        prev = row
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
    if palette is not None:
        out += _chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    out += extra
    z = zlib.compress(bytes(raw), level)
    return out + _chunk(b"IDAT", z[: len(z) // 2]) + _chunk(b"IDAT", z[len(z) // 2:]) + _chunk(b"IEND", b"")


def _req(data: bytes, key: str = "k") -> Request:
    try:
        lay = read_png(data)
        h, w = lay.height, lay.width
    except PngError:
        h = w = 1
    return Request(data, "png", h, w, (0, 0, h, w), "s.tar", key)


def _both(datas: list[bytes]):
    """Each PNG through the two-halves decoder (CPU twin) and the CPU decoder (libpng)."""
    reqs = [_req(d, str(i)) for i, d in enumerate(datas)]
    ours = PngDecoder(device="cpu", num_threads=2).decode(reqs).settle()
    ref = CpuDecoder(num_threads=1).decode(reqs).settle()
    return reqs, ours, ref


KINDS = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 2), (3, 4), (3, 8), (4, 8), (4, 16),
         (6, 8), (6, 16)]
FILTERS = {"none": lambda y: 0, "sub": lambda y: 1, "up": lambda y: 2, "average": lambda y: 3, "paeth": lambda y: 4,
           "each-row": lambda y: (y * 3 + 1) % 5}


def _samples(rng, h, w, color, depth):
    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    top = (1 << depth) - 1
    base = rng.integers(0, top + 1, (h, w, ch), dtype=np.int64)
    # smooth areas too (the filters' differences are small there), and both extremes
    base[: h // 2, : w // 2] = top
    base[h // 2:, : w // 3] = 0
    return base


@pytest.mark.parametrize("color, depth", KINDS, ids=[f"type{c}-{d}bit" for c, d in KINDS])
def test_every_colour_type_depth_and_filter_equals_libpng(color, depth):
    rng = np.random.default_rng(color * 100 + depth)
    datas = []
    for name, f in FILTERS.items():
        for w in (1, 7, 13):  # widths whose packed rows end inside a byte
            s = _samples(rng, 9, w, color, depth)
            palette = None
            if color == 3:
                palette = rng.integers(0, 256, (1 << depth, 3))
            datas.append(write_png(s, color, depth, f, level=(w + len(name)) % 10, palette=palette))
    reqs, ours, ref = _both(datas)
    for k in range(len(reqs)):
        assert ref.errors[k] is None and ours.errors[k] is None, (k, ref.errors[k], ours.errors[k])
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k)), k


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "LA", "RGBA", "1", "I;16", "RGB;16"])
def test_photographs_saved_by_pillow_equal_libpng_and_pillow(photos, mode):
    datas, want = [], []
    for name in sorted(photos)[:3]:
        img = Image.fromarray(photos[name][:96, :130])
        for level in range(10):
            b = io.BytesIO()
            if mode == "I;16":
                im = Image.fromarray(np.asarray(img.convert("L"), np.uint16) * 257)
            elif mode == "RGB;16":  # 16-bit RGB: the writer above (Pillow writes 8-bit RGB only)
                a = np.asarray(img, np.uint16) * 257 + np.arange(130, dtype=np.uint16)[None, :, None]
                datas.append(write_png(a, 2, 16, FILTERS["each-row"], level))
                want.append(np.asarray(Image.open(io.BytesIO(datas[-1])).convert("RGB")))  # Pillow: the high bytes
                assert np.array_equal(want[-1], (a >> 8).astype(np.uint8))
                continue
            elif mode == "P":
                im = img.quantize(256 if level % 2 else 37)
            else:
                im = img.convert(mode)
            im.save(b, "PNG", compress_level=level, optimize=False)
            datas.append(b.getvalue())
            # Pillow clips 16-bit grey to 255 (not libpng's high byte): libpng alone is the reference there
            want.append(None if mode == "I;16" else np.asarray(Image.open(io.BytesIO(datas[-1])).convert("RGB")))
    reqs, ours, ref = _both(datas)
    for k in range(len(reqs)):
        assert ref.errors[k] is None and ours.errors[k] is None, (k, ref.errors[k], ours.errors[k])
        mine = decoded_image(ours, k)
        assert np.array_equal(mine, decoded_image(ref, k)), k
        if want[k] is not None:
            assert np.array_equal(mine, want[k]), k


def test_palette_index_past_the_palette_and_trns_read_as_libpng_reads_them():
    rng = np.random.default_rng(3)
    s = rng.integers(0, 16, (6, 11, 1))
    datas = [write_png(s, 3, 4, FILTERS["paeth"], palette=rng.integers(0, 256, (5, 3))),  # indices 5-15: black
             write_png(s, 3, 4, FILTERS["sub"], palette=rng.integers(0, 256, (16, 3)), trns=bytes(range(16))),
             write_png(rng.integers(0, 256, (6, 11, 3)), 2, 8, FILTERS["up"], trns=b"\x00\x01\x00\x02\x00\x03")]
    reqs, ours, ref = _both(datas)
    for k in range(len(reqs)):
        assert ref.errors[k] is None and ours.errors[k] is None
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k)), k
    assert (decoded_image(ours, 0)[s[..., 0] >= 5] == 0).all()


def test_crop_boxes_and_interlaced_images_through_the_host():
    rng = np.random.default_rng(4)
    img = Image.fromarray(rng.integers(0, 256, (40, 33, 3), dtype=np.uint8))
    b = io.BytesIO()
    img.save(b, "PNG")
    plain = b.getvalue()
    interlaced = _adam7(np.asarray(img))  # (Pillow writes no Adam7 PNG)
    reqs = [Request(plain, "png", 40, 33, (5, 7, 20, 11), "s", "a"), Request(interlaced, "png", 40, 33, (1, 2, 30, 30), "s", "b")]
    dec = PngDecoder(device="cpu")
    ours = dec.decode(reqs).settle()
    ref = CpuDecoder(num_threads=1).decode(reqs).settle()
    for k in range(2):
        assert ours.errors[k] is None and ref.errors[k] is None
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k))
        assert np.array_equal(decoded_image(ours, k), np.asarray(img)[reqs[k].box[0]:reqs[k].box[0] + reqs[k].box[2],
                                                                      reqs[k].box[1]:reqs[k].box[1] + reqs[k].box[3]])
    assert dec.host_fallbacks == 1  # the interlaced one went through libpng on the host
    assert dec.detours() == {"interlaced_by_libpng": 1, "outgrowing_their_window_by_libpng": 0,
                             "a_fault_after_the_image_data_by_libpng": 0, "batches_inflated_by_zlib": 0, "nvcomp_refused": None, "adler_by_zlib": 0,
                             "nvcomp_sizes_reused": 0}


def test_a_loaders_describe_names_the_png_engines_detours(tmp_path):
    """decoder=("png",): describe() says how many interlaced images went to libpng; a
    split's engine_stats() (describe()'s decoder_engines) says it for its PNG engine."""
    from conftest import make_shard
    from gpudecode import Loader
    from gpudecode import transforms as T

    rng = np.random.default_rng(6)
    rgb = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(rgb).save(b, "PNG")
    shard = make_shard(tmp_path / "s.tar", [{"__key__": "plain", "png": b.getvalue(), "cls": b"0"},
                                            {"__key__": "adam7", "png": _adam7(rgb), "cls": b"1"}])
    with Loader([shard], batch_size=2, decoder=("png",), transform=T.Compose([T.CenterCrop(16)]),
                num_threads=1, device="cpu", shuffle=False) as ld:
        (batch,) = list(ld)
        alone = ld.describe()
    from gpudecode.decode.split import Engine, SplitDecoder

    split = SplitDecoder([Engine(PngDecoder(), formats=("png",)), Engine(CpuDecoder(num_threads=1), formats=("jpeg",))])
    reqs = [Request(b.getvalue(), "png", 24, 20, (0, 0, 24, 20), "s", "plain"),
            Request(_adam7(rgb), "png", 24, 20, (0, 0, 24, 20), "s", "adam7")]
    assert split.decode(reqs).settle().errors == [None, None]
    engines = split.engine_stats()
    split.close()
    assert batch.keys == ["plain", "adam7"]
    assert bool((batch.images[0] == batch.images[1]).all())  # the same pixels, two ways
    assert alone["decoder_detours"]["interlaced_by_libpng"] == 1
    assert engines["png"]["detours"]["interlaced_by_libpng"] == 1 and "detours" not in engines["cpu"]


def _adam7(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB Adam7 PNG of `rgb`, each pass's rows unfiltered (filter 0)."""
    h, w = rgb.shape[:2]
    passes = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]
    raw = bytearray()
    for y0, x0, dy, dx in passes:
        sub = rgb[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(bytes(raw)))
            + _chunk(b"IEND", b""))


def _broken() -> dict[str, tuple[bytes, str]]:
    rng = np.random.default_rng(5)
    s = rng.integers(0, 256, (8, 10, 3))
    good = write_png(s, 2, 8, FILTERS["each-row"])
    idat = good.index(b"IDAT") - 4
    out = {}
    raw = bytearray(zlib.decompress(b"".join(_idats(good))))
    raw[3 * (1 + 10 * 3)] = 7  # row 3's filter type: 7
    out["filter type 7"] = (_rebuild(good, zlib.compress(bytes(raw))), "filter type")
    out["truncated"] = (good[: idat + 20], "ends inside")
    bad_crc = bytearray(good)
    bad_crc[idat + 10] ^= 0xFF
    out["IDAT CRC"] = (bytes(bad_crc), "CRC error")
    z = zlib.compress(bytes(zlib.decompress(b"".join(_idats(good)))))
    out["wrong Adler-32"] = (_rebuild(good, z[:-1] + bytes([z[-1] ^ 1])), "inflate|Adler")
    out["too little data"] = (_rebuild(good, zlib.compress(bytes(raw[:-5]))), "not enough image data")
    out["too much data"] = (_rebuild(good, zlib.compress(bytes(raw) + b"\0" * 40)), "more image data")
    out["bytes after the zlib stream"] = (_rebuild(good, z + b"\0\0\0\0\0"), "after the end of the zlib stream")
    out["no PLTE"] = (write_png(rng.integers(0, 4, (4, 4, 1)), 3, 2, FILTERS["none"]), "PLTE")
    ihdr = bytearray(good)
    ihdr[8 + 8 + 8] = 3  # bit depth 3
    ihdr[8 + 8 + 13:8 + 8 + 17] = struct.pack(">I", zlib.crc32(bytes(ihdr[12:29])))
    out["bit depth 3"] = (bytes(ihdr), "bit depth")
    out["not a PNG"] = (b"GIF89a" + good[6:], "signature")
    return out


def _idats(png: bytes) -> list[bytes]:
    out, pos = [], 8
    while pos < len(png):
        n, kind = struct.unpack_from(">I4s", png, pos)
        if kind == b"IDAT":
            out.append(png[pos + 8:pos + 8 + n])
        pos += 12 + n
    return out


def _rebuild(png: bytes, z: bytes) -> bytes:
    head = png[: png.index(b"IDAT") - 4]
    return head + _chunk(b"IDAT", z) + _chunk(b"IEND", b"")


@pytest.mark.parametrize("name", sorted(_broken()))
def test_a_malformed_png_is_its_own_error_as_libpng_refuses_it(name):
    data, why = _broken()[name]
    rng = np.random.default_rng(6)
    fine = write_png(rng.integers(0, 256, (5, 6, 3)), 2, 8, FILTERS["sub"])
    reqs = [_req(fine, "before"), _req(data, "bad"), _req(fine, "after")]
    ours = PngDecoder(device="cpu").decode(reqs).settle()
    ref = CpuDecoder(num_threads=1).decode(reqs).settle()
    assert ours.errors[0] is None and ours.errors[2] is None
    assert ours.errors[1] is not None and re.search(why, ours.errors[1], re.I), ours.errors[1]
    assert ref.errors[1] is not None, name  # libpng refuses it too
    for k in (0, 2):
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k))


def idat_after_the_stream(png: bytes, tail: bytes = b"") -> bytes:
    """`png` with its zlib stream (and `tail` after it) in two IDAT chunks, then a third that
    libpng never reads: the stream ends in the second."""
    z = b"".join(_idats(png)) + tail
    head = png[: png.index(b"IDAT") - 4]
    return (head + _chunk(b"IDAT", z[:9]) + _chunk(b"IDAT", z[9:]) + _chunk(b"IDAT", b"never read by libpng")
            + _chunk(b"IEND", b""))


def test_idat_chunks_after_the_one_the_stream_ends_in_are_not_read_as_libpng_reads_none():
    """libpng stops at the end of the zlib stream: the rest of the IDAT chunk it ends in is
    an error ("Extra compressed data"), the IDAT chunks after that one are never read."""
    rng = np.random.default_rng(9)
    good = write_png(rng.integers(0, 256, (9, 7, 3)), 2, 8, FILTERS["paeth"])
    reqs, ours, ref = _both([good, idat_after_the_stream(good), idat_after_the_stream(good, b"\0")])
    for k in (0, 1):
        assert ours.errors[k] is None and ref.errors[k] is None, (ours.errors[k], ref.errors[k])
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k))
    assert np.array_equal(decoded_image(ours, 1), decoded_image(ours, 0))
    assert ref.errors[2] is not None and "extra compressed data" in ref.errors[2].lower()
    assert ours.errors[2] is not None and "in the IDAT chunk it ends in" in ours.errors[2], ours.errors[2]


def after_the_image_data(png: bytes) -> dict[str, tuple[bytes, bool, bool]]:
    """`png` (one IDAT chunk, then IEND) with what follows its image data changed: name ->
    (the PNG, whether the walk keeps a fault, whether libpng refuses it). libpng reads a
    chunk after the first IDAT only when the zlib stream asks for more data: past the chunk
    the stream ends in, nothing is read, a cut, a bad CRC or a broken chunk header included."""
    z = b"".join(_idats(png))
    head = png[: png.index(b"IDAT") - 4]
    whole, iend = head + _chunk(b"IDAT", z), _chunk(b"IEND", b"")
    bad = _chunk(b"IDAT", b"never read", crc=1)
    return {
        "a bad CRC in an IDAT chunk after the stream": (whole + bad + iend, True, False),
        "an IDAT chunk after the stream cut short": (whole + _chunk(b"IDAT", b"x" * 40)[:30], True, False),
        "a chunk type not of letters after the stream": (whole + b"\0\0\0\0\x01\x02\x03\x04\0\0\0\0", True, False),
        "a chunk length over 2**31 - 1 after the stream": (whole + b"\xff\xff\xff\xffIDAT", True, False),
        "the Adler-32 in a second IDAT chunk, a bad third": (head + _chunk(b"IDAT", z[:-4]) + _chunk(b"IDAT", z[-4:])
                                                              + bad + iend, True, False),
        "the Adler-32 in a second IDAT chunk with a bad CRC": (head + _chunk(b"IDAT", z[:-4])
                                                               + _chunk(b"IDAT", z[-4:], crc=1) + iend, True, True),
        "the stream running into an IDAT chunk with a bad CRC": (head + _chunk(b"IDAT", z[:12])
                                                                 + _chunk(b"IDAT", z[12:], crc=1) + iend, True, True),
        "the stream running into an IDAT chunk cut short": (head + _chunk(b"IDAT", z[:12]) + _chunk(b"IDAT", z[12:])[:-6],
                                                            True, True),
        "IEND cut short": (whole + iend[:10], False, False),
        "a bad CRC in IEND": (whole + _chunk(b"IEND", b"", crc=1), False, False),
        "a second IHDR after the image data": (whole + head[8:33] + iend, False, False),
        "a PLTE with a bad CRC after the image data": (whole + _chunk(b"PLTE", b"\0" * 6, crc=1) + iend, False, False),
    }


def test_what_follows_the_image_data_is_read_only_as_far_as_libpng_reads_it():
    """After the first IDAT chunk the walk refuses nothing: a chunk of another kind ends the
    image data whatever it holds, and a fault (a later IDAT chunk cut short or with a bad
    CRC, a broken chunk header) ends it with the fault kept; libpng decides such an image
    on the host. Each PNG gets libpng's verdict and pixels, by both walks alike."""
    from gpudecode.decode.png import read_png_reference

    rng = np.random.default_rng(21)
    good = write_png(rng.integers(0, 256, (11, 9, 3)), 2, 8, FILTERS["paeth"])
    cases = after_the_image_data(good)
    reqs = [Request(d, "png", 11, 9, (0, 0, 11, 9), "s.tar", str(i)) for i, (d, _, _) in enumerate(cases.values())]
    dec = PngDecoder(device="cpu", num_threads=2)
    ours = dec.decode(reqs).settle()
    ref = CpuDecoder(num_threads=1).decode(reqs).settle()
    whole = CpuDecoder(num_threads=1).decode([Request(good, "png", 11, 9, (0, 0, 11, 9), "s.tar", "good")]).settle()
    faults = 0
    for k, (name, (data, fault, refused)) in enumerate(cases.items()):
        assert _walk(read_png, data) == _walk(read_png_reference, data), name
        assert (read_png(data).fault is not None) == fault, (name, read_png(data).fault)
        faults += fault
        assert (ref.errors[k] is not None) == refused, (name, ref.errors[k])  # (the cases say what libpng does)
        assert ours.errors[k] == ref.errors[k], (name, ours.errors[k], ref.errors[k])
        if not refused:
            assert np.array_equal(decoded_image(ours, k), decoded_image(whole, 0)), name
    assert dec.detours()["a_fault_after_the_image_data_by_libpng"] == faults == 8


def test_an_ancillary_chunks_bad_crc_is_ignored_as_libpng_ignores_it():
    rng = np.random.default_rng(7)
    text = _chunk(b"tEXt", b"Comment\0hello", crc=12345)
    data = write_png(rng.integers(0, 256, (5, 6, 3)), 2, 8, FILTERS["up"], extra=text)
    reqs, ours, ref = _both([data])
    assert ours.errors[0] is None and ref.errors[0] is None
    assert np.array_equal(decoded_image(ours, 0), decoded_image(ref, 0))


def test_the_cuda_kernels_equal_the_cpu_twin_under_the_simulator():
    """The CUDA kernels (one source with the twin) run by numba's simulator on tiny images
    of every kind, a bad filter type among them."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs under numba's CUDA simulator (this machine has a GPU: test_gpu.py runs them there)")
    from gpudecode.decode.png import _plan, inflate

    rng = np.random.default_rng(8)
    datas = []
    for color, depth in KINDS:
        palette = rng.integers(0, 256, (1 << min(depth, 8), 3)) if color == 3 else None
        datas.append(write_png(_samples(rng, 5, 6, color, depth), color, depth, FILTERS["each-row"], palette=palette))
    layouts = [read_png(d) for d in datas]
    plan = _plan(layouts, list(range(len(layouts))))
    src = np.zeros(plan.src_size, np.uint8)
    for j, lay in enumerate(layouts):
        src[plan.src_off[j]:plan.src_off[j] + lay.filtered_size] = np.frombuffer(inflate(lay), np.uint8)
    src[plan.src_off[4] + 2 * (layouts[4].stride + 1)] = 9  # image 4, row 2: filter type 9
    twin_src, gpu_src = src.copy(), src.copy()
    twin_out = np.zeros(plan.out_size, np.uint8)
    gpu_out = np.zeros(plan.out_size, np.uint8)
    twin_err = np.zeros(len(layouts), np.int32)
    gpu_err = np.zeros(len(layouts), np.int32)
    K.decode_rgb_cpu(twin_src, plan.src_off, plan.meta, plan.palettes, twin_out, twin_err)
    K.decode_rgb_cuda(gpu_src, plan.src_off, plan.meta, plan.palettes, gpu_out, gpu_err, tallest=int(plan.meta[:, K.H].max()))
    assert twin_err.tolist() == gpu_err.tolist() and twin_err[4] == 1 and twin_err.sum() == 1
    for j in range(len(layouts)):
        if j == 4:
            continue
        a = slice(plan.meta[j, K.OUT], plan.meta[j, K.OUT] + layouts[j].height * layouts[j].width * 3)
        assert np.array_equal(gpu_out[a], twin_out[a]), KINDS[j]


def test_the_wavefront_takes_images_taller_than_its_block_under_the_simulator():
    """The unfilter kernel's wavefront over images taller than its block (a block of 32
    rows: 70 rows are three chunks, each chunk's first row reading the last one's), wide
    and narrow, one byte a pixel to eight (RGBA at 16 bits), packed 1-bit grey, every
    filter type per row, and a bad filter type in a later chunk: the pixels libpng gives
    (Pillow's reading of the same files), the bad image its error."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs under numba's CUDA simulator (this machine has a GPU: test_gpu.py runs them there)")
    from gpudecode.decode.png import _plan, inflate

    rng = np.random.default_rng(21)
    kinds = [(2, 8, 70, 5), (6, 16, 70, 3), (0, 1, 67, 19), (3, 4, 33, 7), (4, 8, 40, 2), (2, 8, 70, 4)]
    datas = []
    for color, depth, h, w in kinds:
        palette = rng.integers(0, 256, (1 << min(depth, 8), 3)) if color == 3 else None
        datas.append(write_png(_samples(rng, h, w, color, depth), color, depth, FILTERS["each-row"], palette=palette))
    layouts = [read_png(d) for d in datas]
    plan = _plan(layouts, list(range(len(layouts))))
    src = np.zeros(plan.src_size, np.uint8)
    for j, lay in enumerate(layouts):
        src[plan.src_off[j]:plan.src_off[j] + lay.filtered_size] = np.frombuffer(inflate(lay), np.uint8)
    src[plan.src_off[5] + 45 * (layouts[5].stride + 1)] = 7  # the last image, row 45 (its second chunk): type 7
    out = np.zeros(plan.out_size, np.uint8)
    errors = np.zeros(len(layouts), np.int32)
    assert K.wavefront_rows(32) == 32 and K.wavefront_rows(70) == 96 and K.wavefront_rows(5000) == K.ROWS_MAX
    K.decode_rgb_cuda(src, plan.src_off, plan.meta, plan.palettes, out, errors, tallest=32)
    assert errors.tolist() == [0, 0, 0, 0, 0, K.BAD_FILTER]
    for j, (color, depth, h, w) in enumerate(kinds[:5]):
        got = out[plan.meta[j, K.OUT]:plan.meta[j, K.OUT] + h * w * 3].reshape(h, w, 3)
        want = np.asarray(Image.open(io.BytesIO(datas[j])).convert("RGB")) if depth < 16 else None
        ref = _both([datas[j]])[2]
        assert np.array_equal(got, decoded_image(ref, 0)), (color, depth)
        if want is not None:
            assert np.array_equal(got, want), (color, depth)


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 5552, 5553, 70_000, 300_001])
def test_the_adler_pieces_give_zlibs_adler32(n):
    """kernels/png.adler_part summed by pieces (the CUDA kernel's arithmetic, in its CPU
    twin) equals zlib.adler32 on streams of every length around the piece and 5552 (zlib's
    own block), of bytes all 255 (the sums' largest) and random."""
    rng = np.random.default_rng(n)
    streams = [np.full(n, 255, np.uint8), rng.integers(0, 256, n, dtype=np.uint8)]
    src = np.concatenate([np.zeros(3, np.uint8), *streams])  # (offsets not at 0)
    got = K.adler32_cpu(src, np.array([3, 3 + n], np.int64), np.array([n, n], np.int64))
    assert got.tolist() == [zlib.adler32(x.tobytes()) for x in streams]


def test_the_adler_check_kernels_under_the_simulator():
    """The CUDA Adler-32 check (one source with the twin): a stream with a wrong stored
    value is BAD_ADLER, one refused already keeps its code, the rest stay 0."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs under numba's CUDA simulator (this machine has a GPU: test_gpu.py runs them there)")
    rng = np.random.default_rng(9)
    lengths = np.array([1, 300, 2000, 700], np.int64)
    offs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    src = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    stored = np.array([zlib.adler32(src[o:o + n].tobytes()) for o, n in zip(offs, lengths)], np.int64)
    stored[2] ^= 1 << 20
    errors = np.array([0, 0, 0, K.BAD_FILTER], np.int32)
    K.check_adler_cuda(src, offs, lengths, stored, np.zeros((4, 2), np.int64), errors, int(lengths.max()))
    assert errors.tolist() == [0, 0, K.BAD_ADLER, K.BAD_FILTER]


def test_what_the_adler_kernel_refuses_zlib_decides_as_on_the_cpu_under_the_simulator():
    """The GPU path after nvCOMP (decode/png.py's _run_cuda), with the raw Deflate inflated
    here as nvCOMP inflates it (bytes after its end ignored) and the kernels under the
    simulator: a stream whose last four bytes are no Adler-32 is decided by zlib, as the
    CPU decoder's libpng decides it. A stream that ends before its last IDAT chunk is taken
    (zlib's inflate unfiltered again: the pixels of the same PNG without that chunk); a
    wrong Adler-32 and bytes after the stream in its chunk are refused in zlib's words."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs under numba's CUDA simulator (this machine has a GPU: test_gpu.py runs nvCOMP there)")
    from gpudecode.decode.png import _plan, adler_stored

    rng = np.random.default_rng(10)
    good = write_png(_samples(rng, 6, 5, 3, 4), 3, 4, FILTERS["each-row"], palette=rng.integers(0, 256, (16, 3)))
    datas = [good, idat_after_the_stream(good), _broken()["wrong Adler-32"][0], idat_after_the_stream(good, b"\0")]
    lays = [read_png(d) for d in datas]
    plan = _plan(lays, list(range(len(lays))))
    src = torch.zeros(plan.src_size, dtype=torch.uint8)
    for j, lay in enumerate(lays):  # nvCOMP's part: raw Deflate
        raw = zlib.decompressobj(-15).decompress(bytes(lay.raw_deflate()))
        src[plan.src_off[j]:plan.src_off[j] + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    n = len(lays)
    lengths = np.array([lay.filtered_size for lay in lays], np.int64)
    stored = np.array([adler_stored(lay) for lay in lays], np.int64)
    kernel_errors = np.zeros(n, np.int32)
    K.check_adler_cuda(src.numpy(), plan.src_off, lengths, stored, np.zeros((n, 2), np.int64), kernel_errors,
                       int(lengths.max()))
    assert kernel_errors.tolist() == [0, K.BAD_ADLER, K.BAD_ADLER, K.BAD_ADLER]
    out = torch.zeros(plan.out_size, dtype=torch.uint8)
    K.decode_rgb_cuda(src.numpy(), plan.src_off, plan.meta, plan.palettes, out.numpy(), kernel_errors,
                      tallest=int(plan.meta[:, K.H].max()))
    errors: list[str | None] = [None] * n
    PngDecoder(device="cpu")._checksums_by_zlib(
        plan, kernel_errors, errors, src, tuple(torch.from_numpy(a) for a in (plan.src_off, plan.meta, plan.palettes))
        + (out,), 0)
    ref = CpuDecoder(num_threads=1).decode([_req(d, str(k)) for k, d in enumerate(datas)]).settle()
    assert kernel_errors.tolist() == [0, 0, 0, 0]
    assert errors[:2] == [None, None] and ref.errors[:2] == [None, None]
    assert "incorrect data check" in errors[2] and "incorrect data check" in ref.errors[2]
    assert "extra compressed data" in errors[3] and "Extra compressed data" in ref.errors[3]
    size = 6 * 5 * 3
    image = [out[int(plan.meta[j, K.OUT]):int(plan.meta[j, K.OUT]) + size].numpy().reshape(6, 5, 3) for j in (0, 1)]
    assert np.array_equal(image[1], image[0]) and np.array_equal(image[0], decoded_image(ref, 0))


@pytest.mark.parametrize("z", [b"x\x9c", b"x\x9c\x03", b"x\x9c\x03\x00\x00", b"x\x9c\x03\x00\x00\x00\x00"])
def test_a_stream_too_short_for_the_gpus_inflate_gets_zlibs_verdict(z):
    """The chunk walk takes a zlib stream of 2-7 bytes (its header is checked); nvCOMP is
    never handed one (no room for a Deflate stream and its Adler-32): the GPU path's
    verdict for it is zlib's, the one the CPU path gives."""
    from gpudecode.decode.png import _SHORTEST_ZLIB, _zlib_verdict, adler_stored

    good = write_png(np.zeros((4, 4, 3), np.int64), 2, 8, FILTERS["none"])
    data = _rebuild(good, z)
    lay = read_png(data)
    assert len(lay.stream) < _SHORTEST_ZLIB
    cpu = PngDecoder(device="cpu").decode([_req(data, "short")]).settle().errors[0]
    assert cpu is not None and _zlib_verdict(lay) == cpu and "not enough image data" in cpu
    assert adler_stored(lay) == (int.from_bytes(z[-4:], "big") if len(z) >= 4 else 0)


def test_png_kernels_ptx_assembles_for_sm80_and_sm90_without_spills(tmp_path):
    from test_kernels import _ptxas, assemble_without_spills

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = ("import json; from gpudecode.kernels import png\n"
            "print(json.dumps({f'{k}|{cc}': v for cc in ((8, 0), (9, 0)) for k, v in png.compile_ptx(cc).items()}))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    import json

    ptxs = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(ptxs) == 2 * len(K._KERNELS)
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("PTX compiled; torch's triton package ships no ptxas-blackwell here to assemble it")
    for key, ptx in ptxs.items():
        arch = "sm_" + "".join(c for c in key.split("|")[1] if c.isdigit())
        regs = assemble_without_spills(ptxas, ptx, arch,
                                       tmp_path / f"{key.replace('|', '-').replace(' ', '').replace(',', '')}.ptx")
        print("png kernel", key, "registers", regs)


def _walk(fn, data: bytes, max_pixels: int = 0):
    try:
        lay = fn(data, max_pixels)
    except PngError as e:
        return "error", str(e)
    return (lay.width, lay.height, lay.depth, lay.color, lay.interlaced, lay.palette.tobytes(), bytes(lay.stream),
            lay.idat_sizes, lay.fault)


def test_the_native_chunk_walk_equals_the_python_reference_message_for_message(photos):
    """read_png walks natively (csrc/png_walk.cpp, the GIL released); its layout and each
    refusal's message equal read_png_reference's, on every kind written here, photographs
    saved by Pillow (several IDAT chunks each), the malformed ones, and random damage to
    them (a byte changed, a cut, chunk types and lengths rewritten)."""
    from PIL import Image

    from gpudecode.decode.png import read_png_reference

    rng = np.random.default_rng(11)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
    cases = [write_png(rng.integers(0, 1 << d, (9, 13, channels[c])), c, d, FILTERS["each-row"]) for c, d in KINDS]
    for img in list(photos.values())[:3]:
        b = io.BytesIO()
        Image.fromarray(img).save(b, "PNG")
        cases.append(b.getvalue())
    cases += [d for d, _ in _broken().values()]
    cases.append(_adam7(rng.integers(0, 256, (7, 9, 3)).astype(np.uint8)))
    damaged = []
    for data in cases[:20]:
        for _ in range(40):
            d = bytearray(data)
            how = rng.integers(0, 4)
            if how == 0:
                d[rng.integers(0, len(d))] = rng.integers(0, 256)
            elif how == 1:
                d = d[: rng.integers(0, len(d))]
            elif how == 2 and len(d) > 40:
                at = rng.integers(8, len(d) - 8)
                d[at:at + 4] = bytes(rng.integers(0, 256, 4).astype(np.uint8))
            else:  # a chunk type made of any bytes, quotes and backslashes included
                d[12:16] = bytes(rng.choice([39, 34, 92, 9, 200, 65, 0], 4).astype(np.uint8))
            damaged.append(bytes(d))
    ok = refused = 0
    for data in cases + damaged:
        for limit in (0, 100):
            ours, ref = _walk(read_png, data, limit), _walk(read_png_reference, data, limit)
            assert ours == ref, (data[:40], ours[:2], ref[:2])
            ok, refused = ok + (ours[0] != "error"), refused + (ours[0] == "error")
    assert ok >= 25 and refused > 300, (ok, refused)  # (both outcomes many times: the comparison says something)


class _StandInNvcomp:
    """nvCOMP's batched raw Deflate as decode/png.py calls it, on the CPU (zlib): decode()
    finds each stream's size unless given a config (then it holds each output to the
    config's size: `fails` raises where one does not fit, else the output is cut or padded
    with 0xAB, as a real one might leave it)."""

    def __init__(self, fails: bool):
        self.fails, self.passes = fails, 0

    @staticmethod
    def as_arrays(tensors):
        return list(tensors)

    def decompression_config(self, batch):
        self.passes += 1
        return tuple(len(zlib.decompressobj(-15).decompress(bytes(t.numpy()))) for t in batch)

    def decode(self, batch, decompression_config=None):
        if decompression_config is None:
            decompression_config = self.decompression_config(batch)
        out = []
        for t, size in zip(batch, decompression_config):
            data = zlib.decompressobj(-15).decompress(bytes(t.numpy()))
            if len(data) != size and self.fails:
                raise RuntimeError("a stream does not fit its size (stand-in)")
            a = np.frombuffer(bytearray((data + b"\xab" * size)[:size]), np.uint8).view(_Sized)
            out.append(a)
        return out


class _Sized(np.ndarray):
    @property
    def buffer_size(self) -> int:
        return int(self.size)


@pytest.mark.parametrize("staged", [1, 3], ids=["staged on one thread", "staged on three"])
@pytest.mark.parametrize("fails", [True, False], ids=["a misfit raises", "a misfit is cut or padded"])
def test_nvcomps_sizes_are_kept_for_batches_of_one_size_and_a_misfit_is_still_its_error(fails, staged, monkeypatch):
    """decode/png.py's nvCOMP path (_inflate_nvcomp, _nvcomp_decode) with a stand-in for
    nvCOMP on the CPU: the sizes nvCOMP finds for a batch whose streams all fit IHDR's are
    kept and reused by the next batch of the same sizes (no second pass); a batch with a
    stream that does not fit them is inflated right all the same, each image's verdict
    zlib's: where nvCOMP raises, the batch's sizes are found again; where it cuts or pads,
    the Adler-32 check (here its CPU twin) sends the image to zlib. The streams staged on
    one thread or split over three (what a large batch gets), to the same bytes."""
    import sys
    import types

    from gpudecode.decode import png as png_module
    from gpudecode.decode.png import _plan, adler_stored, inflate

    monkeypatch.setattr(png_module, "_STAGE_SHARE", 1)  # (a share of any size: the split as a large batch's)

    nv = _StandInNvcomp(fails)
    monkeypatch.setitem(sys.modules, "nvidia.nvcomp", types.SimpleNamespace(as_arrays=nv.as_arrays))
    import nvidia

    monkeypatch.setattr(nvidia, "nvcomp", sys.modules["nvidia.nvcomp"], raising=False)
    rng = np.random.default_rng(15)
    goods = [write_png(rng.integers(0, 256, (12, 17, 3)), 2, 8, FILTERS["each-row"]) for _ in range(4)]
    raw = zlib.decompress(b"".join(_idats(goods[0])))
    short = _rebuild(goods[0], zlib.compress(raw[:-5]))
    long = _rebuild(goods[0], zlib.compress(raw + b"\0" * 30))
    dec = PngDecoder(device="cpu", num_threads=staged)
    dec._nvcomp = nv

    def run(datas):
        lays = [read_png(d) for d in datas]
        plan = _plan(lays, list(range(len(lays))))
        src = torch.zeros(plan.src_size, dtype=torch.uint8)
        errors: list[str | None] = [None] * len(lays)
        assert dec._inflate_nvcomp(plan, errors, src)
        for j, lay in enumerate(lays):  # the Adler-32 check, then zlib for what it refuses
            if errors[j] is None:
                got = src[plan.src_off[j]:plan.src_off[j] + lay.filtered_size].numpy().tobytes()
                if zlib.adler32(got) != adler_stored(lay):
                    dec.adler_by_zlib += 1
                    try:
                        got = inflate(lay)
                    except PngError as e:
                        errors[j] = str(e)
                        continue
                assert got == zlib.decompress(lay.stream)
        return errors

    assert run(goods) == [None] * 4 and nv.passes == 1
    assert run(goods) == [None] * 4 and nv.passes == 1 and dec.sizes_reused == 1  # (kept)
    errors = run([goods[0], short, goods[2], long])  # (IHDR's sizes those of `goods`)
    assert errors[0] is None and errors[2] is None
    assert "not enough image data" in errors[1] and "more image data" in errors[3], errors
    if fails:  # the kept sizes refused: found again for the batch, and dropped (no other kept)
        assert nv.passes == 2 and dec.adler_by_zlib == 0 and dec._sizes == {}
    else:  # cut or padded to the kept sizes: the Adler-32 sends both to zlib
        assert nv.passes == 1 and dec.adler_by_zlib == 2 and dec.sizes_reused == 2
    run(goods)
    assert dec._sizes is not None and len(dec._sizes) == 1  # (the good batch's sizes, kept again or still)


def test_a_stream_outgrowing_its_declared_window_goes_to_libpng():
    """A zlib stream declaring a window under 32 KiB that the image data outgrows: libpng,
    inflating a row at a time, keeps only that window and refuses a distance past it,
    which a whole-stream inflate (zlib here, nvCOMP on a GPU) would take. Such an image
    goes to libpng on the host: refused as libpng refuses it, or decoded as it decodes it;
    a small window the data fits stays in the two halves."""
    rng = np.random.default_rng(16)
    top = rng.integers(0, 256, (16, 24, 3))
    raw = b"".join(b"\0" + bytes(int(v) for v in r.reshape(-1)) for r in np.concatenate([top, top]))
    base = write_png(np.concatenate([top, top]), 2, 8, FILTERS["none"])

    def window(bits: int, data: bytes = raw) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, bits)
        return c.compress(data) + c.flush()

    z = window(15)  # (the bottom half repeats the top: distances of 16 rows, 1,168 bytes)
    far = z[:1].replace(z[:1], bytes([(1 << 4) | 8])) + z[1:]  # the same stream declaring 512 bytes
    far = far[:1] + bytes([(far[1] & 0xE0) | (31 - ((far[0] << 8 | (far[1] & 0xE0)) % 31))]) + far[2:]
    datas = [_rebuild(base, far), _rebuild(base, window(9)), _rebuild(base, window(12))]
    reqs, ours, ref = _both(datas)
    assert ref.errors[0] is not None and ours.errors[0] == ref.errors[0], (ours.errors[0], ref.errors[0])
    for k in (1, 2):
        assert ours.errors[k] is None and ref.errors[k] is None
        assert np.array_equal(decoded_image(ours, k), decoded_image(ref, k))
    dec = PngDecoder(device="cpu")
    dec.decode(reqs).settle()
    assert dec.detours()["outgrowing_their_window_by_libpng"] == 2  # (window(12): 4 KiB, which 2,352 bytes fit)
