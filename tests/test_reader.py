"""ShardReader against Python's tarfile and webdataset, over files, gzip and HTTP."""
from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import webdataset as wds

from gpudecode import Sample, ShardFormatError, ShardReader, ShardReadError
from gpudecode.io.shards import expand_urls

from conftest import make_shard, seeded_bytes


def as_pairs(samples):
    return [(s.key, dict(s.fields)) for s in samples]


def tarfile_pairs(path):
    """The reference: tarfile's regular members grouped by webdataset's key rule."""
    out: list = []
    with tarfile.open(path) as tf:
        for m in tf:
            if not m.isfile():
                continue
            base = m.name.rsplit("/", 1)[-1]
            if "." not in base or base.startswith("."):
                continue
            dot = m.name.index(".", len(m.name) - len(base))
            key, ext = m.name[:dot], m.name[dot + 1:].lower()
            data = tf.extractfile(m).read()
            if out and out[-1][0] == key:
                out[-1][1][ext] = data
            else:
                out.append((key, {ext: data}))
    return out


def wds_pairs(url):
    """webdataset's view of a shard (it leaves its file to the garbage collector: closed here)."""
    import gc
    import warnings

    ds = wds.WebDataset(url, shardshuffle=False, empty_check=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        out = [(s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}) for s in ds]
        gc.collect()
    return out


def sample_dicts(n, prefix="s"):
    return [{"__key__": f"{prefix}{i:04d}", "jpg": seeded_bytes(100 + 37 * i, prefix, i), "cls": str(i % 5).encode(),
             "json": b'{"label": %d}' % i} for i in range(n)]


def test_webdataset_writer_shard(tmp_path):
    path = make_shard(tmp_path / "a.tar", sample_dicts(50))
    ours = as_pairs(ShardReader(path))
    assert ours == tarfile_pairs(path) == wds_pairs(path)
    assert len(ours) == 50


def _tar_tree(tmp_path, names):
    root = tmp_path / "tree"
    for i, n in enumerate(names):
        p = root / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(seeded_bytes(10 + i, "file", i))
    return root


LONG = "d" * 60 + "/" + "e" * 70 + "/" + "sample_with_a_really_long_name_" + "x" * 80
NAMES = ["a/0001.jpg", "a/0001.cls", "a/0002.JPG", "a/0002.cls", f"{LONG}.jpg", f"{LONG}.cls",
         "b/ünï.cöde.png", "b/ünï.cöde.txt"]


def test_gnu_tar_long_names(tmp_path):
    root = _tar_tree(tmp_path, NAMES)
    out = tmp_path / "gnu.tar"
    subprocess.run(["tar", "--format=gnu", "-cf", str(out), "-C", str(root), *NAMES], check=True)
    ours = as_pairs(ShardReader(str(out)))
    assert ours == tarfile_pairs(out) == wds_pairs(str(out))
    assert ours[2][0] == LONG and ours[3][1].keys() == {"cöde.png", "cöde.txt"}


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_python_tarfile_formats(tmp_path, fmt):
    root = _tar_tree(tmp_path, NAMES)
    out = tmp_path / "py.tar"
    with tarfile.open(out, "w", format=fmt) as tf:
        for n in NAMES:
            tf.add(root / n, arcname=n)
        tf.add(root / "a", arcname="a_dir_entry", recursive=False)  # a directory member: passed over
    ours = as_pairs(ShardReader(str(out)))
    assert ours == tarfile_pairs(out) == wds_pairs(str(out))


def test_ustar_prefix_and_pax_size(tmp_path):
    # a 150-character path fits ustar only through its prefix field
    name = "p" * 90 + "/" + "q" * 50 + ".bin"
    out = tmp_path / "ustar.tar"
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    assert as_pairs(ShardReader(str(out))) == [(name[:-4], {"bin": b"abc"})] == tarfile_pairs(out)


