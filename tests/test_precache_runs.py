"""gpudecode precache as a tool for real datasets: stored sizes against torchvision,
resume after SIGKILL and disk-full faults (byte-identical to a clean run), ranks from
torchrun's and SLURM's variables, Ray tasks, refusals of mixed runs, and verify."""
from __future__ import annotations

import errno
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F

from gpudecode import ShardReader, ShardWriteError
from gpudecode import precache as P
from gpudecode.cli import main
from gpudecode.precache import merge, parse_bytes, parse_size, precache, verify
from gpudecode.io.shards import detect_rank
from gpudecode.transforms.stored import RECORD, downsizing, made, read_record

from conftest import encode, make_shard

SRC_SHARDS = 6
PER_SHARD = 6


@pytest.fixture(scope="module")
def src(photos, tmp_path_factory):
    """6 source shards of real photos at several sizes (JPEG, PNG, grey; some smaller than
    the stored size), each sample with a label and a JSON field."""
    d = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(3)
    names = sorted(photos)
    samples = []
    for k in range(SRC_SHARDS * PER_SHARD):
        name = names[k % len(names)]
        img = photos[name]
        h, w = img.shape[:2]
        ch, cw = int(rng.integers(24, min(h, 160))), int(rng.integers(24, min(w, 200)))
        t, l = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        img = np.ascontiguousarray(img[t:t + ch, l:l + cw])
        if k % 5 == 1:
            ext, data = "png", encode(img, "PNG")
        elif k % 7 == 2:
            ext, data = "jpg", encode(img, "JPEG", mode="L")
        else:
            ext, data = "jpg", encode(img, "JPEG", quality=90)
        samples.append({"__key__": f"s{k:04d}", ext: data, "cls": str(k % 5).encode(),
                        "json": json.dumps({"name": name, "k": k}).encode()})
    urls = [make_shard(d / f"src-{i:02d}.tar", samples[i * PER_SHARD:(i + 1) * PER_SHARD]) for i in range(SRC_SHARDS)]
    return urls, samples


def _tree(out) -> dict[str, bytes]:
    """Every file of a precache output (shards, manifest, the run's records), by path;
    temporary files of interrupted writes excepted."""
    out = str(out)
    files = {}
    for root, _, names in os.walk(out):
        for n in names:
            if ".partial" in n:
                continue
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                files[os.path.relpath(p, out)] = f.read()
    return files


KW = dict(size=48, shard_size=4, num_threads=1)


@pytest.fixture(scope="module")
def clean(src, tmp_path_factory):
    """A clean, uninterrupted run: the reference the others must equal byte for byte."""
    urls, _ = src
    out = tmp_path_factory.mktemp("clean") / "out"
    report = precache(urls, out, **KW)
    return out, report, _tree(out)


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data))


def _samples(shards) -> dict[str, dict[str, bytes]]:
    out: dict = {}
    for p in shards:
        with tarfile.open(p) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return out


def _source_rgb(sample) -> torch.Tensor:
    from PIL import Image

    data = sample.get("jpg", sample.get("png"))
    with Image.open(io.BytesIO(data)) as im:
        return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)


