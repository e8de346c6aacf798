"""Python fuzz targets: each takes bytes and fails (raises AssertionError, or lets an
unexpected exception through) when gpudecode breaks a promise on them. atheris drives
them (`fuzz_py.py TARGET`, `make fuzz`); the test suite replays the saved corpus and
every regression input through them (tests/test_fuzz_corpus.py).

Promises checked:
- tar_stream: the stream parser and the native index agree exactly (members, data,
  fault message, offset, member), plain and gzipped; the native grouping of the names
  (group_names) is the Python rule's (split_key, is_metadata, Grouper).
- gzip_path: a .tar.gz stream through the reader gives members and a TarFault, or the
  project's own ShardFormatError / ShardReadError; never another exception.
- labels: a label is an int64 integer equal to what the text or JSON says, or LabelError;
  the native parse of a read batch (probe_fields) takes exactly the text labels
  parse_label takes, with the same value.
- shard_list: shard specs expand to a list of str, or ValueError / GpuDecodeError.
- npy: a tensor sample is read within its bytes, or ValueError; where the native header
  parser accepts, numpy's parser reads the same shape, dtype and offset.
- image: probe + CPU decode on hostile bytes give pixels of the probed size or the
  project's DecodeError / a per-image error string; never another exception.
- fields: a sample's field (the first byte picks txt, cls, json, npy or another
  extension) decodes to what Python's own readers make of the rest (str, int, json.loads,
  numpy's np.load without pickles, bytes), or ValueError; an array never larger than
  the member's bytes.
- mask: a segmentation mask's member (PNG or .npy, `gpudecode.Mask`) is a 2-D tensor of
  a mask dtype equal to what Pillow (np.array of the PNG) or np.load read, within the
  pixel limit, or ValueError; never another exception. A PNG Pillow refuses and libpng
  takes (no IEND, a broken chunk after the image data) is read as the CPU decoder reads
  it: its samples through libpng's transforms are the CPU decoder's RGB pixels.
- boxes: a detection target's member (JSON or .npy, `gpudecode.Boxes`; the first byte
  picks the format) is finite XYXY float32 [K, 4] of no negative width or height, equal
  to what json.loads or np.load read (converted as torchvision converts the format), with
  int64 labels one a box where the member has them, or ValueError; never another
  exception. Placed on a canvas (RandomZoomOut's) or not, then moved by a crop, a resize,
  padding and flips drawn from the bytes, every box lies in the canvas and then in the
  output, and every box kept is at least the minimum size. A RandomIoUCrop drawn from
  them (an image of a size from the bytes) ends, inside the image, holding one box's
  centre at least where it crops, the boxes it leaves out emptied at its corner, and drawn
  in a batch of two it is the same crop.
- record: a precached image's record (`.gpudecode.json`, transforms.stored) is read as
  json.loads reads it (its source size and steps, each a size of two integers from 1),
  or ValueError; never another exception. Its member written again reads the same. Boxes
  drawn from the bytes, moved by it, lie in the stored image (a record of no step leaves
  them as they were, as no record does); a mask of its source size,
  where the record's sizes are small, comes out of the stored image's size.
- warp_pick: the native nearest warp (a rotation's or affine's canvas on the CPU) picks
  the pixel torch's grid_sample picks, or the fill where grid_sample leaves the image, at
  every grid point the bytes make (read as warp_fuzzer.cpp reads them: NaN, infinities,
  huge and tiny scales included), on a CPU where it is used (warped.nearest_is_exact); the
  native bilinear warp makes torch's ops' bytes (warped.grid_sample_filled) on a finite
  grid where its part holds every tap, and counts the pixels whose taps it does not. A
  perspective warp's grid (a denominator: flags bit 8) alike, its quotients rounded apart.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import tempfile

TARGETS = ("tar_stream", "gzip_path", "labels", "shard_list", "npy", "image", "png_halves", "parquet_pages", "fields",
           "mask", "boxes", "record", "warp_pick")


def _stream_view(stream):
    from gpudecode.io.tario import TarFault, iter_stream

    members, fault = [], None
    for item in iter_stream(stream):
        if isinstance(item, TarFault):
            fault = (item.message, item.offset, item.member, item.io, item.after_end)
        else:
            m, d = item
            members.append((m.name, m.offset, m.type, d if d is not None else b""))
    return members, fault


def tar_stream(data: bytes) -> None:
    from gpudecode.io.tario import index_buffer

    idx, fault = index_buffer(data)
    native = ([(m.name, m.offset, m.type, data[m.offset:m.offset + m.size] if m.type == "0" else b"") for m in idx],
              None if fault is None else (fault.message, fault.offset, fault.member, fault.io, fault.after_end))
    assert _stream_view(io.BytesIO(data)) == native, "stream parser and native index disagree"
    assert _stream_view(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data, 1)))) == native, "gzip stream disagrees"
    _grouping([m.name for m in idx])


def _grouping(names: list[str]) -> None:
    from gpudecode import _native
    from gpudecode.io.reader import Grouper
    from gpudecode.io.tario import split_key

    for prev in (None, "k"):
        got = _native.group_names(names, prev)
        if got is None:
            assert any(not 0x20 <= ord(c) <= 0x7e for n in names for c in n), "ASCII names left to Python"
            continue
        rel, exts, keys = got
        g = Grouper()
        g.key, g.index = prev, 0
        want = [g.group(n) for n in names]
        assert rel.tolist() == [-1 if w is None else w for w in want], "native grouping differs"
        assert exts == [None if w is None else split_key(n)[1] for n, w in zip(names, want)], "extensions differ"
        assert len(keys) == g.index, "sample keys differ"


def gzip_path(data: bytes) -> None:
    from gpudecode.errors import ShardFormatError, ShardReadError
    from gpudecode.io.reader import stream_members

    stream = io.BufferedReader(io.BytesIO(data))  # type: ignore[arg-type]
    try:
        for _ in stream_members(stream, "fuzz.tar.gz"):
            pass
    except (ShardFormatError, ShardReadError) as e:
        assert e.shard == "fuzz.tar.gz"


_TEXT_INT = re.compile(rb"\s*[+-]?[0-9]+\s*")


def labels(data: bytes) -> None:
    from gpudecode.errors import LabelError
    from gpudecode.labels import parse_label

    for ext in ("cls", "json"):
        try:
            v = parse_label({ext: data}, [ext], shard="s", key="k")
        except LabelError as e:
            assert e.shard == "s" and e.key == "k"
            continue
        assert type(v) is int and -(1 << 63) <= v < (1 << 63)
        if ext == "cls":
            assert _TEXT_INT.fullmatch(data) and v == int(data)
        else:
            doc = json.loads(data)
            assert doc["label"] == v and type(doc["label"]) is int
    from gpudecode import _native

    try:
        want: int | None = parse_label({"cls": data}, ["cls"], shard="s", key="k", allow_negative=True)
    except LabelError:
        want = None
    *_, got, ok = _native.probe_fields([{"cls": data}], ["jpg"], ["cls"])
    assert bool(ok[0]) == (want is not None), "native label parse takes what parse_label refuses, or the reverse"
    assert not ok[0] or int(got[0]) == want, "native label value differs"


def shard_list(data: bytes) -> None:
    from gpudecode.errors import GpuDecodeError
    from gpudecode.io.shards import expand_urls

    spec = data.decode("utf-8", "surrogateescape")
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)
        try:
            urls = expand_urls(spec)
            assert isinstance(urls, list) and all(isinstance(u, str) for u in urls)
        except (ValueError, GpuDecodeError):
            pass
        finally:
            os.chdir(cwd)


def _numpy_header(data: bytes):
    """numpy's own reading of a .npy header: (shape, fortran, dtype, offset), or None."""
    import numpy as np

    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f, max_header_size=1 << 20)  # (3, 0) differs from (2, 0) in non-ASCII only
    except Exception:  # numpy's parser: ValueError, SyntaxError, EOFError, ...
        return None
    return shape, fortran, dtype, f.tell()


