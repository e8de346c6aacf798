"""Distributed reading that cannot hang: exact shares over ranks x workers, equal counts
where `even` promises them, len() equal to what iteration yields; DataLoader's
conventions (epochs, seeds, state_dict, .sampler, .dataset); early errors; the
node-local cache of remote shards."""
from __future__ import annotations

import itertools
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from gpudecode import DecodeError, Loader, RemoteOptions, ShardReader, ShardReadError
from gpudecode import transforms as T

from conftest import encode, make_shard


def _shards(tmp_path, sizes, prefix="s", photo=None):
    urls, keys = [], []
    for j, n in enumerate(sizes):
        samples = []
        for i in range(n):
            key = f"{prefix}{j:02d}-{i:03d}"
            img = (np.full((18, 22, 3), (j * 37 + i * 11) % 256, np.uint8) if photo is None
                   else np.ascontiguousarray(photo[i:i + 40, j:j + 50]))
            samples.append({"__key__": key, "jpg": encode(img), "cls": b"%d" % (i % 3)})
            keys.append(key)
        urls.append(make_shard(tmp_path / f"{prefix}-{j:03d}.tar", samples))
    return urls, keys


def _workers(monkeypatch, w, nw):
    import torch.utils.data as tud

    monkeypatch.setattr(tud, "get_worker_info", lambda: None if nw == 1 else type("I", (), {"id": w, "num_workers": nw}))


MATRIX = [  # (shard sizes, world_size, workers)
    ([7], 2, 1),             # one shard, two ranks: split by sample
    ([5, 6, 7, 3], 6, 1),    # four shards, six ranks
    ([5, 6, 7, 3], 2, 1),    # more shards than ranks: whole shards (even=None)
    ([9, 4, 8, 2, 6, 5, 7], 2, 1),  # seven shards on two ranks
    ([9, 4, 8, 2, 6, 5, 7], 3, 2),  # with DataLoader workers
    ([3], 3, 1),             # exactly one sample per rank
    ([10, 0, 4], 4, 1),      # an empty shard
]


