"""Parquet files as shards (gpudecode/io/parquet.py; issue 58): a set written by Hugging
Face `datasets` (an Image column of JPEG and PNG rows, a ClassLabel) read by the Loader as
it lies: every sample once, pixels equal to Pillow's decode, the labels of the column,
ranks with equal batches, resume, random access, mixing with a tar shard; a damaged file
and a row without an image are errors naming the file and the row."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import make_shard
from gpudecode import Loader
from gpudecode.errors import GpuDecodeError, ShardFormatError

pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

H, W = 36, 44


def _images(n: int, seed: int = 0) -> tuple[list[bytes], list[str], list[int]]:
    """n photographs' crops, every third a PNG, the rest JPEG; their formats; labels."""
    from skimage import data

    photos = [data.astronaut(), data.coffee(), data.chelsea()]
    rng = np.random.default_rng(seed)
    out, kinds, labels = [], [], []
    for k in range(n):
        p = photos[k % 3]
        t, l = int(rng.integers(0, p.shape[0] - H)), int(rng.integers(0, p.shape[1] - W))
        b = io.BytesIO()
        kind = "PNG" if k % 3 == 2 else "JPEG"
        Image.fromarray(p[t:t + H, l:l + W]).save(b, kind, **({"quality": 90} if kind == "JPEG" else {}))
        out.append(b.getvalue())
        kinds.append(kind)
        labels.append(int(rng.integers(0, 3)))
    return out, kinds, labels