def npy(data: bytes) -> None:
    import numpy as np

    from gpudecode import _native
    from gpudecode.tensors import npy_layout, npy_rgb

    try:  # the native header parser accepts a subset of what numpy reads, and agrees with it there
        info = _native.probe(data)
    except ValueError:
        info = None
    if info is not None:
        ref = _numpy_header(data)
        assert ref is not None, "native npy header parser accepts what numpy refuses"
        shape, fortran, dtype, offset = ref
        assert (dtype == np.uint8 and not fortran and shape == (info["height"], info["width"], 3)
                and offset == info["data_offset"]), ("native npy header parser disagrees with numpy", info, ref)
        assert offset + shape[0] * shape[1] * 3 <= len(data)
    try:
        h, w, off = npy_layout(data)
    except ValueError:
        assert info is None, "npy_layout refuses what the native parser accepts"
        return
    assert h >= 1 and w >= 1 and off + h * w * 3 <= len(data)
    assert npy_rgb(data).shape == (h, w, 3)


_FIELD_EXTS = ("txt", "cls", "json", "npy", "seg.npy", "bin")


def fields(data: bytes) -> None:
    import numpy as np

    from gpudecode.fields import decode_member

    if not data:
        return
    ext, body = _FIELD_EXTS[data[0] % len(_FIELD_EXTS)], data[1:]
    try:
        value = decode_member(ext, body)
    except ValueError:
        value = None
    if ext == "txt":
        try:
            want = body.decode("utf-8")
        except UnicodeDecodeError:
            want = None
        assert value == want, "a caption differs from Python's UTF-8 decoding"
    elif ext == "cls":
        assert value is None or (type(value) is int and value == int(body) and -(1 << 63) <= value < (1 << 63))
    elif ext == "json":
        if value is not None:  # (compared as written out: NaN is not equal to itself)
            assert json.dumps(value) == json.dumps(json.loads(body)), "a JSON field differs from json.loads"
    elif ext.endswith("npy"):
        if value is None:
            return
        assert isinstance(value, np.ndarray) and not value.dtype.hasobject and value.nbytes <= len(body)
        ref = np.load(io.BytesIO(body), allow_pickle=False)
        assert ref.shape == value.shape and ref.dtype == value.dtype
        assert np.array_equal(ref, value, equal_nan=value.dtype.kind in "fc"), "an .npy field differs from np.load"
    else:
        assert value == body