@pytest.mark.parametrize("sizes,world,nw", MATRIX, ids=[f"{len(m[0])}sh-{m[1]}r-{m[2]}w" for m in MATRIX])
@pytest.mark.parametrize("even", [None, "pad", "drop"])
def test_split_matrix(tmp_path, monkeypatch, sizes, world, nw, even):
    urls, keys = _shards(tmp_path, sizes)
    total = len(keys)
    per_consumer = []
    got = []
    for rank in range(world):
        for w in range(nw):
            _workers(monkeypatch, w, nw)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the pad/drop cost warning (tested below)
                r = ShardReader(urls, rank=rank, world_size=world, even=even, shuffle=True, seed=5)
                r.set_epoch(3)
                ks = [s.key for s in r]
                assert len(ks) == r.samples_per_epoch()  # what it says is what it yields
            per_consumer.append(len(ks))
            got += ks
    consumers = world * nw
    if even is None:
        assert sorted(got) == sorted(keys)  # every sample exactly once
    elif even == "pad":
        assert per_consumer == [-(-total // consumers)] * consumers and set(got) == set(keys)
    else:
        assert per_consumer == [total // consumers] * consumers and len(set(got)) == len(got)


def tf(size=16):
    return T.Compose([T.Resize((size, size))])


@pytest.mark.parametrize("sizes,world", [([7], 2), ([5, 6, 7, 3], 6), ([9, 4, 8, 2, 6, 5, 7], 2), ([1, 1, 1], 3)])
@pytest.mark.parametrize("even", [None, "pad", "drop"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_len_equals_iteration_and_ranks_agree(tmp_path, sizes, world, even, drop_last):
    urls, keys = _shards(tmp_path, sizes)
    lens, batches, seen = [], [], []
    for rank in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=rank, world_size=world, even=even,
                        drop_last=drop_last, seed=1, num_workers=1)
            lens.append(len(ld))
            bs = list(ld)
        batches.append(len(bs))
        seen += [k for b in bs for k in b.keys]
        ld.close()
    assert lens == batches
    if even is not None:
        assert len(set(batches)) == 1  # equal steps on every rank: DDP cannot hang
    if even is None and not drop_last:
        assert sorted(seen) == sorted(keys)


def test_pad_and_drop_warn_when_they_cost_much(tmp_path):
    urls, _ = _shards(tmp_path, [5])
    with pytest.warns(RuntimeWarning, match=r"even='pad' repeats 1 of 5 samples per epoch \(20.0%\)"):
        ShardReader(urls, rank=0, world_size=2, even="pad").samples_per_epoch()
    with pytest.warns(RuntimeWarning, match=r"even='drop' leaves out 1 of 5"):
        ShardReader(urls, rank=0, world_size=2, even="drop").samples_per_epoch()
    big, _ = _shards(tmp_path, [60, 41], prefix="b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ShardReader(big, rank=0, world_size=2, even="pad").samples_per_epoch()  # 1 of 101: no warning


def test_skipped_samples_are_made_up_under_even(tmp_path):
    """A bad sample on one rank under on_error="skip": with even the rank still yields its
    full count (a repeat stands in), so its step count matches the others'."""
    urls, keys = _shards(tmp_path, [8])
    with open(urls[0], "rb") as f:
        data = bytearray(f.read())
    i = data.index(b"s00-003.jpg")
    body = i - i % 512 + 512
    data[body:body + 300] = bytes(300)  # the image's bytes zeroed: not a JPEG any more
    with open(urls[0], "wb") as f:
        f.write(bytes(data))
    counts = []
    for rank in range(2):
        with Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=rank, world_size=2, even="pad",
                    on_error="skip", seed=0) as ld:
            n = [b[0].shape[0] for b in ld]
            counts.append((len(ld), len(n), sum(n)))
            if rank == 0:
                assert [(s.key, s.error) for s in ld.skipped] == [("s00-003", "DecodeError")]
    assert counts == [(2, 2, 4), (2, 2, 4)]


def test_epochs_advance_without_set_epoch(tmp_path):
    urls, _ = _shards(tmp_path, [6, 6, 6])
    ld = Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3)
    orders = [[k for b in ld for k in b.keys] for _ in range(3)]
    assert orders[0] != orders[1] != orders[2] and sorted(orders[0]) == sorted(orders[1])
    ld2 = Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=3)
    ld2.set_epoch(1)
    assert [k for b in ld2 for k in b.keys] == orders[1]  # epoch 1 whichever way it is reached
    ld2.set_epoch(1)
    assert [k for b in ld2 for k in b.keys] == orders[1]  # set_epoch pins it
    ld.close()
    ld2.close()


def test_torch_manual_seed_governs_the_order(tmp_path):
    urls, _ = _shards(tmp_path, [6, 6, 6])

    def order(seed=None):
        with Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=seed) as ld:
            return [k for b in ld for k in b.keys]

    with torch.random.fork_rng(devices=[]):  # torch's global seed is restored for the tests after this one
        torch.manual_seed(1)
        a = order()
        torch.manual_seed(1)
        assert order() == a
        torch.manual_seed(2)
        assert order() != a
        torch.manual_seed(99)
        pinned = order(seed=7)
        torch.manual_seed(123)
        assert order(seed=7) == pinned  # an int seed pins it, whatever torch's seed


@pytest.mark.parametrize("world", [1, 2])
def test_resume_from_state_dict_across_a_split(tmp_path, world):
    """Stop each rank after 2 batches, pickle the state, build new loaders (as a restarted
    job does) and resume: the rest of the epoch is exactly what an uninterrupted run gives,
    and so is the next epoch."""
    urls, _ = _shards(tmp_path, [7, 5], photo=None)
    for rank in range(world):
        def make(rank=rank):
            return Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=rank, world_size=world, seed=4,
                          even="pad" if world > 1 else None)

        with make() as full:
            full.set_epoch(5)
            whole = [(b.keys, b[0].clone()) for b in full]
            nxt = [b.keys for b in full]
        with make() as first:
            first.set_epoch(5)
            it = iter(first)
            head = [(b.keys, b[0].clone()) for b in itertools.islice(it, 2)]
            state = pickle.loads(pickle.dumps(first.state_dict()))
            it.close()
        assert state["_num_yielded"] == 2 and state["dataset_state"]["epoch"] == 5
        with make() as second:
            second.load_state_dict(state)
            tail = [(b.keys, b[0].clone()) for b in second]
            after = [b.keys for b in second]
        got = head + tail
        assert [k for k, _ in got] == [k for k, _ in whole]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, whole))
        assert after == nxt


