"""Image files read as they lie (gpudecode.io.files): an ImageFolder tree against
torchvision's ImageFolder (classes, indices, order, labels), against the same images
packed into shards by `gpudecode shard` (the same pixels), list files and Python lists,
shuffling, ranks, resume, and faults named by file."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from gpudecode import DecodeError, LabelError, Loader, ShardReadError, ShardReader
from gpudecode import transforms as T
from gpudecode.cli import main

from conftest import tar_samples

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def tree(photos, tmp_path_factory):
    """A tree of real photos as users keep them: 3 classes, a nested folder, upper-case
    and mixed extensions (JPEG and PNG), files that are not images beside them."""
    root = tmp_path_factory.mktemp("imagenet") / "train"
    names = list(photos)
    for k in range(22):
        cls = ["n02", "n01", "n10"][k % 3]
        folder = root / cls / ("extra" if k % 7 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        img = photos[names[k % len(names)]][k * 3:k * 3 + 90, k * 4:k * 4 + 120]
        ext, fmt = [("JPEG", "JPEG"), ("jpg", "JPEG"), ("png", "PNG")][k % 3]
        Image.fromarray(np.ascontiguousarray(img)).save(folder / f"img{k:03d}.v1.{ext}", fmt)
    (root / "n01" / "notes.txt").write_text("not an image")
    (root / "README").write_text("a file beside the class folders")
    return root


def _tf(size=48):
    return T.Compose([T.Resize(size), T.CenterCrop(size), T.Normalize(MEAN, STD)])


def test_tree_is_read_as_torchvision_imagefolder(tree):
    ref = torchvision.datasets.ImageFolder(str(tree))
    loader = Loader(str(tree), batch_size=5, transform=_tf(), device="cpu", shuffle=False)
    assert loader.reader.classes == ref.classes == ["n01", "n02", "n10"]
    assert loader.total_samples == len(ref) == 22 and len(loader) == 5
    ds = loader.dataset
    assert len(ds) == len(ref)
    for i, (path, target) in enumerate(ref.samples):  # the same order and indices
        s = ds.sample(i)
        assert s.shard == path and int(s.fields["cls"]) == target
        assert s.key == os.path.relpath(path, tree).rsplit(".", 1)[0].replace(".", "_")
    labels = [t for b in loader for t in b.labels.tolist()]
    assert labels == ref.targets  # unshuffled: the tree's order


def test_tree_pixels_equal_the_shards_of_the_same_tree_and_torchvision(tree, tmp_path, capsys):
    """The files give the very pixels their shards give (`gpudecode shard --key path`),
    and torchvision's ImageFolder + v2 transforms within the suite's bound."""
    import torchvision.transforms.v2 as v2

    assert main(["shard", str(tree), str(tmp_path / "s-%06d.tar"), "--shard-size", "8", "--key", "path",
                 "--quiet"]) == 0
    capsys.readouterr()
    files = Loader(str(tree), batch_size=6, transform=_tf(), device="cpu", shuffle=False)
    shards = Loader(str(tmp_path), batch_size=6, transform=_tf(), device="cpu", shuffle=False)
    from_files = {k: (img, lab) for b in files for k, img, lab in zip(b.keys, b.images.clone(), b.labels)}
    from_shards = {k: (img, lab) for b in shards for k, img, lab in zip(b.keys, b.images.clone(), b.labels)}
    assert from_files.keys() == from_shards.keys() and len(from_files) == 22
    for k, (img, lab) in from_files.items():
        assert torch.equal(img, from_shards[k][0]) and int(lab) == int(from_shards[k][1])
    ref = torchvision.datasets.ImageFolder(str(tree), transform=v2.Compose([
        v2.PILToTensor(), v2.Resize(48), v2.CenterCrop(48), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD)]))
    std = torch.tensor(STD).view(3, 1, 1)
    for i, (path, _) in enumerate(ref.samples):
        key = os.path.relpath(path, tree).rsplit(".", 1)[0].replace(".", "_")
        img, lab = from_files[key]
        want, t = ref[i]
        assert int(lab) == t
        assert float(((img - want).abs() * std).max()) * 255 <= 1.0, key  # JPEG decoders agree to a level


def test_shuffled_epochs_ranks_and_resume(tree):
    kw = dict(batch_size=4, transform=_tf(32), device="cpu", seed=5)
    one = Loader(str(tree), **kw)
    e0 = [k for b in one for k in b.keys]
    e1 = [k for b in one for k in b.keys]
    assert sorted(e0) == sorted(e1) and len(set(e0)) == 22 and e0 != e1  # each file once, a new order
    assert e0 != sorted(e0)
    # the sampler names the dataset indices in the order read
    one.set_epoch(1)
    assert [one.dataset.sample(i).key for i in one.sampler] == e1
    # two ranks: disjoint, together every file, the same batch count (padded) by default
    got, lens = [], []
    for rank in range(2):
        ld = Loader(str(tree), rank=rank, world_size=2, **kw)
        keys = [k for b in ld for k in b.keys]
        lens.append(len(ld))
        got.append(keys)
    assert set(got[0]).isdisjoint(got[1]) and sorted(got[0] + got[1]) == sorted(e0)
    assert lens[0] == lens[1]
    # resume in the middle of an epoch: the rest of it, the same pixels
    full = Loader(str(tree), **kw)
    full.set_epoch(3)
    expected = [(b.keys, b.images.clone()) for b in full]
    ld = Loader(str(tree), **kw)
    ld.set_epoch(3)
    it = iter(ld)
    next(it), next(it)
    state = ld.state_dict()
    it.close()
    again = Loader(str(tree), **kw)
    again.load_state_dict(state)
    rest = [(b.keys, b.images.clone()) for b in again]
    assert [r[0] for r in rest] == [e[0] for e in expected[2:]]
    assert all(torch.equal(r[1], e[1]) for r, e in zip(rest, expected[2:]))


def test_list_file_and_python_lists(tree, tmp_path):
    ref = torchvision.datasets.ImageFolder(str(tree))
    lines = [f"{os.path.relpath(p, tmp_path)} {t}" for p, t in ref.samples[:9]]
    lst = tmp_path / "train.txt"
    lst.write_text("# path label\n" + "\n".join(lines) + "\n")
    ld = Loader(str(lst), batch_size=4, transform=_tf(32), device="cpu", shuffle=False)
    assert [t for b in ld for t in b.labels.tolist()] == ref.targets[:9]
    pairs = [(p, t) for p, t in ref.samples[9:14]]
    ld = Loader(pairs, batch_size=4, transform=_tf(32), device="cpu", shuffle=False)
    assert [t for b in ld for t in b.labels.tolist()] == ref.targets[9:14]
    ld = Loader([p for p, _ in pairs], batch_size=4, transform=_tf(32), device="cpu", shuffle=False, labels=False)
    assert sum(b.images.shape[0] for b in ld) == 5
    # a ShardReader gives the files' bytes as samples
    r = ShardReader(str(lst))
    got = {s.shard: s for s in r}
    assert set(got) == {p for p, _ in ref.samples[:9]}
    for path, s in got.items():
        ext = path.rsplit(".", 1)[1].lower()
        with open(path, "rb") as f:
            assert s.fields[ext] == f.read()
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{ref.samples[0][0]} dog\n")
    with pytest.raises(LabelError, match="line 1: .* is not `path label`"):  # (as a .cls member's "dog" is)
        ShardReader(str(bad))


def test_faults_name_the_file(tree, tmp_path):
    ref = torchvision.datasets.ImageFolder(str(tree))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a JPEG at all")
    missing = str(tmp_path / "gone.jpg")
    items = [(p, t) for p, t in ref.samples[:6]] + [(str(broken), 1), (missing, 2)]
    with pytest.raises((DecodeError, ShardReadError)) as e:
        list(Loader(items, batch_size=4, transform=_tf(32), device="cpu", shuffle=False))
    assert "broken.jpg" in str(e.value) or "gone.jpg" in str(e.value)  # the reader may meet the missing one first
    ld = Loader(items, batch_size=4, transform=_tf(32), device="cpu", shuffle=False, on_error="skip")
    assert sum(b.images.shape[0] for b in ld) == 6
    assert sorted(os.path.basename(s.shard) for s in ld.skipped) == ["broken.jpg", "gone.jpg"]
    # a tree with an empty class folder, a folder with nothing: errors at construction
    empty = tmp_path / "t"
    (empty / "a").mkdir(parents=True)
    (empty / "b").mkdir()
    Image.new("RGB", (8, 8)).save(empty / "a" / "x.png")
    with pytest.raises(ShardReadError, match="no image in class folder.*'b'"):
        Loader(str(empty), batch_size=2, transform=_tf(8), device="cpu")
    with pytest.raises(ShardReadError, match="neither shards nor an ImageFolder tree"):
        Loader(str(empty / "b"), batch_size=2, transform=_tf(8), device="cpu")


def test_precache_and_inspect_take_a_tree(tree, tmp_path, capsys, monkeypatch):
    """`gpudecode precache train/ out/`: the tree in units of FILE_UNIT files, the same
    arrays as precaching the tree's shards (keys are the files' paths); resume keeps the
    units done; inspect counts the tree's images; a Python list is refused by name."""
    import io as _io

    import gpudecode.precache as pc
    from gpudecode.precache import precache

    monkeypatch.setattr(pc, "FILE_UNIT", 8)  # 22 files: units of 8, 8 and 6
    assert main(["shard", str(tree), str(tmp_path / "s" / "s-%06d.tar"), "--key", "path", "--quiet"]) == 0
    a = precache(str(tree), tmp_path / "a", size=40, num_threads=1)
    b = precache(str(tmp_path / "s"), tmp_path / "b", size=40, num_threads=1)
    assert len(a.units) == 3 and a.samples == b.samples == 22

    def arrays(report):  # read back by tarfile (conftest.tar_samples), not our reader
        return {k: np.load(_io.BytesIO(f["npy"])) for p in report.shards for k, f in tar_samples(p) if "npy" in f}

    got, want = arrays(a), arrays(b)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)
    again = precache(str(tree), tmp_path / "a", size=40, num_threads=1, resume=True)
    assert len(again.kept) == 3 and again.written == 0
    # the tensor shards train like any: labels are the tree's class indices
    ref = torchvision.datasets.ImageFolder(str(tree))
    want_labels = {os.path.relpath(p, tree).rsplit(".", 1)[0].replace(".", "_"): t for p, t in ref.samples}
    ld = Loader(a.shards, batch_size=8, transform=T.Compose([T.RandomResizedCrop(16)]), device="cpu")
    assert {k: int(lab) for bt in ld for k, lab in zip(bt.keys, bt.labels)} == want_labels
    with pytest.raises(ValueError, match="a Python list of files cannot be precached"):
        precache([p for p, _ in ref.samples[:3]], tmp_path / "c", size=40)
    capsys.readouterr()
    assert main(["inspect", str(tree)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 22 and report["images"] == {"jpeg 4:2:0": 15, "png rgb": 7}
    assert report["extensions"] == {"jpeg": 8, "jpg": 7, "png": 7, "cls": 22}


_PARTS = ["a", "b.c", "n01440764", ".", "..", "", ".h", "x y", "ü.JPEG"]


def test_keys_under_a_root_are_relpaths_answer_for_any_path():
    """A key's path under its root is taken by prefix where the path is plain (a million
    ImageFolder samples in about 1 s, not 8): for any path drawn from odd parts (empty,
    ".", "..", dot names) and a root given absolute or relative, the same as
    os.path.relpath's (where the prefix is not taken, relpath itself is)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gpudecode.io.files import _under

    seg = st.lists(st.sampled_from(_PARTS), min_size=1, max_size=5).map("/".join)

    @settings(max_examples=400, deadline=None)
    @given(seg, seg, st.booleans(), st.booleans())
    def check(root_tail, rest, absolute, trailing):
        given_root = ("/data/" if absolute else "data/") + root_tail + ("/" if trailing else "")
        root = os.path.abspath(given_root)
        path = given_root.rstrip("/") + "/" + rest
        got = _under(path, tuple({p.rstrip(os.sep) + os.sep for p in (root, given_root)}))
        if got is not None:
            assert got == os.path.relpath(path, root), (given_root, path)

    check()
    assert _under("/r/cat/1.jpg", ("/r/",)) == "cat/1.jpg" and _under("/r/cat/../1.jpg", ("/r/",)) is None
