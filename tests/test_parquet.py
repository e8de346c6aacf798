"""Parquet files as shards (gpudecode/io/parquet.py; issue 58): a set written by Hugging
Face `datasets` (an Image column of JPEG and PNG rows, a ClassLabel) read by the Loader as
it lies: every sample once, pixels equal to Pillow's decode, the labels of the column,
ranks with equal batches, resume, random access, mixing with a tar shard; a damaged file
and a row without an image are errors naming the file and the row."""
from __future__ import annotations

import io

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
    assert sorted(seen) == [f"{k:09d}" for k in range(40)]  # every row once
    for k in range(40):
        want = np.asarray(Image.open(io.BytesIO(images[k])).convert("RGB"))
        got, lab = seen[f"{k:09d}"]
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
    assert sorted(keys) == [f"{k:09d}" for k in range(40)]


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
    assert len(keys) == 45 and {k for k in keys if k.startswith("t")} == {f"t{k}" for k in range(5)}


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
    assert e.value.shard.endswith("holey.parquet") and e.value.key == "000000003" and "no image bytes" in str(e.value)
    with Loader(str(holey), batch_size=3, transform=None, device="cpu", on_error="skip") as ld:
        keys = [k for b in ld for k in b.keys]
        assert sorted(keys) == ["000000000", "000000001", "000000002", "000000004", "000000005"]
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
    assert [labels[int(k)] for k in b.keys] == b.labels.tolist() and b.images.dtype == torch.uint8