def test_state_from_another_world_size_is_refused(tmp_path):
    urls, _ = _shards(tmp_path, [6, 6])
    with Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=0, world_size=2, seed=1) as a:
        state = a.state_dict()
    with Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=0, world_size=3, seed=1) as b:
        with pytest.raises(ValueError, match="world_size=2"):
            b.load_state_dict(state)
        with pytest.raises(ValueError, match="not a gpudecode Loader state"):
            b.load_state_dict({"epoch": 1})


def test_a_finished_epoch_resumes_at_the_next(tmp_path):
    urls, _ = _shards(tmp_path, [6])
    with Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=2) as a:
        first = [b.keys for b in a]
        state = a.state_dict()
        second = [b.keys for b in a]
    assert state["_iterator_finished"] and state["dataset_state"]["epoch"] == 0
    with Loader(urls, batch_size=4, transform=tf(), device="cpu", seed=2) as b:
        b.load_state_dict(state)
        assert [k.keys for k in b] == second != first


def test_early_errors(tmp_path):
    urls, _ = _shards(tmp_path, [3, 3])
    listing = tmp_path / "none.txt"
    listing.write_text("# no shards listed\n")
    with pytest.raises(ShardReadError, match="no shards"):
        Loader(str(listing), batch_size=2, transform=tf(), device="cpu")
    with pytest.raises(ShardReadError, match="shards do not exist"):
        Loader(str(tmp_path / "s-{000..009}.tar"), batch_size=2, transform=tf(), device="cpu")
    empty = tmp_path / "emptydir"
    empty.mkdir()
    with pytest.raises(ShardReadError, match="no .tar"):
        Loader(str(empty), batch_size=2, transform=tf(), device="cpu")
    ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=0, world_size=8, seed=0)
    with pytest.raises(ValueError, match="6 samples cannot be split over 8"):
        len(ld)


def test_dataloader_arguments(tmp_path):
    urls, _ = _shards(tmp_path, [4])
    import contextlib

    # pin_memory without CUDA: said, as DataLoader says it, not silently ignored
    said = pytest.warns(UserWarning, match="pin_memory=True, but torch sees no CUDA device") \
        if not torch.cuda.is_available() else contextlib.nullcontext()
    with said:
        ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", num_workers=0, pin_memory=True,
                    persistent_workers=True, prefetch_factor=3)
    assert ld.num_threads == 1 and ld.prefetch == 3
    assert sum(b[0].shape[0] for b in ld) == 4
    with pytest.raises(ValueError, match="num_workers or num_threads"):
        Loader(urls, batch_size=2, transform=tf(), device="cpu", num_workers=2, num_threads=3)
    with pytest.raises(TypeError):
        Loader(urls, batch_size=2, transform=tf(), device="cpu", collate_fn=None)
    ld.close()


def test_sampler_and_dataset_for_distributed_evaluation(tmp_path, photos):
    """The evaluation pattern of pytorch/examples' ImageNet script: each rank evaluates
    len(sampler) samples (even="drop"), and the remainder
    Subset(dataset, range(len(sampler) * world, len(dataset))) is exactly what was left
    out; dataset[i] is what the loader gives for that sample."""
    urls, keys = _shards(tmp_path, [5, 6], photo=photos["astronaut"])
    world = 3
    seen = []
    for rank in range(world):
        with Loader(urls, batch_size=4, transform=tf(24), device="cpu", rank=rank, world_size=world, shuffle=False,
                    even="drop", seed=0) as ld:
            with pytest.warns(RuntimeWarning, match="leaves out 2 of 11 samples"):
                assert len(ld.sampler) == 11 // world
            assert len(ld.dataset) == 11 == ld.total_samples
            out = {k: img.clone() for b in ld for k, img in zip(b.keys, b[0])}
            assert list(ld.sampler) == [keys.index(k) for k in out]
            seen += list(out)
            ds = ld.dataset
            for k, img in out.items():
                x, label = ds[keys.index(k)]
                assert torch.equal(x, img) and label == int(k[-3:]) % 3
    rest = torch.utils.data.Subset(ds, range(len(ld.sampler) * world, len(ds)))
    assert len(seen) + len(rest) == len(keys)
    assert [keys[i] for i in rest.indices] == [k for k in keys if k not in seen]
    dl = torch.utils.data.DataLoader(rest, batch_size=2, num_workers=0)
    assert sum(x.shape[0] for x, _ in dl) == len(rest)


