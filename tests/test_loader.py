"""The Loader end to end on the CPU, from shards of real photos."""
from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
import torch
from PIL import Image

from gpudecode import DecodeError, LabelError, Loader
from gpudecode import transforms as T
from gpudecode.transforms import sample_rng  # noqa: F401  (documents where draws come from)

from conftest import GPU_BACKENDS, cpu_built_decoder, encode, make_shard

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_tf(size=48):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    """3 shards, 30 samples: JPEG (several subsamplings, progressive, grey, CMYK), PNG
    (RGB, palette, under a .jpg name), odd sizes; label = k % 5."""
    d = tmp_path_factory.mktemp("shards")
    names = list(photos)
    rng = np.random.default_rng(0)
    samples = []
    for k in range(30):
        img = photos[names[k % len(names)]]
        h, w = img.shape[:2]
        ch, cw = int(rng.integers(h // 3, h + 1)), int(rng.integers(w // 3, w + 1))
        img = np.ascontiguousarray(img[:ch, :cw])
        kind = k % 6
        if kind == 0:
            ext, data = "jpg", encode(img, "JPEG", quality=90)
        elif kind == 1:
            ext, data = "jpg", encode(img, "JPEG", quality=80, progressive=True, subsampling=0)
        elif kind == 2:
            ext, data = "png", encode(img, "PNG")
        elif kind == 3:
            ext, data = "jpg", encode(img, "JPEG", mode="L")
        elif kind == 4:
            ext, data = "jpg", encode(img, "JPEG", mode="CMYK")
        else:
            ext, data = "jpg", encode(img, "PNG")  # a PNG under a .jpg name
        samples.append({"__key__": f"s{k:03d}", ext: data, "cls": str(k % 5).encode()})
    return [make_shard(d / f"p-{j}.tar", samples[j * 10:(j + 1) * 10]) for j in range(3)], samples


def reference_batch(tf, samples, keys, seed, epoch, positions, *, torchvision: bool = False):
    """The transforms API on Pillow-decoded images with the loader's params."""
    by_key = {s["__key__"]: s for s in samples}
    imgs, sizes = [], []
    for k in keys:
        s = by_key[k]
        data = s.get("jpg", s.get("png"))
        with Image.open(io.BytesIO(data)) as im:
            a = np.array(im.convert("RGB"))
        imgs.append(torch.from_numpy(a).permute(2, 0, 1).contiguous())
        sizes.append(a.shape[:2])
    params = tf.make_params(sizes, seed, epoch=epoch, indices=positions)
    if torchvision:
        from tvref import torchvision_apply

        return torch.stack([torchvision_apply(img, p, tf.plan.out_size, mean=MEAN, std=STD)
                            for img, p in zip(imgs, params)])
    return tf(imgs, params)


def test_end_to_end_matches_transforms_api(shards):
    urls, samples = shards
    tf = train_tf()
    loader = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=3)
    loader.set_epoch(1)
    pos = 0
    keys_seen = []
    for images, labels in loader:
        assert images.shape[1:] == (3, 48, 48) and images.dtype == torch.float32
        keys = [f"s{pos + i:03d}" for i in range(images.shape[0])]
        ref = reference_batch(tf, samples, keys, 3, 1, list(range(pos, pos + len(keys))))
        torch.testing.assert_close(images, ref, atol=1e-4, rtol=0)
        # and against the specification itself: torchvision's functional ops on Pillow's pixels,
        # replaying the same drawn parameters (the suite's bound for jitter)
        spec = reference_batch(tf, samples, keys, 3, 1, list(range(pos, pos + len(keys))), torchvision=True)
        torch.testing.assert_close(images, spec, atol=2e-3, rtol=0)
        assert labels.tolist() == [int(k[1:]) % 5 for k in keys]
        pos += images.shape[0]
        keys_seen += keys
    assert pos == 30


def test_batch_object_and_keys(shards):
    urls, _ = shards
    loader = Loader(urls, batch_size=7, transform=train_tf(), device="cpu", shuffle=True, seed=1)
    t0 = time.perf_counter()
    batches = list(loader)
    wall = time.perf_counter() - t0
    s = loader.stats.summary()
    assert s["images"] == 30 and 30 / wall <= s["images_per_s"] < float("inf")
    assert 0 < s["producer_images_per_s"] < float("inf")
    assert "delivered" in str(loader.stats)
    b = batches[0]
    images, labels = b
    assert b.images is images and b.labels is labels and b[0] is images and b[1] is labels
    assert [int(k[1:]) % 5 for k in b.keys] == labels.tolist()
    assert sorted(k for x in batches for k in x.keys) == [f"s{k:03d}" for k in range(30)]
    assert [x.images.shape[0] for x in batches] == [7, 7, 7, 7, 2] and len(loader) == 5
    loader.drop_last = True
    assert [x.images.shape[0] for x in loader] == [7, 7, 7, 7] and len(loader) == 4
    assert loader.describe()["decoder"] == "cpu"
    s = loader.stats.summary()
    assert s["batches"] == 4 and s["slowest_stage"] in ("read", "probe", "decode", "augment")


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_other_decoders_through_the_loader(shards, backend):
    """nvImageCodec, DALI and torchcodec built for the CPU give the batches the CPU decoder
    gives (their pixels are the same: tests/test_decode.py), through their own layouts (a
    view over per-image allocations, CHW tensors, DALI's packed copy)."""
    urls, _ = shards
    dec = cpu_built_decoder(backend, max_batch_size=8) if backend == "dali" else cpu_built_decoder(backend)
    kw = dict(batch_size=8, transform=train_tf(), device="cpu", shuffle=True, seed=2, image_ext="jpg;png")
    ref = [(b.keys, b.images.clone()) for b in Loader(urls, **kw)]
    got = [(b.keys, b.images.clone()) for b in Loader(urls, decoder=dec, **kw)]
    assert [k for k, _ in got] == [k for k, _ in ref]
    for (_, a), (_, b) in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_eval_is_deterministic_in_shard_order(shards):
    urls, _ = shards
    tf = T.Compose([T.Resize(64), T.CenterCrop(56), T.Normalize(MEAN, STD)])
    a = [b.images.clone() for b in Loader(urls, batch_size=16, transform=tf, device="cpu", shuffle=False)]
    b = Loader(urls, batch_size=16, transform=tf, device="cpu", shuffle=False, seed=99)
    keys = [k for x in b for k in x.keys]
    assert keys == [f"s{k:03d}" for k in range(30)]
    assert all(torch.equal(x, y.images) for x, y in zip(a, Loader(urls, batch_size=16, transform=tf, device="cpu",
                                                                    shuffle=False)))


def test_same_seed_same_batches_any_threads(shards):
    urls, _ = shards
    def run(threads):
        ld = Loader(urls, batch_size=8, transform=train_tf(), device="cpu", seed=5, num_threads=threads)
        ld.set_epoch(2)
        return [(b.keys, b.images.clone()) for b in ld]
    a, b = run(1), run(2)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert all(torch.equal(x[1], y[1]) for x, y in zip(a, b))


def test_resume_mid_epoch(shards):
    urls, _ = shards
    kw = dict(batch_size=4, transform=train_tf(), device="cpu", seed=8)
    full = Loader(urls, **kw)
    full.set_epoch(3)
    expected = [(b.keys, b.images.clone()) for b in full]
    ld = Loader(urls, **kw)
    ld.set_epoch(3)
    it = iter(ld)
    next(it), next(it), next(it)
    state = ld.state_dict()
    it.close()
    again = Loader(urls, **kw)
    again.load_state_dict(state)
    rest = [(b.keys, b.images.clone()) for b in again]
    assert [r[0] for r in rest] == [e[0] for e in expected[3:]]
    assert all(torch.equal(r[1], e[1]) for r, e in zip(rest, expected[3:]))


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_cover_exactly_once(shards, world):
    urls, _ = shards
    keys = []
    for rank in range(world):
        ld = Loader(urls, batch_size=4, transform=train_tf(16), device="cpu", rank=rank, world_size=world, seed=4)
        keys += [k for b in ld for k in b.keys]
    assert sorted(keys) == [f"s{k:03d}" for k in range(30)]


def test_bad_samples(shards, tmp_path, photos):
    urls, _ = shards
    good = encode(photos["camera"][:60, :80], "JPEG")
    bad = [{"__key__": "b0", "jpg": good[: len(good) // 2], "cls": b"1"},   # truncated JPEG
           {"__key__": "b1", "jpg": b"not an image at all", "cls": b"1"},
           {"__key__": "b2", "jpg": good},                                    # no label
           {"__key__": "b3", "jpg": good, "cls": b"one"},                     # label not an int
           {"__key__": "b4", "txt": b"no image"},
           {"__key__": "b5", "jpg": good, "cls": b"2"}]
    path = make_shard(tmp_path / "bad.tar", bad)
    tf = train_tf(16)
    for key, err in [("b0", DecodeError), ("b1", DecodeError), ("b2", LabelError), ("b3", LabelError),
                     ("b4", DecodeError)]:
        one = make_shard(tmp_path / f"{key}.tar", [b for b in bad if b["__key__"] == key])
        with pytest.raises(err) as ei:
            list(Loader(one, batch_size=4, transform=tf, device="cpu"))
        assert ei.value.key == key and ei.value.shard == one
    ld = Loader([path, urls[0]], batch_size=4, transform=tf, device="cpu", shuffle=False, on_error="skip")
    keys = [k for b in ld for k in b.keys]
    assert keys == ["b5"] + [f"s{k:03d}" for k in range(10)]
    assert sorted(s.key for s in ld.skipped) == ["b0", "b1", "b2", "b3", "b4"]
    with pytest.warns(RuntimeWarning, match="skipped"):
        list(Loader(path, batch_size=4, transform=tf, device="cpu", on_error="warn"))
    with pytest.raises(DecodeError, match="over the limit"):
        list(Loader(urls, batch_size=4, transform=tf, device="cpu", max_pixels=1000))


def test_labels_off_and_json(tmp_path, photos):
    good = encode(photos["coffee"][:40, :60], "JPEG")
    path = make_shard(tmp_path / "j.tar", [{"__key__": f"j{k}", "jpg": good, "json": b'{"label": %d}' % k}
                                           for k in range(3)])
    ld = Loader(path, batch_size=3, transform=train_tf(16), device="cpu", label_ext="cls;json", shuffle=False)
    assert next(iter(ld)).labels.tolist() == [0, 1, 2]
    ld = Loader(path, batch_size=3, transform=train_tf(16), device="cpu", labels=False)
    assert next(iter(ld)).labels is None


def test_torchvision_compose_is_converted_or_refused(shards):
    import torchvision.transforms.v2 as tv

    urls, _ = shards
    ld = Loader(urls, batch_size=4, device="cpu",
                transform=tv.Compose([tv.RandomResizedCrop(32), tv.ToDtype(torch.float32, scale=True)]))
    assert next(iter(ld)).images.shape == (4, 3, 32, 32)
    from gpudecode import TransformError

    with pytest.raises(TransformError, match="RandomZoomOut"):
        Loader(urls, batch_size=4, device="cpu",
               transform=tv.Compose([tv.RandomResizedCrop(32), tv.RandomZoomOut()]))


def test_stats_flag_stalls_but_not_the_pipeline_fill():
    from gpudecode.stats import BatchTiming, LoaderStats

    stats = LoaderStats(started=0.0)
    for k, wait in enumerate([0.5, 0.01, 0.012, 0.3, 0.011]):
        stats.batches.append(BatchTiming(size=8, wait=wait, decode=0.02, augment=0.01, delivered=0.1 * (k + 1)))
    s = stats.summary()
    assert s["stalls"] == [3] and s["slowest_stage"] == "decode"
    assert s["images_per_s"] == pytest.approx(40 / 0.5) and s["producer_images_per_s"] == pytest.approx(40 / 0.1)


class _FakeEvent:
    """A CUDA event as LoaderStats sees one: query() and elapsed_time() in milliseconds."""

    def __init__(self, t_ms: float, done: bool = True) -> None:
        self.t, self.done = t_ms, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: "_FakeEvent") -> float:
        return end.t - self.t


def test_stats_take_gpu_stage_times_from_events():
    """On CUDA the host only enqueues: a stage's time is its GPU work's where that is longer
    (from CUDA events, read once they are done, never waited for), so the slowest stage
    named is the real one."""
    from gpudecode.stats import BatchTiming, LoaderStats

    st = LoaderStats(started=0.0)
    for i in range(5):
        b = BatchTiming(size=8, read=0.001, probe=0.002, decode=0.003, augment=0.0005, delivered=0.1 * (i + 1))
        b.gpu = {"decode": (_FakeEvent(0), _FakeEvent(4)), "h2d": (_FakeEvent(4), _FakeEvent(4)),
                 "augment": (_FakeEvent(5), _FakeEvent(5 + 20))}  # 20 ms of kernel behind 0.5 ms of enqueueing
        st.batches.append(b)
    pending = BatchTiming(size=8, delivered=0.6)
    pending.gpu = {"augment": (_FakeEvent(0), _FakeEvent(999, done=False))}
    st.batches.append(pending)
    s = st.summary()
    assert s["slowest_stage"] == "augment"
    assert s["median_s"]["augment"] == pytest.approx(0.020) and s["median_s"]["decode"] == pytest.approx(0.004)
    assert s["gpu_median_s"]["augment"] == pytest.approx(0.020)
    assert s["images"] == 48 and s["batches"] == 6  # the unfinished one counts as delivered, not as timed
    pending.gpu["augment"][1].done = True
    assert pending.resolve() and pending.gpu["augment"] == pytest.approx(0.999)


def test_a_missing_decoder_extra_is_said_when_the_loader_is_made(shards, monkeypatch):
    """decoder="nvimgcodec" without its package: BackendUnavailableError from Loader(),
    naming the extra, not a Loader whose describe() names it and whose first batch fails."""
    import gpudecode.decode as dec
    from gpudecode import BackendUnavailableError

    urls, _ = shards
    monkeypatch.setitem(dec._MODULES, "nvimgcodec", ("gpudecode_no_such_module", "gpu"))
    with pytest.raises(BackendUnavailableError, match=r"decoder 'nvimgcodec' cannot be used here: "
                                                      r"gpudecode_no_such_module is not importable .*gpudecode\[gpu\]"):
        Loader(urls, batch_size=4, transform=train_tf(), device="cpu", decoder="nvimgcodec")
    with pytest.raises(ValueError, match="unknown decoder 'nvjpg'"):
        Loader(urls, batch_size=4, transform=train_tf(), device="cpu", decoder="nvjpg")


def test_a_state_of_other_shards_is_refused(shards, tmp_path):
    """load_state_dict checks a fingerprint of the shards (names and order): the same
    count of other shards is refused, naming it; the same shards elsewhere resume."""
    import shutil

    urls, _ = shards
    kw = dict(batch_size=4, transform=train_tf(), device="cpu", seed=8)
    ld = Loader(urls, **kw)
    it = iter(ld)
    next(it)
    state = ld.state_dict()
    it.close()
    others = [shutil.copy(u, tmp_path / f"other-{i}.tar") for i, u in enumerate(urls)]
    with pytest.raises(ValueError, match="this state was saved with other shards or files"):
        Loader(others, **kw).load_state_dict(state)
    with pytest.raises(ValueError, match="other shards or files"):
        Loader(list(reversed(urls)), **kw).load_state_dict(state)
    moved = tmp_path / "moved"
    moved.mkdir()
    same = [shutil.copy(u, moved / os.path.basename(u)) for u in urls]
    again = Loader(same, **kw)
    again.load_state_dict(state)  # the same shards, mounted elsewhere
    assert sum(b.images.shape[0] for b in again) == 30 - 4


def test_deeper_queues_never_overwrite_a_batch_still_queued(shards):
    """The pipeline makes every ring a decoded batch lives in as deep as the batches it
    keeps alive (the middle queue + 2): raising the queue depth and prefetch, with a slow
    trainer so that every queue fills, gives every batch's pixels as the default depth
    does (with the decoder's ring fixed at 3, depth 3 overwrote queued batches)."""
    urls, _ = shards

    def run(depth: int, prefetch: int, pause: float) -> list:
        ld = Loader(urls, batch_size=4, transform=train_tf(), device="cpu", seed=3, shuffle=False,
                    prefetch_factor=prefetch, num_workers=2)
        ld.pipeline.config = ld.pipeline.config.replace(depth=depth)
        out = []
        for b in ld:
            out.append((list(b.keys), b.images.clone()))
            time.sleep(pause)  # the trainer's step: the queues fill behind it
        assert ld.pipeline.decoder.buffers == depth + 2
        ld.close()
        return out

    ref = run(1, 1, 0.0)
    for depth, prefetch in ((3, 1), (4, 5)):
        got = run(depth, prefetch, 0.05)
        assert [k for k, _ in got] == [k for k, _ in ref]
        for (_, a), (_, b) in zip(got, ref):
            assert torch.equal(a, b)


def _views():
    g = T.Compose([T.RandomResizedCrop(40, scale=(0.4, 1.0)), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.2, 0.1),
                   T.Normalize(MEAN, STD)])
    local = T.Compose([T.RandomResizedCrop(16, scale=(0.05, 0.4)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    return [g, g, local, local, local]


def test_several_views_of_each_image_decoded_once(shards, monkeypatch):
    """DINO's multi-crop shape (2 global views, 3 local ones): a list of batches, one per
    view at its own size; each view equals the transforms API on Pillow's full decode with
    that view's draws (view 0 from the seed itself, so it is what a one-view Loader gives);
    every image is decoded once for all its views (one window, the union of theirs)."""
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.pipeline import view_seed

    urls, samples = shards
    views = _views()
    decoded = []
    real = CpuDecoder.decode

    def counting(self, requests):
        decoded.append(len(requests))
        return real(self, requests)

    monkeypatch.setattr(CpuDecoder, "decode", counting)
    ld = Loader(urls, batch_size=8, transform=views, device="cpu", shuffle=False, seed=3, num_workers=2)
    ld.set_epoch(1)
    pos = 0
    for b in ld:
        images, labels = b
        assert isinstance(images, list) and [tuple(x.shape[1:]) for x in images] == [(3, 40, 40)] * 2 + [(3, 16, 16)] * 3
        keys = [f"s{pos + i:03d}" for i in range(labels.shape[0])]
        assert b.keys == keys and labels.tolist() == [int(k[1:]) % 5 for k in keys]
        for v, (tf, x) in enumerate(zip(views, images)):
            ref = reference_batch(tf, samples, keys, view_seed(3, v), 1, list(range(pos, pos + len(keys))))
            torch.testing.assert_close(x, ref, atol=1e-4, rtol=0)
        assert not torch.equal(images[0], images[1])  # the same transform, drawn apart
        pos += len(keys)
    assert pos == 30 and sum(decoded) == 30  # one decode per image, whatever the views
    one = Loader(urls, batch_size=8, transform=views[0], device="cpu", shuffle=False, seed=3, num_workers=2)
    one.set_epoch(1)
    ld.set_epoch(1)
    first_views = [b.images[0].clone() for b in ld]
    assert all(torch.equal(a, b.images) for a, b in zip(first_views, one))
    assert ld.describe()["views"] == 5 and ld.describe()["out_size"][2] == (16, 16)
    # Loader.dataset gives the same views for an index (epoch 0, as a map-style dataset draws)
    ld.set_epoch(0)
    b0 = next(iter(ld))
    item, label = ld.dataset[3]
    assert label == 3 and all(torch.allclose(item[v], b0.images[v][3], atol=1e-4) for v in range(5))


def test_views_that_cannot_work_are_refused(shards):
    from gpudecode import TransformError

    urls, _ = shards
    with pytest.raises(TransformError, match="view 1 has no size of its own"):
        Loader(urls, batch_size=4, device="cpu", transform=[train_tf(), T.Compose([T.Normalize(MEAN, STD)])])
    with pytest.raises(TransformError, match="batch_transform with several views"):
        Loader(urls, batch_size=4, device="cpu", transform=_views(), batch_transform=T.MixUp(num_classes=5))
    with pytest.raises(TransformError, match="transform=\\[\\]"):
        Loader(urls, batch_size=4, device="cpu", transform=[])


def test_random_erasing_through_the_loader(shards):
    """RandomErasing after Normalize: each batch equals the transforms API on Pillow's
    decode with the Loader's draws (erased rectangles included)."""
    urls, samples = shards
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD),
                    T.RandomErasing(p=0.5, value="random")])
    ld = Loader(urls, batch_size=8, transform=tf, device="cpu", shuffle=False, seed=4, num_workers=2)
    pos, erased = 0, 0
    for images, _ in ld:
        keys = [f"s{pos + i:03d}" for i in range(images.shape[0])]
        positions = list(range(pos, pos + len(keys)))
        torch.testing.assert_close(images, reference_batch(tf, samples, keys, 4, 0, positions), atol=1e-4, rtol=0)
        by_key = {s["__key__"]: s for s in samples}
        sizes = []
        for k in keys:
            with Image.open(io.BytesIO(by_key[k].get("jpg", by_key[k].get("png")))) as im:
                sizes.append((im.height, im.width))
        erased += sum(p["erase"] is not None for p in tf.make_params(sizes, 4, indices=positions))
        pos += len(keys)
    assert pos == 30 and 0 < erased < 30


def test_dataset_random_access_on_a_gzipped_a_remote_and_a_plain_shard(tmp_path):
    """`loader.dataset[i]` reads sample i of a .tar.gz shard (read up to it) and of an
    fsspec one (memory://) as of a plain local shard (indexed once): Pillow's pixels of
    the member tarfile wrote, and its label; an index past the end is an IndexError."""
    import tarfile

    fsspec = pytest.importorskip("fsspec")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (6 + i, 9, 3), dtype=np.uint8) for i in range(5)]
    for name, mode in (("s.tar.gz", "w:gz"), ("s.tar", "w")):
        with tarfile.open(tmp_path / name, mode) as tf:
            for i, img in enumerate(images):
                b = io.BytesIO()
                Image.fromarray(img).save(b, "PNG")
                for ext, data in (("png", b.getvalue()), ("cls", str(i * 3).encode())):
                    info = tarfile.TarInfo(f"k{i}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    with open(tmp_path / "s.tar", "rb") as f, fsspec.open("memory://ds/s.tar", "wb") as g:
        g.write(f.read())
    try:
        for url in (str(tmp_path / "s.tar.gz"), "memory://ds/s.tar", str(tmp_path / "s.tar")):
            ds = Loader(url, batch_size=2, transform=None, device="cpu").dataset
            assert len(ds) == 5
            for i in (3, 0, 4, 3):
                img, label = ds[i]
                assert label == i * 3 and np.array_equal(img.permute(1, 2, 0).numpy(), images[i]), (url, i)
            with pytest.raises(IndexError):
                ds[5]
    finally:
        fsspec.filesystem("memory").rm("/ds", recursive=True)
