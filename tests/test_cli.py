"""The gpudecode command line: shard, inspect, help."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile

from gpudecode import ShardReader
from gpudecode.cli import main

from conftest import encode, tar_samples


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "gpudecode.cli", "--help"], capture_output=True, text=True, check=True)
    import argparse

    from gpudecode.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"shard", "inspect", "precache", "verify", "bench", "plan", "ops", "demo"}
    listed = out.stdout.split("positional arguments:")[1]  # the subcommand table, not the description
    for cmd in sub.choices:
        assert f"\n    {cmd} " in listed, cmd
    assert out.stderr == ""


def test_shard_an_imagefolder(tmp_path, photos, capsys):
    src = tmp_path / "train"
    files = {}
    for c, name in enumerate(["chelsea", "coffee"]):
        d = src / f"class_{name}"
        d.mkdir(parents=True)
        for k in range(5):
            img = photos[name][k * 7:, k * 5:]
            data = encode(img, "JPEG") if k != 4 else encode(img, "PNG")
            (d / f"img{k}.jpg").write_bytes(data)  # k == 4: a PNG under a .jpg name
            files[data] = c
    (src / "class_coffee" / "notes.txt").write_text("not an image")
    rc = main(["shard", str(src), str(tmp_path / "out" / "train-%06d.tar"), "--shard-size", "4", "--quiet"])
    assert rc == 0
    out = capsys.readouterr()
    assert "wrote 10 samples in 3 shards, 2 classes" in out.out
    assert "notes.txt: not an image" in out.err
    classes = json.loads((tmp_path / "out" / "train-classes.json").read_text())
    assert classes == {"class_chelsea": 0, "class_coffee": 1}
    shards = sorted(str(p) for p in (tmp_path / "out").glob("train-*.tar"))
    assert len(shards) == 3 and not list((tmp_path / "out").glob("*.partial"))
    samples = [(key, fields) for sh in shards for key, fields in tar_samples(sh)]  # tarfile, not our reader
    assert [s.key for s in ShardReader(shards)] == [k for k, _ in samples]
    assert len(samples) == 10
    for _, fields in samples:
        (ext,) = set(fields) - {"cls", "json"}
        data = fields[ext]
        assert int(fields["cls"]) == files[data]
        meta = json.loads(fields["json"])
        assert (src / meta["path"]).read_bytes() == data and meta["label"] == files[data]
        assert ext == ("png" if data.startswith(b"\x89PNG") else "jpg")
    with tarfile.open(shards[0]) as tf:  # plain tars that any tool reads
        assert len(tf.getnames()) == 12  # 4 samples: image, .cls, .json


def test_inspect(tmp_path, photos, capsys):
    from conftest import make_shard

    path = make_shard(tmp_path / "i.tar", [{"__key__": f"k{i}", "jpg": encode(photos["camera"][:30, :40], "JPEG"),
                                            "cls": b"1"} for i in range(3)])
    assert main(["inspect", path]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 3 and report["extensions"] == {"jpg": 3, "cls": 3}
    assert report["images"] == {"jpeg 4:2:0": 3}
    # tensor shards: the .npy shapes (numpy reads the same arrays back)
    import io as _io

    import numpy as np

    from gpudecode.tensors import encode_npy

    arrays = [np.zeros((20, 30, 3), np.uint8), np.ones((20, 30, 3), np.uint8), np.zeros((8, 9, 3), np.uint8)]
    t = make_shard(tmp_path / "t.tar", [{"__key__": f"t{i}", "npy": encode_npy(a), "cls": b"0"}
                                        for i, a in enumerate(arrays)] + [{"__key__": "bad", "npy": b"junk", "cls": b"0"}])
    assert main(["inspect", t]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tensors"] == {"20x30x3 uint8": 2, "8x9x3 uint8": 1, "unreadable: not a .npy array (no magic)": 1}
    assert [np.load(_io.BytesIO(f["npy"])).shape for _, f in tar_samples(t)[:3]] == [(20, 30, 3)] * 2 + [(8, 9, 3)]


def test_errors_exit_nonzero(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.tar")]) == 1
    assert "missing.tar" in capsys.readouterr().err


def test_demo_runs_end_to_end(tmp_path, capsys):
    """`make demo`'s command on a small scale: shards, two epochs, precache, two epochs
    on the tensor shards, two epochs of the shards kept in RAM (the same last batches as
    streamed: the same seed gives the same batches)."""
    import re

    assert main(["demo", "--workdir", str(tmp_path / "demo"), "--images", "48", "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "built 1 shard of real photos" in out and "(48 samples, JPEG and PNG)" in out
    assert out.count("JPEG/PNG shards, epoch") == 2 and out.count("tensor shards, epoch") == 2
    assert "precache: 48 samples -> 1 tensor shard in" in out
    assert "48 images in" in out
    last = r"epoch (\d): 48 images in [\d.]+ s = \d+ img/s; (last batch mean [-+\d.]+, labels \[[\d, ]+\])"
    streamed = re.findall("JPEG/PNG shards, " + last, out)
    kept = re.findall(r"JPEG/PNG shards kept in RAM \(keep='ram'\), " + last, out)
    assert len(streamed) == 2 and kept == streamed, out
    assert "the set kept: 48 images" in out and "in ram, decoded once" in out


def _tree(root, photos, names=("chelsea", "coffee"), per=3):
    for c, name in enumerate(names):
        d = root / f"c{c}_{name}"
        d.mkdir(parents=True)
        for k in range(per):
            (d / f"n{c}_{k}.v2.JPEG").write_bytes(encode(photos[name][k * 9:, k * 4:], "JPEG"))


def test_shard_keys_are_paths(tmp_path, photos):
    src = tmp_path / "val"
    _tree(src, photos)
    assert main(["shard", str(src), str(tmp_path / "out" / "val-%03d.tar"), "--key", "path", "--quiet"]) == 0
    samples = list(ShardReader(str(tmp_path / "out" / "val-000.tar")))
    assert sorted(s.key for s in samples) == sorted(f"c{c}_{n}/n{c}_{k}_v2" for c, n in enumerate(("chelsea", "coffee"))
                                                    for k in range(3))
    for s in samples:
        meta = json.loads(s.fields["json"])
        assert meta["path"] == s.key.replace("_v2", ".v2") + ".JPEG" and (src / meta["path"]).exists()


def test_class_index_per_pattern_and_never_overwritten(tmp_path, photos):
    _tree(tmp_path / "train", photos)
    _tree(tmp_path / "val", photos)
    out = tmp_path / "shards"
    assert main(["shard", str(tmp_path / "train"), str(out / "train-%03d.tar"), "--quiet"]) == 0
    assert main(["shard", str(tmp_path / "val"), str(out / "val-%03d.tar"), "--quiet"]) == 0
    assert sorted(p.name for p in out.glob("*.json")) == ["train-classes.json", "val-classes.json"]
    other = tmp_path / "other"
    _tree(other, photos, names=("rocket", "coffee", "chelsea"))
    assert main(["shard", str(other), str(out / "train-%03d.tar"), "--quiet"]) == 1  # a different index is refused
    assert json.loads((out / "train-classes.json").read_text()) == {"c0_chelsea": 0, "c1_coffee": 1}


def test_shard_refuses_an_earlier_runs_shards_and_keeps_sets_apart(tmp_path, photos, capsys):
    """Run twice into one folder with a smaller --shard-size, the second run would have
    left the first one's tail (inspect counted 46 samples where there were 24): it is
    refused, naming what is there; --overwrite removes it first. train and val side by
    side: a folder of both is refused by name, each pattern reads its own set."""
    _tree(tmp_path / "train", photos)
    _tree(tmp_path / "val", photos)
    out = tmp_path / "shards"
    train = str(out / "train-%06d.tar")
    assert main(["shard", str(tmp_path / "train"), train, "--shard-size", "1", "--quiet"]) == 0
    first = sorted(out.glob("train-*.tar"))
    assert len(first) == 6
    capsys.readouterr()
    assert main(["shard", str(tmp_path / "train"), train, "--shard-size", "4", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "6 shard(s) of" in err and "train-000000.tar ... train-000005.tar" in err and "--overwrite" in err
    assert sorted(out.glob("train-*.tar")) == first  # nothing touched
    assert main(["shard", str(tmp_path / "train"), train, "--shard-size", "4", "--overwrite", "--quiet"]) == 0
    assert "read them as" in capsys.readouterr().out
    left = sorted(out.glob("train-*.tar"))
    assert [p.name for p in left] == ["train-000000.tar", "train-000001.tar"]
    assert sum(len(tar_samples(p)) for p in left) == 6  # tarfile counts what is there
    assert main(["shard", str(tmp_path / "val"), str(out / "val-%06d.tar"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 1
    assert "2 sets of shards written by gpudecode shard (train-*: 2, val-*: 1)" in capsys.readouterr().err
    assert main(["inspect", train]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 6
    assert main(["inspect", str(out / "*.tar")]) == 0  # asked for all: all
    assert json.loads(capsys.readouterr().out)["samples"] == 12


def test_ctrl_c_is_one_line_saying_how_to_go_on(tmp_path, monkeypatch, capsys):
    """Ctrl-C in a command: exit 130 and one line (no traceback): what was finished and
    how to go on; for precache, the images done and --resume."""
    import gpudecode.folder
    import gpudecode.precache

    def interrupted_precache(*args, progress=None, **kw):
        progress(0, 20)
        progress(5, 20)
        raise KeyboardInterrupt

    monkeypatch.setattr(gpudecode.precache, "precache", interrupted_precache)
    (tmp_path / "src").mkdir()
    assert main(["precache", str(tmp_path / "src"), str(tmp_path / "out"), "--size", "32"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("gpudecode precache: interrupted after 5 of 20 images; the source shards finished are kept: "
                       "the same command with --resume goes on from them")
    assert not any("Traceback" in line for line in err)

    def interrupted_shard(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpudecode.folder, "shard_folder", interrupted_shard)
    assert main(["shard", str(tmp_path / "src"), str(tmp_path / "o-%06d.tar")]) == 130
    assert capsys.readouterr().err.strip() == ("gpudecode shard: interrupted; the shards written so far are not a "
                                               "whole set: run the same command again with --overwrite")


def test_every_option_has_help_and_shows_its_default():
    """Every option of every command says what it does, and its default where it has one
    (argparse's default shown unless the help text says it)."""
    import argparse

    from gpudecode.cli import build_parser

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from walk(sp, path + [name])
            elif a.option_strings and a.help != argparse.SUPPRESS:
                yield path, p, a

    seen = 0
    for path, parser, a in walk(build_parser(), []):
        assert a.help, (path, a.option_strings)
        if a.default is not None and a.default is not False and a.default != argparse.SUPPRESS:
            text = parser.format_help()
            assert "default" in a.help or f"(default: {a.default})" in " ".join(text.split()), (path, a.option_strings)
        seen += 1
    assert seen > 60
