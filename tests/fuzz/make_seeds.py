"""Seed corpora for every fuzz target, from what the repository already builds: the tar
corpus (tests/tarcorpus.py), webdataset-style shards of real photos, JPEG/PNG/WebP
encodings of scikit-image's photographs (several subsamplings, progressive, grey, CMYK,
palette, 16-bit), labels, shard specs and tensor samples.

    python tests/fuzz/make_seeds.py OUT_DIR
"""
from __future__ import annotations

import gzip
import io
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def photos() -> list[np.ndarray]:
    from skimage import data

    out = []
    for name in ("astronaut", "coffee", "chelsea", "camera"):
        img = getattr(data, name)()
        if img.ndim == 2:
            img = np.stack([img] * 3, -1)
        out.append(np.ascontiguousarray(img[::8, ::8, :3]))  # small: the fuzzers prefer short inputs
    return out


def images() -> dict[str, bytes]:
    from PIL import Image

    out = {}
    for i, img in enumerate(photos()):
        im = Image.fromarray(img)
        for tag, fmt, kw in [("q90", "JPEG", {"quality": 90}), ("444", "JPEG", {"subsampling": 0}),
                             ("422", "JPEG", {"subsampling": 1}), ("prog", "JPEG", {"progressive": True}),
                             ("png", "PNG", {}), ("webp", "WEBP", {"quality": 50})]:
            b = io.BytesIO()
            im.save(b, fmt, **kw)
            out[f"{i}-{tag}"] = b.getvalue()
        for mode in ("L", "CMYK", "P"):
            b = io.BytesIO()
            im.convert(mode).save(b, "PNG" if mode == "P" else "JPEG")
            out[f"{i}-{mode}"] = b.getvalue()
    b = io.BytesIO()
    Image.fromarray((photos()[3][..., 0].astype(np.uint16) * 257)).save(b, "PNG")
    out["png16"] = b.getvalue()
    return out


def hand_pngs() -> dict[str, bytes]:
    from test_png import variants  # PNGs written by hand: what Pillow cannot write (Adam7, 1-4 bits)

    from test_png_halves import idat_after_the_stream  # a stream that ends before its last IDAT chunk

    out = {f"hand-{k}": v for k, v in variants(photos()[0][:24, :20]).items()}
    first = next(iter(out.values()))
    out["hand-idat-after-the-stream"] = idat_after_the_stream(first)
    out["hand-extra-data-in-its-chunk"] = idat_after_the_stream(first, b"\0")
    return out


def parquet_chunks(imgs: dict[str, bytes]) -> dict[str, bytes]:
    """Image column chunks as pyarrow writes them uncompressed and PLAIN (page format v1
    and v2, one or many pages, a null struct, null and empty bytes), each behind its rows
    and maximum definition level (the parquet_pages target's first two bytes)."""
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    small = [d[:2500] for d in imgs.values()][:6]
    rows = [{"bytes": b, "path": f"{k}.jpg"} for k, b in enumerate(small)] + [None, {"bytes": None, "path": "x"},
                                                                             {"bytes": b"", "path": "y"}]
    out = {}
    for name, opts in {"v1": {}, "v2": {"data_page_version": "2.0"}, "v1-pages": {"data_page_size": 1024},
                       "v2-pages": {"data_page_version": "2.0", "data_page_size": 1024}}.items():
        for kind, table in {"struct": pa.table({"image": pa.array(rows)}),
                            "binary": pa.table({"jpg": pa.array(small, pa.binary())})}.items():
            with tempfile.TemporaryDirectory() as d:
                path = f"{d}/x.parquet"
                pq.write_table(table, path, compression="none", use_dictionary=False, **opts)
                pf = pq.ParquetFile(path)
                col = pf.metadata.row_group(0).column(0)
                raw = Path(path).read_bytes()[col.data_page_offset:col.data_page_offset + col.total_compressed_size]
                head = bytes([pf.metadata.num_rows, pf.schema.column(0).max_definition_level])
                out[f"{kind}-{name}"] = head + raw
    return out