_MASK_LIMIT = 1 << 16


def mask(data: bytes) -> None:
    import numpy as np
    import torch
    from PIL import Image

    from gpudecode import _native
    from gpudecode.decode.png import read_png
    from gpudecode.fields import decode_mask
    from gpudecode.transforms.masks import MASK_DTYPES

    try:
        got = decode_mask(data, _MASK_LIMIT)
    except ValueError:
        return
    assert isinstance(got, torch.Tensor) and got.ndim == 2 and got.dtype in MASK_DTYPES
    assert got.numel() <= _MASK_LIMIT, "a mask over the pixel limit was read"
    if data[:4] != b"\x89PNG":
        ref = np.load(io.BytesIO(data), allow_pickle=False)
        ref = ref[0] if ref.ndim == 3 else ref
        assert tuple(ref.shape) == tuple(got.shape), "an .npy mask's shape differs from np.load's"
        assert np.array_equal(ref.astype(np.int64), got.numpy().astype(np.int64)), "an .npy mask differs from np.load's"
        return
    try:
        with Image.open(io.BytesIO(data)) as im:
            ref = np.array(im)
    except Exception:  # (Pillow refuses what libpng takes: no IEND, a chunk after the data it parses)
        ref = None
    if ref is not None:
        assert tuple(ref.shape) == tuple(got.shape), "a PNG mask's shape differs from Pillow's"
        assert np.array_equal(ref.astype(np.int64), got.numpy().astype(np.int64)), "a PNG mask differs from Pillow's"
        return
    # taken where Pillow refuses: the CPU decoder (its direct path, which the png fuzzer holds
    # to libpng's verdicts and pixels) takes it too, with the RGB libpng's transforms make of
    # these samples. (The module's own libpng, linked in: the same whatever was imported first.)
    layout = read_png(data, _MASK_LIMIT)
    err, rgb, _ = _native.decode_png(data, (0, 0, layout.height, layout.width), _MASK_LIMIT, True)
    assert err is None, f"a PNG mask the CPU decoder refuses ({err}) was read"
    v = got.numpy().astype(np.int64)
    if layout.color == 3:
        want = layout.palette[v]
    else:
        grey = v >> 8 if layout.depth == 16 else v * 255 if layout.depth == 1 else v
        want = np.repeat(grey[..., None], 3, axis=2)
    assert np.array_equal(np.frombuffer(rgb, np.uint8).reshape(want.shape), want.astype(np.uint8)), \
        "a PNG mask differs from libpng's pixels"


_BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")
_BOX_KEYS, _LABEL_KEYS = ("boxes", "bbox", "bboxes"), ("labels", "category_id", "category", "categories")


