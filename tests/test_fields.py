"""A sample's other members handed out beside its image and label (`Loader(...,
fields=)`, gpudecode/fields.py): captions, JSON records, .npy arrays and integers,
against webdataset's own decoding of the same shards (`.decode()`, `.to_tuple`), through
shuffling, ranks and `even`, the resident store, resuming, several views, a user's batch
callable, `loader.dataset`, pickling; functions run on the values (a tokenizer); every
bad field its sample's FieldError, named, and skipped alone under on_error="skip"."""
from __future__ import annotations

import io
import json
import pickle
import threading

import numpy as np
import pytest
import torch

import gpudecode
from gpudecode import FieldError, Loader
from gpudecode import transforms as T
from gpudecode.fields import decode_member

from conftest import encode, make_shard, tar_samples

TF = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])


def _npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _samples(photos, n=23, start=0):
    """JPEG photographs (crops of the test photos, of several sizes) with a class, a UTF-8
    caption, a JSON record and a float32 [2, 3] array each."""
    rng = np.random.default_rng(start)
    names = sorted(photos)
    out = []
    for i in range(start, start + n):
        img = photos[names[i % len(names)]]
        h, w = 40 + (i * 7) % 30, 40 + (i * 11) % 30
        out.append({"__key__": f"sample{i:04d}", "jpg": encode(np.ascontiguousarray(img[:h, :w])),
                    "cls": str(i % 5), "txt": f"a photograph, number {i} — café",
                    "json": json.dumps({"index": i, "tags": ["x"] * (i % 3), "score": i / 7}),
                    "npy": _npy(rng.random((2, 3)).astype(np.float32))})
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory, photos):
    d = tmp_path_factory.mktemp("fields")
    return [make_shard(d / "a-000000.tar", _samples(photos, 23, 0)),
            make_shard(d / "a-000001.tar", _samples(photos, 18, 100))]


def _wds_fields(urls):
    """{key: (txt, json, npy, cls)}: each shard read by tarfile (conftest.tar_samples), each
    member decoded by webdataset's default decoders (basichandlers)."""
    from webdataset.autodecode import basichandlers

    return {k: tuple(basichandlers(ext, f[ext]) for ext in ("txt", "json", "npy", "cls"))
            for u in urls for k, f in tar_samples(u)}


def _flat(ld, epochs=1):
    """Each sample handed out, in order: (key, image, label, *fields)."""
    out = []
    for _ in range(epochs):
        for b in ld:
            rows = [b.keys, list(b.images.clone())]
            rows.append(list(b.labels) if b.labels is not None else [None] * len(b.keys))
            for v in b.fields.values():
                rows.append(list(v.clone()) if isinstance(v, torch.Tensor) else list(v))
            out += list(zip(*rows))
    return out


def test_fields_are_webdatasets_values_and_follow_their_images(shards):
    ref = _wds_fields(shards)
    ld = Loader(shards, batch_size=8, transform=TF, seed=3, device="cpu", num_workers=2,
                fields=["txt", "json", "npy"])
    b = next(iter(ld))
    ld.set_epoch(0)  # (the next iteration: epoch 0 again, from its start)
    assert b._fields == ("images", "labels", "txt", "json", "npy") and len(b) == 5
    images, labels, txt, meta, arr = b  # (unpacks as a DataLoader batch of a 5-tuple Dataset does)
    assert isinstance(txt, list) and isinstance(meta, list) and arr.shape == (8, 2, 3) and arr.dtype == torch.float32
    got = _flat(ld)
    assert sorted(k for k, *_ in got) == sorted(ref)
    plain = {k: (img, lab) for k, img, lab in _flat(Loader(shards, batch_size=8, transform=TF, seed=3, device="cpu",
                                                             num_workers=2))}
    for key, img, lab, t, j, a in got:
        rt, rj, ra, rc = ref[key]
        assert t == rt and j == rj and np.array_equal(a.numpy(), ra) and int(lab) == rc
        assert torch.equal(img, plain[key][0]) and int(plain[key][1]) == rc  # (fields change no image or label)


