"""bench/gpu_call.sh, the prepared GPU call, rehearsed on this machine (GPU_CALL_REHEARSE=1:
the same steps, small, every test of test_gpu.py skipping with its reason): each step runs in
its order under its limit, each bench section leaves its report in $OUT, both CIFAR runs
train, and nothing in the script's own plumbing fails, so a lent GPU's minutes go to the GPU."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # over a minute on 2 cores
@pytest.mark.skipif(not (ROOT / "bench" / "gpu_call.sh").exists(), reason="bench/ is not in this tree")
def test_the_prepared_gpu_call_runs_every_step_in_order_on_the_cpu(tmp_path):
    env = {**os.environ, "GPU_CALL_REHEARSE": "1", "PY": sys.executable, "OUT": str(tmp_path / "out"),
           "END": str(int(time.time()) + 600), "CUDA_VISIBLE_DEVICES": ""}
    env.setdefault("GPUDECODE_CACHE_DIR", str(tmp_path / "kcache"))
    scratch = set(Path("/tmp").glob("gpudecode-call.*"))
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_call.sh")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    log = run.stdout + run.stderr
    assert set(Path("/tmp").glob("gpudecode-call.*")) <= scratch  # (its scratch folder removed when it ends)
    assert run.returncode == 0, log[-3000:]
    steps = re.findall(r"^==> (.+?) \(\d+ s left\)$", log, re.M)
    assert steps == ["the machine", "tests/test_gpu.py: the PNG, resident, pinned-slot, strided-batch, mask and box tests", "bench/gpu.py --sections png",
                     "bench/nvcomp_inflate.py: nvCOMP against zlib, and with more streams a call",
                     "bench/gpu.py --sections resident", "bench/launch_probe.py: a launch's host work, piece by piece",
                     "tests/test_gpu.py: the rest",
                     "the CIFAR example: gpudecode, then torchvision's DataLoader", "bench/gpu.py --sections engines",
                     "done"], log[-3000:]
    assert "'linked_in': True} |" in log and "Traceback" not in log, log[:3000]
    assert len(re.findall(r"^\d+ skipped, \d+ deselected", log, re.M)) == 2, log  # (no CUDA: each test says why)
    assert log.count("test accuracy") == 2, log[-3000:]
    out = tmp_path / "out"
    for name in ("png", "resident", "engines"):
        report = json.loads((out / f"gpu-{name}.json").read_text())
        assert report["failed"] == 0 and report[name], (name, report.get(name))
        assert all("images_per_s" in r or "split" in r for r in report[name]), report[name]
    inflate = json.loads((out / "nvcomp.json").read_text())  # (zlib only here: nvCOMP says why it was not measured)
    probe = json.loads(re.search(r"^(\{.*\"host_us\".*\})$", log, re.M).group(1))  # (the CPU's form: said so)
    assert probe["device"].startswith("cpu (no CUDA device") and len(probe["host_us"]) == 2, probe
    assert inflate["zlib_1_threads"]["images_per_s"] > 0 and "no CUDA device" in inflate["nvcomp_error"], inflate
    md = (out / "gpu-bench.md").read_text()
    assert md.count("# bench/gpu.py: no CUDA device") == 3 and "none is a GPU figure" in md
    assert len(list(out.iterdir())) <= 5  # (with on-device.sh's three: at most the eight files that come back)


@pytest.mark.slow  # about 2 minutes on 2 cores
@pytest.mark.skipif(not (ROOT / "bench" / "gpu_check.py").exists(), reason="bench/ is not in this tree")
def test_make_gpu_check_rehearsed_on_the_cpu(tmp_path):
    """`make gpu-check` as a GPU machine runs it, rehearsed here (`--rehearse`: DALI and
    torchcodec hidden, as that machine's image has neither; the CUDA tests skipped with
    their reason; the bench small): the preflight finds the installed package, every part ends
    ok, its tests pass or skip with their reasons, and the reports are where the call
    fetches them from. (make test ran this after pytest, on one core; here it runs beside
    the other tests.)"""
    out = tmp_path / "out"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OUT": ""}
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--rehearse", "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "gpu-check: ok" in log, log[-4000:]
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["rehearse"] and not report.get("preflight_problem"), report
    found = report["preflight"]["gpudecode"]  # (the installed package, not this source tree)
    assert not found["source_tree"] and "site-packages" in found["path"], found
    parts = report["parts"]
    assert list(parts) == ["kernels", "pipeline", "bench", "cpu"] and all(p["ok"] and not p["cut"] for p in parts.values())
    for name in ("kernels", "pipeline"):
        assert parts[name]["passed"] > 0 and not parts[name]["failed"], parts[name]
    skipped = [s["why"] for s in parts["pipeline"]["skipped"]]
    assert any("hidden by GPUDECODE_HIDE" in why for why in skipped), skipped  # (DALI, torchcodec: hidden)
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.json", "gpu-check.log", "gpu-check.md", "gpu.json",
                                                     "gpu.md"]
