"""examples/parquet: a hub-style Parquet set (written by `datasets`, JPEG and PNG rows, a
ClassLabel) trains from its files as they lie and from the datasets.Dataset a script
loads: every row once an epoch, the head sized from the ClassLabel's names."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import forkrun

pytest.importorskip("datasets")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "parquet" / "train.py"


def test_the_example_trains_from_files_and_from_a_dataset(tmp_path):
    runs = [["--make-demo", str(tmp_path / "set")], ["--data", str(tmp_path / "set"), "--as-dataset"]]
    for extra in runs:
        p = forkrun.run([EXAMPLE, "--epochs", "2", *extra], cwd=tmp_path, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "72 images, 3 classes (astronaut, coffee, chelsea)" in p.stdout, p.stdout
        assert re.findall(r"epoch (\d): (\d+) images", p.stdout) == [("0", "72"), ("1", "72")], p.stdout
    assert sorted(f.name for f in (tmp_path / "set").iterdir()) == ["train-00000-of-00002.parquet",
                                                                    "train-00001-of-00002.parquet"]