def test_labels_off_gives_images_and_fields_and_a_function_runs_on_each(shards):
    ref = _wds_fields(shards)

    def tokens(text: str) -> torch.Tensor:  # (a tokenizer's shape: a fixed-length id tensor)
        ids = [ord(c) % 1000 for c in text][:16]
        return torch.tensor(ids + [0] * (16 - len(ids)), dtype=torch.int64)

    ld = Loader(shards, batch_size=7, transform=TF, seed=1, device="cpu", labels=False, shuffle=False,
                fields={"txt": tokens, "json": lambda d: d["index"], "cls": lambda v: v * 10})
    n = 0
    for b in ld:
        images, toks, index, tens = b
        assert b.labels is None and b._fields == ("images", "txt", "json", "cls")
        assert toks.shape == (len(b.keys), 16) and index.dtype == torch.int64 and tens.dtype == torch.int64
        for k, key in enumerate(b.keys):
            assert torch.equal(toks[k], tokens(ref[key][0]))
            assert int(index[k]) == ref[key][1]["index"] and int(tens[k]) == ref[key][3] * 10
        n += len(b.keys)
    assert n == len(ref)
    assert ld.describe()["batch"] == ["images", "txt", "json", "cls"]


def test_the_function_runs_on_the_fields_thread_and_close_ends_it(shards):
    """A field's function runs on a thread of its own while the batch decodes (not the
    trainer's, not the decode stage's), and close() ends that thread."""
    where = set()

    def upper(text):
        where.add(threading.current_thread())
        return text.upper()

    ld = Loader(shards, batch_size=8, transform=TF, device="cpu", shuffle=False, fields={"txt": upper})
    b = next(iter(ld))
    assert b.fields["txt"] == [t.upper() for t in _wds_texts(shards, b.keys)]
    assert len(where) == 1
    thread = where.pop()
    assert thread.name.startswith("gpudecode-fields") and thread.is_alive()
    ld.close()  # (its own thread: another test's Loader, not yet collected, may hold one of the name in this process)
    thread.join(timeout=10)
    assert not thread.is_alive()


def _wds_texts(shards, keys):
    ref = _wds_fields(shards)
    return [ref[k][0] for k in keys]


def test_a_batched_function_runs_once_a_batch_and_fails_only_its_samples(tmp_path, photos):
    """fields.batched(fn): fn takes the batch's values as one list (a tokenizer's list
    form) and gives a value each, the same as fn on each alone; where it raises, only the
    samples it fails on alone are FieldErrors; a result of another length is the
    function's own error, raised."""
    from gpudecode.fields import batched

    calls = []

    def tokenize(texts):
        calls.append(len(texts))
        if any("number 5 " in t for t in texts):
            raise ValueError("cannot take number 5")
        ids = [[ord(c) % 1000 for c in t][:16] for t in texts]
        return torch.tensor([i + [0] * (16 - len(i)) for i in ids], dtype=torch.int64)

    rows = _samples(photos, 12)
    url = make_shard(tmp_path / "b.tar", rows)
    ld = Loader(url, batch_size=6, transform=TF, device="cpu", shuffle=False, on_error="skip",
                fields={"txt": batched(tokenize)})
    got = _flat(ld)
    assert calls == [6, 1, 1, 1, 1, 1, 1, 6]  # (the first batch's call failed: its values one by one; the second once)
    assert [k for k, *_ in got] == [f"sample{i:04d}" for i in range(12) if i != 5]
    for key, _, _, toks in got:
        text = rows[int(key[-4:])]["txt"]
        assert torch.equal(toks, tokenize([text])[0])
    (s,) = ld.skipped
    assert s.key == "sample0005" and "cannot take number 5" in s.reason and "batched(" in s.reason

    def picky(text):
        if "number 3 " in text:
            raise KeyError("three")
        return text

    with pytest.raises(FieldError, match="picky raised KeyError") as e:  # (the function's exception its cause)
        list(Loader(url, batch_size=6, transform=TF, device="cpu", shuffle=False, fields={"txt": picky}))
    assert isinstance(e.value.__cause__, KeyError) and e.value.key == "sample0003"
    short = Loader(url, batch_size=6, transform=TF, device="cpu", shuffle=False,
                   fields={"txt": batched(lambda texts: texts[:-1])})
    with pytest.raises(TypeError, match="gave 5 values for the 6"):
        list(short)


