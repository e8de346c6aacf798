"""split="elastic" (issue 40): the epoch's global order depends on (seed, epoch, sources)
alone; every rank reads batch-sized runs of it in rounds; each sample draws its
augmentations by its global position; a state_dict() resumes on another world size or
batch size with no sample of the global order repeated or skipped (beyond what `even`
pads), and a state of another seed, source list or transform is refused by name.

The references: the single-process run of the same Loader (the global order is what it
yields), Python's sets and counters for exactly-once."""
from __future__ import annotations

import collections
import itertools
import pickle

import numpy as np
import pytest
import torch

from gpudecode import Loader, ShardReader
from gpudecode import transforms as T
from gpudecode.io.epoch import BLOCK, WINDOW, plan_elastic

from conftest import encode, make_shard

# even=None with several ranks (exactly-once, for these checks) warns of unequal counts, as it should
pytestmark = pytest.mark.filterwarnings("ignore:even=None. the .* ranks read unequal sample counts")

SIZES = [40, 13, 64, 29, 5, 70, 31]  # 252 samples, shards of unequal length


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("elastic")
    urls = []
    for j, n in enumerate(SIZES):
        samples = []
        for i in range(n):
            img = np.full((20, 24, 3), (j * 37 + i * 11) % 256, np.uint8)
            img[::3, ::2] = (i * 7) % 256  # something for the crop and flip to move
            samples.append({"__key__": f"s{j}-{i:03d}", "jpg": encode(img), "cls": b"%d" % (i % 5)})
        urls.append(make_shard(d / f"e-{j:03d}.tar", samples))
    return urls


def tf():
    return T.Compose([T.RandomResizedCrop(12), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])


def make(urls, world=1, rank=0, batch=4, **kw):
    kw = {"seed": 11, "shuffle": True, "split": "elastic", "even": None, **kw}
    return Loader(urls, batch_size=batch, transform=tf(), device="cpu", rank=rank, world_size=world, **kw)


def run(urls, world, batch, **kw):
    """Every rank's batches: [rank][batch k] = (keys, images)."""
    out = []
    for r in range(world):
        with make(urls, world, r, batch, **kw) as ld:
            ld.set_epoch(3)
            out.append([(b.keys, b.images.clone()) for b in ld])
    return out


def rounds(per_rank):
    """The global order a world consumed: round k is rank 0's batch k, rank 1's, ..."""
    seq = []
    for k in range(max(len(x) for x in per_rank)):
        for x in per_rank:
            if k < len(x):
                seq.append(x[k])
    return seq


def test_the_global_order_and_the_draws_do_not_depend_on_the_world_size(shards):
    one = run(shards, 1, 4)[0]
    order = [k for keys, _ in one for k in keys]
    assert sorted(order) == sorted(f"s{j}-{i:03d}" for j, n in enumerate(SIZES) for i in range(n))
    pixels = {k: img for keys, imgs in one for k, img in zip(keys, imgs)}
    for world in (2, 3, 5):
        per = run(shards, world, 4)
        got = [k for keys, _ in rounds(per) for k in keys]
        assert got == order, world  # the same global order, read in batch-sized runs by rank
        for keys, imgs in itertools.chain.from_iterable(per):
            for k, img in zip(keys, imgs):  # each sample's augmentation drawn by its global position
                assert torch.equal(img, pixels[k]), (world, k)


def test_the_order_mixes_blocks_and_is_fixed_by_seed_and_epoch(shards):
    a = [k for keys, _ in run(shards, 1, 8)[0] for k in keys]
    b = [k for keys, _ in run(shards, 1, 8, seed=12)[0] for k in keys]
    assert a != b and sorted(a) == sorted(b)
    # a batch of 8 draws from several shards (the window interleaves blocks of up to 16 shards)
    firsts = [{k.split("-")[0] for k in a[i:i + 8]} for i in range(0, 64, 8)]
    assert min(len(s) for s in firsts) >= 4, firsts


@pytest.mark.parametrize("old,new", [((3, 2), (2, 3)), ((2, 4), (5, 2)), ((4, 3), (1, 12)), ((3, 4), (3, 4))])
@pytest.mark.parametrize("even", [None, "pad"])
def test_resume_on_another_world_size(shards, old, new, even):
    """Ranks of `old` = (world, batch) stop after 3 batches each and save; a job of `new`
    ranks and batch size loads rank 0's state (all ranks' agree) and finishes the epoch:
    every sample of the epoch exactly once over both, plus only the pad of the last round;
    every new rank the same batch count."""
    (w0, b0), (w1, b1) = old, new
    states, head = [], []
    for r in range(w0):
        with make(shards, w0, r, b0, even=even) as ld:
            ld.set_epoch(3)
            it = iter(ld)
            head += [k for b in itertools.islice(it, 3) for k in b.keys]
            states.append(pickle.loads(pickle.dumps(ld.state_dict())))
            it.close()
    positions = {s["dataset_state"]["global_position"] for s in states}
    assert positions == {3 * w0 * b0}  # every rank counts the job's place alike
    tail, batches = [], []
    for r in range(w1):
        with make(shards, w1, r, b1, even=even) as ld:
            ld.load_state_dict(states[0])
            got = [b.keys for b in ld]
            batches.append(len(got))
            tail += [k for keys in got for k in keys]
    total = sum(SIZES)
    seen = collections.Counter(head + tail)
    assert set(seen) == {f"s{j}-{i:03d}" for j, n in enumerate(SIZES) for i in range(n)}  # none skipped
    repeats = sum(seen.values()) - total
    if even is None:
        assert repeats == 0
    else:
        rest = total - 3 * w0 * b0
        assert repeats == (-rest) % w1  # the last round padded to equal shares, no more
        assert len(set(batches)) == 1, batches
    if (w0, b0) == (w1, b1):  # the same world: the rest is what an uninterrupted run gives
        full = run(shards, w1, b1, even=even)
        assert tail == [k for x in full for keys, _ in x[3:] for k in keys]