def _write(path, images: list[bytes], labels: list[int], rows_a_group: int = 7) -> str:
    """`images` as `datasets` writes an image set: an Image column ({bytes, path}) and a
    ClassLabel, row groups of `rows_a_group`."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": f"img{k}.x"} for k, b in enumerate(images)],
                                     "label": labels}, features=features)
    ds.to_parquet(str(path), batch_size=rows_a_group)
    return str(path)


@pytest.fixture(scope="module")
def parquet_set(tmp_path_factory):
    images, kinds, labels = _images(40)
    path = _write(tmp_path_factory.mktemp("pq") / "train-00000-of-00001.parquet", images, labels)
    return path, images, kinds, labels


def test_a_datasets_parquet_set_is_read_as_it_lies(parquet_set):
    path, images, kinds, labels = parquet_set
    assert pq.ParquetFile(path).metadata.num_row_groups > 3 and {"JPEG", "PNG"} == set(kinds)
    from gpudecode.io.parquet import classes

    assert classes(path) == ("a", "b", "c")
    seen = {}
    with Loader(path, batch_size=8, transform=None, device="cpu", num_workers=2, shuffle=True, seed=3) as ld:
        assert ld.reader.classes == ["a", "b", "c"]  # the ClassLabel's names, as an ImageFolder tree's
        for b in ld:
            for key, img, lab in zip(b.keys, b.images, b.labels):
                seen[key] = (img.permute(1, 2, 0).numpy(), int(lab))
    assert sorted(seen) == [f"train-00000-of-00001/{k:09d}" for k in range(40)]  # every row once
    for k in range(40):
        want = np.asarray(Image.open(io.BytesIO(images[k])).convert("RGB"))
        got, lab = seen[f"train-00000-of-00001/{k:09d}"]
        assert lab == labels[k]
        assert np.array_equal(got, want), k  # Pillow's pixels (PNG and JPEG rows)


def test_ranks_get_equal_batches_and_every_row_once(parquet_set):
    path = parquet_set[0]
    per_rank = []
    for rank in range(2):
        with Loader(path, batch_size=4, transform=None, device="cpu", rank=rank, world_size=2, seed=1,
                    shuffle=True) as ld:
            per_rank.append([list(b.keys) for b in ld])
    assert [len(r) for r in per_rank] == [5, 5] and all(len(b) == 4 for r in per_rank for b in r)
    keys = [k for r in per_rank for b in r for k in b]
    assert sorted(keys) == [f"train-00000-of-00001/{k:09d}" for k in range(40)]


def test_resume_and_random_access_and_a_tar_shard_beside_it(parquet_set, tmp_path):
    path, images, _, labels = parquet_set
    kw = dict(batch_size=6, transform=None, device="cpu", seed=5, shuffle=True)
    with Loader(path, **kw) as ld:
        it = iter(ld)
        [next(it) for _ in range(3)]
        state = ld.state_dict()
        rest = [list(b.keys) for b in it]
    with Loader(path, **kw) as again:
        again.load_state_dict(state)
        assert [list(b.keys) for b in again] == rest
    with Loader(path, **kw) as ld:
        img, lab = ld.dataset[17]
        assert lab == labels[17]
        assert np.array_equal(img.permute(1, 2, 0).numpy(), np.asarray(Image.open(io.BytesIO(images[17])).convert("RGB")))
    tar = make_shard(tmp_path / "t-0.tar", [{"__key__": f"t{k}", "jpg": images[k], "cls": b"2"} for k in range(5)])
    with Loader([path, tar], batch_size=9, transform=None, device="cpu", seed=0) as ld:
        keys = [k for b in ld for k in b.keys]
    assert len(keys) == 45 and {k for k in keys if not k.startswith("train-")} == {f"t{k}" for k in range(5)}
    import shutil

    other = shutil.copy(path, tmp_path / "train-00001-of-00002.parquet")  # (two files: their rows' keys differ)
    with Loader([path, str(other)], batch_size=8, transform=None, device="cpu") as ld:
        keys = [k for b in ld for k in b.keys]
    assert len(keys) == len(set(keys)) == 80


def test_a_damaged_file_and_a_row_without_an_image_are_named(parquet_set, tmp_path):
    path = parquet_set[0]
    with open(path, "rb") as f:
        raw = f.read()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(GpuDecodeError, match="cut.parquet"):
        with Loader(str(cut), batch_size=4, transform=None, device="cpu") as ld:
            list(ld)
    import pyarrow as pa

    imgs = _images(6, seed=9)[0]
    table = pa.table({"image": pa.array([{"bytes": b, "path": None} for b in imgs[:3]] + [{"bytes": None, "path": None}]
                                        + [{"bytes": b, "path": None} for b in imgs[3:5]]),
                      "label": pa.array([0, 1, 2, 0, 1, 2], pa.int64())})
    holey = tmp_path / "holey.parquet"
    pq.write_table(table, str(holey))
    with pytest.raises(ShardFormatError) as e:
        with Loader(str(holey), batch_size=3, transform=None, device="cpu") as ld:
            list(ld)
    assert e.value.shard.endswith("holey.parquet") and e.value.key == "holey/000000003" and "no image bytes" in str(e.value)
    with Loader(str(holey), batch_size=3, transform=None, device="cpu", on_error="skip") as ld:
        keys = [k for b in ld for k in b.keys]
        assert sorted(keys) == [f"holey/{k:09d}" for k in (0, 1, 2, 4, 5)]
    no_image = tmp_path / "no-image.parquet"
    pq.write_table(pa.table({"pixels": pa.array([b"x"]), "label": pa.array([1])}), str(no_image))
    with pytest.raises(ShardFormatError, match="no image column .* among the columns pixels, label"):
        with Loader(str(no_image), batch_size=1, transform=None, device="cpu") as ld:
            list(ld)


def test_other_layouts_by_their_column_names(tmp_path):
    import pyarrow as pa

    imgs, _, labels = _images(5, seed=2)
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"jpg": pa.array(imgs, pa.binary()), "target": pa.array(labels, pa.int32())}), str(path))
    with Loader(str(path), batch_size=5, transform=None, device="cpu") as ld:
        (b,) = list(ld)
    assert [labels[int(k.split("/")[1])] for k in b.keys] == b.labels.tolist() and b.images.dtype == torch.uint8


def _pyarrow_rows(path: str) -> list[tuple[bytes | None, int | None]]:
    """Each row's image bytes and label as pyarrow reads them (the reference)."""
    t = pq.read_table(path)
    col = t.column("image").combine_chunks() if "image" in t.column_names else None
    out = []
    for k in range(t.num_rows):
        if col is not None and str(col.type).startswith("struct"):
            v = col[k].as_py()
            data = None if v is None else v["bytes"]
        else:
            data = t.column(t.column_names[0])[k].as_py()
        out.append((data, t.column("label")[k].as_py() if "label" in t.column_names else None))
    return out


