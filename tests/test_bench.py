"""`gpudecode bench` end to end on a tiny dataset (tables, JSON, plots), and
gpudecode.profile against loaders slowed on purpose."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gpudecode import ShardReader, profile
from gpudecode.bench import data as bdata
from gpudecode.cli import main
from gpudecode.profiling import find_period

from conftest import tar_samples

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("benchdata") / "d"
    doc = bdata.make_data(root, count=24, size=64, shard_size=8, show_progress=False)
    return root, doc


def _plots_ok(paths):
    assert paths and isinstance(paths, list)
    for p in paths:
        data = Path(p).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, p


def test_make_data_same_pixels_in_every_format(tiny):
    root, doc = tiny
    assert doc["count"] == 24 and doc["size"] == [64, 64] and doc["formats"] == ["png", "jpg", "tensor"]
    assert json.loads((root / "dataset.json").read_text()) == doc
    samples = {}
    for f, ext in (("png", "png"), ("jpg", "jpg"), ("tensor", "npy")):
        got = {s.key: s for s in ShardReader([str(root / p) for p in doc["shards"][f]])}
        assert len(got) == 24 and all(ext in s.fields and "cls" in s.fields for s in got.values())
        files = sorted((root / doc["files"][f]).rglob(f"*.{ext}"))
        assert len(files) == 24
        samples[f] = got
    for key, s in samples["png"].items():
        png = np.asarray(Image.open(io.BytesIO(s.fields["png"])).convert("RGB"))
        npy = np.load(io.BytesIO(samples["tensor"][key].fields["npy"]))
        jpg = np.asarray(Image.open(io.BytesIO(samples["jpg"][key].fields["jpg"])).convert("RGB"))
        np.testing.assert_array_equal(png, npy)  # lossless formats: the same pixels
        assert png.shape == (64, 64, 3) and np.abs(jpg.astype(int) - png).mean() < 6  # JPEG q90: close
        # a photograph, not noise or a flat field: neighbours correlate, and there is detail
        g = png.astype(float).mean(axis=2)
        assert g.std() > 5 and np.corrcoef(g[:, :-1].ravel(), g[:, 1:].ravel())[0, 1] > 0.5
        assert s.fields["cls"] == samples["jpg"][key].fields["cls"]
    with pytest.raises(ValueError, match="not empty"):
        (root.parent / "other").mkdir(exist_ok=True)
        (root.parent / "other" / "x.txt").write_text("mine")
        bdata.make_data(root.parent / "other", count=2, size=64, show_progress=False)
    assert bdata.parse_size("640x480") == (480, 640) and bdata.parse_size(224) == (224, 224)


def test_large_images_are_mosaics_of_photographs():
    rng = np.random.default_rng(1)
    img, label = bdata.make_image(rng, bdata._photos(), 600, 700)
    assert img.shape == (600, 700, 3) and label >= 0
    g = img.astype(float).mean(axis=2)
    # detail per pixel as in a photograph: the mean gradient is not that of a smooth upscale
    assert np.abs(np.diff(g, axis=1)).mean() > 1.0


def test_formats_end_to_end(tiny, tmp_path, capsys):
    root, _ = tiny
    rc = main(["bench", "formats", str(root), "--out", str(tmp_path), "--batch", "8", "--repeat", "2",
               "--threads", "1", "--quiet", "--pipelines", "gpudecode,classic,spdl,synthetic"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| format | pipeline | img/s |" in out and "formats.json" in out
    doc = json.loads((tmp_path / "formats.json").read_text())
    assert set(doc["img_per_s"]) == {"png", "jpg", "tensor"}
    for fmt, rows in doc["img_per_s"].items():
        assert {"gpudecode", "classic", "synthetic"} <= set(rows)
        assert "spdl" in rows or "spdl" in doc["skipped"].get(fmt, {})
        for name, r in rows.items():
            assert len(r["runs"]) == 2 and r["min"] <= r["median"] <= r["max"]
            assert r["mb_per_s"] == pytest.approx(r["median"] * doc["dataset"]["bytes_per_image"][fmt] / 1e6)
            # the ratios are the raw figures' ratios
            assert doc["x_classic"][fmt][name] == pytest.approx(r["median"] / rows["classic"]["median"])
        assert doc["gpudecode_stages"][fmt]["batches"] == 3
    assert doc["machine"]["cores"] and "torch" in doc["machine"]["versions"]
    assert (tmp_path / "formats.md").read_text().startswith("24 images 64x64")
    _plots_ok(doc["plots"])


def test_train_io_and_profile_subcommands(tiny, tmp_path, capsys):
    root, _ = tiny
    assert main(["bench", "train", str(root), "--out", str(tmp_path), "--batch", "4", "--step-ms", "5",
                 "--workers", "1"]) == 0
    doc = json.loads((tmp_path / "train.json").read_text())
    assert set(doc["runs"]) == {"classic, 1 workers", "gpudecode, 1 threads"}
    for r in doc["runs"].values():
        assert r["batches"] == 5 and len(r["wait"]) == len(r["step"]) == 5  # 24 / 4 = 6, one warm-up
        assert r["wait_fraction"] == pytest.approx(sum(r["wait"]) / r["elapsed"])
    _plots_ok(doc["plots"])
    assert main(["bench", "io", str(root), "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "io.json").read_text())
    assert {(r["tier"], r["access"]) for r in doc["rows"]} == {
        (f"local disk ({m})", a) for m in ("cold", "warm")
        for a in ("shards", "small files", "Loader, shards", "Loader, files")}
    assert {r["format"] for r in doc["rows"] if r["access"].startswith("Loader")} == {"jpg", "png"}
    on_disk = {f: sum(p.stat().st_size for p in (root / "shards" / f).glob("*.tar")) for f in ("png", "jpg", "tensor")}
    for r in doc["rows"]:
        assert r["mb_per_s"] == pytest.approx(r["bytes"] / r["seconds"] / 1e6)
        assert r["images"] == 24
        if r["access"] == "shards":
            assert r["bytes"] == on_disk[r["format"]]
    _plots_ok(doc["plots"])
    assert main(["bench", "profile", str(root), "--out", str(tmp_path), "--batch", "4", "--step-ms", "2",
                 "--threads", "1"]) == 0
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert set(doc["runs"]) == {"classic", "gpudecode"} and doc["runs"]["gpudecode"]["stage_capacity"]
    _plots_ok(doc["plots"])
    out = capsys.readouterr().out
    assert "## classic" in out and "## gpudecode" in out and "stage capacity" in out


class _Clock:
    """Simulated time for profile(): the iterable and the step advance it, so the
    classifications are checked on exact timings, not on sleeps a busy machine stretches."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float):
        def run(batch) -> None:
            self.now += seconds
        return run


