"""Every option of the command line, exercised by a test that checks what it does (the
options no other test passed), and every public name of gpudecode used as what it is."""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import tarfile

import numpy as np
import pytest
import torch

import gpudecode
from gpudecode.cli import build_parser, main

from conftest import encode, make_shard

HERE = os.path.dirname(os.path.abspath(__file__))


def _options() -> list[tuple[str, str]]:
    out = []

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
            else:
                out.extend((" ".join(path), o) for o in a.option_strings if o.startswith("--") and o != "--help")

    walk(build_parser(), [])
    return out


def test_every_cli_option_and_public_name_is_exercised_somewhere():
    """A new option or public name without a test fails here (this module holds the ones no
    other test needed)."""
    text = ""
    for name in glob.glob(os.path.join(HERE, "*.py")):
        with open(name) as f:
            text += f.read()
    missing = [(c, o) for c, o in _options() if not re.search(r"[\"' ]%s[\"' =]" % re.escape(o), text)]
    assert missing == []
    unused = [n for n in gpudecode.__all__ if not re.search(r"\b%s\b" % n, text.replace("__all__", ""))]
    assert unused == []


@pytest.fixture(scope="module")
def sources(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("opts")
    urls = []
    for j in range(2):
        samples = [{"__key__": f"s{j}{i:02d}", "jpg": encode(np.ascontiguousarray(photos["coffee"][i:i + 60, i:i + 80])),
                    "cls": str(i % 3).encode()} for i in range(6)]
        urls.append(make_shard(d / f"src-{j}.tar", samples))
    return urls


def test_precache_shard_bytes_max_pixels_device_decoder(sources, tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["precache", sources[0], str(out), "--size", "32", "--shard-bytes", "8kB", "--device", "cpu",
                 "--decoder", "cpu", "--max-pixels", "0", "--quiet"]) == 0
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["settings"]["device"] == "cpu" and doc["settings"]["decoder"] == "cpu"
    assert doc["settings"]["max_pixels"] == 0  # 0: no limit
    assert len(doc["shards"]) > 1 and all(os.path.getsize(out / e["path"]) <= 8000 + 10240 for e in doc["shards"])
    capsys.readouterr()
    # a limit below the images' 60x80 pixels refuses them; --keep-going lists them and goes on
    assert main(["precache", sources[0], str(tmp_path / "b"), "--size", "32", "--max-pixels", "1000", "--quiet"]) == 1
    assert "over the limit" in capsys.readouterr().err
    with pytest.warns(RuntimeWarning):
        assert main(["precache", sources[0], str(tmp_path / "c"), "--size", "32", "--max-pixels", "1000",
                     "--keep-going", "--quiet"]) == 1  # every sample skipped: nothing written is a failure
    err = capsys.readouterr().err
    assert "skipped 6 samples" in err and "nothing was written" in err


def test_precache_rank_and_world_size(sources, tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["precache", f"{os.path.dirname(sources[0])}/src-{{0..1}}.tar", out,
                 "--size", "32", "--rank", "1", "--world-size", "2", "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "other ranks' source shards are not done yet" in said and not os.path.exists(os.path.join(out, "manifest.json"))
    assert main(["precache", f"{os.path.dirname(sources[0])}/src-{{0..1}}.tar", out, "--size", "32", "--rank", "0",
                 "--world-size", "2", "--quiet"]) == 0
    with open(os.path.join(out, "manifest.json")) as f:  # the last rank wrote it
        doc = json.load(f)
    assert sorted(e["source"] for e in doc["shards"]) == sorted(os.path.abspath(s) for s in sources)


def test_precache_ray_flag_reaches_the_executor(sources, tmp_path, monkeypatch):
    """--ray (a local Ray) and --ray ADDRESS choose the Ray executor (the executor itself is
    tested in test_precache_runs.py)."""
    import gpudecode.precache as pc

    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise ValueError("stop here")

    monkeypatch.setattr(pc, "precache", fake)
    assert main(["precache", sources[0], str(tmp_path / "x"), "--ray"]) == 1
    assert seen["executor"] == "ray" and seen["ray_address"] is None
    assert main(["precache", sources[0], str(tmp_path / "x"), "--ray", "auto"]) == 1
    assert seen["ray_address"] == "auto"


def test_bench_options(tmp_path, capsys):
    data = tmp_path / "d"
    assert main(["bench", "make-data", str(data), "--count", "8", "--formats", "jpg", "--size", "48",
                 "--shard-size", "4", "--quiet"]) == 0
    desc = json.loads((data / "dataset.json").read_text())
    assert desc["count"] == 8 and desc["formats"] == ["jpg"] and len(desc["shards"]["jpg"]) == 2
    assert main(["bench", "formats", str(data), "--out", str(tmp_path / "f"), "--device", "cpu", "--pipelines",
                 "gpudecode", "--repeat", "1", "--batch", "4", "--crop", "32", "--quiet"]) == 0
    assert json.loads((tmp_path / "f" / "formats.json").read_text())["args"]["device"] == "cpu"
    assert main(["bench", "train", str(data), "--out", str(tmp_path / "t"), "--batch", "2", "--batches", "3",
                 "--device", "cpu", "--workers", "1", "--step-ms", "1"]) == 0
    runs = json.loads((tmp_path / "t" / "train.json").read_text())["runs"]
    assert all(r["batches"] == 3 for r in runs.values())
    capsys.readouterr()
    assert main(["bench", "train", str(data), "--out", str(tmp_path / "t2"), "--model", "resnet18"]) == 1
    assert "runs a real step on a GPU" in capsys.readouterr().err
    assert main(["bench", "profile", str(data), "--out", str(tmp_path / "p"), "--batch", "2", "--batches", "3",
                 "--device", "cpu", "--threads", "1", "--step-ms", "1"]) == 0
    prof = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert prof["runs"]["gpudecode"]["batches"] == 3
    assert main(["bench", "io", str(data), "--out", str(tmp_path / "i"), "--block-kib", "4", "--tiers",
                 "--tier-files", "3", "--first-byte-ms", "0", "--nfs-latency-ms", "0", "--threads", "2"]) == 0
    io_doc = json.loads((tmp_path / "i" / "io.json").read_text())
    assert io_doc["settings"]["block"] == 4096
    assert {r["images"] for r in io_doc["rows"] if r["access"] == "small files" and r["tier"] != "local disk (cold)"
            and r["tier"] != "local disk (warm)"} == {3}


def test_plan_options(tmp_path, capsys):
    formats = os.path.join(HERE, "..", "bench", "results", "formats", "formats.json")
    io_json = os.path.join(HERE, "..", "bench", "results", "io", "io.json")
    assert main(["plan", "--from", formats, "--pipeline", "classic", "--formats", "jpg", "--gpus", "8", "--rate",
                 "2000", "--io", io_json, "--storage", "measured-object-store,nfs-hdd", "--tier",
                 "nfs-hdd:devices=48", "--dataset-images", "1000", "--node", "cache_gb=1", "--all", "--out", ""]) == 0
    text = capsys.readouterr().out
    assert "tier measured-object-store" in text and "| 8 | nfs-hdd | jpg |" in text and "png" not in text.split("|")[3]
    with open(formats) as f:
        src = json.load(f)
    assert f"{src['args']['threads'] / src['img_per_s']['jpg']['classic']['median'] * 1e3:.3f} core-ms" in text
    # 1,000 images of 14 kB = 14 MB: a 1 GB cache holds it all, so nothing is read from the tiers
    assert "0/node" in text


def test_public_names_are_what_they_say(tmp_path, photos):
    from gpudecode import (Batch, ImageInfo, KernelLaunchError, LoaderIterator, ProfileReport, Skipped,
                           GpuDecodeError, probe, profile)

    url = make_shard(tmp_path / "p.tar", [{"__key__": "a", "jpg": encode(np.ascontiguousarray(photos["rocket"][:40, :50])),
                                           "cls": b"2"}, {"__key__": "b", "jpg": b"junk", "cls": b"1"}])
    assert isinstance(probe(encode(np.zeros((5, 7, 3), np.uint8))), ImageInfo)
    tf = gpudecode.transforms.Compose([gpudecode.transforms.Resize((8, 8))])
    ld = gpudecode.Loader(url, batch_size=2, transform=tf, device="cpu", on_error="skip", shuffle=False)
    it = iter(ld)
    assert isinstance(it, LoaderIterator)
    b = next(it)
    assert isinstance(b, Batch) and b.keys == ["a"] and b.labels.tolist() == [2]
    assert [type(s) for s in ld.skipped] == [Skipped] and ld.skipped[0].key == "b"
    assert isinstance(profile([(torch.zeros(2, 3, 4, 4), None)] * 3, step=0.0), ProfileReport)
    assert issubclass(KernelLaunchError, GpuDecodeError) and issubclass(KernelLaunchError, RuntimeError)
    with tarfile.open(url) as t:
        assert len(t.getmembers()) == 4
