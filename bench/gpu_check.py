"""`make gpu-check`: the GPU path checked and measured on this machine, in one command.

    python bench/gpu_check.py [--out DIR] [--images N] [--no-bench]

1. The GPU tests (pytest, from tests/): the CUDA kernels against the CPU twin on real
   photos and against torchvision on CUDA tensors, each GPU decoder against the CPU
   decoder, the Loader on CUDA end to end with a slow consumer, precache on CUDA
   (tests/test_gpu.py), with the kernel, decoder and loader suites beside them. On a
   machine without CUDA the kernels run under numba's CUDA simulator, the GPU decoders
   in their CPU builds, and the tests that need a device are skipped, each with the reason.
2. bench/gpu.py: img/s per decoder and batch size against the CPU path and torchvision's
   classic DataLoader (the CPU side only, and said so, without CUDA).

Writes gpu-check.md and gpu-check.json (and bench/gpu.py's gpu.md / gpu.json) to --out
(default: $OUT when set, else bench/_out/gpu). Exits with the tests' status: 0 when every
test passed or was skipped for want of a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["test_gpu.py", "test_gpu_design.py", "test_kernels.py", "test_decode.py", "test_loader.py", "test_transforms.py"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "_out" / "gpu"))
    ap.add_argument("--images", type=int, default=4096, help="images in bench/gpu.py's dataset")
    ap.add_argument("--no-bench", action="store_true", help="the tests only")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    cuda = torch.cuda.is_available()
    print(f"gpu-check: {'CUDA device: ' + torch.cuda.get_device_name() if cuda else 'no CUDA device'}; "
          f"torch {torch.__version__}", flush=True)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *TESTS],
                          cwd=ROOT / "tests", capture_output=True, text=True)
    (out / "gpu-check-tests.log").write_text(proc.stdout + proc.stderr)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    skips = re.findall(r"SKIPPED \[\d+\] (\S+): (.+)", proc.stdout)
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    print(proc.stdout[-4000:] if proc.returncode else tail, flush=True)
    report = {"cuda": cuda, "device": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__,
              "tests": {"status": proc.returncode, "summary": tail, "failed": failed,
                        "skipped": [{"where": w, "why": why} for w, why in skips],
                        "seconds": round(time.perf_counter() - t)}}
    if not a.no_bench:
        b = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), "--out", str(out),
                            "--images", str(a.images)], capture_output=True, text=True)
        print(b.stdout[-4000:], b.stderr[-2000:] if b.returncode else "", flush=True)
        report["bench"] = {"status": b.returncode, "report": str(out / "gpu.md")}
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    md = [f"# gpu-check: {report['device'] or 'no CUDA device'}", "",
          f"tests: {tail} ({report['tests']['seconds']} s; log gpu-check-tests.log)"]
    if failed:
        md += ["", "failed:"] + [f"- {f}" for f in failed]
    if skips:
        md += ["", "skipped:"] + [f"- {w}: {why}" for w, why in skips]
    if "bench" in report:
        md += ["", f"bench/gpu.py: exit {report['bench']['status']}, see gpu.md"]
    (out / "gpu-check.md").write_text("\n".join(md) + "\n")
    print(f"gpu-check: reports in {out}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