def test_resume_on_the_same_world_size_is_bit_identical(shards):
    full = run(shards, 2, 4)
    for r in range(2):
        with make(shards, 2, r) as ld:
            ld.set_epoch(3)
            it = iter(ld)
            head = [(b.keys, b.images.clone()) for b in itertools.islice(it, 2)]
            state = ld.state_dict()
            it.close()
        with make(shards, 2, r) as ld:
            ld.load_state_dict(state)
            tail = [(b.keys, b.images.clone()) for b in ld]
        got = head + tail
        assert [k for k, _ in got] == [k for k, _ in full[r]]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, full[r]))


def test_a_state_of_another_seed_sources_or_transform_is_refused(shards):
    with make(shards, 2, 0) as ld:
        ld.set_epoch(3)
        it = iter(ld)
        next(it)
        state = ld.state_dict()
        it.close()
    with make(shards, 3, 1, seed=12) as other:
        with pytest.raises(ValueError, match="seed=11"):
            other.load_state_dict(state)
    with make(list(reversed(shards)), 3, 1) as reordered:
        with pytest.raises(ValueError, match="other shards or files"):
            reordered.load_state_dict(state)
    flipped = Loader(shards, batch_size=4, transform=T.Compose([T.RandomResizedCrop(12), T.ToDtype(torch.float32,
                     scale=True)]), device="cpu", rank=0, world_size=3, seed=11, shuffle=True, split="elastic",
                     even=None)
    with flipped, pytest.raises(ValueError, match="other transforms"):
        flipped.load_state_dict(state)
    with make(shards, 3, 1, split="sample") as not_elastic, pytest.raises(ValueError, match="split="):
        not_elastic.load_state_dict(state)


