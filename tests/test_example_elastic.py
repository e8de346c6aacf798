"""examples/elastic/resume.py under torchrun (gloo, the CPU): an epoch on 4 ranks stopped
after 2 steps and resumed on 2 ranks reads every sample of the epoch once, plus only the
last round's pad, counted (the README's DDP section shows these lines)."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import encode, make_shard

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "elastic" / "resume.py"


def torchrun(n, *args, cwd):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n), str(EXAMPLE),
           *map(str, args)]
    env = dict(os.environ, TMPDIR=str(cwd), OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


@pytest.mark.slow
def test_a_job_of_four_ranks_resumes_on_two(tmp_path):
    urls, keys = [], []
    for j, n in enumerate([19, 23, 15]):
        samples = [{"__key__": f"e{j}-{i:02d}", "jpg": encode(np.full((40, 48, 3), 5 * i, np.uint8)),
                    "cls": b"1"} for i in range(n)]
        keys += [s["__key__"] for s in samples]
        urls.append(make_shard(tmp_path / f"d-{j:02d}.tar", samples))
    data = str(tmp_path / "d-{00..02}.tar")
    # the CPU kernel compiled here first, into the run's cache: six processes then load it, not compile it
    import torch

    import gpudecode
    from gpudecode import transforms as T

    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    with gpudecode.Loader(urls, batch_size=4, transform=tf, device="cpu") as warm:
        next(iter(warm))
    torchrun(4, data, "--stop-after", 2, "--state", tmp_path / "loader.pt", "--ledger", tmp_path / "ledger",
             cwd=tmp_path)
    out = torchrun(2, data, "--state", tmp_path / "loader.pt", "--ledger", tmp_path / "ledger", cwd=tmp_path)
    read = collections.Counter()
    for f in (tmp_path / "ledger").iterdir():
        read.update(x for x in f.read_text().split() if x)
    assert set(read) == set(keys)  # none skipped: 4 x 2 steps x 4 samples, then the rest on 2 ranks
    rest = len(keys) - 4 * 2 * 4
    assert sum(read.values()) - len(keys) == (-rest) % 2  # one pass, plus the last round's pad
    counts = {line.split(":")[1].strip() for line in out.splitlines() if line.startswith("rank ")}
    assert len(counts) == 1, out  # equal shares on the two ranks