def test_cache_dir_makes_later_epochs_local(tmp_path, http_server):
    urls, keys = _shards(tmp_path, [5, 4])
    for u in urls:
        with open(u, "rb") as f:
            http_server.files["/" + os.path.basename(u)] = f.read()
    remote = [http_server.url("/" + os.path.basename(u)) for u in urls]
    cache = tmp_path / "cache"
    ld = Loader(remote, batch_size=3, transform=tf(), device="cpu", cache_dir=cache, seed=0, shuffle=False)
    first = [k for b in ld for k in b.keys]
    n = len(http_server.requests)
    assert n == 2 and first == keys  # one request per shard, the whole epoch
    second = [k for b in ld for k in b.keys]
    # read from the copies: per shard one request for byte 0 (revalidation), no body
    probes = sorted(http_server.requests[n:])
    assert second == keys and probes == [("/" + os.path.basename(u), "bytes=0-0") for u in urls]
    n = len(http_server.requests)
    assert len(ld) == 3 and len(http_server.requests) == n  # counting reads the copies too
    copies = sorted(p.name for p in cache.iterdir() if p.suffix == ".tar")
    assert len(copies) == 2
    ld.close()
    # a new loader (a new process, as it were) finds the copies; revalidate=False: not a request
    ld2 = Loader(remote, batch_size=3, transform=tf(), device="cpu", cache_dir=cache, shuffle=False, seed=0,
                 remote=RemoteOptions(revalidate=False))
    assert [k for b in ld2 for k in b.keys] == keys and len(http_server.requests) == n
    ld2.close()


def test_cache_limit_evicts_least_recently_used(tmp_path, http_server):
    from gpudecode.io.cache import ShardCache

    urls, _ = _shards(tmp_path, [5, 5, 5])
    for u in urls:
        with open(u, "rb") as f:
            http_server.files["/" + os.path.basename(u)] = f.read()
    a, b, c = (http_server.url("/" + os.path.basename(u)) for u in urls)
    cache = ShardCache(tmp_path / "cache", limit=2 * os.path.getsize(urls[0]) + 100)
    pa = cache.fetch(a)
    cache.fetch(b)
    os.utime(pa, (1, 1))  # a used long ago
    assert cache.local(b) is not None  # b used just now
    cache.fetch(c)
    assert cache.local(a) is None and cache.local(b) is not None and cache.local(c) is not None
    assert cache.downloads == 3
    assert cache.fetch(a).exists() and cache.downloads == 4  # fetched again when needed


def test_truncated_download_is_not_cached(tmp_path, http_server):
    from httpfault import Fault

    from gpudecode import RemoteOptions

    urls, _ = _shards(tmp_path, [5])
    with open(urls[0], "rb") as f:
        http_server.files["/s.tar"] = f.read()
    http_server.faults["/s.tar"] = [Fault("short", after=1000)] + [Fault("short", after=0)] * 3
    cache = tmp_path / "cache"
    ld = Loader([http_server.url("/s.tar")], batch_size=5, transform=tf(), device="cpu", cache_dir=cache,
                remote=RemoteOptions(retries=2, backoff=0.01, read_timeout=1))
    with pytest.raises(ShardReadError, match="gave up after 3 tries"):
        for _ in ld:  # (not list(): it asks len() first, which counts by downloading)
            pass
    assert not [p for p in cache.iterdir() if p.suffix == ".tar" or p.name.endswith(".partial")]
    ld.close()


def test_default_gives_every_rank_the_same_batch_count(tmp_path):
    """The case of the report: 7 shards on 2 ranks gave 16 and 9 batches under the old
    default (gloo aborted, NCCL would hang). The default now pads as DistributedSampler
    does; even=None (exact, for evaluation) says before the first batch that counts differ;
    one process alone reads every sample once."""
    urls, keys = _shards(tmp_path, [9, 4, 8, 2, 6, 5, 8])  # 42: no padding needed, so no cost warning
    counts, seen = [], []
    for rank in range(2):
        ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=rank, world_size=2, seed=1, num_workers=1)
        assert ld.reader.even == "pad" and ld.reader.even_policy == "auto"
        bs = list(ld)
        assert len(bs) == len(ld)
        counts.append(len(bs))
        seen += [k for b in bs for k in b.keys]
    assert counts[0] == counts[1] == 11 and sorted(seen) == sorted(keys)
    for rank, n in ((0, None), (1, None)):
        ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=rank, world_size=2, seed=1, even=n,
                    num_workers=1)
        with pytest.warns(RuntimeWarning, match=r"even=None: the 2 ranks read unequal sample counts in epoch 0 "
                                                r"\(rank 0: \d+, rank 1: \d+\)"):
            it = iter(ld)
        it.close()
    alone = Loader(urls, batch_size=2, transform=tf(), device="cpu", seed=1, num_workers=1, rank=0, world_size=1)
    assert alone.reader.even is None and sorted(k for b in alone for k in b.keys) == sorted(keys)