def _walked(path: str) -> list:
    """The row groups io/parquet.py read in place (_Group) or left to pyarrow (None)."""
    import os

    from gpudecode.io import parquet as P

    st = os.stat(path)
    layout = P._LAYOUTS.get((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return [layout.groups.get(g) for g in range(len(layout.rows))] if layout else []


@pytest.mark.parametrize("how", ["datasets", "v2 pages, small pages", "nulls and empties", "snappy", "dictionary"])
def test_rows_read_in_place_equal_pyarrows(tmp_path, how):
    """A local file's uncompressed PLAIN image chunks are walked in place (the Thrift page
    headers, the definition levels, each value's length: io/parquet.plain_pages); every
    row's bytes, format and label equal pyarrow's read of the file, in page format v1 and
    v2, with many pages a group, null structs, null and empty bytes, null labels and a
    signature not known (the path's suffix then); compressed or dictionary-encoded chunks
    are pyarrow's to read, with the same rows. A second read (the walk kept) is the same."""
    import pyarrow as pa

    from gpudecode.io.assembly import iter_shard
    from gpudecode.io.members import Sample

    imgs, kinds, labels = _images(23, seed=5)
    path = str(tmp_path / "set.parquet")
    if how == "datasets":
        _write(path, imgs, labels)
    else:
        rows = [{"bytes": b, "path": f"img{k}.{'png' if kinds[k] == 'PNG' else 'jpg'}"} for k, b in enumerate(imgs)]
        labs: list = list(labels)
        if how == "nulls and empties":
            rows[3] = None
            rows[5] = {"bytes": None, "path": "x.jpg"}
            rows[8] = {"bytes": b"", "path": "y.jpg"}
            rows[11] = {"bytes": b"GIF89a" + imgs[11][6:], "path": "odd.gif"}  # (no signature known: the path's)
            labs[4] = None
        opts = {"datasets": {}, "v2 pages, small pages": dict(data_page_version="2.0", data_page_size=2048),
                "nulls and empties": dict(data_page_size=4096), "snappy": dict(compression="snappy"),
                "dictionary": dict(use_dictionary=True, compression="none")}[how]
        opts.setdefault("compression", "none")
        opts.setdefault("use_dictionary", False)
        pq.write_table(pa.table({"image": pa.array(rows), "label": pa.array(labs, pa.int64())}), path,
                       row_group_size=9, **opts)
    ref = _pyarrow_rows(path)
    for _ in range(2):
        got = list(iter_shard(path, on_error="skip"))
        samples = {s.key: s for s in got if isinstance(s, Sample)}
        for k, (data, label) in enumerate(ref):
            key = "set/%09d" % k
            if not data:
                assert key not in samples, key
                continue
            s = samples[key]
            ((ext, value),) = [(e, v) for e, v in s.fields.items() if e != "cls"]
            assert bytes(value) == data, key
            assert ext == ("gif" if data[:3] == b"GIF" else "png" if data[:4] == b"\x89PNG" else "jpg")
            assert s.fields.get("cls") == (None if label is None else b"%d" % label), key
    groups = _walked(path)
    in_place = how in ("datasets", "v2 pages, small pages", "nulls and empties")
    assert groups and all((g is not None) == in_place for g in groups), (how, groups)


def test_the_pool_and_the_mapping_hold_the_same_bytes(parquet_set):
    """A Parquet image read into the reader's pooled blocks or as a view of the mapped file
    (pool_extensions, map_extensions: as a tar member) holds pyarrow's bytes."""
    from gpudecode.io.reader import ShardReader

    path, images = parquet_set[0], parquet_set[1]
    for opts in ({"pool_extensions": ("jpg", "png")}, {"map_extensions": ("jpg", "png")}):
        r = ShardReader([path], shuffle=False, num_threads=1, **opts)
        seen = 0
        for s in r:
            ((ext, v),) = [(e, v) for e, v in s.fields.items() if e != "cls"]
            assert isinstance(v, memoryview) and bytes(v) == images[int(s.key.split("/")[1])], (opts, s.key)
            if "map_extensions" in opts:
                assert v.readonly
            seen += 1
        r.close()
        assert seen == len(images)


def test_a_file_cut_or_rewritten_after_its_walk_is_read_anew(parquet_set, tmp_path):
    """The walk is kept by the file's stat: a file rewritten in place with other rows is
    walked again (its new rows come out), and one cut short after its walk is the file's
    error naming it, never bytes from past its end."""
    import shutil

    from gpudecode.io.assembly import iter_shard
    from gpudecode.io.members import Sample

    path = str(tmp_path / "moving.parquet")
    shutil.copy(parquet_set[0], path)
    assert sum(isinstance(s, Sample) for s in iter_shard(path)) == len(parquet_set[1])
    imgs, _, labels = _images(5, seed=11)
    _write(path, imgs, labels)
    got = [s for s in iter_shard(path) if isinstance(s, Sample)]
    assert [bytes(s.fields[e]) for s in got for e in s.fields if e != "cls"] == imgs
    with open(path, "r+b") as f:
        f.truncate(f.seek(0, 2) - 200)
    with pytest.raises(GpuDecodeError, match="moving.parquet"):
        for item in iter_shard(path):
            if not isinstance(item, Sample):
                raise item.error


def test_plain_pages_refuses_hostile_chunks_and_never_reads_past_them(parquet_set):
    """io/parquet.plain_pages on a real chunk cut, flipped and stretched at random: it
    refuses (_Unsupported, or the index, value and struct errors the reader catches) or
    returns spans inside the chunk, one a row; never a hang (hypothesis' deadline)."""
    import struct

    from hypothesis import given, settings, strategies as st

    from gpudecode.io import parquet as P

    pf = pq.ParquetFile(parquet_set[0])
    col = pf.metadata.row_group(0).column(0)
    with open(parquet_set[0], "rb") as f:
        raw = f.read()[col.data_page_offset:col.data_page_offset + col.total_compressed_size]
    rows = pf.metadata.row_group(0).num_rows
    offsets, lengths, heads = P.plain_pages(raw, rows, 2)
    assert len(offsets) == rows and (lengths > 0).all() and (heads[:, :3] == [0xFF, 0xD8, 0xFF]).any(axis=1).any()

    @settings(max_examples=300, deadline=2000)
    @given(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=8),
           st.integers(0, len(raw)), st.integers(0, 64), st.integers(0, 3))
    def check(flips, cut, rows_asked, max_def):
        data = bytearray(raw[:cut])
        for at, v in flips:
            if at < len(data):
                data[at] = v
        try:
            offs, lens, _ = P.plain_pages(bytes(data), rows_asked, max_def)
        except (P._Unsupported, IndexError, ValueError, struct.error):
            return
        assert len(offs) == rows_asked
        real = lens >= 0
        assert (offs[real] >= 0).all() and (offs[real] + lens[real] <= len(data)).all()

    check()


def test_walks_kept_are_bounded_and_the_oldest_go_first(parquet_set, tmp_path, monkeypatch):
    """The walks kept across epochs hold at most LAYOUT_ROWS rows: past it the oldest
    file's walk is dropped (and that file is walked again when read, with the same rows)."""
    import shutil

    from gpudecode.io import parquet as P
    from gpudecode.io.assembly import iter_shard
    from gpudecode.io.members import Sample

    P.forget_layouts()
    monkeypatch.setattr(P, "LAYOUT_ROWS", 50)  # (40 rows a file: one file's walk at a time)
    paths = [str(tmp_path / f"s{k}.parquet") for k in range(3)]
    for p in paths:
        shutil.copy(parquet_set[0], p)
    firsts = [[bytes(s.fields[e]) for s in iter_shard(p) if isinstance(s, Sample) for e in s.fields if e != "cls"]
              for p in paths]
    assert [bool(_walked(p)) for p in paths] == [False, False, True]
    assert P._LAYOUT_ROWS_HELD[0] == 40
    again = [bytes(s.fields[e]) for s in iter_shard(paths[0]) if isinstance(s, Sample) for e in s.fields if e != "cls"]
    assert again == firsts[0] == parquet_set[1] and [bool(_walked(p)) for p in paths] == [True, False, False]
    P.forget_layouts()
    assert not P._LAYOUTS and P._LAYOUT_ROWS_HELD[0] == 0


def test_inspect_precache_and_an_fsspec_url(parquet_set, tmp_path, capsys):
    """What a shard source has, from Parquet: `gpudecode inspect` counts its rows and
    formats; `gpudecode precache` writes the same tensor shards as from a tar shard of the
    same samples (webdataset writes it: the reference); an fsspec URL (memory://) gives
    the local file's batches and classes."""
    import json

    fsspec = pytest.importorskip("fsspec")

    from gpudecode.cli import main

    path, images, kinds, labels = parquet_set
    assert main(["inspect", path]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == len(images)
    assert report["extensions"] == {"jpg": kinds.count("JPEG"), "png": kinds.count("PNG"), "cls": len(images)}
    tar = make_shard(tmp_path / "same.tar", [{"__key__": "train-00000-of-00001/%09d" % k, "jpg" if kinds[k] == "JPEG" else "png": b,
                                              "cls": str(labels[k])} for k, b in enumerate(images)])
    outs = {}
    for name, src in (("parquet", path), ("tar", tar)):
        assert main(["precache", src, str(tmp_path / name), "--size", "24", "--crop", "center", "--quiet"]) == 0
        with Loader(str(tmp_path / name), batch_size=len(images), transform=None, device="cpu", shuffle=False) as ld:
            (b,) = list(ld)
            outs[name] = (b.keys, b.images.clone(), b.labels.clone())
    assert outs["parquet"][0] == outs["tar"][0]
    assert torch.equal(outs["parquet"][1], outs["tar"][1]) and torch.equal(outs["parquet"][2], outs["tar"][2])
    with open(path, "rb") as f, fsspec.open("memory://bucket/train-00000-of-00001.parquet", "wb") as g:
        g.write(f.read())
    got = {}
    for url in (path, "memory://bucket/train-00000-of-00001.parquet"):
        with Loader(url, batch_size=8, transform=None, device="cpu", shuffle=True, seed=3) as ld:
            got[url] = ([(b.keys, b.images.clone(), b.labels.clone()) for b in ld], ld.reader.classes)
    (a, ca), (b, cb) = got.values()
    assert list(ca) == list(cb) == ["a", "b", "c"] and len(a) == len(b) == 5
    for x, y in zip(a, b):
        assert x[0] == y[0] and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2])


