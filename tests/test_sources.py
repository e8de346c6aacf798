"""Mixing sources (issue 40): `Loader([Source(...), Source(...)])` draws each epoch's exact
counts from each source (weight, repeat, choose; torchdata.nodes' stop criteria as
epoch sizes), deterministic in (seed, epoch), elastic over ranks, with each source's own
labels (label_offset), its skips counted against it, and the mix reported. References:
collections.Counter over the keys read, and counts worked out by hand."""
from __future__ import annotations

import collections
import itertools
import pickle

import numpy as np
import pytest
import torch
from gpudecode import Loader, Source
from gpudecode import transforms as T
from gpudecode.io.epoch import mixture_counts

from conftest import encode, make_shard

pytestmark = pytest.mark.filterwarnings("ignore:even=None. the .* ranks read unequal sample counts")


def _shard(path, prefix, n, label, bad=()):
    samples = []
    for i in range(n):
        img = np.full((12, 14, 3), (i * 13) % 256, np.uint8)
        data = encode(img) if i not in bad else b"\xff\xd8not a jpeg"
        samples.append({"__key__": f"{prefix}{i:03d}", "jpg": data, "cls": b"%d" % label})
    return make_shard(path, samples)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sources")
    a = [_shard(d / "a-000.tar", "a0-", 100, 0), _shard(d / "a-001.tar", "a1-", 50, 1)]
    b = [_shard(d / "b-000.tar", "b-", 30, 2)]
    c = [_shard(d / "c-000.tar", "c-", 20, 3)]
    return {"a": a, "b": b, "c": c, "dir": d}


def make(sources, **kw):
    kw = {"batch_size": 8, "transform": T.Compose([T.Resize((8, 8))]), "device": "cpu", "seed": 3, **kw}
    return Loader(sources, **kw)


def source_of(key):
    return key.split("-")[0][0]


def test_the_counts_are_exact_and_as_worked_out_by_hand():
    sizes = [150, 30, 20]
    w = [Source("a", weight=0.7), Source("b", weight=0.3)]
    # all_exhausted: every weighted source once at least: max(150 / 0.7, 30 / 0.3) = 214.3 -> 214
    assert mixture_counts(sizes[:2], w, None) == [150, 64]
    # first_exhausted: none repeats: min(150 / 0.7, 30 / 0.3) = 100
    assert mixture_counts(sizes[:2], w, "first_exhausted") == [70, 30]
    # an int epoch: the weighted share what repeat/choose leave; largest remainder
    mixed = [Source("a", weight=2), Source("b", weight=1), Source("c", choose=7)]
    assert mixture_counts(sizes, mixed, 107) == [67, 33, 7]
    assert mixture_counts(sizes, [Source("a"), Source("b", repeat=2.5), Source("c", repeat=0.5)], None) == [150, 75, 10]
    with pytest.raises(ValueError, match="below the 37 samples"):
        mixture_counts(sizes, [Source("a", weight=1), Source("b"), Source("c", choose=7)], 36)
    with pytest.raises(ValueError, match="one of weight, repeat and choose"):
        Source("a", weight=1, repeat=2)
    with pytest.raises(ValueError, match="no Source has a weight"):
        mixture_counts(sizes, [Source("a"), Source("b")], 100)


@pytest.mark.parametrize("kind", ["weights", "repeat-choose", "first"])
def test_each_epoch_reads_exactly_its_counts(data, kind):
    if kind == "weights":
        sources, size, want = [Source(data["a"], weight=0.7), Source(data["b"], weight=0.3)], None, {"a": 150, "b": 64}
    elif kind == "repeat-choose":
        sources = [Source(data["a"], choose=40), Source(data["b"], repeat=2), Source(data["c"])]
        size, want = None, {"a": 40, "b": 60, "c": 20}
    else:
        sources, size, want = [Source(data["a"], weight=1), Source(data["c"], weight=1)], "first_exhausted", \
            {"a": 20, "c": 20}
    with make(sources, epoch_size=size) as ld:
        epochs = []
        for e in range(2):
            keys = [k for b in ld for k in b.keys]
            got = collections.Counter(map(source_of, keys))
            assert dict(got) == want, (e, got)
            assert ld.stats.summary()["sources"] == {s.label: want[source_of_src(s)] for s in sources}
            per_key = collections.Counter(keys)
            for s in want:  # each sample of a source as evenly as its count allows
                ks = [per_key[k] for k in per_key if source_of(k) == s]
                assert max(ks) - min(ks) <= 1, (s, collections.Counter(ks))
            epochs.append(keys)
        assert epochs[0] != epochs[1]
    with make(sources, epoch_size=size) as again:
        assert [k for b in again for k in b.keys] == epochs[0]  # (seed, epoch) fix the draw


def source_of_src(s):
    return s.urls[0].split("/")[-1][0]


