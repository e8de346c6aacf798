"""The resident store (Loader(keep=...), gpudecode.resident): the set decoded once and kept
in RAM (or on the GPU), every later epoch read in place, in the reader's own order.

The oracle is the same Loader streaming the same samples: with one seed, the batches
must be the same bit for bit (keys, labels, pixels) in every split mode, for several
ranks, after a resume, with several views; the reader's order of keys must be the order
its threads read (tested against the samples it yields)."""
from __future__ import annotations

import functools
import io
import os
import shutil
import warnings

import numpy as np
import pytest
import torch

from conftest import encode, make_shard
from gpudecode import Loader, Source
from gpudecode import transforms as T
from gpudecode.errors import DecodeError, GpuDecodeError
from gpudecode.io.reader import ShardReader


def _tensor_bytes(img: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, img)
    return b.getvalue()


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    """Four shards of unequal sizes: JPEG (two qualities), PNG and tensor (.npy) samples of
    the photographs, at several sizes."""
    d = tmp_path_factory.mktemp("resident")
    names = sorted(photos)
    urls, k = [], 0
    for j, size in enumerate([23, 9, 31, 17]):
        samples = []
        for _ in range(size):
            img = photos[names[k % len(names)]]
            img = np.ascontiguousarray(img[k % 13: 120 + 7 * (k % 9), k % 7: 140 + 5 * (k % 11)])
            kind = k % 5
            if kind == 3:
                field = {"png": encode(img, "PNG")}
            elif kind == 4:
                field = {"npy": _tensor_bytes(img)}
            else:
                field = {"jpg": encode(img, "JPEG", quality=80 + 5 * kind)}
            samples.append({"__key__": f"{j}-{k:05d}", **field, "cls": str(k % 7).encode()})
            k += 1
        urls.append(make_shard(d / f"train-{j}.tar", samples))
    return urls


def _tf(size=40):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])


def _epochs(loader, epochs=(0, 1)):
    out = []
    for e in epochs:
        loader.set_epoch(e)
        for b in loader:
            imgs = [v.clone() for v in b.images] if isinstance(b.images, list) else b.images.clone()
            out.append((e, list(b.keys), b.labels.clone(), imgs))
    return out


def _same(a, b):
    assert len(a) == len(b) and len(a) > 0
    for (ea, ka, la, ia), (eb, kb, lb, ib) in zip(a, b):
        assert (ea, ka) == (eb, kb)
        assert torch.equal(la, lb)
        for x, y in zip(ia if isinstance(ia, list) else [ia], ib if isinstance(ib, list) else [ib]):
            assert torch.equal(x, y), ka


KW = dict(batch_size=8, device="cpu", num_workers=1, seed=11, image_ext="jpg;png;npy")


@pytest.mark.parametrize("split", ["shard", "sample", "elastic"])
def test_keep_ram_gives_the_streamed_batches_bit_for_bit(shards, split):
    with Loader(shards, transform=_tf(), split=split, **KW) as ld:
        want = _epochs(ld)
    with Loader(shards, transform=_tf(), split=split, keep="ram", **KW) as ld:
        got = _epochs(ld)
        kept = ld.describe()["keep"]
    _same(got, want)
    assert kept["tier"] == "ram" and kept["images"] == 80 and kept["bytes"] > 0 and kept["left_out"] == 0


@pytest.mark.filterwarnings("ignore:even=:RuntimeWarning")
@pytest.mark.parametrize("split", ["shard", "elastic"])
def test_each_rank_gets_its_streamed_share(shards, split):
    for rank in range(3):
        kw = dict(KW, rank=rank, world_size=3, split=split)
        with Loader(shards, transform=_tf(), **kw) as ld:
            want = _epochs(ld)
        with Loader(shards, transform=_tf(), keep="ram", **kw) as ld:
            got = _epochs(ld)
            assert ld.describe()["keep"]["images"] == 80  # the whole set on every rank
        _same(got, want)