def test_a_hugging_face_dataset_given_as_it_is(parquet_set):
    """Loader(datasets.Dataset): the Dataset's own rows (as datasets read the Parquet file:
    Dataset.from_parquet), pixels equal to Pillow's decode of ds[i]'s bytes, labels and
    ClassLabel names the Dataset's; a shuffled and selected Dataset gives exactly its rows
    (key i is ds[i]); a null image is that row's error; a transform set on the Dataset is
    refused with the way to give it."""
    import pyarrow as pa

    from gpudecode.errors import GpuDecodeError

    path, images, kinds, labels = parquet_set
    ds = datasets.Dataset.from_parquet(path)
    with Loader(ds, batch_size=8, transform=None, device="cpu", shuffle=True, seed=1) as ld:
        assert list(ld.reader.classes) == ["a", "b", "c"]
        seen = {k: (img.permute(1, 2, 0).numpy(), int(lab)) for b in ld for k, img, lab in zip(b.keys, b.images,
                                                                                                  b.labels)}
    assert sorted(seen) == [f"{k:09d}" for k in range(40)]
    raw = ds.with_format("arrow")["image"]
    for k in range(40):
        want = np.asarray(Image.open(io.BytesIO(images[k])).convert("RGB"))
        assert raw[k]["bytes"].as_py() == images[k]
        assert np.array_equal(seen[f"{k:09d}"][0], want) and seen[f"{k:09d}"][1] == labels[k], k
    sub = ds.shuffle(seed=4).select(range(12))
    with Loader(sub, batch_size=12, transform=None, device="cpu", shuffle=False) as ld:
        (b,) = list(ld)
        again = pickle.loads(pickle.dumps(ld.dataset))  # (as to DataLoader's spawned workers: the Dataset, rebuilt)
    for key, img, lab in zip(b.keys, b.images, b.labels):
        row = sub[int(key)]
        assert np.array_equal(img.permute(1, 2, 0).numpy(), np.asarray(row["image"].convert("RGB")))
        assert int(lab) == row["label"] == again[int(key)][1] and torch.equal(again[int(key)][0], img)
    holey = datasets.Dataset(pa.table({"image": pa.array([{"bytes": images[0], "path": None}, None]),
                                       "label": pa.array([1, 2], pa.int64())}))
    with pytest.raises(GpuDecodeError, match="no image bytes") as e:
        with Loader(holey, batch_size=2, transform=None, device="cpu", shuffle=False) as ld:
            list(ld)
    assert e.value.key == "000000001"
    ds.set_transform(lambda x: x)
    with pytest.raises(TypeError, match=r"give the transform to the Loader \(transform=\)"):
        Loader(ds, batch_size=2, transform=None, device="cpu")