def main(out: Path) -> None:
    import tarcorpus

    from gpudecode.io.writer import ShardWriter
    from gpudecode.tensors import encode_npy

    out.mkdir(parents=True, exist_ok=True)
    imgs = images()
    dirs = {t: out / t for t in ("tar", "probe", "jpeg", "png", "batch", "tar_stream", "gzip_path", "labels",
                                 "shard_list", "npy", "image", "png_halves", "parquet_pages", "png_walk", "fields",
                                 "mask", "boxes", "record", "warp", "warp_pick")}
    for d in dirs.values():
        d.mkdir(exist_ok=True)
    tars = [c.data[:1 << 15] for c in tarcorpus.cases()]
    with ShardWriter(str(out / "shard-%d.tar")) as w:
        for k, (name, data) in enumerate(list(imgs.items())[:3]):
            w.write({"__key__": f"{name}", "jpg": data[:3000], "cls": str(k)})
    tars.append(Path(w.shards[0]).read_bytes())
    os.unlink(w.shards[0])
    for i, t in enumerate(tars):
        for d in ("tar", "tar_stream"):
            (dirs[d] / f"t{i:03d}").write_bytes(t)
        (dirs["gzip_path"] / f"t{i:03d}").write_bytes(gzip.compress(t))
    for name, data in imgs.items():
        (dirs["probe"] / name).write_bytes(data)
        (dirs["image"] / name).write_bytes(data)
        if data[:2] == b"\xff\xd8":
            (dirs["jpeg"] / name).write_bytes(bytes([0, 10, 20, 200, 200, 0, 0, 0]) + data)
            (dirs["jpeg"] / (name + "-fast")).write_bytes(bytes([3, 60, 60, 100, 100, 0, 0, 0]) + data)
        if data[:4] == b"\x89PNG":
            (dirs["png"] / name).write_bytes(bytes([1, 10, 20, 200, 200, 0, 0, 0]) + data)
            (dirs["png_halves"] / name).write_bytes(data)
            (dirs["png_walk"] / name).write_bytes(data)
    for name, data in warp_seeds().items():
        (dirs["warp"] / name).write_bytes(data)
        (dirs["warp_pick"] / name).write_bytes(data)
    for name, data in parquet_chunks(imgs).items():
        (dirs["parquet_pages"] / name).write_bytes(data)
    for name, data in hand_pngs().items():  # colour types, bit depths, tRNS, Adam7
        (dirs["png"] / name).write_bytes(bytes([1, 30, 40, 120, 160, 0, 0, 0]) + data)
        (dirs["png_halves"] / name).write_bytes(data)
        (dirs["png_walk"] / name).write_bytes(data)
        (dirs["probe"] / name).write_bytes(data)
    jpegs = [d for d in imgs.values() if d[:2] == b"\xff\xd8"]
    for i in range(0, len(jpegs) - 1, 2):
        a, b = jpegs[i], jpegs[i + 1]
        (dirs["batch"] / f"b{i}").write_bytes(bytes([1, 0x81]) + len(a).to_bytes(2, "big") + a + b)
    pngs = [d for d in imgs.values() if d[:4] == b"\x89PNG"]
    for i, (a, b) in enumerate(zip(pngs, jpegs)):  # PNG and JPEG in one batch
        (dirs["batch"] / f"pj{i}").write_bytes(bytes([1, 0x01]) + len(a).to_bytes(2, "big") + a + b)
    for i, lab in enumerate([b"7", b"-3\n", b" 42 ", b"3.7", b"true", b"9223372036854775807", b"9223372036854775808",
                             b'{"label": 5}', b'{"label": 5.0}', b'{"label": true}', b'[[[[1]]]]', b'{"label": 1e400}']):
        (dirs["labels"] / f"l{i}").write_bytes(lab)
    for i, spec in enumerate([b"train-{000000..000009}.tar", b"a.tar::b.tar", b"imagenet-@000010.tgz",
                              b"s3://bucket/x-{0..3}.tar", b"file:///tmp/x.tar", b"shards.txt", b"{a,b}{1..3}.tar"]):
        (dirs["shard_list"] / f"s{i}").write_bytes(spec)
    for i, img in enumerate(photos()[:2]):
        (dirs["npy"] / f"n{i}").write_bytes(encode_npy(img[:16, :16]))
        (dirs["probe"] / f"npy{i}").write_bytes(encode_npy(img[:8, :8]))  # the native npy header parser
    for i, (kind, body) in enumerate(field_seeds()):  # (the first byte picks the extension: harness.fields)
        (dirs["fields"] / f"f{i}").write_bytes(bytes([kind]) + body)
    for name, body in mask_seeds().items():
        (dirs["mask"] / name).write_bytes(body)
    for name, body in box_seeds().items():
        (dirs["boxes"] / name).write_bytes(body)
    for name, body in record_seeds().items():
        (dirs["record"] / name).write_bytes(body)
    print(f"seeds in {out}")