@pytest.mark.parametrize("size, crop", [("40", "center"), ("36x52", "none"), ("48", "none")])
def test_stored_pixels_match_torchvision(src, tmp_path, size, crop):
    """--size S (never upscaled), --size S --crop center, --size HxW: within one level of
    torchvision's resize (+ center_crop, which pads small images with zeros as ours does),
    keys, labels and JSON kept, and webdataset reads the same arrays."""
    import webdataset as wds

    urls, samples = src
    report = precache(urls, tmp_path / "out", size=size, crop=crop, shard_size=10, num_threads=2)
    assert report.samples == len(samples) and report.manifest is not None and verify(tmp_path / "out") == []
    got = _samples(report.shards)
    assert list(got) == [s["__key__"] for s in samples]  # all, in source order, once
    stored = parse_size(size)
    for s in samples:
        fields = got[s["__key__"]]
        assert fields["cls"] == s["cls"] and fields["json"] == s["json"]
        img = _source_rgb(s)
        h, w = img.shape[1:]
        steps = downsizing(h, w, stored, crop)  # (a record of them beside each image resized or cut)
        assert set(fields) == {"npy", "cls", "json"} | ({RECORD} if steps != (None, None) else set())
        if steps != (None, None):
            assert read_record(fields[RECORD]) == made(h, w, *steps)
        if isinstance(stored, tuple):
            ref = F.resize(img, list(stored), antialias=True)
        else:
            ref = F.resize(img, [stored], antialias=True) if min(h, w) > stored else img
            if crop == "center":
                ref = F.center_crop(ref, [stored, stored])
        ref = ref.permute(1, 2, 0).numpy()
        arr = _npy(fields["npy"])
        assert arr.shape == ref.shape and arr.dtype == np.uint8, s["__key__"]
        assert np.abs(arr.astype(int) - ref.astype(int)).max() <= 1, s["__key__"]
    doc = json.loads(Path(report.manifest).read_text())
    assert doc["transform"]["size"] == (list(stored) if isinstance(stored, tuple) else stored)
    assert doc["transform"]["crop"] == crop and doc["pixels"]["dtype"] == "uint8" and doc["pixels"]["layout"] == "HWC"
    if crop == "center":
        assert doc["pixels"]["shape"] == [stored, stored, 3]
    # webdataset reads the shards: the same arrays
    import gc
    import warnings

    ds = wds.WebDataset(report.shards, shardshuffle=False, empty_check=False).decode()
    with warnings.catch_warnings():  # webdataset leaves its files to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        seen = {item["__key__"]: item["npy"] for item in ds}
        gc.collect()
    assert list(seen) == list(got)
    for key, arr in seen.items():
        np.testing.assert_array_equal(arr, _npy(got[key]["npy"]))


def test_clean_run_layout_and_manifest(src, clean):
    urls, samples = src
    out, report, files = clean
    assert report.samples == len(samples) and report.written == len(samples) and not report.kept
    # one unit per source shard, its parts split at 4 samples: 6 -> 4 + 2
    assert sorted(n for n in files if n.endswith(".tar")) == [f"shard-{u:06d}-{p:03d}.tar"
                                                              for u in range(SRC_SHARDS) for p in (0, 1)]
    doc = json.loads(files["manifest.json"])
    assert doc["version"] == P.FORMAT_VERSION and doc["samples"] == len(samples)
    assert doc["sources"] == [os.path.abspath(u) for u in urls]
    assert [e["samples"] for e in doc["shards"]] == [4, 2] * SRC_SHARDS
    assert doc["transform"]["size"] == 48 and doc["transform"]["interpolation"].startswith("bilinear")
    # the folder is a dataset (the run's own files are not shards)
    reader = ShardReader(str(out), shuffle=False)
    assert [s.key for s in reader] == [s["__key__"] for s in samples] and len(reader.urls) == 2 * SRC_SHARDS