def test_an_elastic_resume_on_another_world_size_and_describe(parquet_set, tmp_path):
    """split="elastic" over two Parquet files: 3 ranks stop after 2 batches each and save;
    2 ranks finish the epoch from rank 0's state: every row of both files, none twice but
    the last round's pad (even="pad", the default), equal batches; describe() counts the
    files as shards."""
    import shutil

    path = parquet_set[0]
    other = str(shutil.copy(path, tmp_path / "train-00001-of-00002.parquet"))
    kw = dict(batch_size=4, transform=None, device="cpu", shuffle=True, seed=9, split="elastic")
    head, states = [], []
    for r in range(3):
        with Loader([path, other], rank=r, world_size=3, **kw) as ld:
            it = iter(ld)
            head += [k for b in [next(it), next(it)] for k in b.keys]
            states.append(ld.state_dict())
            it.close()
    tail, batches = [], []
    for r in range(2):
        with Loader([path, other], rank=r, world_size=2, **kw) as ld:
            ld.load_state_dict(states[0])
            got = [b.keys for b in ld]
            batches.append(len(got))
            tail += [k for keys in got for k in keys]
            described = ld.describe()
    keys = head + tail
    assert len(set(keys)) == 80 and len(keys) - 80 == (-(80 - 24)) % 2 and len(set(batches)) == 1
    assert {k.split("/")[0] for k in keys} == {"train-00000-of-00001", "train-00001-of-00002"}
    assert described["shards"] == 2 and list(ld.reader.classes) == ["a", "b", "c"]