def test_gzip_and_list_file_and_directory(tmp_path):
    (tmp_path / "d").mkdir()
    raw = make_shard(tmp_path / "d" / "x-000.tar", sample_dicts(7))
    gz = tmp_path / "d" / "x-001.tar.gz"
    gz.write_bytes(gzip.compress(Path(raw).read_bytes()))
    expected = tarfile_pairs(raw)
    assert as_pairs(ShardReader(str(gz))) == expected
    lst = tmp_path / "shards.txt"
    lst.write_text("# two shards\nd/x-000.tar\n\nd/x-001.tar.gz\n")
    assert as_pairs(ShardReader(str(lst))) == expected * 2
    assert as_pairs(ShardReader(str(tmp_path / "d"))) == expected * 2


def test_expand_patterns(tmp_path):
    assert expand_urls("s-{000..003}.tar") == [f"s-{i:03d}.tar" for i in range(4)]
    at = expand_urls("imagenet-@001000.tgz")
    assert len(at) == 1000 and at[0] == "imagenet-000000.tgz" and at[-1] == "imagenet-000999.tgz"
    assert expand_urls(["a.tar", "b-{1..2}.tar"]) == ["a.tar", "b-1.tar", "b-2.tar"]
    assert expand_urls("a.tar::b.tar") == ["a.tar", "b.tar"]
    assert expand_urls("http://h/x-{0..1}.tar") == ["http://h/x-0.tar", "http://h/x-1.tar"]