def test_later_epochs_read_nothing(shards, tmp_path):
    """Once filled, the store is all an epoch reads: the shards' bytes overwritten (size
    and time kept, so their counts stay valid) change nothing, where any read would fail."""
    moved = []
    for u in shards:
        dst = tmp_path / os.path.basename(u)
        shutil.copyfile(u, dst)
        moved.append(str(dst))
    with Loader(moved, transform=_tf(), keep="ram", **KW) as ld:
        first = _epochs(ld, (0,))
        for u in moved:
            st = os.stat(u)
            with open(u, "r+b") as f:
                f.write(b"\xff" * st.st_size)
            os.utime(u, ns=(st.st_atime_ns, st.st_mtime_ns))
        again = _epochs(ld, (0, 1))
    _same(again[:len(first)], first)
    with Loader(moved, transform=_tf(), **KW) as ld, pytest.raises(GpuDecodeError):
        list(ld)  # (streaming the overwritten shards fails: the test would see a read)


def test_several_views_and_a_batch_transform(shards):
    views = [T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()]),
             T.Compose([T.RandomResizedCrop(16, scale=(0.05, 0.4)), T.ColorJitter(0.4, 0.4, 0.4, 0.1)])]
    with Loader(shards, transform=views, **KW) as ld:
        want = _epochs(ld, (0,))
    with Loader(shards, transform=views, keep="ram", **KW) as ld:
        got = _epochs(ld, (0,))
    _same(got, want)
    mix = T.RandomChoice([T.MixUp(alpha=0.4, num_classes=7), T.CutMix(alpha=1.0, num_classes=7)])
    with Loader(shards, transform=_tf(), batch_transform=mix, **KW) as ld:
        want = _epochs(ld, (0,))
    with Loader(shards, transform=_tf(), batch_transform=mix, keep="ram", **KW) as ld:
        got = _epochs(ld, (0,))
    _same(got, want)


def test_a_resume_from_the_middle_of_an_epoch(shards):
    for split in ("sample", "elastic"):
        with Loader(shards, transform=_tf(), split=split, **KW) as ld:
            want = _epochs(ld, (1,))
        with Loader(shards, transform=_tf(), split=split, keep="ram", **KW) as ld:
            ld.set_epoch(1)
            it = iter(ld)
            for _ in range(3):
                next(it)
            state = ld.state_dict()
            it.close()
        with Loader(shards, transform=_tf(), split=split, keep="ram", **KW) as ld:
            ld.load_state_dict(state)
            got = [(1, list(b.keys), b.labels.clone(), b.images.clone()) for b in ld]
        _same(got, want[3:])


def test_a_mixture_and_an_image_folder(shards, photos, tmp_path):
    for c in ("cat", "dog"):
        os.makedirs(tmp_path / "tree" / c)
        for i in range(6):
            (tmp_path / "tree" / c / f"{i}.png").write_bytes(encode(photos["coffee"][i * 9:i * 9 + 90, :100], "PNG"))
    tree = str(tmp_path / "tree")
    mixture = [Source(shards[:2], weight=2.0), Source(tree, weight=1.0, label_offset=7)]
    for urls in (tree, mixture):
        with Loader(urls, transform=_tf(), **KW) as ld:
            want = _epochs(ld)
        with Loader(urls, transform=_tf(), keep="ram", **KW) as ld:
            got = _epochs(ld)
        _same(got, want)


def test_a_set_over_the_budget_streams_and_says_why(shards):
    with Loader(shards, transform=_tf(), **KW) as ld:
        want = _epochs(ld, (0,))
    with Loader(shards, transform=_tf(), keep="ram", keep_budget=100_000, **KW) as ld:
        with pytest.warns(RuntimeWarning, match=r"keep='ram': the Loader streams: the decoded set needs .* over the "
                                                r"budget \(ram 0.00 GiB\)"):
            got = _epochs(ld, (0,))
        why = ld.describe()["keep"]
    _same(got, want)
    assert why["tier"] is None and "over the budget" in why["why"]