def _boxes_said(value):
    """(boxes, labels or None) as a member's JSON says them, by the rule fields.Boxes
    documents: a record's boxes and labels keys, a list of COCO annotations, a bare list."""
    if isinstance(value, dict):
        return (next(value[k] for k in _BOX_KEYS if k in value),
                next((value[k] for k in _LABEL_KEYS if k in value), None))
    if isinstance(value, list) and value and all(isinstance(a, dict) for a in value):
        labels = [next((a[k] for k in _LABEL_KEYS if k in a), None) for a in value]
        return [next(a[k] for k in _BOX_KEYS if k in a) for a in value], None if labels[0] is None else labels
    return value, None


def boxes(data: bytes) -> None:
    import numpy as np
    import torch
    import torchvision.transforms.v2.functional as F
    from torchvision import tv_tensors

    from gpudecode.fields import decode_boxes
    from gpudecode.transforms.boxes import box_moves, move_boxes, on_canvas

    if not data:
        return
    fmt, body = _BOX_FORMATS[data[0] % 3], data[1:]
    try:
        got = decode_boxes(body, fmt)
    except ValueError:
        return
    xyxy, labels = got.xyxy, got.labels
    assert xyxy.dtype == np.float32 and xyxy.ndim == 2 and xyxy.shape[1] == 4 and np.isfinite(xyxy).all()
    assert (xyxy[:, 2] >= xyxy[:, 0]).all() and (xyxy[:, 3] >= xyxy[:, 1]).all(), "a box of negative size was read"
    assert labels is None or (labels.dtype == np.int64 and labels.shape == (len(xyxy),))
    if body[:6] == b"\x93NUMPY":
        said, said_labels = np.load(io.BytesIO(body), allow_pickle=False), None
    else:
        said, said_labels = _boxes_said(json.loads(body))
    ref = np.asarray(said, np.float64).astype(np.float32).reshape(-1, 4)
    ref = F.convert_bounding_box_format(tv_tensors.BoundingBoxes(torch.from_numpy(ref), format=fmt, canvas_size=(1, 1)),
                                        new_format="XYXY").as_subclass(torch.Tensor).numpy()
    assert np.array_equal(ref, xyxy), "boxes differ from what json.loads / np.load read"
    assert (labels is None) == (said_labels is None) and (labels is None or labels.tolist() == list(said_labels))
    # a move drawn from the bytes: a source box, the size it is resized to, an offset, flips
    from gpudecode.kernels import fused

    rng = np.random.default_rng(len(data) * 7919 + data[-1])
    g = np.zeros((1, fused.GEOM), np.int64)
    g[0, fused.TOP], g[0, fused.LEFT] = rng.integers(-8, 64, 2)
    g[0, fused.BH], g[0, fused.BW], g[0, fused.VH], g[0, fused.VW] = rng.integers(1, 96, 4)
    g[0, fused.OY], g[0, fused.OX] = rng.integers(-16, 48, 2)
    g[0, fused.FLIP], g[0, fused.VFLIP] = rng.integers(0, 2, 2)
    out_size = tuple(int(v) for v in rng.integers(1, 64, 2))
    if data[-1] & 1:  # (placed on a RandomZoomOut canvas first: clamped to it)
        top, left, bottom, right = (int(v) for v in rng.integers(0, 32, 4))
        h, w = (int(v) for v in rng.integers(1, 64, 2))
        xyxy = on_canvas(xyxy, np.array([top, left, h, w, h + top + bottom, w + left + right]))
        assert (xyxy[:, 0::2] >= 0).all() and (xyxy[:, 0::2] <= w + left + right).all(), "a box left its canvas"
        assert (xyxy[:, 1::2] >= 0).all() and (xyxy[:, 1::2] <= h + top + bottom).all(), "a box left its canvas"
    moved, ok = move_boxes(xyxy, box_moves(g, bool(data[-1] & 2))[0], out_size, min_size=1.0, min_area=1.0)
    assert moved.shape == xyxy.shape and np.isfinite(moved).all()
    assert (moved[:, 0::2] >= 0).all() and (moved[:, 0::2] <= out_size[1]).all(), "a box left the output"
    assert (moved[:, 1::2] >= 0).all() and (moved[:, 1::2] <= out_size[0]).all(), "a box left the output"
    w, h = moved[ok, 2] - moved[ok, 0], moved[ok, 3] - moved[ok, 1]
    assert (w >= 1).all() and (h >= 1).all() and (w * h >= 1).all(), "a box under the minimum was kept"
    # a crop drawn from the boxes (RandomIoUCrop, SSD's): inside the image, the boxes whose centres
    # it holds marked, one at least where it crops; those it leaves out emptied at its corner
    import random

    from gpudecode.transforms.iou_crop import RandomIoUCrop, emptied

    ih, iw = (int(v) for v in rng.integers(1, 300, 2))
    crop = RandomIoUCrop()
    try:
        p = crop.draw(random.Random(len(data)), (ih, iw), xyxy)
    except ValueError as e:  # (an image of one row: torchvision's division by zero, named)
        assert "height 0" in str(e), str(e)
    else:
        # drawn with a batch (its first rounds at once), the same crop
        key = random.Random(len(data)).getrandbits(64)
        other = xyxy[::-1].copy()
        try:
            alone = crop.crop(key + 1, (iw, ih), other)
        except ValueError:  # (an image too low for its crops: refused alone, so in the batch too)
            alone = None
        try:
            both = crop.crops([key, key + 1], [(ih, iw), (iw, ih)], [xyxy, other])
        except ValueError as e:
            assert alone is None, f"the batch refused what crop() takes: {e}"
        else:
            assert alone is not None, "the batch took what crop() refuses"
            for got, want in zip(both, (p, alone)):
                assert got["crop"] == want["crop"] and np.array_equal(got.get("inside"), want.get("inside"))
        t, l, ch, cw = p["crop"]
        assert 0 <= t and 0 <= l and 0 < ch and 0 < cw and t + ch <= ih and l + cw <= iw, (p["crop"], ih, iw)
        if "inside" in p:
            assert p["inside"].shape == (len(xyxy),) and p["inside"].any(), "a crop that holds no box's centre"
            out = emptied(xyxy, p)
            assert np.array_equal(out[p["inside"]], xyxy[p["inside"]]), "a box inside the crop changed"
            assert (out[~p["inside"]] == np.float32([l, t, l, t])).all(), "a box left out is not emptied"
        _ragged_crop(xyxy, labels, ih, iw, len(data))
    # then a warp drawn from the bytes (a rotation, an affine warp, a perspective): each box the
    # box around its corners' new places, inside the output, and what is kept is what kept() says
    from gpudecode.errors import TransformError
    from gpudecode.transforms.boxes import kept
    from gpudecode.transforms.warps import ElasticTransform, RandomAffine, RandomPerspective, RandomRotation

    step = [RandomRotation(180, center=None if data[-1] & 2 else (3.5, -2.0)),
            RandomAffine(90, (0.5, 0.5), (0.1, 3.0), (-60, 60, -60, 60)), RandomPerspective(1.0, p=1.0),
            ElasticTransform(80.0, 1.0)][data[0] % 4]
    try:
        drawn = step.drawn(step.draw(random.Random(len(data)), out_size), out_size)
    except TransformError:  # (an output too small for the elastic field's blur: refused by name, as drawn)
        return
    warped = drawn[0].boxes(moved) if drawn else moved
    assert warped.shape == moved.shape and np.isfinite(warped).all(), "a warped box is not finite"
    assert (warped[:, 0::2] >= 0).all() and (warped[:, 0::2] <= out_size[1]).all(), "a warped box left the output"
    assert (warped[:, 1::2] >= 0).all() and (warped[:, 1::2] <= out_size[0]).all(), "a warped box left the output"
    assert (warped[:, 2] >= warped[:, 0]).all() and (warped[:, 3] >= warped[:, 1]).all(), "a warped box turned over"
    ok = kept(warped, min_size=1.0, min_area=1.0)
    w, h = warped[ok, 2] - warped[ok, 0], warped[ok, 3] - warped[ok, 1]
    assert (w >= 1).all() and (h >= 1).all(), "a warped box under the minimum was kept"