def test_pad_makes_up_a_batch_whose_every_image_failed(tmp_path):
    """even="pad" with on_error="skip": a batch whose every image is bad is made up of the
    rank's images of the batch before (their keys kept, the failures in skipped), so the
    rank still yields len(loader) batches (the README's promise; it used to raise)."""
    samples = [{"__key__": f"k{i:02d}", "jpg": encode(np.full((16, 16, 3), 10 * i, np.uint8)) if not 4 <= i < 8
                else b"not a jpeg", "cls": b"%d" % i} for i in range(16)]
    shard = make_shard(tmp_path / "p.tar", samples)
    ld = Loader(shard, batch_size=4, transform=tf(8), device="cpu", rank=0, world_size=2, even="pad", seed=0,
                on_error="skip", shuffle=False, num_workers=1)
    batches = [(b.keys, b.images.clone(), b.labels.clone()) for b in ld]
    assert len(batches) == len(ld) == 2
    (k0, i0, l0), (k1, i1, l1) = batches
    assert k0 == ["k00", "k01", "k02", "k03"] and k1 == k0
    assert torch.equal(i1, i0) and l1.tolist() == l0.tolist() == [0, 1, 2, 3]
    assert sorted(s.key for s in ld.skipped) == ["k04", "k05", "k06", "k07"]
    # the first batch of a Loader has nothing to make it up from: said, naming a sample
    shard = make_shard(tmp_path / "q.tar", samples[4:8] + samples[:4] + samples[8:])
    ld = Loader(shard, batch_size=4, transform=tf(8), device="cpu", rank=0, world_size=2, even="pad", seed=0,
                on_error="skip", shuffle=False, num_workers=1)
    with pytest.raises(DecodeError, match="this Loader's first batch failed") as e:
        list(ld)
    assert e.value.key == "k07" and e.value.shard.endswith("q.tar")  # the last of the four, named


def test_a_changed_cache_copy_is_fetched_again_and_stale_partials_go(tmp_path, http_server):
    """A bit flipped in a cached copy (the sidecar keeps its sha256): the next process to
    use it checks the bytes once, removes the copy and fetches it again, so the trainer
    gets the server's samples (tarfile says which); a killed download's .partial (its
    process gone) is removed by the next process and counted by cache_limit meanwhile."""
    import subprocess
    import sys
    import tarfile

    import gpudecode.io.cache as cache_mod
    from gpudecode.io.cache import ShardCache

    urls, _ = _shards(tmp_path, [5])
    with open(urls[0], "rb") as f:
        data = f.read()
    http_server.files["/c.tar"] = data
    url = http_server.url("/c.tar")
    cache = ShardCache(tmp_path / "cache")
    path = cache.fetch(url)
    assert cache.downloads == 1 and path.read_bytes() == data
    raw = bytearray(path.read_bytes())
    raw[700] ^= 0x10  # inside the first image's bytes: the tar still parses
    path.write_bytes(bytes(raw))
    cache_mod._VERIFIED.clear()  # a new process, as it were
    again = ShardCache(tmp_path / "cache")
    assert again.local(url) is None and again.replaced == 1  # refused by content
    assert again.fetch(url).read_bytes() == data and again.downloads == 1
    with tarfile.open(again.local(url)) as t:
        assert len(t.getmembers()) == 10
    # a partial left by a process that is gone, another by this one (still writing)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / "cache" / f"x.tar.{int(dead.stdout)}.partial"
    gone.write_bytes(b"\0" * 5000)
    mine = tmp_path / "cache" / f"y.tar.{os.getpid()}.partial"
    mine.write_bytes(b"\0" * 3000)
    cache_mod._CLEANED.clear()
    fresh = ShardCache(tmp_path / "cache", limit=len(data) + 1000)
    fresh.fetch(url)
    assert not gone.exists() and mine.exists() and fresh.stale_partials == 1
    # the live partial counts against the limit: with it the copy does not fit beside another
    http_server.files["/d.tar"] = data
    fresh.fetch(http_server.url("/d.tar"))
    assert fresh.local(url) is None  # evicted: copies and partials together passed the limit
    mine.unlink()