def test_classes_open_a_file_once_and_again_when_it_changes(parquet_set, tmp_path, monkeypatch):
    """reader.classes on a Parquet set reads the file's metadata once (a file's classes are
    kept by its stat); a file rewritten with other names is read again."""
    import shutil

    from gpudecode.io import parquet as P

    path = str(shutil.copy(parquet_set[0], tmp_path / "c.parquet"))
    assert P.classes(path) == ("a", "b", "c")
    opened = []
    real = P._open
    monkeypatch.setattr(P, "_open", lambda u, *key: opened.append(u) or real(u, *key))
    assert P.classes(path) == ("a", "b", "c") and opened == []
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["x", "y"])})
    datasets.Dataset.from_dict({"image": [{"bytes": parquet_set[1][0], "path": None}], "label": [1]},
                               features=features).to_parquet(path)
    assert P.classes(path) == ("x", "y") and opened == [path]


def test_a_folder_of_parquet_files_is_named_by_its_folder(parquet_set, tmp_path):
    """A Hugging Face dataset's data/ folder named as it is, local or on fsspec (memory://):
    its Parquet files, sorted, the same batches as the files named one by one; the files
    of two splits in one folder, or Parquet files beside tar shards, refused by name."""
    import shutil

    from gpudecode.errors import ShardReadError
    from gpudecode.io.shards import expand_urls

    fsspec = pytest.importorskip("fsspec")
    path = parquet_set[0]
    data = tmp_path / "data"
    data.mkdir()
    files = [str(shutil.copy(path, data / f"train-0000{k}-of-00002.parquet")) for k in (1, 0)][::-1]
    (data / "README.md").write_text("a dataset card")
    remote = "memory://hub/data"
    for f in files:
        with open(f, "rb") as src, fsspec.open(f"{remote}/{f.rpartition('/')[2]}", "wb") as dst:
            dst.write(src.read())
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert expand_urls(str(data)) == expand_urls(str(data) + "/") == files
    assert expand_urls(remote) == expand_urls(remote + "/") == [f"{remote}/{f.rpartition('/')[2]}" for f in files]
    got = []
    for spec in (files, str(data), remote):
        with Loader(spec, batch_size=16, transform=None, device="cpu", shuffle=True, seed=2) as ld:
            got.append([(b.keys, b.images.clone(), b.labels.clone()) for b in ld])
            assert ld.reader.classes == ["a", "b", "c"]
            assert ld.dataset.targets == [v for f in files for v in pq.read_table(f)["label"].to_pylist()]
    assert sum(len(b[0]) for b in got[0]) == rows == 80
    for other in got[1:]:
        assert len(other) == len(got[0])
        for x, y in zip(got[0], other):
            assert x[0] == y[0] and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2])
    plain = tmp_path / "plain"  # names of no convention: every one, sorted
    plain.mkdir()
    shutil.copy(path, plain / "b.PQ")
    shutil.copy(path, plain / "a.parquet")
    assert expand_urls(str(plain)) == [f"{plain}/a.parquet", f"{plain}/b.PQ"]
    shutil.copy(path, data / "test-00000-of-00001.parquet")
    with pytest.raises(ShardReadError, match=r"Parquet files of 2 splits \(test: 1, train: 2\): name one, e\.g\. "
                                             r".*/data/train-\*\.parquet") as e:
        expand_urls(str(data))
    assert e.value.shard == str(data)
    with open(path, "rb") as src, fsspec.open(f"{remote}/test-00000-of-00001.parquet", "wb") as dst:
        dst.write(src.read())
    with pytest.raises(ShardReadError, match="2 splits"):
        Loader(remote, batch_size=4, transform=None, device="cpu")
    make_shard(plain / "t-0.tar", [{"__key__": "x", "jpg": parquet_set[1][0]}])
    with pytest.raises(ShardReadError, match=r"both tar shards \(1\) and Parquet files \(2\): name the ones"):
        expand_urls(str(plain))
    fsspec.filesystem("memory").rm("/hub", recursive=True)