def test_bad_samples_under_skip_give_the_streamed_batches(photos, tmp_path):
    """A sample that fails keeps its place (its batch one image short, as streamed), and
    each epoch's `skipped` lists it, as a streamed epoch does."""
    samples = [{"__key__": f"{k:03d}", "jpg": encode(photos["astronaut"][k:k + 100, :120]), "cls": b"1"}
               for k in range(20)]
    samples[5]["jpg"] = samples[5]["jpg"][:300]
    samples[12]["jpg"] = b"not an image"
    samples[17]["cls"] = b"minus one"
    shard = make_shard(tmp_path / "bad.tar", samples)
    results = {}
    for keep in (None, "ram"):
        with Loader(shard, transform=_tf(), keep=keep, on_error="skip", **KW) as ld:
            got, skipped = [], []
            for e in (0, 1):
                got += _epochs(ld, (e,))
                skipped.append(sorted(s.key for s in ld.skipped))
            results[keep] = got, skipped
            if keep:
                assert ld.describe()["keep"]["left_out"] == 3
    _same(results["ram"][0], results[None][0])
    assert results["ram"][1] == results[None][1] == [["005", "012", "017"]] * 2
    with Loader(shard, transform=_tf(), keep="ram", **KW) as ld, pytest.raises(DecodeError) as e:
        list(ld)
    assert e.value.key == "005"


def test_an_error_in_a_kept_epoch_comes_after_the_batches_before_it(photos, tmp_path):
    """A kept epoch runs its two stages on one thread (EpochRun): a sample its transform
    cannot take (a crop larger than it) still reaches the trainer as its DecodeError after
    every batch before it and none after, as when streaming; and the next epoch starts
    clean."""
    samples = [{"__key__": f"{k:03d}", "jpg": encode(photos["coffee"][:120, k:k + 120]), "cls": b"2"}
               for k in range(20)]
    samples[13]["jpg"] = encode(photos["coffee"][:60, :60])
    shard = make_shard(tmp_path / "small.tar", samples)
    tf = T.Compose([T.RandomCrop(100), T.Normalize([0.5] * 3, [0.25] * 3)])
    seen = {}
    for keep in (None, "ram"):
        with Loader(shard, transform=tf, keep=keep, **KW) as ld:
            got = []
            with pytest.raises(DecodeError) as e:
                for b in ld:
                    got.append((list(b.keys), b.images.clone()))
            assert e.value.key == "013" and "small.tar" in str(e.value.shard)
            ld.set_epoch(1)
            with pytest.raises(DecodeError):
                list(ld)
            seen[keep] = got
    assert [k for k, _ in seen["ram"]] == [k for k, _ in seen[None]] and seen[None]
    assert all("013" not in k for k, _ in seen[None])
    for (_, a), (_, b) in zip(seen["ram"], seen[None]):
        assert torch.equal(a, b)
    # under on_error="skip" that batch is one image short (its labels and keys with it), as streamed
    skipped = {}
    for keep in (None, "ram"):
        with Loader(shard, transform=tf, keep=keep, on_error="skip", **KW) as ld:
            skipped[keep] = _epochs(ld)
            assert [s.key for s in ld.skipped] == ["013"]
    _same(skipped["ram"], skipped[None])
    for e in (0, 1):
        keys = [k for ep, ks, _, _ in skipped["ram"] if ep == e for k in ks]
        assert sorted(keys) == [f"{k:03d}" for k in range(20) if k != 13]


def test_a_transform_without_geometry_keeps_the_one_size_rule(shards, photos, tmp_path):
    same = [{"__key__": f"{k}", "jpg": encode(photos["chelsea"][:64, :64]), "cls": b"0"} for k in range(6)]
    same[3]["jpg"] = encode(photos["chelsea"][:50, :64])
    shard = make_shard(tmp_path / "sizes.tar", same)
    kw = dict(KW, batch_size=3, on_error="skip")
    tf = T.Compose([T.RandomHorizontalFlip()])
    with Loader(shard, transform=tf, **kw) as ld, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [list(b.keys) for b in ld]
    with Loader(shard, transform=tf, keep="ram", **kw) as ld, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [list(b.keys) for b in ld]
        assert [s.key for s in ld.skipped] == ["3"]
    assert sorted(k for b in got for k in b) == sorted(k for b in want for k in b)