def test_len_after_an_epoch_is_that_epochs(tmp_path):
    """With even=None and several ranks the batch count differs between epochs (whole
    shards per rank): len() during an epoch and after it ends is that epoch's; set_epoch
    (or the next iteration) moves it on."""
    urls, _ = _shards(tmp_path, [9, 4, 8, 2, 6, 5, 7])
    ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", rank=0, world_size=2, even=None, seed=1,
                num_workers=1)
    counts = {}
    for e in range(6):
        ld.set_epoch(e)
        counts[e] = len(ld)
    e, f = next((a, b) for a in counts for b in counts if counts[a] != counts[b] and b == a + 1)
    ld.set_epoch(e)
    with pytest.warns(RuntimeWarning, match="unequal sample counts"):
        got = sum(1 for _ in ld)
    assert got == counts[e] and len(ld) == counts[e]  # the epoch that just ended
    ld.set_epoch(f)
    assert len(ld) == counts[f]
    assert sum(1 for _ in ld) == counts[f] and len(ld) == counts[f]


def test_a_cached_copy_is_revalidated_against_its_remote_each_epoch(tmp_path, http_server):
    """The remote shard is replaced (new samples, new ETag) while a Loader with cache_dir
    trains: the next epoch's first use of the copy asks the server for byte 0, sees the
    ETag changed, fetches the shard again and delivers its samples (tarfile says which),
    and the epoch after that is counted anew. Without an ETag the size decides; a server
    that cannot be reached leaves the copy in use, with a warning."""
    from conftest import tar_samples

    v1, k1 = _shards(tmp_path, [5], prefix="o")
    v2, k2 = _shards(tmp_path, [8], prefix="n")
    body = {p: Path(p).read_bytes() for p in v1 + v2}
    http_server.files["/c.tar"] = body[v1[0]]
    http_server.etags["/c.tar"] = '"v1"'
    url = http_server.url("/c.tar")
    ld = Loader([url], batch_size=3, transform=tf(), device="cpu", cache_dir=tmp_path / "cache", seed=0,
                shuffle=False)
    assert [k for b in ld for k in b.keys] == k1 and len(ld) == 2
    http_server.files["/c.tar"] = body[v2[0]]
    http_server.etags["/c.tar"] = '"v2"'
    assert [k for b in ld for k in b.keys] == [k for k, _ in tar_samples(v2[0])] == k2
    assert ld.reader.cache.changed == 1 and len(ld) == 3  # the next epoch is counted anew
    copy = ld.reader.cache.path_for(url)
    assert copy.read_bytes() == body[v2[0]]
    # no ETag: the size tells (v1 is shorter than v2)
    del http_server.etags["/c.tar"]
    http_server.files["/c.tar"] = body[v1[0]]
    assert [k for b in ld for k in b.keys] == k1 and ld.reader.cache.changed == 2
    # the server gone: the copy (checked when fetched) is used, and the warning says so
    http_server.close()
    with pytest.warns(RuntimeWarning, match="could not be revalidated"):
        assert [k for b in ld for k in b.keys] == k1
    ld.close()


def test_a_shard_that_changes_during_a_resumed_download_is_refused(tmp_path, http_server):
    """The connection drops mid-download and the resumed request (Range) is answered from
    another version of the shard (another ETag): never spliced into one copy."""
    from httpfault import Fault

    from gpudecode.io.cache import ShardCache

    v1, _ = _shards(tmp_path, [6], prefix="o")
    data = Path(v1[0]).read_bytes()
    http_server.files["/c.tar"] = data
    http_server.etags["/c.tar"] = '"v1"'
    http_server.faults["/c.tar"] = [Fault("drop", after=2000)]
    cache = ShardCache(tmp_path / "cache", remote=RemoteOptions(backoff=0.01))
    real = http_server.etags

    class Changing(dict):  # the second request (the resume) sees version 2
        def __getitem__(self, k):
            return '"v2"' if len(http_server.requests) > 1 else real[k]

    http_server.etags = Changing(real)
    with pytest.raises(ShardReadError, match=r'changed while it was read \(ETag "v1" became "v2"\)'):
        cache.fetch(http_server.url("/c.tar"))
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]