def test_the_elastic_plan_reads_runs_and_splits_exactly():
    counts = {f"u{i}": n for i, n in enumerate([300, 17, 129, 64, 1, 250])}
    urls = list(counts)
    total = sum(counts.values())
    ref = list(plan_elastic(urls, counts, consumer=0, consumers=1, chunk=1, even=None, shuffle=True, seed=1,
                            epoch=2).order())
    assert sorted(ref) == sorted((u, i) for u, n in counts.items() for i in range(n))
    for consumers, chunk in ((2, 32), (3, 10), (7, 64), (4, 1)):
        plans = [plan_elastic(urls, counts, consumer=c, consumers=consumers, chunk=chunk, even=None, shuffle=True,
                              seed=1, epoch=2) for c in range(consumers)]
        by_pos = {}
        for p in plans:
            items = list(p.order())
            lens = [chunk] * len(p.chunks)
            if lens:
                lens[-1] = len(items) - chunk * (len(p.chunks) - 1)
            at = 0
            for pos, n in zip(p.chunks, lens):
                for j in range(n):
                    by_pos[pos + j] = items[at + j]
                at += n
        assert [by_pos[i] for i in range(total)] == ref, (consumers, chunk)
        # each chunk is read as runs: at most one segment per block of each window it meets
        assert all(len(p.segments) <= len(p.chunks) * (WINDOW + 1) * (chunk // (BLOCK * WINDOW) + 2) for p in plans)
    pad = [plan_elastic(urls, counts, consumer=c, consumers=4, chunk=32, even="pad", shuffle=True, seed=1, epoch=2)
           for c in range(4)]
    assert len({p.target for p in pad}) == 1 and sum(p.target for p in pad) - total == (-total) % 4
    unshuffled = plan_elastic(urls, counts, consumer=0, consumers=1, chunk=8, even=None, shuffle=False, seed=1,
                              epoch=0)
    assert list(unshuffled.order()) == [(u, i) for u in urls for i in range(counts[u])]  # in order without shuffle


def test_reader_plan_is_public_and_names_the_split(shards):
    rd = ShardReader(shards, rank=1, world_size=3, split="elastic", chunk=4, shuffle=True, seed=5)
    p = rd.plan(0)
    import gpudecode

    assert isinstance(p, gpudecode.EpochPlan)
    assert (p.rank, p.world_size, p.mode, p.even, p.chunk) == (1, 3, "elastic", "pad", 4)
    assert p.target == -(-sum(SIZES) // 3) and len(list(rd.iter_epoch(0))) == p.target
    plain = ShardReader(shards, rank=0, world_size=2, split="sample").plan(0)
    assert plain.mode == "sample" and plain.target == sum(SIZES) // 2
    with pytest.raises(ValueError, match="repeated_augs and split='elastic'"):
        ShardReader(shards, split="elastic", repeated_augs=2)


def test_the_sampler_lists_the_elastic_order(shards):
    """loader.sampler (DataLoader's place for it) gives the indices in the order the rank
    yields them."""
    with make(shards, 3, 2, batch=4) as ld:
        ld.set_epoch(3)
        keys = [k for b in ld for k in b.keys]
        ld.set_epoch(3)
        idx = list(ld.sampler)
    names = [f"s{j}-{i:03d}" for j, n in enumerate(SIZES) for i in range(n)]
    assert [names[i] for i in idx] == keys


def test_a_reader_pickles_to_spawned_workers_and_reads_by_index(shards):
    """A ShardReader goes to DataLoader's spawned workers by pickle (its locks and caches
    made anew there); read_sample, the one read-by-index path, gives what iteration gives."""
    import pickle

    rd = ShardReader(shards, split="elastic", chunk=4, shuffle=False)
    first = {s.key: dict(s.fields) for s in rd}
    again = pickle.loads(pickle.dumps(rd))
    for url, j in [(shards[0], 0), (shards[3], 28), (shards[6], 5)]:
        s = again.read_sample(url, j)
        assert s.key == f"s{shards.index(url)}-{j:03d}" and dict(s.fields) == first[s.key]
    with pytest.raises(IndexError, match="holds 13"):
        again.read_sample(shards[1], 13)


def _ledger_sources(kind, tmp_path, damaged):
    """Shards, an ImageFolder tree, or a mixture of the two, with one damaged image."""
    from PIL import Image

    from gpudecode import Source

    names = []
    if kind in ("shards", "mixed"):
        urls = []
        for j, n in enumerate([23, 17, 30]):
            samples = []
            for i in range(n):
                key = f"s{j}-{i:03d}"
                data = encode(np.full((10, 12, 3), (i * 9) % 256, np.uint8)) if key != damaged else b"\xff\xd8bad"
                samples.append({"__key__": key, "jpg": data, "cls": b"%d" % (i % 3)})
                names.append(key)
            urls.append(make_shard(tmp_path / f"l-{j:03d}.tar", samples))
        if kind == "shards":
            return urls, names
    tree = tmp_path / "tree"
    for c in range(3):
        (tmp_path / "tree" / f"c{c}").mkdir(parents=True)
        for i in range(9):
            Image.fromarray(np.full((10, 12, 3), 20 * c + i, np.uint8)).save(tree / f"c{c}" / f"{i}.png")
    rd = ShardReader(str(tree))  # (the tree's keys, as the reader names them)
    names += [k for f in rd.files.values() for k in f.keys]
    if kind == "files":
        return str(tree), names
    return [Source(urls, weight=2.0), Source(str(tree), weight=1.0, label_offset=3)], names


@pytest.mark.parametrize("kind", ["shards", "files", "mixed"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_the_sample_ledger_over_a_resume_on_other_world_sizes(tmp_path, kind, shuffle):
    """Issue 40's ledger: an epoch on 4 ranks stopped after 2 steps and resumed on 2, 3
    and 8 ranks (and 2 onto 4): the multiset of samples read over the epoch is one pass of
    the epoch's global order, less a damaged sample skipped, plus only `even`'s pads
    (counted), and the new ranks' batch counts are equal. Shards, files and a mixture,
    shuffled or not."""
    damaged = "s1-004" if kind != "files" else None
    urls, names = _ledger_sources(kind, tmp_path, damaged)
    kw = dict(batch_size=3, transform=tf(), device="cpu", seed=2, shuffle=shuffle, split="elastic", even="pad",
              on_error="skip")
    with Loader(urls, **kw) as one:  # the epoch's global order, in one process
        whole = [k for b in one for k in b.keys]
    for old, new in ((4, 2), (4, 3), (4, 8), (2, 4)):
        head, states = [], []
        for r in range(old):
            with Loader(urls, rank=r, world_size=old, **kw) as ld:
                it = iter(ld)
                head += [k for b in itertools.islice(it, 2) for k in b.keys]
                states.append(ld.state_dict())
                it.close()
        assert len({s["dataset_state"]["global_position"] for s in states}) == 1
        tail, batches = [], []
        for r in range(new):
            with Loader(urls, rank=r, world_size=new, **kw) as ld:
                ld.load_state_dict(states[r % old])
                got = [b.keys for b in ld]
                batches.append(len(got))
                tail += [k for keys in got for k in keys]
        seen = collections.Counter(head + tail)
        expected = collections.Counter(whole)
        assert len(set(batches)) == 1, (old, new, batches)
        assert set(seen) == set(expected) == set(names) - {damaged}, (old, new)  # nothing skipped but the damaged
        extra = seen - expected  # repeats beyond one pass: the pads of the last rounds, no more
        assert sum(extra.values()) <= new + old, (old, new, extra)
        assert not (expected - seen), (old, new)