def test_keep_size_stores_what_precache_stores(shards, tmp_path):
    """keep_size=S: each image brought down to a shorter side of S as `gpudecode precache
    --size S` stores it, the same pixels; keep="auto" on the CPU keeps it in RAM."""
    from gpudecode.precache import precache
    from gpudecode.tensors import npy_rgb

    out = precache(shards, tmp_path / "cache", size=64, image_ext="jpg;png;npy")
    stored = {}
    for url in out.shards:
        for s in ShardReader(url).read_shard(url):
            stored[s.key] = npy_rgb(s.fields["npy"])
    with Loader(shards, transform=_tf(32), keep="auto", keep_size=64, **KW) as ld:
        list(ld)
        store = ld.keeper.resident
        assert ld.describe()["keep"]["tier"] == "ram" and ld.describe()["keep"]["size"] == 64
    assert len(store) == len(stored) == 80
    pixels = store.pixels.numpy()
    for k, s in enumerate(store.samples):
        h, w = (int(v) for v in store.shapes[k])
        img = pixels[store.offsets[k]:store.offsets[k] + h * w * 3].reshape(h, w, 3)
        assert min(h, w) <= 64 and np.array_equal(img, stored[s.key]), s.key


@pytest.mark.parametrize("kw, message", [
    (dict(keep="disk"), "keep must be None"),
    (dict(keep_size=64), "keep_size= is about a resident store"),
    (dict(keep="ram", keep_size=0), "keep_size must be a positive int"),
    (dict(keep="gpu"), "keep='gpu' keeps the set in GPU memory"),
    (dict(keep_budget=10), "keep_budget= is about a resident store"),
    (dict(keep="ram", keep_budget=-1), "keep_budget must be a positive number"),
    (dict(keep="ram", keep_budget=1.5), "keep_budget must be a positive number"),
])
def test_keep_arguments_are_checked_where_given(shards, kw, message):
    with pytest.raises(ValueError, match=message):
        Loader(shards, transform=_tf(), **KW, **kw)


def _sources(kw: dict, shards, photos, tmp_path) -> object:
    """The sources a parametrized case names (its "tree" and "mixture" popped from kw): an
    image folder of 18 PNGs (also for repeated_augs), a mixture of the shards, else the shards."""
    if kw.pop("tree", False) or kw.get("repeated_augs"):
        for c in ("a", "b"):
            os.makedirs(tmp_path / c)
            for i in range(9):
                (tmp_path / c / f"{i}.png").write_bytes(encode(photos["rocket"][i:i + 20, :30], "PNG"))
        return str(tmp_path)
    if kw.pop("mixture", False):
        return [Source(shards[:2], weight=1.0), Source(shards[2:], repeat=0.5)]
    return shards