class _SimulatedWorkers:
    """A DataLoader of `num_workers` workers, each `per_batch` seconds a batch, in order:
    batch i is ready when its worker (i % num_workers) has made it after its earlier ones."""

    def __init__(self, clock: _Clock, num_workers: int, per_batch: float, batches: int, size: int = 8) -> None:
        self.clock, self.num_workers, self.per_batch, self.batches, self.size = clock, num_workers, per_batch, batches, size

    def __iter__(self):
        start = self.clock.now
        for i in range(self.batches):
            ready = start + (i // self.num_workers + 1) * self.per_batch
            self.clock.now = max(self.clock.now, ready)
            yield torch.zeros(self.size, 3, 2, 2), torch.zeros(self.size)


def test_profile_finds_a_worker_bound_loader_and_its_period(tmp_path):
    """2 workers, each 200 ms per batch, the step 5 ms: the workers finish in step, so
    every 2nd batch waits for both (the talks' pattern), and the report says so."""
    clock = _Clock()
    r = profile(_SimulatedWorkers(clock, 2, 0.2, 13), step=clock.step(0.005), batches=12, clock=clock)
    assert r.bound == "data" and r.wait_fraction > 0.9 and r.input_speedup_needed == pytest.approx(0.1 / 0.005, rel=0.1)
    assert r.num_workers == 2 and r.period == 2, (r.stalls, [round(w, 3) for w in r.wait])
    assert r.stalls == [1, 3, 5, 7, 9, 11]  # batch 0 (the warm-up's twin) comes with it
    assert any("worker-bound" in a and "num_workers = 2" in a for a in r.advice)
    assert "every 2 batches (num_workers = 2)" in r.summary()
    doc = json.loads(r.to_json())
    assert doc["period"] == 2 and doc["batches"] == 12 and doc["images"] == 96
    _plots_ok([r.plot(str(tmp_path / "dl.png"))])
    # three workers: every third batch waits
    clock = _Clock()
    r = profile(_SimulatedWorkers(clock, 3, 0.3, 31), step=clock.step(0.005), batches=30, clock=clock)
    assert r.period == 3 and "every 3 batches (num_workers = 3)" in r.summary()


class _Slow(torch.utils.data.Dataset):
    """Every sample takes 25 ms to make: a transform slowed on purpose."""

    def __len__(self) -> int:
        return 8 * 8

    def __getitem__(self, i):
        time.sleep(0.025)
        return torch.zeros(3, 8, 8), 0


def test_profile_of_a_real_dataloader_with_workers():
    """The same with a real DataLoader, checking only what a busy machine cannot change:
    sleeps make the workers slower, never faster, so the step (5 ms against 100 ms a
    batch) waits; where the stalls fall is the simulation's to check (above)."""
    dl = torch.utils.data.DataLoader(_Slow(), batch_size=8, num_workers=2)
    r = profile(dl, step=0.005, batches=6)
    assert r.bound == "data" and r.num_workers == 2 and r.batches == 6 and r.images == 48
    assert r.elapsed >= 0.2 * 6 / 2 * 0.9  # at least the workers' own time, less the warm-up's head start


def test_profile_names_the_slowed_stage_of_a_loader(tiny, monkeypatch):
    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.decode.cpu import CpuDecoder

    root, doc = tiny
    real = CpuDecoder.decode

    def slow_decode(self, requests):
        time.sleep(0.08)  # far above every other stage of 4 images of 64x64, even on busy cores
        return real(self, requests)

    monkeypatch.setattr(CpuDecoder, "decode", slow_decode)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    loader = Loader([str(root / p) for p in doc["shards"]["jpg"]], batch_size=4, transform=tf, device="cpu",
                    num_threads=1)
    r = profile(loader, step=0.001, batches=12)  # 6 batches an epoch: two epochs and more
    assert r.batches == 12 and r.epochs == 3
    assert any("only 12 batches measured" in n for n in r.notes) and "note: only 12" in r.summary()
    assert r.bound == "data" and r.weakest == "decode"
    # capacities and the delivered rate never contradict: each stage passed what was delivered
    s = loader.stats.summary()
    for stage, cap in s["stage_capacity_img_s"].items():
        assert cap >= s["images_per_s"], (stage, cap, s["images_per_s"])
    assert set(r.stage_capacity) >= {"read", "probe", "decode", "augment"}
    assert r.stage_capacity["decode"] < 4 / 0.08 + 1  # sleeps bound it: the figure is the stage's own
    assert any("decode-bound" in a for a in r.advice)


def test_profile_compute_bound_and_plain_iterables():
    batches = [(torch.zeros(16, 3, 4, 4), torch.zeros(16)) for _ in range(30)]
    clock = _Clock()
    r = profile(batches, step=clock.step(0.003), clock=clock)
    assert r.bound == "compute" and r.batches == 29 and r.images == 29 * 16 and not r.stalls
    assert r.wait_fraction == 0.0 and r.elapsed == pytest.approx(29 * 0.003)
    assert r.loader == "list" and r.num_workers is None and not r.stage_capacity
    # a real clock and sleeps: the verdict a busy machine cannot change (waits add up to little)
    r = profile(batches, step=0.003)
    assert r.batches == 29 and r.elapsed >= 29 * 0.003
    calls = []
    r = profile(iter(batches), step=lambda b: calls.append(len(b[0])), batches=5, warmup=2)
    assert r.batches == 5 and calls == [16] * 7
    with pytest.raises(ValueError, match="no batch measured"):
        profile([], step=0.0)
    # more batches asked for than a list holds: its epochs repeat; a one-shot iterator says what it gave
    r = profile(batches, step=0.0, batches=45)
    assert r.batches == 45 and r.epochs == 2 and not r.notes
    r = profile(iter(batches), step=0.0, batches=45)
    assert r.batches == 29 and r.epochs == 1
    assert r.notes == ["measured 29 batches of the 45 asked for (the iterable ended and cannot be iterated again)"]


def test_find_period():
    assert find_period([1, 3, 5, 7, 9, 11], 12) == 2
    assert find_period([2, 5, 8, 11, 14], 16) == 3
    assert find_period([0, 7], 20) is None  # too few
    assert find_period([1, 2, 3, 5, 8, 13], 16) is None  # no rhythm
    assert find_period([3, 9, 15], 40) is None  # regular, but far fewer stalls than every 6th batch would give


def test_io_tiers_stand_ins(tiny, tmp_path):
    """`bench io --tiers`: the object-store stand-in (HTTP on 127.0.0.1, read by gpudecode's
    remote path, with and without cache_dir) and the NFS stand-in deliver every image's
    bytes (checked against tarfile and the files on disk); `plan --io` takes the figures."""
    import tarfile

    root, _ = tiny
    assert main(["bench", "io", str(root), "--out", str(tmp_path), "--tiers", "--link-mb-s", "400",
                 "--first-byte-ms", "1", "--nfs-latency-ms", "0.2", "--threads", "4"]) == 0
    doc = json.loads((tmp_path / "io.json").read_text())
    members = {}
    for f in ("png", "jpg", "tensor"):
        n = 0
        for p in (root / "shards" / f).glob("*.tar"):
            with tarfile.open(p) as t:
                n += sum(m.size for m in t.getmembers() if m.isfile())
        members[f] = n
    files = {f: sum(p.stat().st_size for p in (root / "files" / f).rglob("*") if p.is_file())
             for f in ("png", "jpg", "tensor")}
    seen = set()
    for r in doc["rows"]:
        seen.add((r["tier"], r["access"], r["cache"]))
        assert r["images"] == 24, r
        if r["tier"] == "object-store":
            want = members[r["format"]] if r["access"] == "shards" else files[r["format"]]
            assert r["bytes"] == want, r
            assert 1 <= r["connections"] <= 4
        if r["tier"] == "nfs" and r["access"] == "small files":
            assert r["bytes"] == files[r["format"]]
    assert ("object-store", "shards", "cache_dir, next epochs (node-local copy)") in seen
    assert ("nfs", "small files", "none") in seen and ("object-store", "small files", "none") in seen
    _plots_ok(doc["plots"])
    from gpudecode.planning import tiers_from_io

    measured = tiers_from_io(tmp_path / "io.json")
    assert set(measured) == {"measured-disk", "measured-object-store"}
    per_conn = [r["mb_per_s"] / r["connections"] for r in doc["rows"]
                if r["tier"] == "object-store" and r["access"] == "shards" and r["cache"] == "none"]
    import statistics

    assert measured["measured-object-store"].stream_mb_s == pytest.approx(statistics.median(per_conn))


def test_throttled_server_paces_and_serves_ranges(tmp_path):
    import urllib.request

    from gpudecode.bench.tiers import Link, ThrottledServer

    data = bytes(range(256)) * 2048  # 512 KiB
    (tmp_path / "a.bin").write_bytes(data)
    with ThrottledServer(tmp_path, Link(mb_s=5.0, first_byte_ms=50), max_requests=3) as srv:
        t = time.perf_counter()
        with urllib.request.urlopen(srv.url(tmp_path / "a.bin"), timeout=30) as r:
            assert r.read() == data
        # sleeps bound it from below (no upper bound: a busy machine is slower, never faster):
        # 50 ms to the first byte, then no chunk sent before 5 MB/s would have carried it
        assert time.perf_counter() - t >= 0.05 + len(data) / 5e6 * 0.999
        req = urllib.request.Request(srv.url(tmp_path / "a.bin"), headers={"Range": "bytes=1000-1999"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 206 and r.read() == data[1000:2000]
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(srv.url(tmp_path / "a.bin") + "x", timeout=30)
        with pytest.raises(urllib.error.HTTPError, match="503"):  # the request budget is spent
            urllib.request.urlopen(srv.url(tmp_path / "a.bin"), timeout=30)


def test_io_on_any_folder_counts_the_shards_images(tiny, tmp_path):
    """A folder that is not a make-data dataset: one group; the shards' images counted from
    their headers (img/s needs them), the small files one image each."""
    import shutil

    root, _ = tiny
    folder = tmp_path / "mixed"
    folder.mkdir()
    for p in sorted((root / "shards" / "jpg").glob("*.tar"))[:2]:
        shutil.copy(p, folder / p.name)
    shutil.copytree(root / "files" / "jpg", folder / "files")
    assert main(["bench", "io", str(folder), "--out", str(tmp_path / "o")]) == 0
    doc = json.loads((tmp_path / "o" / "io.json").read_text())
    files = sum(1 for p in (folder / "files").rglob("*") if p.is_file())
    for r in doc["rows"]:
        assert r["format"] == "all"
        assert r["images"] == (16 if r["access"] == "shards" else files), r


def test_python_per_sample_splits_python_from_the_native_calls(tiny):
    """gpudecode.bench.gil: each part's time split into Python and native calls, the
    natives put back afterwards, the figures those of the samples given."""
    from gpudecode import _native
    from gpudecode import transforms as T
    from gpudecode.bench.gil import python_per_sample
    from gpudecode.kernels import fused

    root, doc = tiny
    before = (_native.read_ranges, _native.probe_fields, fused.cpu_kernel)
    for fmt in ("jpg", "tensor"):
        tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
        got = python_per_sample([str(root / p) for p in doc["shards"][fmt]], tf, batch_size=8, repeat=1)
        assert got["samples"] == 24 and got["ceiling_img_per_s"] > 0
        for part in ("reader", "prepare", "finish"):
            assert got[part]["python_us"] > 0 and got[part]["native_us"] > 0, (fmt, part, got)
        assert got["loader"]["python_us"] == pytest.approx(sum(got[p]["python_us"] for p in ("reader", "prepare",
                                                                                               "finish")))
    assert (_native.read_ranges, _native.probe_fields, fused.cpu_kernel) == before


def test_loader_python_per_sample_counts_every_thread(tiny):
    """gpudecode.bench.gil.loader_python_per_sample: a running Loader's process CPU time
    split into native calls (each thread's, in its CPU time) and the rest, per sample of
    an epoch; the decoder on one native thread; the natives put back afterwards."""
    import time

    from gpudecode import _native
    from gpudecode import transforms as T
    from gpudecode.bench.gil import loader_python_per_sample
    from gpudecode.kernels import fused

    root, doc = tiny
    before = (_native.read_ranges, _native.decode_batch, fused.cpu_kernel)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    for fmt in ("jpg", "tensor"):
        c = time.process_time()
        got = loader_python_per_sample([str(root / p) for p in doc["shards"][fmt]], tf, batch_size=8, epochs=1,
                                       shuffle=True)
        spent = (time.process_time() - c) * 1e6
        assert got["samples"] == 24 and got["img_per_s"] > 0
        assert got["python_us"] > 0 and got["native_us"] > 0 and 0 <= got["gc_us"] < got["python_us"], (fmt, got)
        assert got["sys_us"] >= 0, (fmt, got)  # (in the kernel's ticks: no finer bound on 24 samples)
        # one measured epoch of two: at most the process's CPU time per sample, all told
        assert (got["python_us"] + got["native_us"]) * 24 <= spent
    assert (_native.read_ranges, _native.decode_batch, fused.cpu_kernel) == before


def test_kernel_stage_alone_and_the_bare_cast(tiny):
    """gpudecode.bench.gil.finish_alone times a Loader's second stage over tensor batches
    prepared beforehand (JPEG batches would share the decoder's ring: refused, named);
    conversion_rate times numpy's uint8 -> float32 cast of an output's size."""
    from gpudecode import transforms as T
    from gpudecode.bench.gil import conversion_rate, finish_alone

    root, doc = tiny
    tf = T.Compose([T.CenterCrop(32), T.RandomHorizontalFlip(), T.Normalize([0.5] * 3, [0.25] * 3)])
    assert finish_alone([str(root / p) for p in doc["shards"]["tensor"]], tf, batch_size=8, repeat=1) > 0
    with pytest.raises(ValueError, match="tensor samples only.*jpeg"):
        finish_alone([str(root / p) for p in doc["shards"]["jpg"]], tf, batch_size=8, repeat=1)
    assert conversion_rate(size=32, batch_size=4, num_threads=2, repeat=1) > 0


def test_bench_suite_runs_from_the_package(tmp_path, monkeypatch, capsys):
    """bench/*.py are thin callers of gpudecode.bench.suite: a suite module runs on its own
    (here the reader's, small) and writes its JSON where it is told."""
    import sys

    from gpudecode.bench.suite import reader

    monkeypatch.setattr(reader, "OUT", tmp_path)
    monkeypatch.setattr("gpudecode.bench.suite.OUT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["reader", "--samples", "64", "--shards", "2"])
    reader.main()
    out = capsys.readouterr().out
    assert "webdataset" in out and "x webdataset" in out
    doc = json.loads((tmp_path / "reader.json").read_text())
    assert doc["machine"] and doc["args"]["samples"] == 64
    bench = Path(__file__).resolve().parents[1] / "bench"
    for name in ("reader", "kernels", "loader", "formats", "tensors", "recipes", "gpu"):  # each a caller only
        text = (bench / f"{name}.py").read_text()
        assert f"from gpudecode.bench.suite.{name} import main" in text and len(text.splitlines()) < 15


def _run_loader_bench(monkeypatch, capsys, tmp_path, args: list[str]) -> str:
    """bench/loader.py run with `args`, its outputs under tmp_path: what it printed."""
    import sys

    from gpudecode.bench.suite import loader

    monkeypatch.setattr(loader, "OUT", tmp_path)
    monkeypatch.setattr("gpudecode.bench.suite.OUT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["loader", *args])
    loader.main()
    return capsys.readouterr().out


def test_the_recipes_bench_times_ten_crops_both_ways(tmp_path, monkeypatch, capsys):
    """bench/recipes.py --crops: evaluation over TenCrop through the Loader (ten views) and
    through the DataLoader with torchvision: both rates and their ratio, in the printout and
    the JSON."""
    import sys

    from gpudecode.bench.suite import loader, recipes

    monkeypatch.setattr(loader, "OUT", tmp_path)
    monkeypatch.setattr("gpudecode.bench.suite.OUT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["recipes", "--crops", "--images", "16", "--batch", "8", "--repeat", "1"])
    recipes.main()
    out = capsys.readouterr().out
    assert "TenCrop(224)" in out and "ten crops: gpudecode / torchvision = " in out
    doc = json.loads((tmp_path / "recipe_crops.json").read_text())
    assert set(doc["img_per_s"]) == {"gpudecode Loader, TenCrop as 10 views", "torchvision DataLoader, TenCrop"}
    assert all(v > 0 for v in doc["img_per_s"].values())


def test_the_recipes_bench_times_recipes_as_written(tmp_path, monkeypatch, capsys):
    """bench/recipes.py --as-written: each recipe given to the Loader as torchvision's
    Compose and run by the DataLoader, both rates and their ratio."""
    import sys

    from gpudecode.bench.suite import loader, recipes

    monkeypatch.setattr(loader, "OUT", tmp_path)
    monkeypatch.setattr("gpudecode.bench.suite.OUT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["recipes", "--as-written", "--images", "16", "--batch", "8", "--repeat", "1",
                                      "--threads", "1"])
    recipes.main()
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "recipe_as_written.json").read_text())
    assert len(doc["img_per_s"]) == 2 * len(recipes.as_written()) and all(v > 0 for v in doc["img_per_s"].values())
    for name in recipes.as_written():
        assert f"{name}: gpudecode / torchvision = " in out
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--only", "RandomChoice([RRC"])  # (the recipes named so, alone)
    recipes.main()
    out = capsys.readouterr().out
    assert out.count("gpudecode / torchvision = ") == 1 and "RandomChoice([RRC(224), CenterCrop(224)])" in out


def test_the_captions_bench_runs_each_pipeline(tmp_path, monkeypatch, capsys):
    """bench/loader.py --captions: image-text pairs through the Loader (with and without
    its captions) and through webdataset's pipeline as OpenCLIP builds it, every rate in
    the printout and the JSON; the captioned shards hold each image with its caption."""
    from gpudecode.bench.suite import loader

    out = _run_loader_bench(monkeypatch, capsys, tmp_path,
                            ["--captions", "--images", "48", "--repeat", "1", "--batch", "16", "--skip-dali"])
    assert "x webdataset" in out and "captions tokenized" in out
    doc = json.loads((tmp_path / "loader_captions.json").read_text())
    assert len(doc["img_per_s"]) == 4 and all(v > 0 for v in doc["img_per_s"].values())
    got = [s for p in sorted((tmp_path / "loader_48_captioned").glob("train-*.tar")) for s in tar_samples(p)]
    source = {k: f["jpg"] for p in sorted((tmp_path / "loader_48").glob("train-*.tar")) for k, f in tar_samples(p)}
    assert len(got) == 48 and all(set(f) == {"jpg", "txt"} and f["jpg"] == source[k] and len(f["txt"].decode()) > 10
                                  for k, f in got)
    assert loader.tokens("ab").tolist()[:3] == [97, 98, 0] and loader.tokens("x" * 100).shape == (77,)
    one, many, _ = loader.tokenizer("standin")
    assert torch.equal(many(["ab", "c"]), torch.stack([one("ab"), one("c")]))


def test_the_boxes_bench_runs_each_pipeline(tmp_path, monkeypatch, capsys):
    """bench/loader.py --boxes: images with COCO annotations through the Loader (with and
    without its Boxes field) and through torchvision v2 over webdataset, every rate in the
    printout and the JSON; the boxed shards hold each image with annotations in it."""
    out = _run_loader_bench(monkeypatch, capsys, tmp_path,
                            ["--boxes", "--images", "32", "--repeat", "1", "--batch", "8", "--skip-dali"])
    assert "x torchvision" in out and "COCO annotations" in out
    doc = json.loads((tmp_path / "loader_boxes.json").read_text())
    assert len(doc["img_per_s"]) == 3 and all(v > 0 for v in doc["img_per_s"].values())
    got = [s for p in sorted((tmp_path / "loader_32_boxed").glob("train-*.tar")) for s in tar_samples(p)]
    source = {k: f["jpg"] for p in sorted((tmp_path / "loader_32").glob("train-*.tar")) for k, f in tar_samples(p)}
    assert len(got) == 32 and all(set(f) == {"jpg", "json"} and f["jpg"] == source[k] for k, f in got)
    for _, f in got:
        for a in json.loads(f["json"]):
            x, y, w, h = a["bbox"]
            assert 0 <= x and 0 <= y and x + w <= 500.01 and y + h <= 375.01 and 1 <= a["category_id"] <= 90


@pytest.mark.parametrize("recipe,shape", [("ssd", "300x300"), ("ssdlite", "images of their own sizes"),
                                          ("multiscale", "images of their own sizes")])
def test_the_boxes_bench_runs_ssds_recipes(tmp_path, monkeypatch, capsys, recipe, shape):
    """bench/loader.py --boxes --recipe ssd / ssdlite / multiscale: SSD's recipes
    (RandomIoUCrop drawn from the boxes; ssdlite's as written, images of their own sizes)
    and multiscale's as written, through the Loader and through torchvision v2 over
    webdataset: both rates."""
    out = _run_loader_bench(monkeypatch, capsys, tmp_path, ["--boxes", "--recipe", recipe, "--images", "16", "--repeat",
                                                            "1", "--batch", "8", "--skip-dali"])
    assert "x torchvision" in out and f"{recipe} -> {shape}" in out
    doc = json.loads((tmp_path / f"loader_boxes_{recipe}.json").read_text())
    assert set(doc["img_per_s"]) == {"gpudecode Loader, Boxes field", "torchvision v2 reference + webdataset"}
    assert all(v > 0 for v in doc["img_per_s"].values()) and doc["args"]["recipe"] == recipe


def test_the_masks_bench_runs_each_pipeline_through_a_rotation(tmp_path, monkeypatch, capsys):
    """bench/loader.py --masks --rotate 15: images with palette-PNG masks through the Loader
    (its Mask field as int64 and as uint8, and without it) and through torchvision v2 over
    webdataset, RandomRotation(15) in both: every rate in the printout and the JSON."""
    out = _run_loader_bench(monkeypatch, capsys, tmp_path, ["--masks", "--rotate", "15", "--images", "16", "--repeat",
                                                            "1", "--batch", "8", "--skip-dali"])
    assert "x torchvision" in out and "palette-PNG masks" in out and "RandomRotation(15) after the flip" in out
    doc = json.loads((tmp_path / "loader_masks_rotate.json").read_text())
    assert len(doc["img_per_s"]) == 4 and all(v > 0 for v in doc["img_per_s"].values())
    assert doc["args"]["rotate"] == 15.0


def test_the_precached_masks_bench_runs_each_pipeline(tmp_path, monkeypatch, capsys):
    """bench/loader.py --masks --precache 96: the masked set precached with and without its
    masks moved, the Loader over each (and over the images alone): every rate in the
    printout and the JSON; the moved set's masks are of the stored size."""
    from gpudecode.transforms.stored import RECORD, read_record

    out = _run_loader_bench(monkeypatch, capsys, tmp_path, ["--masks", "--precache", "96", "--images", "16", "--repeat",
                                                            "1", "--batch", "8", "--skip-dali"])
    assert "x each epoch" in out and "precached at 96" in out
    doc = json.loads((tmp_path / "loader_masks_precached.json").read_text())
    assert len(doc["img_per_s"]) == 3 and all(v > 0 for v in doc["img_per_s"].values())
    moved = [s for p in sorted((tmp_path / "loader_16_masked_precached_96" / "moved").glob("*.tar"))
             for _, s in tar_samples(p)]
    assert len(moved) == 16 and all(read_record(s[RECORD]).done("seg.png") == 1 for s in moved)


def test_kernel_stages_from_memory_and_cached(tmp_path, monkeypatch, capsys):
    """bench/kernels.py --stages (issue 41): each stage of the base resample timed over
    distinct images (memory) and over one image and one output slot (cached), and this
    core's bandwidth: every figure there and positive, in the printout and the JSON."""
    import functools
    import sys

    from gpudecode.bench.suite import kernels

    monkeypatch.setattr("gpudecode.bench.suite.OUT", tmp_path)
    monkeypatch.setattr(kernels, "_bandwidth", functools.partial(kernels._bandwidth, mib=16))
    monkeypatch.setattr(sys, "argv", ["kernels", "--stages", "--images", "4", "--repeat", "1"])
    kernels.main()
    out = capsys.readouterr().out
    assert "memory/cached" in out and "GB/s" in out
    doc = json.loads((tmp_path / "kernels_stages.json").read_text())
    for column in ("stages_us", "stages_cached_us"):
        assert set(doc[column]) == set(kernels.STAGES) and all(v > 0 for v in doc[column].values())
    assert doc["whole_us"] > 0 and all(v > 0 for v in doc["bandwidth_gbs"].values())


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_the_resident_benchs_host_part(tmp_path, monkeypatch, mode):
    """bench/resident.py part 3 (issue 55): a resident epoch's host work per sample with
    the kernel's launch a no-op, by part, every figure there; the launch is put back; with
    the crop's padding reflected too (--padding-mode reflect: airbench's)."""
    from gpudecode.bench.suite import resident
    from gpudecode.transforms import compose

    monkeypatch.setattr(resident, "OUT", tmp_path)
    launch = compose.launch
    assert resident.cifar_set(300, tmp_path, mode)[2].plan.geometry[0].padding_mode == mode
    got = resident.host_part(300, 1, 1, batch=64, padding_mode=mode)
    assert compose.launch is launch
    assert got["images"] == 300 and got["loader_img_s"] > 0
    assert set(got["ns_per_sample"]) == {"order", "prepare", "finish"} and all(v > 0 for v in got["ns_per_sample"].values())
    assert got["sum_ns"] == pytest.approx(sum(got["ns_per_sample"].values())) and got["met"] == (got["sum_ns"] < 1000)


def test_the_resident_benchs_cifar_part_with_autoaugment(tmp_path, monkeypatch):
    """bench/resident.py --autoaugment: part 2 with AutoAugment's CIFAR10 policy after the
    flip on both sides (the Loader's converted, torchvision's on PIL images): every rate."""
    from gpudecode.bench.suite import resident

    monkeypatch.setattr(resident, "OUT", tmp_path)
    assert resident.cifar_set(300, tmp_path, autoaugment=True)[2].plan.program[0].policy == "cifar10"
    got = resident.cifar_part(300, 1, 0, 1, autoaugment=True)
    assert got["images"] == 300 and got["autoaugment"] is True
    assert all(got[k] > 0 for k in ("torchvision_img_s", "ram_img_s", "stream_img_s", "given_img_s", "given_ram_img_s"))


def test_the_resident_benchs_cifar_part_upscaled(tmp_path, monkeypatch):
    """bench/resident.py --upscale 64: part 2 with a Resize(64) after the flip on both sides
    (the Loader's a Pad's canvas, the crop, the Resize, the flip): every rate, and the
    Loader's batches of 64x64."""
    from gpudecode.bench.suite import resident
    from gpudecode.transforms import Pad

    monkeypatch.setattr(resident, "OUT", tmp_path)
    tf = resident.cifar_set(300, tmp_path, upscale=64)[2]
    assert isinstance(tf.plan.canvas, Pad) and tf.out_size == (64, 64)
    got = resident.cifar_part(300, 1, 0, 1, upscale=64)
    assert got["images"] == 300 and got["upscale"] == 64
    assert all(got[k] > 0 for k in ("torchvision_img_s", "ram_img_s", "stream_img_s", "given_img_s", "given_ram_img_s"))


def test_the_resident_benchs_mnist_part(tmp_path, monkeypatch):
    """bench/resident.py --mnist: part 4's grey set read by torchvision's MNIST class, the
    Loader's batches of one channel (three with Grayscale(3)), every rate."""
    import torchvision

    from gpudecode.bench.suite import resident

    monkeypatch.setattr(resident, "OUT", tmp_path)
    got = resident.mnist_part(300, 1, 0, 1)
    assert len(torchvision.datasets.MNIST(str(tmp_path / "mnist_300"), train=True)) == 300
    assert got["shapes"] == [[256, 1, 28, 28], [256, 3, 28, 28]]
    assert all(got[k] > 0 for k in ("torchvision_img_s", "ram_img_s", "three_img_s"))


def test_a_gpu_bench_cut_by_its_time_limit_still_writes_what_it_measured(tmp_path, monkeypatch, capsys):
    """bench/gpu.py under a call's time limit (SIGINT first): each run is printed as soon as
    it is measured, and an interrupted section still leaves the report of those before it,
    marked cut, with exit status 1."""
    from gpudecode.bench.suite import gpu, loader

    monkeypatch.setattr(loader, "OUT", tmp_path / "data")  # (its dataset, made here)
    monkeypatch.setattr(gpu, "OUT", tmp_path / "data")
    row = {"threads": 2, "batch_size": 8, "images": 8, "alone": {"cpu": 1.0}, "ceiling": 1.0, "best_alone": 1.0,
           "split": 1.0, "shares": {"cpu": 1.0}, "idle": {"cpu": 0.0}, "of_ceiling": 1.0, "of_best": 1.0}
    monkeypatch.setattr(gpu, "engine_runs", lambda *a, **k: [gpu._said(dict(row))])

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu, "png_runs", interrupted)
    assert gpu.main(["--sections", "engines,png", "--images", "8", "--batch-sizes", "8", "--out",
                     str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "gpu bench: measured " + json.dumps(row) in out and "interrupted" in out
    report = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert report["engines"] == [row] and report["png"] == [] and "interrupted" in report["cut"]
    assert "**interrupted" in (tmp_path / "out" / "gpu.md").read_text()


def test_the_draws_bench_compares_each_recipe_with_torchvisions(capsys):
    """bench/draws.py: each recipe's draws as the Loader makes them against torchvision v2's
    make_params for the same steps, and the IoU crops natively against their Python
    reference: every figure positive, in the printout and the JSON, the CPU named."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "draws.py"
    spec = importlib.util.spec_from_file_location("bench_draws", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--batch", "6", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out.strip().splitlines()[-1])
    rows = doc["us_an_image"]
    assert len(rows) == 6 and all(v > 0 for row in rows.values() for v in row.values())
    assert sum("iou crops, native" in row for row in rows.values()) == 2 and "family" in doc["machine"]
    assert "x" in out and "its IoU crops: native / the Python reference" in out