def test_a_mixture_is_elastic_over_ranks(data):
    sources = [Source(data["a"], weight=0.5), Source(data["b"], weight=0.5)]
    with make(sources, batch_size=4) as one:
        whole = [k for b in one for k in b.keys]
    parts = []
    for r in range(3):
        with make(sources, batch_size=4, rank=r, world_size=3, even=None) as ld:
            parts.append([b.keys for b in ld])
    rounds = [keys for k in range(max(map(len, parts))) for p in parts if k < len(p) for keys in [p[k]]]
    assert [k for keys in rounds for k in keys] == whole
    # resumed on two ranks after two rounds of three: nothing skipped or repeated
    states, head = [], []
    for r in range(3):
        with make(sources, batch_size=4, rank=r, world_size=3, even=None) as ld:
            it = iter(ld)
            head += [k for b in itertools.islice(it, 2) for k in b.keys]
            states.append(pickle.loads(pickle.dumps(ld.state_dict())))
            it.close()
    tail = []
    for r in range(2):
        with make(sources, batch_size=6, rank=r, world_size=2, even=None) as ld:
            ld.load_state_dict(states[0])
            tail += [k for b in ld for k in b.keys]
    assert collections.Counter(head + tail) == collections.Counter(whole)
    with make([Source(data["a"], weight=0.6), Source(data["b"], weight=0.4)], batch_size=4, rank=0,
              world_size=2, even=None) as other, pytest.raises(ValueError, match="other shards or files"):
        other.load_state_dict(states[0])  # another mix is another source list


def test_labels_keep_their_source_and_skips_are_counted_against_it(data):
    bad = [_shard(data["dir"] / "bad-000.tar", "c-", 20, 1, bad=(3, 11))]
    sources = [Source(data["b"], name="B"), Source(bad, label_offset=5, name="C")]
    with make(sources, on_error="skip") as ld:
        got = collections.defaultdict(set)
        for b in ld:
            for k, lab in zip(b.keys, b.labels.tolist()):
                got[source_of(k)].add(lab)
        assert dict(got) == {"b": {2}, "c": {6}}  # C's label 1, after its offset of 5
        mix = {m["source"]: m for m in ld.describe()["mix"]}
    assert (mix["B"]["skipped"], mix["C"]["skipped"]) == (0, 2)
    assert (mix["B"]["per_epoch"], mix["C"]["per_epoch"], mix["C"]["label_offset"]) == (30, 20, 5)