def _ragged_crop(xyxy, labels, ih: int, iw: int, seed: int) -> None:
    """ssdlite's preset as written (RandomIoUCrop, a flip; ragged=True) on two images
    beside each other, one with the bytes' boxes: each image the exact crop of its source
    (flipped or not) at its own size, zeros around it in the padded batch, its boxes inside
    its own size."""
    import numpy as np
    import torch

    from gpudecode import transforms as T

    tf = T.Compose([T.RandomIoUCrop(), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)], ragged=True)
    gen = np.random.default_rng(seed)
    imgs = [torch.from_numpy(gen.integers(0, 256, (3, h, w), dtype=np.uint8)) for h, w in ((ih, iw), (iw % 40 + 2, 9))]
    entries = [{"boxes": xyxy, "labels": labels if labels is not None else np.zeros(len(xyxy), np.int64)},
               {"boxes": np.float32([[1, 1, 5, 5]]), "labels": np.int64([3])}]
    try:
        d = tf.draw_batch([tuple(i.shape[1:]) for i in imgs], seed, boxes=entries)
    except ValueError as e:  # (an image of one row, or no crop found for it: named, as crop() names it)
        assert "height 0" in str(e) or "no crop" in str(e), str(e)
        return
    got = tf(imgs, d)
    targets = tf.boxes(entries, d)
    for k, (img, p) in enumerate(zip(imgs, d)):
        t, l, h, w = p["crop"]
        want = img[:, t:t + h, l:l + w].float().mul_(1 / 255)  # (the kernel's and torchvision's to_dtype: a product)
        want = want.flip(-1) if p["flip"] else want
        assert tuple(got.sizes[k].tolist()) == (h, w) and torch.equal(got[k], want), "a ragged image is not its crop"
        assert not got.padded[k, :, h:].any() and not got.padded[k, :, :, w:].any(), "not zero around an image"
        b = targets[k]["boxes"]
        assert (b[:, 0::2] >= 0).all() and (b[:, 0::2] <= w).all() and (b[:, 1::2] <= h).all(), "a box left its image"