def warp_seeds() -> dict[str, bytes]:
    """The native warp's inputs as warp_fuzzer.cpp reads them (sizes, layout, the scale,
    the output's pixel centres, the fill): rotations and a zoom as the warps draw them,
    and grids with a NaN and an infinity."""
    import math

    out = {}
    for name, (h, w, wh, ww, angle, zoom) in {"rot30": (40, 30, 24, 36, 30.0, 1.0), "rot-100": (17, 45, 17, 45, -100.0, 1.0),
                                              "zoom2": (9, 7, 9, 7, 0.0, 0.5), "tiny": (1, 1, 3, 2, 12.0, 1.0)}.items():
        c, s = math.cos(math.radians(angle)) * zoom, math.sin(math.radians(angle)) * zoom
        scale = np.array([c / (w / 2), -s / (h / 2), s / (w / 2), c / (h / 2), 0.0, 0.0], np.float32)
        xs = np.linspace(-ww / 2 + 0.5, ww / 2 - 0.5, ww, dtype=np.float32)
        ys = np.linspace(-wh / 2 + 0.5, wh / 2 - 0.5, wh, dtype=np.float32)
        head = bytes([(h - 1) % 48, (w - 1) % 48, (wh - 1) % 40, (ww - 1) % 40, len(out) % 2])
        out[name] = head + scale.tobytes() + xs.tobytes() + ys.tobytes() + bytes([0, 128, 255])
    odd = np.array([np.nan, 1.0, np.inf, -np.inf, 1e30, -1e-30], np.float32)
    out["nan-inf"] = bytes([7, 9, 3, 4, 1]) + odd.tobytes() + np.resize(odd, 9).tobytes() + bytes([1, 2, 3])
    return out


def field_seeds() -> list[tuple[int, bytes]]:
    """A sample's fields of each kind harness.fields reads: (extension's index, bytes)."""
    import numpy as np

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.asfortranarray(np.eye(3, dtype=np.int16)),
              np.array([True, False]), np.zeros((0, 4), np.uint8), np.array(3.5)]
    out = [(0, "a photograph of a café".encode()), (0, b"\xff\xfe"), (1, b" 12\n"), (1, b"1e3"),
           (2, b'{"tags": ["a", "b"], "score": 0.5}'), (2, b"[[[[]]]]"), (2, b"NaN"), (5, b"\x00raw")]
    for i, a in enumerate(arrays):
        b = io.BytesIO()
        np.save(b, a)
        out.append((3 + i % 2, b.getvalue()))
    return out