def _cli(source, out, *flags, env=None):
    return subprocess.Popen([sys.executable, "-m", "gpudecode.cli", "precache", str(source), str(out), *flags,
                             "--size", "48", "--shard-size", "4", "--threads", "1", "--quiet"],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _names(out) -> set[str]:
    """The output's files, temporary files excepted (too short-lived to count on seeing)."""
    names = set()
    for root, _, files in os.walk(out):
        names.update(os.path.join(root, n) for n in files if ".partial" not in n)
    return names


def _kill_after(proc, out, k: int) -> int | None:
    """SIGKILLs `proc` once k new files have appeared under `out` (or lets it finish);
    the number of source shards done (records) when it was killed, else None."""
    seen = _names(out)
    new: set[str] = set()
    t0 = time.monotonic()
    while proc.poll() is None and len(new) < k and time.monotonic() - t0 < 120:
        new |= _names(out) - seen
        time.sleep(0.0005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate()
    if proc.returncode == 0:
        return None
    assert proc.returncode == -signal.SIGKILL, stderr.decode()
    return len([n for n in os.listdir(out / ".precache") if n.startswith("unit-") and n.endswith(".json")])


def test_sigkill_at_random_points_then_resume_is_byte_identical(src, clean, tmp_path):
    """Three runs of the CLI, each SIGKILLed at a random point (once the k-th file of the
    output has appeared, k random in the first, second or last third: shards, records,
    the manifest),
    its --resume SIGKILLed again at a random point, then resumed to the end: every file
    equals the clean run's, and verify passes."""
    urls, _ = src
    _, _, want = clean
    listfile = tmp_path / "sources.txt"
    listfile.write_text("\n".join(urls) + "\n")
    rng = random.Random(11)
    states = []  # source shards done (records) when each kill landed
    n = len(want) - 1
    for trial in range(3):  # the first kill early, midway, late in the run (random within each third)
        out = tmp_path / f"out{trial}"
        states.append(_kill_after(_cli(listfile, out), out, rng.randint(trial * n // 3 + 1, (trial + 1) * n // 3)))
        left = len(want) - len(_names(out))  # files still to come
        states.append(_kill_after(_cli(listfile, out, "--resume"), out, rng.randint(1, max(1, left - 1))))
        proc = _cli(listfile, out, "--resume")
        _, stderr = proc.communicate()
        assert proc.returncode == 0, stderr.decode()
        assert _tree(out) == want
        assert verify(out) == []
        assert main(["verify", str(out)]) == 0
    killed = [n for n in states if n is not None]
    assert len(killed) >= 4 and len(set(killed)) >= 3 and any(0 < n < SRC_SHARDS for n in killed), states


@pytest.mark.parametrize("budget", [30_000, 250_000, 500_000])
def test_disk_full_mid_run_then_resume_is_byte_identical(src, clean, tmp_path, monkeypatch, budget):
    """ENOSPC injected after `budget` bytes written (shards and records alike): the run stops
    with ShardWriteError naming the file; nothing partial sits under a shard's name; with
    space again, --resume completes it byte-identical to the clean run."""
    from gpudecode.io.writer import ShardWriter

    urls, _ = src
    _, _, want = clean
    written = [0]

    def write_limited(f, b):
        if written[0] + len(b) > budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written[0] += len(b)
        return len(b)

    class Full(io.FileIO):
        def write(self, b):
            write_limited(self, b)
            return super().write(b)

    real_open = open

    def json_open(path, mode="r", *a, **kw):  # the records and manifest (text files) go through this
        f = real_open(path, mode, *a, **kw)
        if "w" in mode:
            orig = f.write

            def w(text):
                write_limited(f, text.encode())
                return orig(text)
            f.write = w
        return f

    out = tmp_path / "out"
    with monkeypatch.context() as m:
        m.setattr(ShardWriter, "_open", lambda self, path: Full(path, "wb"))
        m.setattr(P, "open", json_open, raising=False)
        with pytest.raises(ShardWriteError, match="no space left on device") as e:
            precache(urls, out, **KW)
    assert str(out) in str(e.value.shard)
    assert not [n for n in os.listdir(out) if n.endswith(".tar") and n not in want]
    assert merge_fails(out)
    report = precache(urls, out, resume=True, **KW)
    assert report.units and (report.kept or budget < 100_000)  # some source shards were done, the others redone
    assert _tree(out) == want and verify(out) == []


def merge_fails(out) -> bool:
    try:
        merge(out)
    except ValueError as e:
        return "not done" in str(e)
    return False


def test_two_ranks_from_torchrun_variables(src, clean, tmp_path):
    """Two processes with RANK/WORLD_SIZE (as torchrun sets them), at the same time: each
    writes its share, the last one the manifest; together the clean run's bytes."""
    urls, _ = src
    _, _, want = clean
    out = tmp_path / "out"
    listfile = tmp_path / "sources.txt"
    listfile.write_text("\n".join(urls) + "\n")
    procs = [_cli(listfile, out, env={"RANK": str(r), "WORLD_SIZE": "2"}) for r in range(2)]
    for p in procs:
        stdout, stderr = p.communicate()
        assert p.returncode == 0, stderr.decode()
    assert _tree(out) == want and verify(out) == []


def test_slurm_array_variables(src, clean, tmp_path, monkeypatch):
    """A SLURM array 1-3 simulated by its variables: 3 elements write the dataset exactly
    once; before the last, there is no manifest and --merge says what is missing."""
    urls, _ = src
    _, _, want = clean
    out = tmp_path / "out"
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    reports = []
    for task in (3, 1, 2):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        assert detect_rank(array=True) == (task - 1, 3)
        reports.append(precache(urls, out, **KW))
        if task != 2:
            assert reports[-1].manifest is None
            assert main(["precache", "--merge", str(out)]) == 1
    assert [r.units for r in reports] == [[2, 5], [0, 3], [1, 4]]
    assert reports[-1].manifest is not None
    assert _tree(out) == want and verify(out) == []


def test_detect_rank():
    """One detector for every command: a SLURM array's elements are ranks only where the
    array shares out one piece of work (precache), never for a Loader (a sweep)."""
    env = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_STEP": "2",
           "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}
    old = dict(os.environ)
    try:
        for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
            os.environ.pop(k, None)
        os.environ.update(env)
        assert detect_rank(array=True) == (2 * 2 + 1, 8)  # element (7 - 3) / 2 = 2 of 4, task 1 of 2
        assert detect_rank() == (1, 2)  # for training: the tasks of this element's job step
        for k in env:
            del os.environ[k]
        os.environ.update({"SLURM_PROCID": "3", "SLURM_NTASKS": "5"})
        assert detect_rank(array=True) == (3, 5)
        os.environ.update({"RANK": "1", "WORLD_SIZE": "2"})
        assert detect_rank(array=True) == (1, 2)  # torchrun's first
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_ray_tasks_give_the_rank_modes_bytes(src, clean, tmp_path):
    """executor="ray" on a local Ray with 2 CPUs started by the test: the same files as
    the clean run; resume under Ray redoes only what is missing."""
    import ray  # in the [test] extra: a missing one is a broken install, not a skip
    urls, _ = src
    _, _, want = clean
    out = tmp_path / "out"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        report = precache(urls, out, executor="ray", **KW)
        assert report.manifest is not None and sorted(report.units) == list(range(SRC_SHARDS))
        assert _tree(out) == want and verify(out) == []
        os.unlink(out / "shard-000004-001.tar")
        report = precache(urls, out, executor="ray", resume=True, **KW)
        assert report.units == [4] and len(report.kept) == SRC_SHARDS - 1
        assert _tree(out) == want
    finally:
        ray.shutdown()


def test_a_used_folder_is_refused(src, clean, tmp_path):
    urls, _ = src
    out, _, want = clean
    # other settings into a used OUT (the issue's --shard-size case): refused, nothing touched
    for kw in (dict(KW, shard_size=3), dict(KW, size=64), dict(KW, crop="center")):
        with pytest.raises(ValueError, match="another precache run"):
            precache(urls, out, **kw)
        with pytest.raises(ValueError, match="another precache run"):
            precache(urls, out, resume=True, **kw)
    with pytest.raises(ValueError, match="another precache run"):
        precache(urls[:3], out, resume=True, **KW)  # other sources
    # the same run again without --resume: refused too (it would redo finished work)
    with pytest.raises(ValueError, match="--resume"):
        precache(urls, out, **KW)
    assert _tree(out) == want
    # a folder with other files
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        precache(urls, other, **KW)
    # a pattern whose shards are there already from elsewhere
    (tmp_path / "pat").mkdir()
    (tmp_path / "pat" / "t-000000.tar").write_bytes(b"\0" * 1024)
    with pytest.raises(ValueError, match="not empty"):
        precache(urls, tmp_path / "pat" / "t-%06d.tar", **KW)
    # the CLI says it plainly
    assert main(["precache", urls[0], str(out), "--size", "64", "--quiet"]) == 1


def test_verify_finds_what_is_wrong(src, clean, tmp_path, capsys):
    import shutil

    _, _, want = clean
    out = tmp_path / "out"
    shutil.copytree(clean[0], out)
    assert verify(out) == [] and main(["verify", str(out)]) == 0
    a, b, c = out / "shard-000001-000.tar", out / "shard-000002-001.tar", out / "shard-000003-000.tar"
    data = bytearray(a.read_bytes())
    data[3000] ^= 0xFF
    a.write_bytes(bytes(data))
    b.unlink()
    c.write_bytes(c.read_bytes()[:-1024])
    (out / "shard-000099-000.tar").write_bytes((out / "shard-000000-000.tar").read_bytes())
    problems = verify(out)
    text = "\n".join(problems)
    assert "shard-000001-000.tar: sha256 differs" in text
    assert "shard-000002-001.tar: missing" in text
    assert "shard-000003-000.tar: " in text and "bytes, the manifest says" in text
    assert "shard-000099-000.tar: a shard the manifest does not list" in text
    assert len(problems) == 4
    assert main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert "4 problems" in err and "shard-000002-001.tar: missing" in err
    # a shard whose bytes and checksum match a manifest that lies about its count
    shutil.rmtree(out)
    shutil.copytree(clean[0], out)
    doc = json.loads((out / "manifest.json").read_text())
    doc["shards"][0]["samples"] += 1
    (out / "manifest.json").write_text(json.dumps(doc))
    text = "\n".join(verify(out))
    assert "shard-000000-000.tar: 4 samples, the manifest says 5" in text and "add up to" in text
    assert verify(tmp_path / "nothing") == [f"no readable manifest at {tmp_path / 'nothing' / 'manifest.json'}"]


def test_shard_bytes_and_sizes_parse():
    assert parse_size("256") == 256 and parse_size("224x160") == (224, 160) and parse_size((3, 4)) == (3, 4)
    for bad in ("0", "x", "12x", "-3", (1, 2, 3), 0):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert parse_bytes("1GB") == 10**9 and parse_bytes("512MiB") == 512 << 20 and parse_bytes("2e6") == 2_000_000
    assert parse_bytes(None) is None and parse_bytes(123) == 123
    for bad in ("1XB", "lots", "", "1e309", "1e999GB", "1e", "..", "1.2.3"):  # (1e309: past a float; was OverflowError)
        with pytest.raises(ValueError, match="not a byte size"):
            parse_bytes(bad)


def test_shard_bytes_splits_output(src, tmp_path):
    """--shard-bytes is a bound on every output file (a sample larger than it alone excepted)."""
    urls, samples = src
    report = precache(urls, tmp_path / "out", size=48, shard_bytes="40kB", num_threads=1)
    doc = json.loads(Path(report.manifest).read_text())
    assert sum(e["samples"] for e in doc["shards"]) == len(samples) and len(doc["shards"]) > SRC_SHARDS
    assert all(e["bytes"] <= 40_000 for e in doc["shards"])
    assert max(e["samples"] for e in doc["shards"]) >= 2
    assert all(os.path.getsize(p) == e["bytes"] for p, e in zip(report.shards, doc["shards"]))
    assert verify(tmp_path / "out") == []
    tiny = precache(urls[:1], tmp_path / "tiny", size=48, shard_bytes=1000, num_threads=1)
    assert len(tiny.shards) == PER_SHARD  # one sample each: none fits, none is refused


def test_pattern_output_and_merge(src, clean, tmp_path):
    """A shard-pattern OUT: names unit * 1000 + part, the manifest beside them; rank 0 of 2
    leaves it to the other, --merge assembles it once both are done."""
    urls, _ = src
    pat = str(tmp_path / "c" / "train-%06d.tar")
    r0 = precache(urls, pat, rank=0, world_size=2, **KW)
    assert r0.manifest is None and r0.units == [0, 2, 4]
    with pytest.raises(ValueError, match="3 of 6 source shards are not done: units 1, 3, 5"):
        merge(pat)
    r1 = precache(urls, pat, rank=1, world_size=2, **KW)
    assert r1.manifest == str(tmp_path / "c" / "train-manifest.json")
    assert sorted(os.path.basename(p) for p in r0.shards + r1.shards) == [
        f"train-{u * 1000 + p:06d}.tar" for u in range(SRC_SHARDS) for p in (0, 1)]
    assert main(["precache", "--merge", pat]) == 0
    assert verify(pat) == []
    ref = _samples(clean[1].shards)
    got = _samples(sorted(r0.shards + r1.shards))
    assert got.keys() == ref.keys() and all(got[k] == ref[k] for k in ref)
