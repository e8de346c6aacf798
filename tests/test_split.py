"""The split decoder (gpudecode.decode.split): each batch's images among several engines
at once, joined in batch order.

On this CPU machine its engines are CPU decoders: the exact one, the fast-IDCT one (whose
pixels differ, so each image tells which engine decoded it), nvImageCodec's CPU build,
and engines slowed on purpose by a known cost a pixel (so adaptivity is tested against a
known answer). The GPU engines run the same code on a GPU (make gpu-check)."""
from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch

from conftest import cpu_built_decoder, decoded_image, encode, make_shard
from gpudecode import Loader
from gpudecode import transforms as T
from gpudecode.decode import Request, Requests, check_spec, make_decoder
from gpudecode.decode.cpu import CpuDecoder
from gpudecode.decode.split import OVERHEAD_PIXELS, Engine, SplitDecoder
from gpudecode.errors import Cancelled, DecodeError


def _requests(photos, n: int, seed: int = 0, bad: tuple[int, ...] = ()) -> list[Request]:
    """n requests over the photographs (JPEG at two subsamplings, PNG), each a random box;
    the images at `bad` are cut short (their decoders' errors)."""
    rng = np.random.default_rng(seed)
    names = sorted(photos)
    out = []
    for k in range(n):
        img = photos[names[k % len(names)]]
        img = img[: 64 + 16 * (k % 5), : 80 + 8 * (k % 7)]
        fmt = "png" if k % 4 == 3 else "jpeg"
        data = encode(img, "PNG") if fmt == "png" else encode(img, "JPEG", quality=85 + k % 10,
                                                              subsampling=k % 3)
        if k in bad:
            data = data[: len(data) // 3]
        h, w = img.shape[:2]
        bh, bw = int(rng.integers(8, h + 1)), int(rng.integers(8, w + 1))
        t, l = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
        out.append(Request(data, fmt, h, w, (t, l, bh, bw), "shard-0.tar", f"{k:06d}"))
    return out


def _alone(decoder, r: Request) -> tuple[np.ndarray | None, str | None]:
    got = decoder.decode([r]).settle()
    return (decoded_image(got, 0), None) if got.errors[0] is None else (None, got.errors[0])


class Paced:
    """A CPU decoder that also takes `ns_per_unit` nanoseconds per cost unit of what it is
    given (its window's pixels + OVERHEAD_PIXELS an image): an engine of known speed."""

    def __init__(self, ns_per_unit: float, name: str) -> None:
        self.inner = CpuDecoder(num_threads=1)
        self.ns = ns_per_unit
        self.name = name
        self.device = "cpu"
        self.backend = f"paced CPU decoder ({ns_per_unit} ns a unit)"
        self.buffers = self.inner.buffers
        self.calls = 0

    def decode(self, requests):
        rq = Requests.of(requests)
        boxes = np.asarray(rq.boxes, np.int64).reshape(-1, 4)
        units = float((boxes[:, 2] * boxes[:, 3] + OVERHEAD_PIXELS).sum())
        end = time.perf_counter() + units * self.ns * 1e-9
        out = self.inner.decode(rq)
        self.calls += 1
        time.sleep(max(0.0, end - time.perf_counter()))
        return out

    def close(self):
        self.inner.close()


class Broken:
    name, device, backend, buffers = "broken", "cpu", "a decoder that always fails", 3

    def decode(self, requests):
        raise RuntimeError("the device fell off the bus")

    def close(self):
        pass


def test_every_image_is_its_engines_own_decode_in_batch_order(photos):
    exact, fast = CpuDecoder(num_threads=1), CpuDecoder(num_threads=1, fast=True)
    split = SplitDecoder([Engine(CpuDecoder(num_threads=1), name="exact"),
                          Engine(CpuDecoder(num_threads=1, fast=True), name="fast")])
    seen = set()
    differ = 0
    for batch in range(4):  # the rates move between batches, and with them the assignment
        reqs = _requests(photos, 24, seed=batch, bad=(5, 17))
        got = split.decode(reqs).settle()
        assert len(got.errors) == len(reqs)
        for k, r in enumerate(reqs):
            engine = int(split.last_assignment[k])
            seen.add(engine)
            want, err = _alone(exact if engine == 0 else fast, r)
            if k in (5, 17):
                assert err is not None and got.errors[k] == err  # its own error, at its own place
                continue
            assert got.errors[k] is None
            img = decoded_image(got, k)
            assert np.array_equal(img, want), (batch, k, engine)
            other, _ = _alone(fast if engine == 0 else exact, r)
            differ += not np.array_equal(img, other)
    assert seen == {0, 1}
    assert differ > 0  # the engines' pixels differ: an image from the wrong engine would have been seen
    split.close()


def test_a_gpu_library_engine_and_the_cpu_decoder_in_one_batch(photos):
    nv = cpu_built_decoder("nvimgcodec")
    exact = CpuDecoder(num_threads=1)
    split = SplitDecoder([Engine(make_decoder("nvimgcodec", device="cpu", num_threads=1, max_pixels=0),
                                 name="nvimgcodec"), Engine(CpuDecoder(num_threads=1), name="cpu")],
                         shares={"nvimgcodec": 1, "cpu": 1})
    reqs = _requests(photos, 16, seed=3)
    got = split.decode(reqs).settle()
    assert sorted(set(split.last_assignment.tolist())) == [0, 1]
    for k, r in enumerate(reqs):
        want, err = _alone(nv if split.last_assignment[k] == 0 else exact, r)
        assert err is None and got.errors[k] is None
        assert np.array_equal(decoded_image(got, k), want)
    split.close()
    nv.close()


def test_an_engine_three_times_slower_gets_a_quarter_and_no_engine_idles(photos):
    fast, slow = Paced(100, "fast"), Paced(300, "slow")
    split = SplitDecoder([fast, slow])
    reqs = _requests(photos, 48, seed=1)
    shares, idle = [], []
    for _ in range(7):
        got = split.decode(reqs).settle()
        assert got.errors.count(None) == len(reqs)
        shares.append(float(np.mean(split.last_assignment == 1)))
        (_, s0, span), (_, s1, _) = got.engines["fast"], got.engines["slow"]
        idle.append(1 - min(s0, s1) / span)
    # the first batch splits evenly (nothing measured yet); then a quarter of the images
    assert shares[0] == pytest.approx(0.5, abs=0.1)
    assert all(0.15 <= s <= 0.35 for s in shares[3:]), shares
    assert max(idle[3:]) < 0.35, idle  # each engine busy for most of every batch's decode
    stats = split.engine_stats()
    assert stats["slow"]["rate_units_per_s"] == pytest.approx(stats["fast"]["rate_units_per_s"] / 3, rel=0.3)
    split.close()


def test_pinned_shares_give_exact_counts_and_the_same_assignment_every_run(photos):
    reqs = _requests(photos, 40, seed=2)

    def run():
        split = SplitDecoder([Paced(0, "a"), Paced(0, "b"), Paced(0, "c")], shares={"a": 0.5, "b": 0.25, "c": 0.25})
        got = split.decode(reqs).settle()
        assert got.errors.count(None) == len(reqs)
        out = split.last_assignment.copy()
        split.close()
        return out

    first, second = run(), run()
    assert np.array_equal(first, second)
    assert np.bincount(first).tolist() == [20, 10, 10]


def test_an_engine_left_out_by_its_share_decodes_nothing(photos):
    a, b = Paced(0, "a"), Paced(0, "b")
    split = SplitDecoder([a, b], shares={"a": 1.0, "b": 0.0})
    split.decode(_requests(photos, 8)).settle()
    assert b.calls == 0 and a.calls == 1
    split.close()


def test_an_engine_takes_only_its_formats(photos):
    jpeg_only = Engine(Paced(0, "hw"), formats=("jpeg",))
    split = SplitDecoder([jpeg_only, Paced(0, "cpu")], shares={"hw": 0.9, "cpu": 0.1})
    reqs = _requests(photos, 16)
    got = split.decode(reqs).settle()
    assert got.errors.count(None) == len(reqs)
    for k, r in enumerate(reqs):
        if r.format != "jpeg":
            assert split.last_assignment[k] == 1
    assert (split.last_assignment == 0).any()
    split.close()


class Contended(Paced):
    """A Paced decoder that holds `lock` while it works: engines sharing one lock cannot
    work at once (as the H200's engines slowed each other down), so a split of them is
    slower than its fastest engine alone."""

    def __init__(self, ns_per_unit: float, name: str, lock) -> None:
        super().__init__(ns_per_unit, name)
        self.lock = lock

    def decode(self, requests):
        with self.lock:
            return super().decode(requests)


def _tuned_run(split, reqs, batches):
    for _ in range(batches):
        got = split.decode(reqs).settle()
        assert got.errors.count(None) == len(reqs)
    return split.tuning()


def test_tuning_keeps_the_fastest_engine_alone_when_engines_slow_each_other(photos):
    import threading

    lock = threading.Lock()
    split = SplitDecoder([Contended(100, "fast", lock), Contended(400, "slow", lock)], tune=True)
    reqs = _requests(photos, 16, seed=4)
    t = _tuned_run(split, reqs, 3 * 3 + 2)  # the tournament of 3 subsets, 3 batches each, then 2
    assert t["using"] == "fast" and t["measuring"] is None, t
    assert set(t["measured_images_per_s"]) == {"fast", "slow", "fast+slow"}
    assert t["measured_images_per_s"]["fast"] > t["measured_images_per_s"]["fast+slow"], t
    assert (split.last_assignment == 0).all()  # every image to the fast engine now
    stats = split.engine_stats()
    assert stats["slow"]["idle_s"] < stats["fast"]["busy_s"]  # (left out is not counted as waiting)
    split.close()


def test_tuning_keeps_every_engine_when_they_work_at_once(photos):
    split = SplitDecoder([Paced(100, "a"), Paced(100, "b")], tune=True)
    reqs = _requests(photos, 24, seed=5)
    t = _tuned_run(split, reqs, 3 * 3 + 1)
    assert t["using"] == "a+b", t
    assert sorted(set(split.last_assignment.tolist())) == [0, 1]
    split.close()


def test_tuning_measures_the_best_others_again_and_follows_a_change(photos):
    import threading

    lock = threading.Lock()
    fast, slow = Contended(100, "fast", lock), Contended(400, "slow", lock)
    split = SplitDecoder([fast, slow], tune=True, trial=2, retune=3)
    reqs = _requests(photos, 16, seed=6)
    assert _tuned_run(split, reqs, 3 * 2)["using"] == "fast"
    fast.ns, slow.ns = 800, 50  # the machine changes: the other engine is now the fast one
    seen = []
    for _ in range(16):
        split.decode(reqs).settle()
        seen.append(split.tuning()["using"])
    assert seen[-1] == "slow", seen
    split.close()


def test_tuning_sends_a_format_its_engines_refuse_to_one_that_takes_it(photos):
    import threading

    lock = threading.Lock()
    hw = Engine(Contended(50, "hw", lock), formats=("jpeg",))
    split = SplitDecoder([hw, Contended(400, "cpu", lock)], tune=True)
    jpegs = [r for r in _requests(photos, 24, seed=7) if r.format == "jpeg"][:12]
    assert _tuned_run(split, jpegs, 3 * 3 + 1)["using"] == "hw"
    mixed = _requests(photos, 16, seed=8)
    got = split.decode(mixed).settle()
    assert got.errors.count(None) == len(mixed)  # the PNGs were decoded, by the CPU engine
    for k, r in enumerate(mixed):
        assert split.last_assignment[k] == (1 if r.format == "png" else 0), k
    split.close()


def test_tuning_drops_an_engine_that_fails_and_measures_the_rest_again(photos):
    split = SplitDecoder([Paced(0, "a"), Paced(0, "b"), Broken()], tune=True, trial=2)
    reqs = _requests(photos, 12, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the broken engine's warning)
        t = _tuned_run(split, reqs, 3 * 2 + 2)
    assert "broken" not in (t["using"] or "") and t["using"] is not None, t
    assert all("broken" not in k for k in t["measured_images_per_s"]), t
    split.close()


def test_pinned_shares_and_engine_tuples_are_not_tuned(photos, tmp_path):
    assert SplitDecoder([Paced(0, "a"), Paced(0, "b")], shares={"a": 1, "b": 1}, tune=True).tuning() is None
    dec = make_decoder(("cpu", "nvimgcodec"), device="cpu", num_threads=1, max_pixels=0)
    assert dec.tuning() is None
    dec.close()
    for bad in (dict(trial=1), dict(retune=0), dict(trial=2.5), dict(retune=True)):
        with pytest.raises(ValueError, match="trial|retune"):
            SplitDecoder([Paced(0, "a")], **bad)


def test_a_slow_engine_still_gets_an_image_a_batch(photos):
    split = SplitDecoder([Paced(10, "fast"), Paced(2000, "slow")])
    reqs = _requests(photos, 12)
    for _ in range(3):
        split.decode(reqs)
        assert (split.last_assignment == 1).sum() >= 1  # measured again every batch
    split.close()


def test_an_engine_that_fails_as_a_whole_hands_its_images_to_the_others(photos):
    exact = CpuDecoder(num_threads=1)
    split = SplitDecoder([Broken(), Engine(CpuDecoder(num_threads=1), name="cpu")], shares={"broken": 1, "cpu": 1})
    reqs = _requests(photos, 10, bad=(4,))
    with pytest.warns(RuntimeWarning, match="engine 'broken' failed .*the device fell off the bus"):
        got = split.decode(reqs).settle()
    for k, r in enumerate(reqs):  # nothing lost: every image decoded (or its own error), in order
        want, err = _alone(exact, r)
        assert got.errors[k] == err
        if err is None:
            assert np.array_equal(decoded_image(got, k), want)
    assert "left out: RuntimeError" in split.backend
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: later batches go to the others without a word
        split.decode(reqs).settle()
    assert set(split.last_assignment.tolist()) == {1}
    split.close()


def test_when_every_engine_fails_each_image_says_why(photos):
    split = SplitDecoder([Broken()])
    with pytest.warns(RuntimeWarning):
        got = split.decode(_requests(photos, 3)).settle()
    assert all(e is not None and "the device fell off the bus" in e for e in got.errors)
    with pytest.raises(RuntimeError, match="every engine of the split decoder failed"):
        split.decode(_requests(photos, 3))


def test_interrupt_cancels_and_resume_decodes_again(photos):
    split = SplitDecoder([CpuDecoder(num_threads=1), Engine(CpuDecoder(num_threads=1), name="cpu2")])
    split.interrupt()
    with pytest.raises(Cancelled):
        split.decode(_requests(photos, 4))
    split.resume()
    assert split.decode(_requests(photos, 4)).settle().errors.count(None) == 4
    split.close()


@pytest.mark.parametrize("spec, message", [
    (("cpu", "nope"), "engines are named from"),
    (("cpu", "cpu"), "names each engine once"),
    ((), "at least one engine"),
    (("nvimgcodec-hw", "cpu"), "decodes on a GPU"),
    ({"cpu": -1}, "finite number >= 0"),
    ({"cpu": float("nan")}, "finite number >= 0"),
    ({"cpu": 0}, "above 0"),
    ("nope", "unknown decoder 'nope'"),
])
def test_a_wrong_split_is_refused_when_the_loader_is_made(tmp_path, photos, spec, message):
    shard = make_shard(tmp_path / "s.tar", [{"__key__": "a", "jpg": encode(photos["coffee"]), "cls": b"1"}])
    with pytest.raises(ValueError, match=message):
        check_spec(spec, "cpu")
    with pytest.raises(ValueError, match=message):
        Loader(shard, batch_size=1, transform=T.Compose([T.CenterCrop(32)]), device="cpu", decoder=spec)


def test_split_decoder_arguments_are_checked():
    with pytest.raises(ValueError, match="at least one engine"):
        SplitDecoder([])
    with pytest.raises(ValueError, match="names must differ"):
        SplitDecoder([CpuDecoder(num_threads=1), CpuDecoder(num_threads=1)])
    with pytest.raises(ValueError, match="not an engine of this split"):
        SplitDecoder([CpuDecoder(num_threads=1)], shares={"gpu": 1})
    with pytest.raises(ValueError, match="smoothing"):
        SplitDecoder([CpuDecoder(num_threads=1)], smoothing=0)


def _shard(tmp_path, photos, n: int, bad: tuple[int, ...] = ()) -> str:
    names = sorted(photos)
    samples = []
    for k in range(n):
        img = photos[names[k % len(names)]][: 96 + 8 * (k % 4), : 112 + 4 * (k % 6)]
        data = encode(img, "PNG") if k % 5 == 4 else encode(img, quality=90)
        if k in bad:
            data = data[:200]
        samples.append({"__key__": f"{k:05d}", "png" if k % 5 == 4 else "jpg": data, "cls": str(k % 3).encode()})
    return make_shard(tmp_path / "train-0.tar", samples)


def _batches(loader) -> list:
    return [(b.images.clone(), b.labels.clone(), list(b.keys)) for b in loader]


def test_the_loader_on_a_split_gives_the_cpu_decoders_batches_bit_for_bit(tmp_path, photos):
    shard = _shard(tmp_path, photos, 40)
    tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    kw = dict(batch_size=8, transform=tf, device="cpu", num_workers=1, seed=5)
    with Loader(shard, decoder="cpu", **kw) as ref:
        want = _batches(ref)
    split = SplitDecoder([CpuDecoder(num_threads=1), Engine(CpuDecoder(num_threads=1), name="cpu2")])
    with Loader(shard, decoder=split, **kw) as ld:
        got = _batches(ld)
        summary = ld.stats.summary()
        described = ld.describe()
    assert len(got) == len(want) == 5
    for (gi, gl, gk), (wi, wl, wk) in zip(got, want):
        assert gk == wk and torch.equal(gl, wl) and torch.equal(gi, wi)
    engines = summary["decoder_engines"]
    assert set(engines) == {"cpu", "cpu2"}
    assert sum(e["share"] for e in engines.values()) == pytest.approx(1.0)
    assert all(e["share"] > 0 for e in engines.values())
    assert set(described["decoder_engines"]) == {"cpu", "cpu2"}
    assert described["decoder_engines"]["cpu"]["images"] + described["decoder_engines"]["cpu2"]["images"] == 40
    assert "decoder engine cpu2" in str(ld.stats)
    split.close()


def test_the_png_engine_in_a_loaders_split_gives_the_cpu_decoders_batches_bit_for_bit(tmp_path, photos):
    """decoder=("png", "cpu"): PNGs decoded in two halves (decode/png.py: zlib and the
    unfilter kernel's CPU twin here), JPEGs by the CPU decoder, the same batches as the
    CPU decoder alone, bit for bit (issue 56)."""
    shard = _shard(tmp_path, photos, 40)
    tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    kw = dict(batch_size=8, transform=tf, device="cpu", num_workers=1, seed=5)
    with Loader(shard, decoder="cpu", **kw) as ref:
        want = _batches(ref)
    with Loader(shard, decoder={"png": 1.0, "cpu": 0.0001}, **kw) as ld:
        got = _batches(ld)
        engines = ld.describe()["decoder_engines"]
    assert len(got) == len(want) == 5
    for (gi, gl, gk), (wi, wl, wk) in zip(got, want):
        assert gk == wk and torch.equal(gl, wl) and torch.equal(gi, wi)
    assert engines["png"]["images"] == 8 and engines["cpu"]["images"] == 32  # every PNG, no JPEG


def test_several_views_decode_each_image_once_on_the_engine_that_gets_it(tmp_path, photos):
    """Multi-crop: each image's union window decoded once, by one engine, every view read
    from it: the CPU decoder's batches bit for bit."""
    shard = _shard(tmp_path, photos, 24)
    views = [T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()]),
             T.Compose([T.RandomResizedCrop(16, scale=(0.05, 0.4)), T.RandomHorizontalFlip()])]
    kw = dict(batch_size=8, transform=views, device="cpu", num_workers=1, seed=3)
    with Loader(shard, decoder="cpu", **kw) as ref:
        want = [(list(b.keys), [v.clone() for v in b.images]) for b in ref]
    split = SplitDecoder([CpuDecoder(num_threads=1), Engine(CpuDecoder(num_threads=1), name="cpu2")])
    with Loader(shard, decoder=split, **kw) as ld:
        got = [(list(b.keys), [v.clone() for v in b.images]) for b in ld]
        assert ld.describe()["decoder_engines"]["cpu2"]["images"] > 0
    assert len(got) == len(want) == 3
    for (gk, gv), (wk, wv) in zip(got, want):
        assert gk == wk and all(torch.equal(a, b) for a, b in zip(gv, wv))
    split.close()