def test_image_folder_sources_keep_their_own_classes(tmp_path):
    from PIL import Image

    for tree, classes in (("t1", ["cat", "dog"]), ("t2", ["ant", "bee", "fly"])):
        for j, c in enumerate(classes):
            (tmp_path / tree / c).mkdir(parents=True)
            for i in range(3):
                Image.fromarray(np.full((10, 10, 3), 40 * j + i, np.uint8)).save(tmp_path / tree / c / f"{i}.png")
    with make([Source(str(tmp_path / "t1")), Source(str(tmp_path / "t2"), label_offset=2)], batch_size=5) as ld:
        labels = sorted(int(x) for b in ld for x in b.labels)
        assert ld.reader.classes == ["cat", "dog", "ant", "bee", "fly"]
    assert labels == sorted([0] * 3 + [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3)
    with pytest.raises(ValueError, match="label_offset"):  # (refused when the Loader is made, issue 57)
        make([Source(str(tmp_path / "t1")), Source(str(tmp_path / "t2"))], batch_size=5)


def test_a_mixture_is_refused_where_it_cannot_be_honoured(data):
    with pytest.raises(ValueError, match="Source alone"):
        make([Source(data["a"]), data["b"][0]])
    with pytest.raises(ValueError, match="split elastically"):
        make([Source(data["a"]), Source(data["b"])], split="sample")
    with pytest.raises(ValueError, match="in two sources"):
        make([Source(data["a"]), Source(data["a"][:1])])
    with pytest.raises(ValueError, match="epoch_size sizes a mixture"):
        make(data["a"], epoch_size=100)
    with pytest.raises(Exception, match="do not exist: .*nothing-here"):
        make([Source(data["a"]), Source(str(data["dir"] / "nothing-here-{000..001}.tar"))])


def test_views_batch_transforms_and_precached_sources_go_through_a_mixture(data, tmp_path):
    """The Loader's other conventions hold for a mixture: several views, MixUp on the
    finished batch, and sources precached one by one (`gpudecode precache` per source,
    then mixed: tensor shards are sources like any)."""
    from gpudecode.mixing import MixUp
    from gpudecode.precache import precache

    views = [T.Compose([T.RandomResizedCrop(8), T.ToDtype(torch.float32, scale=True)]),
             T.Compose([T.RandomResizedCrop(4), T.ToDtype(torch.float32, scale=True)])]
    sources = [Source(data["b"], choose=12), Source(data["c"], repeat=1)]
    with make(sources, transform=views) as ld:
        shapes = {tuple(v.shape[1:]) for b in ld for v in b.images}
        assert shapes == {(3, 8, 8), (3, 4, 4)} and ld.stats.summary()["images"] == 32
    with make(sources, transform=views[0], batch_transform=MixUp(alpha=0.4, num_classes=4)) as ld:
        labels = [b.labels for b in ld]
    assert all(lab.shape[1] == 4 and torch.allclose(lab.sum(1), torch.ones(len(lab))) for lab in labels)
    outs = []
    for name, urls in (("b", data["b"]), ("c", data["c"])):
        report = precache(urls, str(tmp_path / name / f"{name}-%06d.tar"), size=10, shard_size=8, num_threads=1)
        outs.append(report.shards)
    with make([Source(outs[0], weight=1), Source(outs[1], weight=1)], epoch_size=40,
              transform=T.Compose([T.CenterCrop(8), T.ToDtype(torch.float32, scale=True)])) as ld:
        keys = [k for b in ld for k in b.keys]
        assert collections.Counter(map(source_of, keys)) == {"b": 20, "c": 20}


def test_the_profile_names_the_slow_source(data):
    """gpudecode.profile over a mixture: each source's read rate on the reader threads,
    and the slow one named (here a source whose reads are made 20 ms slower a run)."""
    import time

    import gpudecode

    with make([Source(data["a"], name="fast", choose=60), Source(data["b"], name="slow")], batch_size=6) as ld:
        real = ld.reader.segments._segment_items

        def slowed(seg, group, orders):  # the storage under one source is slow: its reads take longer
            for items in real(seg, group, orders):
                if seg.url in data["b"]:
                    time.sleep(0.02)
                yield items

        ld.reader.segments._segment_items = slowed
        report = gpudecode.profile(ld, step=0.0)
    caps = report.source_capacity
    assert set(caps) == {"fast", "slow"} and caps["slow"] < caps["fast"] / 3, caps
    assert "slowest: slow" in report.summary()


def test_twenty_epochs_of_exact_counts_in_a_reproducible_order(data):
    """Over 20 epochs each source gives exactly its count every epoch (the plans, read
    without decoding), and each epoch's global order is the same for 1 and 3 ranks."""
    from gpudecode import ShardReader

    sources = [Source(data["a"], weight=0.7), Source(data["b"], weight=0.3), Source(data["c"], choose=9)]
    want = mixture_counts([150, 30, 20], sources, 120)
    assert want == [78, 33, 9]  # the epoch of 120 less choose's 9, shared 0.7 : 0.3 (77.7 -> 78, 33.3 -> 33)
    one = ShardReader(sources, epoch_size=120, shuffle=True, seed=4, rank=0, world_size=1, chunk=5)
    three = [ShardReader(sources, epoch_size=120, shuffle=True, seed=4, rank=r, world_size=3, chunk=5, even=None)
             for r in range(3)]
    owner = {u: i for i, g in enumerate(one.source_urls) for u in g}
    for epoch in range(20):
        order = list(one.plan(epoch).order())
        got = collections.Counter(owner[u] for u, _ in order)
        assert [got[i] for i in range(3)] == want, (epoch, got)
        by_pos = {}
        for rd in three:
            p = rd.plan(epoch)
            items = list(p.order())
            for k, pos in enumerate(p.chunks):
                for j, item in enumerate(items[5 * k:5 * k + 5]):
                    by_pos[pos + j] = item
        assert [by_pos[i] for i in range(len(order))] == order, epoch


def test_the_dataset_view_of_a_mixture_gives_each_source_its_labels(data):
    """`loader.dataset[i]` and the Loader label a sample alike: a shard source's label_offset
    reaches the dataset's pipeline too (both built from one PipelineConfig; the dataset
    used to build its own and read C's labels without their offset)."""
    with make([Source(data["b"], name="B"), Source(data["c"], label_offset=5, name="C")]) as ld:
        ds = ld.dataset
        by_key = {k: lab for b in ld for k, lab in zip(b.keys, b.labels.tolist())}
        labels = {ds.sample(i).key: ds[i][1] for i in range(len(ds))}
    assert labels == by_key and set(labels.values()) == {2, 8}  # C's label 3, after its offset of 5


def test_the_dataset_view_goes_to_spawned_dataloader_workers(data):
    """`loader.dataset` is a map-style dataset for torch's DataLoader, which pickles it to
    each worker under the "spawn" start method (macOS's and Windows' default, and what
    CUDA jobs use): a mixture's label offsets went in a MappingProxyType that does not
    pickle. Through 2 spawned workers each item equals the item read in this process."""
    with make([Source(data["b"], name="B"), Source(data["c"], label_offset=5, name="C")]) as ld:
        ds = ld.dataset
        want = [ds[i] for i in range(len(ds))]
    loader = torch.utils.data.DataLoader(ds, batch_size=7, num_workers=2, multiprocessing_context="spawn")
    got = [(img, int(lab)) for imgs, labs in loader for img, lab in zip(imgs, labs)]
    assert len(got) == len(want) == 50 and {lab for _, lab in got} == {2, 8}
    for (a, la), (b, lb) in zip(got, want):
        assert la == lb and torch.equal(a, b)