def test_each_bad_field_is_its_samples_error_and_skipped_alone(tmp_path, photos):
    good = _samples(photos, 12)
    bad = {3: ("txt", b"\xff\xfe not utf-8"), 5: ("json", b"{bad json"), 7: ("npy", b"\x93NUMPY garbage"),
           9: ("txt", None)}
    for i, (ext, data) in bad.items():
        if data is None:
            del good[i][ext]
        else:
            good[i][ext] = data
    url = make_shard(tmp_path / "bad.tar", good)
    with pytest.raises(FieldError) as e:
        list(Loader(url, batch_size=4, transform=TF, device="cpu", shuffle=False, fields=["txt", "json", "npy"]))
    assert e.value.key == "sample0003" and e.value.shard == url and "not UTF-8" in str(e.value)
    ld = Loader(url, batch_size=4, transform=TF, device="cpu", shuffle=False, fields=["txt", "json", "npy"],
                on_error="skip")
    got = _flat(ld)
    keys = [k for k, *_ in got]
    assert keys == [f"sample{i:04d}" for i in range(12) if i not in bad]
    for key, _, lab, t, j, a in got:  # (the rest still line up: each sample's own values)
        i = int(key[-4:])
        assert t.endswith(f"number {i} — café") and j["index"] == i and int(lab) == i % 5 and a.shape == (2, 3)
    why = {s.key: s for s in ld.skipped}
    assert sorted(why) == [f"sample{i:04d}" for i in sorted(bad)]
    assert all(s.error == "FieldError" and s.shard == url for s in why.values())
    assert "no field .txt" in why["sample0009"].reason and "not valid JSON" in why["sample0005"].reason
    kept = Loader(url, batch_size=4, transform=TF, device="cpu", shuffle=False, fields=["txt", "json", "npy"],
                  on_error="skip", keep="ram")
    for _ in range(2):  # (the store leaves them out, and each epoch names them as streaming does)
        assert [(k, t, j) for k, _, _, t, j, _ in _flat(kept)] == [(k, t, j) for k, _, _, t, j, _ in got]
        assert sorted((s.key, s.reason) for s in kept.skipped) == sorted((s.key, s.reason) for s in ld.skipped)
        kept.skipped.clear()


def test_hostile_npy_and_pickles_are_refused_without_allocating():
    small = _npy(np.zeros(2))
    huge = small.replace(b"(2,), }" + b" " * 12, b"(1000000000000,), }")  # (the header's length kept: padding taken)
    assert len(huge) == len(small) and b"1000000000000" in huge
    with pytest.raises(ValueError, match="header says"):
        decode_member("npy", huge)
    objs = io.BytesIO()
    np.save(objs, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="pickle"):
        decode_member("npy", objs.getvalue())
    fortran = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    assert np.array_equal(decode_member("seg.npy", _npy(fortran)), fortran)  # (by its last extension)
    with pytest.raises(ValueError, match="not an integer"):
        decode_member("cls", b"3.5")
    with pytest.raises(ValueError, match="nested"):
        decode_member("json", b"[" * 100_000 + b"]" * 100_000)
    assert decode_member("bin", memoryview(b"\x00\x01")) == b"\x00\x01"