def test_the_loader_names_each_bad_image_decoded_by_a_split(tmp_path, photos):
    shard = _shard(tmp_path, photos, 16, bad=(3, 11))
    kw = dict(batch_size=8, transform=T.Compose([T.CenterCrop(48)]), device="cpu", num_workers=1, seed=0,
              shuffle=False)
    split = SplitDecoder([CpuDecoder(num_threads=1), Engine(CpuDecoder(num_threads=1), name="cpu2")])
    with Loader(shard, decoder=split, **kw) as ld, pytest.raises(DecodeError) as e:
        list(ld)
    assert e.value.key == "00003" and "train-0.tar" in str(e.value)
    with Loader(shard, decoder=split, on_error="skip", **kw) as ld:
        keys = [k for b in ld for k in b.keys]
        assert sorted(s.key for s in ld.skipped) == ["00003", "00011"]
    assert len(keys) == 14 and "00003" not in keys and "00011" not in keys
    split.close()


def test_a_loader_given_engine_names_makes_its_split(tmp_path, photos):
    shard = _shard(tmp_path, photos, 8)
    kw = dict(batch_size=4, transform=T.Compose([T.CenterCrop(48)]), device="cpu", num_workers=1, seed=0)
    with Loader(shard, decoder=("cpu",), **kw) as ld:  # a split of one engine is that engine
        list(ld)
        assert ld.describe()["decoder"] == "cpu"
    with Loader(shard, decoder={"cpu": 1.0}, **kw) as ld:  # pinned: a split, even of one
        n = sum(len(b.keys) for b in ld)
        d = ld.describe()
    assert n == 8 and d["decoder"] == "split" and d["decoder_engines"]["cpu"]["images"] == 8