def box_seeds() -> dict[str, bytes]:
    """Detection targets harness.boxes reads, the first byte the format (XYXY, XYWH,
    CXCYWH): each JSON form, .npy of floats and ints, empty, and a few it refuses."""
    import json

    b = [[1.5, 2, 10, 12], [0, 0, 3, 4], [20, 30, 25.25, 31]]
    forms = {"record": {"boxes": b, "labels": [3, 7, 1]}, "hf": {"bbox": b, "category": [1, 2, 3]},
             "coco": [{"bbox": x, "category_id": c, "iscrowd": 0} for x, c in zip(b, [5, 6, 7])],
             "bare": b, "empty": [], "no-labels": {"boxes": b}, "negative": [[5, 0, 1, 4]], "nan": [[0, 0, 1e999, 1]]}
    out = {f"{name}-{f}": bytes([f]) + json.dumps(v).encode() for name, v in forms.items() for f in range(3)}
    for i, a in enumerate([np.array(b), np.array(b, np.int16), np.zeros((0, 4), np.float32), np.ones((2, 3))]):
        buf = io.BytesIO()
        np.save(buf, a)
        out[f"npy{i}"] = bytes([i % 3]) + buf.getvalue()
    return out


def record_seeds() -> dict[str, bytes]:
    """Records of precached images (harness.record): as precache writes them (a resize; a
    resize and its centre cut; a cut that pads; a set precached twice; small ones a mask
    is moved through), and a few it refuses."""
    from gpudecode.transforms.stored import made

    out = {"resize": made(480, 640, (256, 341), None), "cut": made(480, 640, (224, 298), (224, 224)),
           "pad": made(30, 41, None, (48, 48)), "small": made(40, 60, (20, 30), (24, 24))}
    out["twice"] = out["cut"].then((30, 30), None)  # type: ignore[union-attr]
    out["moved"] = out["small"].with_moved(["seg.png"])  # type: ignore[union-attr]
    out["moved-then"] = out["moved"].then((10, 12), (8, 8))
    seeds = {k: v.member() for k, v in out.items()}  # type: ignore[union-attr]
    seeds.update({"version2": b'{"version": 2, "from": [4, 4], "steps": []}', "bool": b'{"version": 1, "from": [4, true], '
                  b'"steps": []}', "step": b'{"version": 1, "from": [4, 4], "steps": [{"spin": [1, 1]}]}'})
    return seeds


def mask_seeds() -> dict[str, bytes]:
    """Segmentation masks harness.mask reads: PNGs of each one-channel mode (palette of 1-8
    bits, grey, 1-bit, 16-bit; and hand_pngs' one-channel kinds), an RGB one (refused), .npy
    of each integer kind."""
    import numpy as np
    from PIL import Image

    m = (np.arange(12 * 10).reshape(12, 10) // 17).astype(np.uint8)
    out = {}
    for name, im, kw in [("p8", Image.fromarray(m), {}), ("p2", Image.fromarray(m % 4), {"bits": 2}),
                         ("l8", Image.fromarray(m * 30), {}), ("one", Image.fromarray(m % 2 == 1), {}),
                         ("i16", Image.fromarray(m.astype(np.uint16) * 900), {}),
                         ("rgb", Image.fromarray(np.stack([m] * 3, -1)), {})]:
        if name.startswith("p"):
            im.putpalette([v for i in range(256) for v in (i, 255 - i, i // 2)])
        b = io.BytesIO()
        im.save(b, "PNG", **kw)
        out[name] = b.getvalue()
    # (every one-channel kind written by hand: bit depths 1-16, tRNS, Adam7, which Pillow reads)
    out.update({k: v for k, v in hand_pngs().items() if ("gray" in k or "palette" in k) and "alpha" not in k})
    for dt in ("u1", "<i2", ">u2", "<i8", "?", "<f4"):
        b = io.BytesIO()
        np.save(b, (m % 2).astype(dt))
        out[f"npy-{dt.strip('<>')}{'-be' if dt[0] == '>' else ''}"] = b.getvalue()
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]))
