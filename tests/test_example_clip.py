"""examples/clip: captioned shards (jpg + txt) trained on contrastively, each caption
tokenized on the Loader's threads: every pair once an epoch as (images, tokens), and a
caption that is not UTF-8 skipped and named, the rest trained on."""
from __future__ import annotations

import re
from pathlib import Path

import forkrun
from conftest import make_shard, tar_samples

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "clip" / "train.py"


def _run(tmp_path, *extra):
    p = forkrun.run([EXAMPLE, "--epochs", "2", *extra], cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_the_example_trains_on_pairs_and_skips_a_bad_caption(tmp_path):
    out = _run(tmp_path, "--make-demo", str(tmp_path / "set"))
    assert "64 image-text pairs, 4 batches an epoch" in out and "['images', 'txt']" in out, out
    assert re.findall(r"epoch (\d): (\d+) pairs", out) == [("0", "64"), ("1", "64")], out
    assert "skipped" not in out

    (_, first), *_ = tar_samples(tmp_path / "set" / "pairs-000000.tar")
    make_shard(tmp_path / "set" / "pairs-000002.tar",
               [{"__key__": "bad-0000", "jpg": first["jpg"], "txt": b"caf\xe9 au lait"}])  # (Latin-1, not UTF-8)
    out = _run(tmp_path, "--data", str(tmp_path / "set"))
    assert "65 image-text pairs" in out and "skipped 1: bad-0000: field .txt is not UTF-8" in out, out
    assert re.findall(r"epoch (\d): (\d+) pairs", out) == [("0", "63"), ("1", "63")], out  # (4 batches of 16, less it)