def test_refused_when_the_loader_is_made(shards, tmp_path, photos):
    with pytest.raises(ValueError, match="runs code from the shard"):
        Loader(shards, batch_size=4, transform=TF, device="cpu", fields="pyd")
    with pytest.raises(ValueError, match="image extensions given"):
        Loader(shards, batch_size=4, transform=TF, device="cpu", image_ext="jpg;npy", fields="npy")
    with pytest.raises(ValueError, match="named by two fields"):
        Loader(shards, batch_size=4, transform=TF, device="cpu", fields=["txt", "json;txt"])
    with pytest.raises(ValueError, match="batch's own labels"):
        Loader(shards, batch_size=4, transform=TF, device="cpu", fields="labels")
    with pytest.raises(TypeError, match="not callable"):
        Loader(shards, batch_size=4, transform=TF, device="cpu", fields={"txt": "upper"})
    folder = tmp_path / "tree" / "cat"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(encode(photos["coffee"][:32, :32]))
    with pytest.raises(ValueError, match="images as they lie"):
        Loader(str(tmp_path / "tree"), batch_size=4, transform=TF, device="cpu", fields="txt")


@pytest.mark.parametrize("compressed", [False, True])
def test_a_parquet_files_other_columns_are_fields(tmp_path, photos, compressed):
    """Image-text pairs in Parquet (a caption column beside the image, as the hub's
    captioned sets hold them): each named column a field, its values as pyarrow's
    to_pylist gives them, row for row, whether the rows are read in place (uncompressed)
    or by pyarrow; a null is no field, the row's FieldError; a column not there is refused."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _samples(photos, 30)
    captions = [r["txt"] for r in rows]
    captions[11] = None
    table = pa.table({"image": pa.array([r["jpg"] for r in rows], pa.binary()),
                      "label": pa.array([int(r["cls"]) for r in rows], pa.int64()),
                      "Caption": pa.array(captions, pa.string()),
                      "score": pa.array([k / 3 for k in range(30)], pa.float64()),
                      "tags": pa.array([["x"] * (k % 3) for k in range(30)], pa.list_(pa.string()))})
    path = str(tmp_path / "pairs.parquet")
    pq.write_table(table, path, row_group_size=8, compression="zstd" if compressed else "none", use_dictionary=False)
    want = pq.read_table(path).to_pylist()
    ld = Loader(path, batch_size=8, transform=TF, device="cpu", seed=2, fields=["caption", "score", "tags"],
                on_error="skip")
    got = _flat(ld)
    assert len(got) == 29
    for key, _, lab, caption, score, tags in got:
        row = want[int(key.rsplit("/", 1)[1])]
        assert (caption, score, tags, int(lab)) == (row["Caption"], row["score"], row["tags"], row["label"])
    assert [s.key for s in ld.skipped] == ["pairs/000000011"] and "no field .caption" in ld.skipped[0].reason
    b = next(iter(Loader(path, batch_size=4, transform=TF, device="cpu", shuffle=False, fields="score")))
    assert b.fields["score"].dtype == torch.float64  # (Python floats as DataLoader's default_collate makes them)
    with pytest.raises(ValueError, match="has no column 'txt'.*Caption"):
        Loader(path, batch_size=4, transform=TF, device="cpu", fields="txt")


def test_a_pickle_read_by_the_callers_function_and_alternatives_in_order(tmp_path, photos):
    rows = [{"__key__": f"k{i}", "jpg": encode(photos["coffee"][:40, :40]), "cls": "1",
             **({"pyd": pickle.dumps({"i": i})} if i % 2 else {"caption": f"c{i}".encode()})} for i in range(6)]
    url = make_shard(tmp_path / "p.tar", rows)
    ld = Loader(url, batch_size=6, transform=TF, device="cpu", shuffle=False,
                fields={"pyd": pickle.loads, "caption;txt": None}, on_error="skip")
    # (every sample lacks one of the two fields: those without .pyd skip, naming it)
    assert _flat(ld) == [] and len(ld.skipped) == 6
    ld = Loader(url, batch_size=6, transform=TF, device="cpu", shuffle=False, fields={"pyd;caption": bytes})
    (b,) = list(ld)
    assert b.fields["pyd"] == [b"c0", pickle.dumps({"i": 1}), b"c2", pickle.dumps({"i": 3}), b"c4",
                               pickle.dumps({"i": 5})]


def test_arrays_of_another_shape_than_their_batchs_first_are_named(tmp_path, photos):
    rows = _samples(photos, 8)
    rows[5]["npy"] = _npy(np.zeros((4, 4), np.float32))
    url = make_shard(tmp_path / "shape.tar", rows)
    ld = Loader(url, batch_size=8, transform=TF, device="cpu", shuffle=False, fields="npy", on_error="skip")
    (b,) = list(ld)
    assert b.fields["npy"].shape == (7, 2, 3) and "sample0005" not in b.keys
    (s,) = ld.skipped
    assert s.key == "sample0005" and "(4, 4)" in s.reason and "'sample0000'" in s.reason


def test_ranks_even_resume_and_the_resident_store_keep_each_samples_fields(shards):
    ref = _wds_fields(shards)

    def check(rows):
        for key, _, lab, t, j in rows:
            assert (t, j, int(lab)) == (ref[key][0], ref[key][1], ref[key][3])

    kw = dict(batch_size=5, transform=TF, seed=7, device="cpu", num_workers=1, fields=["txt", "json"])
    with pytest.warns(RuntimeWarning, match="repeats"):
        ranks = [_flat(Loader(shards, rank=r, world_size=3, even="pad", split="sample", **kw)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    for r in ranks:
        check(r)
    streamed = _flat(Loader(shards, **kw), epochs=2)
    kept = Loader(shards, keep="ram", **kw)
    resident = _flat(kept, epochs=2)
    assert kept.describe()["keep"]["tier"] == "ram"
    assert [(k, t, j) for k, _, _, t, j in resident] == [(k, t, j) for k, _, _, t, j in streamed]
    assert all(torch.equal(a[1], b[1]) for a, b in zip(resident, streamed))
    check(resident)
    ld = Loader(shards, **kw)
    it = iter(ld)
    first = [next(it) for _ in range(3)]
    state = ld.state_dict()
    rest = _flat(_Rest(it))
    again = Loader(shards, **kw)
    again.load_state_dict(state)
    assert [(k, t, j) for k, _, _, t, j in _flat(again)] == [(k, t, j) for k, _, _, t, j in rest]
    assert first[0].fields["txt"] == [ref[k][0] for k in first[0].keys]


def test_a_batch_made_up_under_even_repeats_the_fields_with_their_images(tmp_path, photos):
    rows = _samples(photos, 8)
    for r in rows[4:]:
        r["jpg"] = r["jpg"][:200]  # (cut: every image of the second batch fails)
    url = make_shard(tmp_path / "cut.tar", rows)
    ld = Loader(url, batch_size=4, transform=TF, device="cpu", shuffle=False, even="pad", on_error="skip",
                fields=["txt", "npy"])
    first, second = list(ld)
    assert len(ld.skipped) == 4 and second.keys == first.keys
    assert second.fields["txt"] == first.fields["txt"] and torch.equal(second.fields["npy"], first.fields["npy"])


class _Rest:
    def __init__(self, it):
        self.it = it

    def __iter__(self):
        return self.it


def test_views_batch_callables_pickling_and_the_dataset(shards):
    ref = _wds_fields(shards)
    ld = Loader(shards, batch_size=4, transform=[TF, T.Compose([T.RandomResizedCrop(16)])], device="cpu",
                shuffle=False, fields="txt")
    b = next(iter(ld))
    assert isinstance(b.images, list) and len(b.images) == 2 and b.fields["txt"] == [ref[k][0] for k in b.keys]
    ld = Loader(shards, batch_size=4, transform=TF, device="cpu", shuffle=False, fields="txt",
                batch_transform=lambda images, labels: (images.flip(-1), labels + 1))
    b = next(iter(ld))
    assert b.labels.tolist() == [ref[k][3] + 1 for k in b.keys] and b.fields["txt"] == [ref[k][0] for k in b.keys]
    again = pickle.loads(pickle.dumps(b))
    assert type(again)._fields == b._fields and again.keys == b.keys and again.fields["txt"] == b.fields["txt"]
    rebuilt = type(b)(*[x for x in b])  # (namedtuple's protocol: torch's collate, Lightning's transfer)
    assert rebuilt.fields == b.fields and rebuilt._asdict()["txt"] == b.fields["txt"]
    one = Loader(shards, batch_size=4, transform=TF, device="cpu", shuffle=False, fields=["txt", "npy"])
    threads = threading.active_count()
    image, label, text, arr = one.dataset[5]
    assert threading.active_count() == threads  # (one item: no thread made for its fields)
    key = one.dataset.sample(5).key
    assert text == ref[key][0] and label == ref[key][3] and np.array_equal(arr.numpy(), ref[key][2])
    assert image.shape == (3, 24, 24)


def test_a_default_image_extension_named_as_a_field_is_that_field(tmp_path, photos):
    """The default image extensions hold npy (precache's tensor samples): a Loader asked for
    .npy as a field reads the image from the sample's other image member."""
    url = make_shard(tmp_path / "n.tar", _samples(photos, 4))
    ld = Loader(url, batch_size=4, transform=TF, device="cpu", shuffle=False, fields="npy")
    assert "npy" not in ld.pipeline.config.image_exts and "jpg" in ld.pipeline.config.image_exts
    (b,) = list(ld)
    assert b.fields["npy"].shape == (4, 2, 3)


def test_fields_without_any_is_the_plain_batch(shards):
    b = next(iter(Loader(shards, batch_size=4, transform=TF, device="cpu")))
    assert type(b) is gpudecode.batches.Batch and b._fields == ("images", "labels") and b.fields == {}
    b = next(iter(Loader(shards, batch_size=4, transform=TF, device="cpu", labels=False)))
    assert len(b) == 2 and b.labels is None


def test_precached_tensor_shards_keep_their_fields(shards, tmp_path):
    """precache keeps a sample's other members beside its tensor: a captioned set precached
    is read with its captions."""
    from gpudecode.precache import precache

    ref = _wds_fields(shards)
    precache(shards, tmp_path / "out", size=32, num_threads=1)
    out = sorted(str(p) for p in (tmp_path / "out").glob("*.tar"))
    ld = Loader(out, batch_size=8, transform=T.Compose([T.RandomCrop(24)]), device="cpu", fields=["txt", "json"])
    got = _flat(ld)
    assert sorted(k for k, *_ in got) == sorted(ref)
    for key, img, lab, t, j in got:
        assert (t, j, int(lab)) == (ref[key][0], ref[key][1], ref[key][3]) and img.shape == (3, 24, 24)


def test_a_hugging_face_datasets_other_columns_are_fields(photos):
    """A `datasets.Dataset` given as it is (an Image column, a ClassLabel, a caption and a
    score column): each named column a field, row for row through its indices (shuffled and
    selected), a null no field (the row's FieldError), a column not there refused."""
    datasets = pytest.importorskip("datasets")
    rows = _samples(photos, 20)
    texts = [r["txt"] for r in rows]
    texts[4] = None
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list("abcde")),
                                  "text": datasets.Value("string"), "score": datasets.Value("float64")})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": r["jpg"], "path": None} for r in rows],
                                     "label": [int(r["cls"]) for r in rows], "text": texts,
                                     "score": [k / 4 for k in range(20)]}, features=features)
    view = ds.shuffle(seed=1).select(range(15))
    ld = Loader(view, batch_size=4, transform=TF, device="cpu", seed=0, fields=["text", "score"], on_error="skip")
    got = _flat(ld)
    want = {str(k): view[k] for k in range(len(view))}
    gone = [str(k) for k in range(len(view)) if view[k]["text"] is None]
    assert len(gone) == 1  # (row 4 is in the view)
    assert sorted(int(k) for k, *_ in got) == sorted(int(k) for k in want if k not in gone)
    for key, _, lab, text, score in got:
        row = want[str(int(key))]
        assert (text, float(score), int(lab)) == (row["text"], row["score"], row["label"])
    assert [int(s.key) for s in ld.skipped] == [int(k) for k in gone] and "no field .text" in ld.skipped[0].reason
    with pytest.raises(ValueError, match="has no column 'txt'.*text, score"):
        Loader(ds, batch_size=4, transform=TF, device="cpu", fields="txt")