def test_http(tmp_path):
    """Python's own http.server (a plain static server, not ours), bound to a port the
    kernel picks (no bind-close-reuse race with other processes)."""
    import functools
    import http.server
    import threading

    make_shard(tmp_path / "web-0.tar", sample_dicts(20, "w"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        url = f"http://127.0.0.1:{port}/web-0.tar"
        assert as_pairs(ShardReader(url)) == tarfile_pairs(tmp_path / "web-0.tar")
        with pytest.raises(ShardReadError, match="missing.tar"):
            list(ShardReader(f"http://127.0.0.1:{port}/missing.tar"))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _many_shards(tmp_path, nshards=7, per=(3, 9)):
    urls, keys = [], []
    for j in range(nshards):
        n = per[0] + (j * 5) % (per[1] - per[0] + 1)
        ss = sample_dicts(n, prefix=f"sh{j}-")
        urls.append(make_shard(tmp_path / f"s-{j:03d}.tar", ss))
        keys += [s["__key__"] for s in ss]
    return urls, keys


@pytest.mark.parametrize("world_size,workers", [(1, 1), (2, 1), (3, 2), (2, 3), (7, 1)])
def test_rank_worker_split_covers_once(tmp_path, monkeypatch, world_size, workers):
    urls, keys = _many_shards(tmp_path)
    import torch.utils.data as tud

    seen = []
    for rank in range(world_size):
        for w in range(workers):
            monkeypatch.setattr(tud, "get_worker_info", lambda w=w: type("I", (), {"id": w, "num_workers": workers}))
            r = ShardReader(urls, shuffle=True, seed=3, buffer_size=10, rank=rank, world_size=world_size)
            r.set_epoch(2)
            seen += [s.key for s in r]
    assert sorted(seen) == sorted(keys)
    assert len(set(seen)) == len(seen)


def test_rank_from_environment(tmp_path, monkeypatch):
    urls, _ = _many_shards(tmp_path, 4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ShardReader(urls, even=None).shards_for(0) == [urls[1], urls[3]]
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert ShardReader(urls, even=None).shards_for(0) == [urls[0]]
    # another rank's shards, asked from this process: what that rank reads
    r = ShardReader(urls, even=None, rank=0, world_size=2)
    assert r.shards_for(0, rank=1) == ShardReader(urls, even=None, rank=1, world_size=2).shards_for(0)
    assert sorted(r.shards_for(0, rank=0) + r.shards_for(0, rank=1)) == sorted(urls)
    with pytest.raises(ValueError, match="rank 2 is outside world_size 2"):
        r.shards_for(0, rank=2)


def test_order_is_deterministic(tmp_path):
    urls, keys = _many_shards(tmp_path)
    def run(threads, epoch):
        r = ShardReader(urls, shuffle=True, seed=11, buffer_size=16, num_threads=threads)
        r.set_epoch(epoch)
        return [s.key for s in r]
    a = run(1, 0)
    assert a == run(4, 0) == run(2, 0)
    assert a != run(2, 1) and sorted(a) == sorted(run(2, 1)) == sorted(keys)
    assert [s.key for s in ShardReader(urls)] == keys  # no shuffle: shard order, member order


@pytest.mark.parametrize("even", ["pad", "drop"])
def test_even_counts(tmp_path, even):
    """Uneven shards, 3 ranks: every rank yields ceil(N/3) (pad: the union is everything)
    or floor(N/3) samples (drop: the last N mod 3 of the epoch are left out)."""
    urls, keys = _many_shards(tmp_path, 5)
    with pytest.warns(RuntimeWarning, match="even=None: the 3 ranks read unequal sample counts"):
        counts = [len(list(ShardReader(urls, rank=r, world_size=3, even=None))) for r in range(3)]
    assert len(set(counts)) > 1  # even=None, split by shard: the ranks are uneven (and were told)
    got = [[s.key for s in ShardReader(urls, rank=r, world_size=3, even=even)] for r in range(3)]
    n = len(keys)
    target = -(-n // 3) if even == "pad" else n // 3
    assert [len(g) for g in got] == [target] * 3
    flat = [k for g in got for k in g]
    if even == "pad":
        assert set(flat) == set(keys)
    else:
        assert flat == keys[:3 * (n // 3)]


def test_resume_start(tmp_path):
    urls, _ = _many_shards(tmp_path)
    r = ShardReader(urls, shuffle=True, seed=5)
    full = [s.key for s in r.iter_epoch(3)]
    assert [s.key for s in r.iter_epoch(3, start=17)] == full[17:]


# ---- bad input ---------------------------------------------------------------------------

def _good(tmp_path, name="good.tar", n=6):
    return make_shard(tmp_path / name, sample_dicts(n, prefix=name.split(".")[0]))


def test_truncated_tar(tmp_path):
    path = _good(tmp_path)
    data = Path(path).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(ShardFormatError, match="truncated") as ei:
        list(ShardReader(str(cut)))
    assert ei.value.shard == str(cut) and ei.value.offset is not None
    r = ShardReader([str(cut), path], on_error="skip")
    got = list(r)
    assert len(r.skipped) == 1 and r.skipped[0].shard == str(cut)
    assert [s.key for s in got[-6:]] == [k for k, _ in tarfile_pairs(path)]  # the next shard is whole
    # exactly the samples complete before the cut are kept (tarfile says where each member's
    # header lies: a sample is complete once a header of another key lies whole before the cut)
    cut_at = len(data) // 2 + 100
    with tarfile.open(path) as t:
        members = [(m.name.split(".", 1)[0], m.offset) for m in t.getmembers()]
    complete = []
    for i, (key, _) in enumerate(members):
        if key not in complete and any(k != key and off + 512 <= cut_at for k, off in members[i + 1:]):
            complete.append(key)
    assert 0 < len(complete) < 6
    assert [s.key for s in got[:-6]] == complete


def test_bad_checksum(tmp_path):
    data = bytearray(Path(_good(tmp_path)).read_bytes())
    hdrs = [i for i in range(0, len(data), 512) if data[i + 257:i + 262] == b"ustar"]
    data[hdrs[3] + 10] ^= 0x5A
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match="checksum") as ei:
        list(ShardReader(str(bad)))
    assert ei.value.offset == hdrs[3]


def test_not_a_tar_and_missing(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(seeded_bytes(5000, "junk"))
    with pytest.raises(ShardFormatError, match="junk.tar"):
        list(ShardReader(str(junk)))
    with pytest.raises(ShardReadError, match="nope.tar"):
        list(ShardReader(str(tmp_path / "nope.tar")))
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(ShardFormatError, match="empty"):
        list(ShardReader(str(empty)))
    good = _good(tmp_path)
    # a missing shard is a wrong path, not damaged data: refused when the reader is made,
    # whatever the policy, naming what is missing
    with pytest.raises(ShardReadError, match="1 of 3 shards does not exist: .*nope.tar"):
        ShardReader([str(junk), str(tmp_path / "nope.tar"), good], on_error="warn")
    r = ShardReader([str(junk), str(empty), good], on_error="warn")
    with pytest.warns(RuntimeWarning, match="skipped"):
        got = list(r)
    assert len(got) == 6 and [s.error for s in r.skipped] == ["ShardFormatError", "ShardFormatError"]


def test_repeated_extension(tmp_path):
    out = tmp_path / "dup.tar"
    with tarfile.open(out, "w") as tf:
        for name, data in [("k1.jpg", b"a"), ("k1.cls", b"1"), ("k2.jpg", b"b"), ("k2.JPG", b"c"),
                           ("k3.jpg", b"d")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with pytest.raises(ShardFormatError, match="repeated extension 'jpg'") as ei:
        list(ShardReader(str(out)))
    assert ei.value.key == "k2"
    r = ShardReader(str(out), on_error="skip")
    assert [s.key for s in r] == ["k1", "k3"]
    assert [(s.key, s.error) for s in r.skipped] == [("k2", "ShardFormatError")]


def test_truncated_gzip(tmp_path):
    data = gzip.compress(Path(_good(tmp_path)).read_bytes())
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises((ShardReadError, ShardFormatError), match="cut.tgz"):
        list(ShardReader(str(cut)))


def test_early_stop_releases_threads(tmp_path):
    import threading

    urls, _ = _many_shards(tmp_path)
    def readers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("gpudecode-reader-") and t.is_alive()]

    assert readers() == []
    for _ in range(5):
        it = iter(ShardReader(urls, num_threads=3))
        next(it)  # (its reader threads may or may not have finished their shards by now)
        it.close()  # joins whatever still runs
        assert readers() == []  # the threads this test is about, by name: not whatever else runs


def test_samples_have_shard_and_index(tmp_path):
    path = _good(tmp_path, n=4)
    got = list(ShardReader(path))
    assert [s.index for s in got] == [0, 1, 2, 3] and all(s.shard == path for s in got)
    assert isinstance(got[0], Sample)


def test_extension_filter(tmp_path):
    path = _good(tmp_path, n=3)
    got = list(ShardReader(path, extensions=["cls"]))
    assert all(set(s.fields) == {"cls"} for s in got)


def test_huge_patterns_are_refused_before_expanding():
    """A pattern naming more than MAX_SHARDS shards is refused at once (it used to build
    the whole list); the bound used for that is never below braceexpand's own count."""
    import braceexpand

    from gpudecode.io.shards import MAX_SHARDS, _count_bound

    for spec in ["a{0..9}b{x,y}", "{a..e}{1..3..2}", "{a,{1..3}}", "x{i..33}", "plain", "{0..-5}",
                 "{00..10}-{a,b,c}", "{a,b}{c,{d,e}}{1..4}", "s-{000..099}.tar::t-{0..9}.tar"]:
        for part in spec.split("::"):
            assert _count_bound(part) >= len(list(braceexpand.braceexpand(part)))
    t = time.monotonic()
    for spec in ["train-{000000000..999999999}.tar", "x-@99999999.tar", "{0..1000}{0..1000}", "{0..99999999999999999999}"]:
        with pytest.raises(ValueError, match=str(MAX_SHARDS)):
            expand_urls(spec)
    # a watchdog, not a speed test: expanding any of these would take minutes or memory
    assert time.monotonic() - t < 30


def test_shuffle_buffer_starts_before_it_is_full():
    """The buffer gives out its first sample once it holds `initial` of them (webdataset's
    convention) and fills to `size` on the way, two in for each out: nothing is lost or
    repeated, and the order is fixed by the generator."""
    import random

    from gpudecode.io.reader import _shuffled

    pulled = []

    def source(n):
        for i in range(n):
            pulled.append(i)
            yield i

    it = _shuffled(source(1000), 200, random.Random(5), initial=20)
    first = next(it)
    assert len(pulled) == 20 and 0 <= first < 20  # the first came after 20 samples, not 200
    rest = list(it)
    assert sorted([first, *rest]) == list(range(1000))
    again = list(_shuffled(iter(range(1000)), 200, random.Random(5), initial=20))
    assert again == [first, *rest]
    # shorter than `initial`, and a buffer smaller than `initial`: everything, once
    assert sorted(_shuffled(iter(range(7)), 200, random.Random(1), initial=20)) == list(range(7))
    assert sorted(_shuffled(iter(range(50)), 5, random.Random(1), initial=20)) == list(range(50))
    # it does mix: the first 100 out are not the first 100 in
    assert [first, *rest][:100] != list(range(100))


@pytest.mark.parametrize("seed", range(12))
def test_the_native_shuffle_order_is_the_shuffle_buffers_own(seed):
    """planner.shuffle_order (csrc/shuffle.h: CPython's MT19937 continued from the
    Random's state, its _randbelow and random.shuffle's draws) gives 0..n-1 in exactly
    the order _shuffled gives them, whatever n, buffer size and initial fill (edges:
    empty, one sample, a buffer of 1, buffers larger than the epoch, 2**k lengths where
    _randbelow redraws most); the Random passed in is left as it was."""
    import random

    from gpudecode.io.planner import _shuffled, shuffle_order

    pick = random.Random(seed)
    for n in (0, 1, 2, 255, 256, 257, pick.randrange(3000)):
        for size in (1, 2, 64, 100, 1000, 5000, pick.randrange(1, 2000)):
            initial = pick.choice([1, 20, 100, 2000])
            rng = random.Random(f"epoch:{seed}:{n}:{size}")
            rng.random()  # (a state mid-block, not just seeded)
            before = rng.getstate()
            got = shuffle_order(n, size, rng, initial)
            assert rng.getstate() == before
            assert got.tolist() == list(_shuffled(iter(range(n)), size, rng, initial)), (n, size, initial)


def test_a_shuffle_buffer_of_2_to_the_32_takes_the_python_path():
    import random

    from gpudecode.io.planner import _shuffled, shuffle_order

    got = shuffle_order(50, 1 << 32, random.Random(3))
    assert got.tolist() == list(_shuffled(iter(range(50)), 1 << 32, random.Random(3)))


def test_globs_and_printf_patterns_name_shards(tmp_path):
    """The shapes users type: a glob, the `%06d` pattern `gpudecode shard` takes, both in
    a list file too; what they match equals the brace pattern's list (tarfile reads the
    same keys); a pattern matching nothing is an error naming it."""
    urls, keys = _many_shards(tmp_path, 4)
    (tmp_path / "notes.txt.bak").write_text("x")
    names = sorted(os.path.basename(u) for u in urls)
    braces = expand_urls(str(tmp_path / "s-{000..003}.tar"))
    assert [os.path.basename(u) for u in expand_urls(str(tmp_path / "*.tar"))] == names
    printf = expand_urls(str(tmp_path / "s-%03d.tar"))
    assert printf == braces == sorted(urls)
    with open(tmp_path / "list.txt", "w") as f:
        f.write("s-*.tar\n")
    assert expand_urls(str(tmp_path / "list.txt")) == sorted(urls)
    import tarfile
    got = [s.key for s in ShardReader(str(tmp_path / "s-%d.tar"))]
    want = []
    for u in sorted(urls):
        with tarfile.open(u) as t:
            want += list(dict.fromkeys(m.name.split(".", 1)[0] for m in t.getmembers()))
    assert got == want and sorted(got) == sorted(keys)
    with pytest.raises(ShardReadError, match="the pattern matches no file"):
        ShardReader(str(tmp_path / "train-%06d.tar"))
    with pytest.raises(ShardReadError, match="the pattern matches no file"):
        ShardReader(str(tmp_path / "nothing-*.tar"))
    # numbers in order, not as text: 2 before 10, and %06d wants at least 6 digits
    for n in (2, 10):
        shutil.copy(urls[0], tmp_path / f"w-{n:06d}.tar")
    shutil.copy(urls[0], tmp_path / "w-7.tar")
    with pytest.warns(RuntimeWarning, match=r"numbers 2\.\.10 lack 3, 4, 5, 6, 7 and 2 more"):  # (a gap is said)
        got = expand_urls(str(tmp_path / "w-%06d.tar"))
    assert [os.path.basename(u) for u in got] == ["w-000002.tar", "w-000010.tar"]
    assert expand_urls("https://host/a%2d?x=*") == ["https://host/a%2d?x=*"]


def test_counts_follow_a_replaced_shard(tmp_path):
    """A shard replaced after it was counted: the next epoch counts it again (size or
    time changed), so len() and the split follow the data; tarfile says what is there."""
    import tarfile

    urls, _ = _many_shards(tmp_path, 3)
    r = ShardReader(urls, rank=0, world_size=1)
    before = r.total_samples
    extra = make_shard(tmp_path / "bigger.tar", sample_dicts(40, prefix="new-"))
    os.replace(extra, urls[1])
    assert r.total_samples == before  # the epoch that counted keeps its count
    r.set_epoch(1)
    with tarfile.open(urls[1]) as t:
        in_shard = len({m.name.split(".")[0] for m in t.getmembers()})
    assert in_shard == 40
    assert r.sample_counts()[urls[1]] == 40 and len(list(r)) == r.total_samples


def test_a_sample_repeated_in_a_shard_is_named(tmp_path):
    """The same key again after other samples (a complete sample written twice): under
    raise a ShardFormatError naming the key and both positions; under skip the first is
    delivered, the repeat listed in skipped. (It used to be delivered twice unsaid.)"""
    import tarfile

    from gpudecode import ShardFormatError

    ss = sample_dicts(3, prefix="d")
    shard = make_shard(tmp_path / "dup.tar", ss + [ss[0]])
    with tarfile.open(shard) as t:  # tarfile: four samples' members are there
        assert [m.name for m in t.getmembers()].count(f"{ss[0]['__key__']}.cls") == 2
    with pytest.raises(ShardFormatError, match=r"appears a second time in the shard \(sample 3; the first was "
                                               r"sample 0\)") as e:
        list(ShardReader(shard))
    assert e.value.key == ss[0]["__key__"]
    r = ShardReader(shard, on_error="skip")
    assert [s.key for s in r] == [s["__key__"] for s in ss]
    assert [(s.key, s.error) for s in r.skipped] == [(ss[0]["__key__"], "ShardFormatError")]


def test_a_path_too_long_for_the_file_system_is_a_shard_read_error():
    """Found by the shard_list fuzzer: a name over the file system's 255 bytes made
    `Path.is_dir()` raise a bare OSError (ENAMETOOLONG)."""
    from gpudecode import ShardReadError
    from gpudecode.io.shards import expand_urls

    long = "x" * 300 + ".tar"
    with pytest.raises(ShardReadError, match="File name too long") as e:
        expand_urls(long)
    assert e.value.shard == long


def test_a_remote_pattern_whose_backend_is_missing_is_a_shard_read_error(tmp_path):
    """Found by the shard_list fuzzer: a glob over s3:// without s3fs installed escaped as
    fsspec's bare ImportError ("Install s3fs to access S3"); an unknown protocol as its
    ValueError. Both are ShardReadErrors naming the pattern, fsspec's error as the cause;
    an fsspec file system that is there (memory://) lists its files."""
    import fsspec

    from gpudecode import ShardReadError
    from gpudecode.io.shards import expand_urls

    with pytest.raises(ShardReadError, match=r"cannot list the files the pattern names: ValueError: Protocol not "
                                             r"known: nosuch") as e:
        expand_urls("nosuch://bucket/train-*.tar")
    assert e.value.shard == "nosuch://bucket/train-*.tar" and isinstance(e.value.__cause__, ValueError)
    try:
        import s3fs  # noqa: F401
    except ImportError:
        with pytest.raises(ShardReadError, match=r"ImportError: Install s3fs to access S3") as e:
            expand_urls("s3://bucket/xt/x-{000..001}-*.tar")
        assert e.value.shard == "s3://bucket/xt/x-000-*.tar" and isinstance(e.value.__cause__, ImportError)
    # every file a remote glob matches (it gave the first alone: fsspec's get_fs_token_paths globbed it
    # already, and the first of its matches was globbed again), in the pattern's spelling
    fs = fsspec.filesystem("memory")
    urls, keys = _many_shards(tmp_path, 2)
    for name, local in zip(("b-0.tar", "b-1.tar", "c-0.tar", "d-000002.tar", "d-000010.tar", "d-7.tar"), urls * 3):
        fs.pipe(f"/listing/{name}", Path(local).read_bytes())
    try:
        assert expand_urls("memory://listing/b-*.tar") == ["memory://listing/b-0.tar", "memory://listing/b-1.tar"]
        assert expand_urls("memory:///listing/b-*.tar") == ["memory:///listing/b-0.tar", "memory:///listing/b-1.tar"]
        with pytest.warns(RuntimeWarning, match=r"numbers 2\.\.10 lack 3, 4, 5, 6, 7 and 2 more"):
            assert expand_urls("memory://listing/d-%06d.tar") == ["memory://listing/d-000002.tar",
                                                                  "memory://listing/d-000010.tar"]
        assert [s.key for s in ShardReader("memory://listing/b-*.tar")] == keys  # (both shards read)
    finally:
        fs.rm("/listing", recursive=True)


def test_a_remote_folder_and_list_file_name_their_shards_as_local_ones_do(tmp_path):
    """A folder or a list file on an fsspec file system (memory:// here; s3://, gs://) names
    the shards a local one does (they failed as shards: "cannot open shard"); the samples
    read through them are tarfile's; a folder of two gpudecode sets is refused as locally."""
    import fsspec

    from gpudecode import ShardReadError
    from gpudecode.io.shards import expand_urls

    urls, keys = _many_shards(tmp_path, 3)
    (tmp_path / "list.txt").write_text("# two of them\ns-000.tar\n\n" + urls[2] + "\n")
    fs = fsspec.filesystem("memory")
    for u in urls:
        fs.pipe(f"/rf/{os.path.basename(u)}", Path(u).read_bytes())
    fs.pipe("/rf/notes.txt.bak", b"x")
    fs.pipe("/rf/list.txt", b"\xef\xbb\xbf# two of them\ns-000.tar\n\nmemory://rf/s-002.tar\n")
    fs.pipe("/rf/lists.txt", b"list.txt\nmemory://rf/s-001.tar\n")
    fs.pipe("/rf/loop.txt", b"s-000.tar\nloop.txt\n")
    fs.pipe("/empty/notes.md", b"x")
    fs.pipe("/two/train-000000.tar", b"x")
    fs.pipe("/two/train-classes.json", b"{}")
    fs.pipe("/two/val-000000.tar", b"x")
    fs.pipe("/two/val-classes.json", b"{}")
    try:
        names = [os.path.basename(u) for u in expand_urls(str(tmp_path))]
        for folder in ("memory://rf", "memory://rf/"):
            assert expand_urls(folder) == [f"memory://rf/{n}" for n in names], folder
            assert [smp.key for smp in ShardReader(folder)] == keys
        listed = expand_urls("memory://rf/list.txt")
        assert [os.path.basename(u) for u in listed] == [os.path.basename(u) for u in expand_urls(str(tmp_path / "list.txt"))]
        assert listed == ["memory://rf/s-000.tar", "memory://rf/s-002.tar"]
        assert expand_urls("memory://rf/lists.txt") == listed + ["memory://rf/s-001.tar"]
        with pytest.raises(ValueError, match="includes itself"):
            expand_urls("memory://rf/loop.txt")
        with pytest.raises(ShardReadError, match="the folder holds no .tar/.tgz/.tar.gz shards") as e:
            expand_urls("memory://empty/")
        assert e.value.shard == "memory://empty/"
        with pytest.raises(ShardReadError, match=r"holds 2 sets of shards written by gpudecode shard \(train-\*: 1, "
                                                 r"val-\*: 1\): name one, e.g. memory://two/train-%06d.tar"):
            expand_urls("memory://two")
        with pytest.raises(ShardReadError, match="cannot read the list: FileNotFoundError"):
            expand_urls("memory://rf/missing.txt")
        fs.pipe("/rf/images.txt", b"# a file list\nimg/a.jpg 3\nimg/b.png 1\n")  # (read locally, a file list)
        for files in (None, {}):
            with pytest.raises(ShardReadError, match=r"the list names image files .*: remote file lists are not read"):
                expand_urls("memory://rf/images.txt", files=files)
        assert expand_urls("memory://rf/s-009.tar") == ["memory://rf/s-009.tar"]  # (a shard: no request)
        # read shuffled through a glob and a local cache, two epochs: the local folder's samples, byte for byte
        cache = tmp_path / "cache"
        for epoch in (0, 1):
            got, want = (ShardReader(u, shuffle=True, seed=5, cache_dir=c) for u, c in
                         (("memory://rf/s-*.tar", cache), (str(tmp_path), None)))
            got.set_epoch(epoch)
            want.set_epoch(epoch)
            assert as_pairs(got) == as_pairs(want) and sorted(smp.key for smp in got) == sorted(keys)
        assert len([p for p in cache.rglob("*") if p.is_file() and p.name.endswith(".tar")]) == 3
    finally:
        for d in ("/rf", "/empty", "/two"):
            fs.rm(d, recursive=True)


def test_a_pattern_field_of_absurd_width_is_a_value_error():
    """Found by the shard_list fuzzer: `%0111...1d` (a width of dozens of digits) overflowed
    the regular expression built from it (a bare OverflowError); writing refuses it too."""
    from gpudecode.io.shards import expand_urls
    from gpudecode.io.writer import format_pattern

    with pytest.raises(ValueError, match="digits"):
        expand_urls("/tmp/nowhere/train-%0" + "1" * 40 + "d.tar")
    with pytest.raises(ValueError, match="100 digits or more"):
        format_pattern("out/train-%0999999999d.tar", 0)
    assert format_pattern("out/train-%06d.tar", 7) == "out/train-000007.tar"
    assert format_pattern("out/train-{:06d}.tar", 7) == "out/train-000007.tar"


def test_a_reader_goes_to_spawned_dataloader_workers(tmp_path):
    """DataLoader with the spawn start method pickles the dataset: a ShardReader (with a
    node cache, whose lock and shard mappings stay in the parent) is picklable, and its
    workers split the shards and deliver every sample once."""
    import pickle

    import torch

    from gpudecode import ShardReader

    shards = [make_shard(tmp_path / f"w{j}.tar", [{"__key__": f"k{j}{i:02d}", "jpg": b"x" * (i + 1), "cls": b"1"}
                                                  for i in range(6)]) for j in range(4)]
    reader = ShardReader(shards, shuffle=False, cache_dir=tmp_path / "cache")
    again = pickle.loads(pickle.dumps(reader))
    assert sorted(s.key for s in again) == sorted(s.key for s in reader)
    dl = torch.utils.data.DataLoader(reader, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    keys = [s.key for s in dl]
    assert sorted(keys) == sorted(f"k{j}{i:02d}" for j in range(4) for i in range(6))