def record(data: bytes) -> None:
    import numpy as np
    import torch

    from gpudecode.transforms.stored import read_record, stored_boxes, stored_mask

    try:
        rec = read_record(data)
    except ValueError:
        return
    doc = json.loads(data)
    assert list(rec.source) == doc["from"] and [[op, h, w] for op, h, w in rec.steps] == [
        [*s.keys(), *next(iter(s.values()))] for s in doc["steps"]], "the record differs from what json.loads read"
    assert read_record(rec.member()) == rec, "the record written again reads otherwise"
    assert dict(rec.moved) == doc.get("moved", {}), "the moved members differ from what json.loads read"
    assert all(1 <= n <= len(rec.steps) for _, n in rec.moved), "a member moved through steps the record has not"
    rng = np.random.default_rng(len(data) * 7919 + data[-1])
    (h, w), (sh, sw) = rec.source, rec.size
    x0, y0 = rng.uniform(-2, w + 2, 5), rng.uniform(-2, h + 2, 5)
    xyxy = np.stack([x0, y0, x0 + rng.uniform(0, w, 5), y0 + rng.uniform(0, h, 5)], 1).astype(np.float32)
    moved = stored_boxes(rec, xyxy)
    assert moved.shape == (5, 4) and np.isfinite(moved).all()
    if not rec.steps:  # (a record of no step: the boxes as they were, as without one)
        assert np.array_equal(moved, xyxy), "a record of no step moved the boxes"
        return
    assert (moved[:, 0::2] >= 0).all() and (moved[:, 0::2] <= sw).all(), "a box left the stored image"
    assert (moved[:, 1::2] >= 0).all() and (moved[:, 1::2] <= sh).all(), "a box left the stored image"
    if max(max(s[1:]) for s in [("", *rec.source), *rec.steps]) <= 64:
        mask = torch.from_numpy(rng.integers(0, 3, rec.source).astype(np.uint8))
        assert tuple(stored_mask(rec, mask).shape) == rec.size, "a mask not of the stored image's size"
        for name, n in rec.moved:  # (a member moved through its first n steps: the rest from that size)
            part = torch.from_numpy(rng.integers(0, 3, rec.size_after(n)).astype(np.uint8))
            assert tuple(stored_mask(rec, part, rec.done(name)).shape) == rec.size, "a moved mask not stored"