@pytest.mark.parametrize("kw", [
    dict(split="shard", shuffle=False), dict(split="shard", world_size=3, even="pad"),
    dict(split="sample", world_size=3, even="drop"), dict(split="sample", world_size=2, even=None),
    dict(split="elastic", world_size=3, chunk=8), dict(split="elastic", world_size=2, even="drop", chunk=5),
    dict(tree=True, split="sample", world_size=2), dict(tree=True, split="elastic", world_size=2, chunk=4),
    dict(tree=True, repeated_augs=3, world_size=2), dict(mixture=True, world_size=2, chunk=4),
])
def test_the_readers_order_of_keys_is_the_order_it_reads(shards, photos, tmp_path, kw):
    kw = dict(kw)
    urls = _sources(kw, shards, photos, tmp_path)
    world = kw.pop("world_size", 1)
    shuffle = kw.pop("shuffle", True)
    for rank in range(world):
        for epoch in (0, 3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (even's cost warnings)
                r = ShardReader(urls, shuffle=shuffle, seed=3,
                                rank=rank, world_size=world, extensions=["jpg", "png", "npy", "cls"], **kw)
                streamed = [(s.shard, s.index) for s in r.iter_epoch(epoch)]
                assert r.epoch_keys(epoch) == streamed
                assert r.epoch_keys(epoch, start=5) == [(s.shard, s.index) for s in r.iter_epoch(epoch, start=5)]


def test_the_store_is_written_once_in_place_or_packed_where_no_mapping(shards, monkeypatch):
    """The fill writes each image into its place in one reserved mapping (the store is
    that mapping's written part, not a packed copy); where the system refuses the
    mapping, the images are packed at the end: the same batches either way."""
    from gpudecode import resident

    arenas = []

    class Seen(resident._Arena):
        def __init__(self, limits):
            super().__init__(limits)
            arenas.append(self)

    monkeypatch.setattr(resident, "_Arena", Seen)
    with Loader(shards, transform=_tf(), keep="ram", **KW) as ld:
        mapped = _epochs(ld)
        pixels = ld.keeper.resident.pixels
    (arena,) = arenas
    assert arena._map is not None and not arena.parts
    assert pixels.data_ptr() == arena.flat.ctypes.data  # the mapping itself, no packed copy

    def refused(*a, **k):
        raise OSError("no mapping (this test)")

    monkeypatch.setattr(resident, "_reserve", refused)
    with Loader(shards, transform=_tf(), keep="ram", **KW) as ld:
        packed = _epochs(ld)
        assert torch.equal(ld.keeper.resident.pixels, pixels)
    _same(packed, mapped)


def test_the_fills_peak_is_the_store_not_twice_it(tmp_path):
    """200 MB of images appended to the store's arena and made its tensor: the process's
    peak memory (VmHWM) grows by about the store, where keeping the images apart and
    packing them at the end took twice it."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from gpudecode.resident import _Arena\n"
        "def hwm():\n"
        "    return int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]) * 1024\n"
        "img = np.full((1024, 1024, 3), 7, np.uint8)[:, :, ::-1]  # (strided, as a decoder's view may be)\n"
        "before = hwm()\n"
        "a = _Arena({'ram': 1 << 30})\n"
        "for _ in range(64):\n"
        "    a.append(img)\n"
        "t = a.tensor('ram', 'cpu')\n"
        "assert int(t.numel()) == 64 * img.size and int(t[12345]) == 7\n"
        "print((hwm() - before) / t.numel())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    grew = float(p.stdout.strip().splitlines()[-1])
    assert 0.9 < grew < 1.3, grew


@pytest.mark.parametrize("kw", [
    dict(split="shard", shuffle=False), dict(split="shard", world_size=3, even="pad"),
    dict(split="sample", world_size=3, even="drop"), dict(split="sample", world_size=2, even=None),
    dict(split="elastic", world_size=3), dict(tree=True, split="sample", world_size=2),
    dict(tree=True, split="elastic", world_size=2), dict(mixture=True, world_size=2),
    dict(bad=True), dict(bad=True, split="sample", world_size=2, even="pad"),
])
def test_an_epochs_rows_from_arrays_equal_its_keys_rows(shards, photos, tmp_path, kw):
    """resident.epoch_rows (each shard's codes sliced, the order by positions) gives the
    rows of ShardReader.epoch_keys' order (Resident.codes_of), for every split, file
    lists, mixtures and samples that failed while filling (their codes keep their
    places), from the start and from the middle."""
    from gpudecode.resident import FAILED, epoch_rows

    kw = dict(kw)
    urls = _sources(kw, shards, photos, tmp_path)
    if kw.pop("bad", False):
        samples = [{"__key__": f"{k:03d}", "jpg": encode(photos["astronaut"][k:k + 40, :50]), "cls": b"1"}
                   for k in range(30)]
        samples[5]["jpg"] = b"not an image"
        samples[17]["cls"] = b"minus one"
        urls = [make_shard(tmp_path / "bad.tar", samples), *shards[:2]]
        kw["on_error"] = "skip"
    world = kw.pop("world_size", 1)
    seen = []
    for rank in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (even's cost warnings)
            with Loader(urls, transform=_tf(), keep="ram", rank=rank, world_size=world,
                        **{**KW, "seed": 3, **kw}) as ld:
                list(ld)
                store, rd = ld.keeper.resident, ld.reader
                for epoch in (0, 3):
                    for start in (0, 5):
                        keys = rd.epoch_keys(epoch, start=start, missing=store.unread)
                        got = epoch_rows(rd, store, epoch, start=start)
                        assert got.tolist() == store.codes_of(keys).tolist(), (rank, epoch, start)
                        seen += got.tolist()
                failed = len(store.failed)
    assert sum(code <= FAILED for code in seen) > 0 if failed else min(seen) >= 0


def test_a_ram_store_feeding_a_gpu_packs_each_window_as_numpy_slices_it():
    """Resident.gathered (what a RAM store uploads for a GPU: each image's window, packed):
    the native copy equals numpy's slices of the stored images, for windows of every
    shape (empty, one pixel, whole, at the edges); a window outside its image is refused."""
    from gpudecode.resident import Resident, StoredSample

    rng = np.random.default_rng(12)
    shapes = np.array([[5, 7], [1, 1], [33, 20], [8, 64]], np.int64)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in shapes.tolist()]
    sizes = shapes[:, 0] * shapes[:, 1] * 3
    store = Resident("ram", torch.from_numpy(np.concatenate([i.reshape(-1) for i in images])),
                     np.cumsum(sizes) - sizes, shapes, None, [StoredSample(str(k), "s", k) for k in range(4)],
                     {("s", k): k for k in range(4)})
    rows = np.array([2, 0, 3, 1, 2, 3], np.int64)
    boxes = np.array([[0, 0, 33, 20], [1, 2, 3, 4], [7, 60, 1, 4], [0, 0, 1, 1], [32, 19, 1, 1], [3, 3, 0, 0]])
    got = store.gathered(rows, boxes)
    for k, (r, (t, l, h, w)) in enumerate(zip(rows.tolist(), boxes.tolist())):
        a = int(got.offsets[k])
        assert np.array_equal(got.pixels.numpy()[a:a + h * w * 3].reshape(h, w, 3), images[r][t:t + h, l:l + w])
        assert got.shapes[k].tolist() == [h, w] and got.boxes[k].tolist() == [0, 0, h, w]
    with pytest.raises(ValueError, match=r"outside stored image 0 \(5x7\)"):
        store.gathered(np.array([0]), np.array([[3, 0, 3, 7]]))


def test_a_ram_store_feeding_a_gpu_is_gathered_into_the_uploads_staging_buffer():
    """On a GPU a RAM store's windows are packed straight into the upload ring's staging
    buffer of the batch's turn, which upload() then sends without copying it again (the
    ring on the CPU: the same turns, plain memory); the store itself is the fill's mapping,
    never a page-locked copy of it (was: the whole store copied into pinned memory)."""
    from gpudecode.decode._upload import UploadRing
    from gpudecode.resident import Resident, StoredSample, _Arena

    rng = np.random.default_rng(5)
    shapes = np.array([[6, 9], [12, 4], [3, 3]], np.int64)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in shapes.tolist()]
    sizes = shapes[:, 0] * shapes[:, 1] * 3
    store = Resident("ram", torch.from_numpy(np.concatenate([i.reshape(-1) for i in images])),
                     np.cumsum(sizes) - sizes, shapes, None, [StoredSample(str(k), "s", k) for k in range(3)],
                     {("s", k): k for k in range(3)})
    ring = UploadRing(torch.device("cpu"), 2)
    rows, boxes = np.array([1, 0, 2]), np.array([[2, 1, 5, 3], [0, 0, 6, 9], [1, 1, 2, 2]])
    want = store.gathered(rows, boxes)
    for turn in range(5):  # (the turns come round: each its own buffer, grown as needed)
        got = store.gathered(rows[:turn % 3 + 1], boxes[:turn % 3 + 1], into=functools.partial(ring.staging_buffer, turn))
        staging = ring.staging[turn % 2]
        assert got.pixels.data_ptr() == staging.data_ptr()  # packed in the staging buffer itself
        dev, host = ring.upload(got.pixels, turn)
        assert host.data_ptr() == staging.data_ptr() and ring.staging[turn % 2] is staging  # not copied again
        n = got.pixels.numel()
        assert torch.equal(dev, want.pixels[:n]) and np.array_equal(got.offsets, want.offsets[:turn % 3 + 1])
    other = torch.arange(40, dtype=torch.uint8)  # pixels from elsewhere: copied into the staging buffer
    dev, host = ring.upload(other, 7)
    assert host.data_ptr() == ring.staging[1].data_ptr() and torch.equal(dev, other) and torch.equal(host, other)
    with pytest.raises(ValueError, match="uint8 bytes on the CPU were asked"):
        store.gathered(rows, boxes, into=lambda n: torch.empty(n + 1, dtype=torch.uint8))
    arena = _Arena({"ram": 1 << 20})
    arena.append(images[0])
    kept = arena.tensor("ram", "cuda:0")  # (a RAM store a CUDA device reads: no device needed to make it)
    assert kept.data_ptr() == arena.flat.ctypes.data and not kept.is_pinned()