def test_pad_makes_up_a_failed_batch_of_every_view(tmp_path):
    """The made-up batch of several views repeats each view's images of the batch before."""
    samples = [{"__key__": f"k{i:02d}", "jpg": encode(np.full((16, 16, 3), 10 * i, np.uint8)) if not 4 <= i < 8
                else b"not a jpeg", "cls": b"%d" % i} for i in range(16)]
    shard = make_shard(tmp_path / "p.tar", samples)
    views = [tf(8), T.Compose([T.RandomResizedCrop(4), T.Normalize([0.5] * 3, [0.25] * 3)])]
    ld = Loader(shard, batch_size=4, transform=views, device="cpu", rank=0, world_size=2, even="pad", seed=0,
                on_error="skip", shuffle=False, num_workers=1)
    batches = [([x.clone() for x in b.images], b.keys) for b in ld]
    assert len(batches) == len(ld) == 2
    (i0, k0), (i1, k1) = batches
    assert k1 == k0 and [x.shape[-1] for x in i1] == [8, 4]
    assert all(torch.equal(a, b) for a, b in zip(i0, i1))


def test_dataset_names_a_shard_that_shrank_since_it_was_indexed(tmp_path):
    """Loader.dataset indexes a shard on first use and reads members by offset: a shard cut
    short afterwards is a ShardReadError naming it and the sample's key, not short bytes."""
    urls, keys = _shards(tmp_path, [6])
    ld = Loader(urls, batch_size=2, transform=tf(), device="cpu", shuffle=False)
    ds = ld.dataset
    img, label = ds[0]
    assert img.shape == (3, 16, 16)
    os.truncate(urls[0], os.path.getsize(urls[0]) // 2)
    with pytest.raises(ShardReadError, match="shrank") as e:
        ds[5]
    assert e.value.shard == urls[0] and e.value.key == keys[5]


def test_dataset_items_are_the_whole_image_through_the_compose(tmp_path, photos):
    """Loader.dataset runs each item through the Loader's pipeline (the window decoded, the
    batch kernel): on photographs, every transform style gives what the whole image
    decoded and the Compose called on it give, bit for bit, with the same draws."""
    from conftest import encode, make_shard

    from gpudecode._probe import probe_samples
    from gpudecode.decode.cpu import CpuDecoder
    from gpudecode.errors import ErrorPolicy
    from gpudecode.pipeline import view_seed

    imgs = list(photos.values())
    url = make_shard(tmp_path / "p.tar", [{"__key__": f"k{i:02d}", "jpg": encode(imgs[i % len(imgs)][i:, 2 * i:]),
                                           "cls": str(i)} for i in range(6)])
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    styles = [T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                         T.Normalize(mean, std)]),
              T.Compose([T.Resize(80), T.CenterCrop(64), T.Normalize(mean, std)]),
              T.Compose([T.RandomResizedCrop(48), T.ToDtype(torch.uint8)], layout="NHWC"),
              [T.Compose([T.RandomResizedCrop(40)]), T.Compose([T.RandomResizedCrop(24), T.RandomGrayscale(0.5)])]]
    dec = CpuDecoder(num_threads=1)
    for tf in styles:
        ds = Loader([url], batch_size=2, transform=tf, device="cpu", shuffle=False, seed=9).dataset
        for i in range(6):
            got, label = ds[i]
            (p,) = probe_samples([ds.sample(i)], ["jpg"], 0, ErrorPolicy("raise"))
            out = dec.decode([p.request()])
            h, w = (int(v) for v in out.shapes[0])
            img = torch.from_numpy(np.ascontiguousarray(out.pixels[:h * w * 3].numpy().reshape(h, w, 3)
                                                        .transpose(2, 0, 1)))
            views = tf if isinstance(tf, list) else [tf]
            want = [t(img, t.make_params([(h, w)], view_seed(9, v), epoch=0, indices=[i])) for v, t in enumerate(views)]
            assert label == i
            for a, b in zip(got if isinstance(tf, list) else [got], want):
                assert a.dtype == b.dtype and torch.equal(a, b)