def image(data: bytes) -> None:
    from gpudecode._probe import probe_samples
    from gpudecode.decode import Request
    from gpudecode.errors import DecodeError
    from gpudecode.io.reader import Sample

    errors: list = []

    def fail(e):
        assert isinstance(e, DecodeError) and e.shard == "s" and e.key == "k", repr(e)
        errors.append(e)

    probed = probe_samples([Sample("k", {"jpg": data}, "s", 0)], ["jpg"], 1 << 22, fail)
    if not probed:
        return
    p = probed[0]
    dec = _decoder()
    for box in ((0, 0, p.height, p.width), (p.height // 3, p.width // 4, max(1, p.height // 2), max(1, p.width // 2))):
        out = dec.decode([Request(p.data, p.format, p.height, p.width, box, "s", "k")])
        if out.errors[0] is None:  # the box's pixels, inside the decoded (or stored) image
            t, l, h, w = (int(v) for v in out.boxes[0])
            assert (h, w) == box[2:] and t + h <= out.shapes[0][0] and l + w <= out.shapes[0][1], (out.boxes[0], box)


def png_halves(data: bytes) -> None:
    """PNG in two halves (decode/png.py: the chunk walk, zlib, the unfilter kernel's CPU
    twin): the native walk says what the Python reference says; refuses with PngError or decodes.
    The two halves and libpng both refuse or both decode, to the same pixels: what the walk
    refuses, libpng refuses too (the walk reads after the first IDAT chunk only as libpng
    does), and what it takes is decoded to libpng's verdict."""
    import numpy as np

    from gpudecode.decode import Request
    from gpudecode.decode.png import PngDecoder, PngError, read_png, read_png_reference

    def walked(fn):  # the native walk and the Python reference: the same layout, or the same refusal
        try:
            lay = fn(data, 1 << 22)
        except PngError as e:
            return None, str(e)
        return lay, (lay.width, lay.height, lay.depth, lay.color, lay.interlaced, lay.palette.tobytes(),
                     bytes(lay.stream), lay.idat_sizes, lay.fault)

    lay, ours = walked(read_png)
    assert ours == walked(read_png_reference)[1], "the native chunk walk and the reference differ"
    if lay is None:
        ref = _decoder().decode([Request(data, "png", 1, 1, (0, 0, 1, 1), "s", "k")]).settle()
        assert ref.errors[0] is not None, f"the walk refuses what libpng takes: {ours!r}"
        return
    box = (0, 0, lay.height, lay.width)
    req = [Request(data, "png", lay.height, lay.width, box, "s", "k")]
    ours = PngDecoder(device="cpu", max_pixels=1 << 22).decode(req).settle()
    ref = _decoder().decode(req).settle()
    assert (ours.errors[0] is None) == (ref.errors[0] is None), \
        f"the two halves and libpng disagree: {ours.errors[0]!r} against {ref.errors[0]!r}"
    if ours.errors[0] is None and ref.errors[0] is None:
        a = ours.pixels[int(ours.offsets[0]):int(ours.offsets[0]) + lay.height * lay.width * 3].numpy()
        t, l, h, w = (int(v) for v in ref.boxes[0])
        sy, sx, sc = (int(v) for v in ref.strides[0])
        b = ref.pixels[int(ref.offsets[0]) + t * sy + l * sx:].as_strided((h, w, 3), (sy, sx, sc)).numpy()
        assert np.array_equal(a.reshape(h, w, 3), b), "the two halves and libpng decode it differently"


_DECODER = None


def parquet_pages(data: bytes) -> None:
    """A Parquet column chunk walked in place (io/parquet.plain_pages: Thrift page
    headers, definition levels, PLAIN values), its first two bytes the rows asked and the
    maximum definition level: refused (_Unsupported, or the index, value and struct errors
    the reader catches, all of which hand the chunk to pyarrow) or one span a row, each
    inside the chunk, its head the value's first bytes; the walk through small reads of a
    file (_FileRegion, as the reader walks) gives the same."""
    import struct

    import numpy as np

    from gpudecode.io import parquet

    if len(data) < 2:
        return
    rows, max_def, chunk = data[0], data[1] % 4, data[2:]
    try:
        offsets, lengths, heads = parquet.plain_pages(chunk, rows, max_def)
    except (parquet._Unsupported, IndexError, ValueError, struct.error):
        return
    assert len(offsets) == len(lengths) == len(heads) == rows, "not one span a row"
    real = lengths >= 0
    assert ((offsets[real] >= 0) & (offsets[real] + lengths[real] <= len(chunk))).all(), "a span past the chunk"
    for k in np.flatnonzero(real)[:8]:
        o, n = int(offsets[k]), int(lengths[k])
        assert heads[k].tobytes() == chunk[o:o + min(n, 12)].ljust(12, b"\0"), "a head that is not the value's"
    if len(chunk) > 2:  # the walk through small reads: the same
        with tempfile.TemporaryFile() as f:
            f.write(chunk)
            f.flush()
            got = parquet.plain_pages(parquet._FileRegion(f.fileno(), 0, len(chunk)), rows, max_def)
        assert all(np.array_equal(a, b) for a, b in zip(got, (offsets, lengths, heads))), "small reads disagree"


def warp_pick(data: bytes) -> None:
    import numpy as np
    import torch

    from gpudecode import _native
    from gpudecode.transforms import warped

    if not warped.nearest_is_exact():
        return
    data = bytes(data)
    padded = data + bytes(5 + 4 * 9 + 4 * 80 + 8)  # (warp_fuzzer.cpp reads past the end as zeros)
    h, w, wh, ww = 1 + padded[0] % 48, 1 + padded[1] % 48, 1 + padded[2] % 40, 1 + padded[3] % 40
    planar, bilinear, no_fill, perspective = padded[4] & 1, padded[4] & 2, padded[4] & 4, padded[4] & 8
    at = 5
    scale = np.frombuffer(padded, np.float32, 9 if perspective else 6, at)  # (a perspective's: its denominator too)
    at += 4 * len(scale)
    xs = np.frombuffer(padded, np.float32, ww, at)
    ys = np.frombuffer(padded, np.float32, wh, at + 4 * ww)
    at += 4 * (ww + wh)
    fill = np.frombuffer(padded, np.uint8, 3, at).copy()
    at += 3
    top, left, ph, pw = 0, 0, h, w
    if padded[at] & 1:  # (a part of the image)
        top, left = padded[at + 1] % h, padded[at + 2] % w
        ph, pw = 1 + padded[at + 3] % (h - top), 1 + padded[at + 4] % (w - left)
        at += 4
    at += 1
    src = ((np.arange(ph * pw * 3) * 7 + 1) & 0xFF).astype(np.uint8)
    if at < len(data):
        src[0] = data[at]
    part = src.reshape(3, ph, pw) if planar else src.reshape(ph, pw, 3).transpose(2, 0, 1)
    got = np.empty((3, wh, ww), np.uint8)
    with np.errstate(all="ignore"):  # (the grid as the native code makes it: each product, sum, quotient rounded)
        gx = ((xs * scale[0])[None, :] + (ys * scale[2])[:, None]) + scale[4]
        gy = ((xs * scale[1])[None, :] + (ys * scale[3])[:, None]) + scale[5]
        if perspective:
            den = ((xs * scale[6])[None, :] + (ys * scale[7])[:, None]) + scale[8]
            gx, gy = gx / den - np.float32(1), gy / den - np.float32(1)
    grid = torch.from_numpy(np.stack([gx, gy], -1).astype(np.float32))[None]
    if bilinear:
        if not warped.bilinear_is_exact():
            return
        levels = None if no_fill else fill.astype(np.float32)
        missing = _native.warp_affine_bilinear(part, xs, ys, scale, levels, got, (top, left, h, w))
        assert 0 <= missing <= wh * ww and (missing == 0 or (ph, pw) != (h, w)), missing
        if missing or not torch.isfinite(grid).all():
            return
        whole = torch.from_numpy(((np.arange(h * w * 3) * 13 + 5) & 0xFF).astype(np.uint8)).view(3, h, w)
        whole[:, top:top + ph, left:left + pw] = torch.from_numpy(np.ascontiguousarray(part))
        want = warped.grid_sample_filled(whole, grid, warped.BILINEAR, None if no_fill else fill.tolist())
        assert torch.equal(torch.from_numpy(got), want), f"{int((torch.from_numpy(got) != want).sum())} pixels apart"
        return
    missing = _native.warp_affine_nearest(part, xs, ys, scale, fill, got, (top, left, h, w))
    # grid_sample of the whole image's pixel numbers (exact in float32): which pixel each point picks
    number = torch.arange(1, h * w + 1, dtype=torch.float32).view(1, 1, h, w)
    picked = torch.nn.functional.grid_sample(number, grid, mode="nearest", padding_mode="zeros",
                                             align_corners=False)[0, 0].to(torch.int64) - 1
    y, x = picked.div(w, rounding_mode="floor"), picked.remainder(w)
    inside = picked >= 0
    in_part = inside & (y >= top) & (y < top + ph) & (x >= left) & (x < left + pw)
    assert missing == int((inside & ~in_part).sum()), (missing, int((inside & ~in_part).sum()))
    values = torch.from_numpy(np.ascontiguousarray(part))[:, (y - top).clamp(0, ph - 1), (x - left).clamp(0, pw - 1)]
    want = torch.where(in_part, values, torch.from_numpy(fill).view(3, 1, 1))
    assert torch.equal(torch.from_numpy(got), want), f"{int((torch.from_numpy(got) != want).sum())} pixels picked apart"


def _decoder():
    global _DECODER
    if _DECODER is None:
        from gpudecode.decode.cpu import CpuDecoder

        _DECODER = CpuDecoder(num_threads=1, max_pixels=1 << 22)
    return _DECODER
