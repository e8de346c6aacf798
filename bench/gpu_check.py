"""`make gpu-check`: the GPU path checked and measured on this machine, in parts that each
fit in one short call of a lent GPU machine (at most 10 minutes, only a few files back).

    python bench/gpu_check.py [--part all|preflight|kernels|pipeline|bench] [--out DIR]
                              [--budget SECONDS] [--images N] [--rehearse]

Every call starts with the preflight: what it found (GPU, driver, Python, torch,
torchvision, numba, numba-cuda; which gpudecode it imports and from where; each decoder
and what actually decodes in it, GPU, hardware or CPU; whether the CUDA kernels compile,
and whether a second process loads them from the disk cache). Then the part asked for:

- kernels:  tests/test_gpu.py, test_kernels.py, test_transforms.py (the CUDA kernels
            against the CPU twin and torchvision, the GPU decoders, the Loader on CUDA);
- pipeline: tests/test_gpu_design.py, test_decode.py, test_split.py, test_loader.py (each
            GPU decoder beside the CPU one, the split decoder's engines, the stream and
            ring design, the Loader end to end);
- bench:    gpudecode.bench.suite.gpu (bench/gpu.py): img/s per decoder and batch size
            against the CPU path and the classic DataLoader, and the recipes;
- cpu:      gpudecode.bench.suite.kernels (bench/kernels.py, --ops, --stages): the host CPU's
            fused kernel against torchvision on one core (the GPU machines' hosts are
            Intel Xeons: issue 41's figure), into the log;
- all:      the four, one after the other.

Everything it prints is also appended, line by line as it comes, to <out>/gpu-check.log,
so a call cut off by its time limit leaves its log behind; --budget (seconds, default: no
limit) stops a part that would run past it and says so in the report. It writes at most
five files to --out (default $OUT, else bench/_out/gpu): gpu-check.log, gpu-check.json
and gpu-check.md (each call adds its part to them), and the bench's gpu.json and gpu.md.
Tests and the bench run from a folder outside this repository, so they import the
installed gpudecode, never the source tree.

Without CUDA the kernels run under numba's CUDA simulator, the GPU decoders in their CPU
builds, the tests that need a device are skipped with the reason, and the bench runs the
same pipelines on the CPU, small. --rehearse runs it so in the shape of the GPU machine's
image (DALI and torchcodec hidden, as it has neither) and small: of each part's tests, those
that touch a GPU library or CUDA, take under 20 s on 2 cores and are not the simulator's (the
full suite runs every one); the bench's runs and recipes on 32 images (bench/gpu_call.sh's
rehearsal runs its other sections). `make test` runs that rehearsal, so the first real
GPU run does not fail in its own tooling.

Exit status: 0 when every test passed or was skipped with a reason, the bench ran
without an error, and the preflight found the installed package; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = {
    "kernels": ["test_gpu.py", "test_kernels.py", "test_transforms.py"],
    "pipeline": ["test_gpu_design.py", "test_decode.py", "test_split.py", "test_loader.py"],
}
ORDER = ("kernels", "pipeline", "bench", "cpu")
# The rehearsal checks this script and the GPU image's shape (DALI and torchcodec hidden), not the
# tests themselves (make test runs every one of them): of each part, the tests that touch a GPU
# library or CUDA, so a test that fails where DALI is absent is still seen here (the simulator's
# tests left out: without CUDA they are the suite's own, run again).
REHEARSED = "(gpu or cuda or dali or torchcodec or nvimgcodec or backend) and not simulator"
HIDDEN = "nvidia.dali,torchcodec"
GRACE = 20  # seconds before the deadline a cut part is interrupted, for its report  # what the GPU machine's image lacks (../shared/gpu/README.md)


class Log:
    """Prints and appends to <out>/gpu-check.log at once (flushed per line)."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "a", buffering=1, encoding="utf-8", errors="replace")

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.f.write(line + "\n")

    def close(self) -> None:
        self.f.close()


def run_streamed(cmd: list[str], *, cwd: Path, env: dict, log: Log, deadline: float | None) -> tuple[int, bool]:
    """Runs `cmd`, each output line to the log as it comes; (exit status, cut off at the
    deadline)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    cut = False
    lines = proc.stdout
    if lines is None:  # (never, with stdout=PIPE: for the type checker, and kept under python -O)
        raise RuntimeError(f"no output pipe for {cmd[0]}")
    if deadline is not None:
        import threading

        # the interrupt comes GRACE seconds before the deadline, or a quarter of what is left
        # when that is shorter (a short budget is not spent before the command starts)
        grace = min(GRACE, max(0.0, (deadline - time.monotonic()) / 4))

        def watchdog() -> None:
            nonlocal cut
            while proc.poll() is None:
                if time.monotonic() > deadline - grace:
                    # SIGINT first: pytest, interrupted so, still prints its summary (the
                    # failed tests' names and reasons) and writes its junit report; a cut
                    # without them left only a line of dots from the first GPU run
                    cut = True
                    for sig, wait in ((signal.SIGINT, max(grace, 2.0)), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                        try:
                            os.killpg(proc.pid, sig)
                            proc.wait(wait)
                            return
                        except subprocess.TimeoutExpired:
                            continue
                        except ProcessLookupError:
                            return
                    return
                time.sleep(0.5)

        threading.Thread(target=watchdog, daemon=True).start()
    with lines:
        for line in lines:
            log(line.rstrip("\n"))
    return proc.wait(), cut


def child_env(rehearse: bool, cache: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # one kernel cache for the call: the preflight's compiled kernels serve the tests
    env.setdefault("GPUDECODE_CACHE_DIR", str(cache))
    if rehearse:
        env["GPUDECODE_HIDE"] = HIDDEN
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench" / "_hide")] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


# ---------------------------------------------------------------------------------------
# the preflight, in a child process (a crash there is reported, not fatal)

KERNEL_PROBE = """
import time, torch
from gpudecode import transforms as T
tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                T.Normalize([0.5] * 3, [0.25] * 3)])
img = torch.randint(0, 256, (3, 48, 40), dtype=torch.uint8, device="cuda")
t = time.perf_counter()
out = tf([img], tf.make_params([(48, 40)], 0))
torch.cuda.synchronize()
print("SECONDS", time.perf_counter() - t, float(out.abs().sum()))
"""


def preflight_child() -> int:
    """Prints the facts as JSON on its last line."""
    facts: dict = {"python": sys.version.split()[0], "cwd": os.getcwd()}
    import torch

    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    try:
        import torchvision

        facts["torchvision"] = torchvision.__version__
    except Exception as e:  # reported, not fatal
        facts["torchvision"] = f"unavailable ({type(e).__name__})"
    cuda = torch.cuda.is_available()
    facts["cuda"] = cuda
    if cuda:
        facts["gpu"] = torch.cuda.get_device_name()
        facts["capability"] = "sm_%d%d" % torch.cuda.get_device_capability()
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
            facts["driver"], facts["memory"] = (x.strip() for x in smi.split(","))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass
    for mod, key in (("numba", "numba"), ("numba_cuda", "numba_cuda")):
        try:
            facts[key] = __import__(mod).__version__
        except Exception as e:  # not installed
            facts[key] = f"unavailable ({type(e).__name__})"
    facts["cudasim"] = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    try:
        import gpudecode
        from gpudecode import _native  # noqa: F401  (the built module: a source tree has none)

        where = Path(gpudecode.__file__).resolve().parent
        facts["gpudecode"] = {"version": gpudecode.__version__, "path": str(where),
                              "source_tree": where == ROOT / "gpudecode"}
    except Exception as e:
        facts["gpudecode"] = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(facts))
        return 0
    facts["decoders"] = decoders_found("cuda" if cuda else "cpu")
    if cuda:
        facts["engines"] = engines_found()
        facts["kernels"] = kernels_compile()
    print(json.dumps(facts))
    return 0


def engines_found() -> dict:
    """On a GPU: what decoder="auto" makes (the split decoder's engines), which of
    nvImageCodec's GPU backends decode and why the others do not, and whether its regions
    of interest work (a child process: a crash there is reported, not suffered)."""
    out: dict = {}
    try:
        from gpudecode.decode import available, make_decoder

        dec = make_decoder("auto", device="cuda", num_threads=2, max_pixels=0)
        out["auto"] = getattr(dec, "backend", dec.name)
        dec.close()
        if available("nvimgcodec")[0]:
            from gpudecode.decode import nvimgcodec as nv

            probe = nv.NvImageCodecDecoder(device="cuda", num_threads=1, backends=("hw", "cuda"))
            out["nvimgcodec_backends"] = {"working": probe.working, "why": probe.why}
            probe.close()
    except Exception as e:  # reported
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        from gpudecode.decode import nvimgcodec as nv

        out["roi"] = nv.roi_probe(0)
    except Exception as e:
        out["roi"] = (False, f"{type(e).__name__}: {e}")
    return out


def decoders_found(device: str) -> dict:
    """Each decoder: usable here or why not; what decodes in it (its `backend`); a small
    JPEG decoded through it on `device`."""
    import io

    import numpy as np
    from PIL import Image

    from gpudecode.decode import NAMES, Request, available, make_decoder

    img = np.zeros((64, 48, 3), np.uint8)
    img[:, :, 0] = np.arange(48, dtype=np.uint8) * 5
    b = io.BytesIO()
    Image.fromarray(img).save(b, format="JPEG", quality=95)
    req = Request(b.getvalue(), "jpeg", 64, 48, (8, 4, 40, 30), "preflight", "k")
    out = {}
    for name in NAMES:
        ok, why = available(name)
        if not ok:
            out[name] = {"usable": False, "why": why}
            continue
        try:
            dec = make_decoder(name, device=device, num_threads=2, max_pixels=0)
            got = dec.decode([req]).settle()
            out[name] = {"usable": got.errors[0] is None, "backend": getattr(dec, "backend", "?"),
                         "pixels_on": str(got.pixels.device), "error": got.errors[0]}
            dec.close()
        except Exception as e:  # the backend's own failure, reported
            out[name] = {"usable": False, "why": f"{type(e).__name__}: {e}"}
    return out


def kernels_compile() -> dict:
    """The fused CUDA kernels on a tiny batch, in two processes one after the other: the
    first compiles (or loads what an earlier call kept), the second must load from the
    disk cache."""
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", KERNEL_PROBE], capture_output=True, text=True, timeout=300)
        line = next((x for x in p.stdout.splitlines() if x.startswith("SECONDS")), None)
        if p.returncode or line is None:
            return {"ok": False, "error": (p.stderr or p.stdout)[-1500:]}
        runs.append(float(line.split()[1]))
    return {"ok": True, "first_s": runs[0], "second_s": runs[1]}


def preflight_lines(f: dict) -> list[str]:
    lines = ["gpu-check preflight:"]
    if f.get("cuda"):
        lines.append(f"  GPU: {f.get('gpu')} ({f.get('capability')}), driver {f.get('driver', '?')}, "
                     f"{f.get('memory', '?')}")
    else:
        lines.append("  GPU: none (torch.cuda.is_available() is False): kernels under numba's CUDA simulator, GPU "
                     "decoders in their CPU builds, no GPU figure")
    lines.append(f"  python {f.get('python')}, torch {f.get('torch')} (CUDA {f.get('torch_cuda')}), torchvision "
                 f"{f.get('torchvision')}, numba {f.get('numba')}, numba-cuda {f.get('numba_cuda')}")
    g = f.get("gpudecode", {})
    if "error" in g:
        lines.append(f"  gpudecode: NOT importable as installed: {g['error']}")
    else:
        lines.append(f"  gpudecode {g.get('version')} from {g.get('path')}"
                     + (" (THE SOURCE TREE, not the installed package)" if g.get("source_tree") else ""))
    for name, d in f.get("decoders", {}).items():
        if d.get("usable"):
            lines.append(f"  decoder {name}: {d.get('backend')}; a test JPEG decoded onto {d.get('pixels_on')}")
        else:
            lines.append(f"  decoder {name}: not usable here: {d.get('why') or d.get('error')}")
    e = f.get("engines")
    if e is not None:
        lines.append(f"  decoder 'auto' (every engine): {e.get('auto', e.get('error'))}")
        nb = e.get("nvimgcodec_backends")
        if nb:
            lines.append(f"  nvImageCodec GPU backends: {nb['working']}; why not: {nb['why'] or 'none failed'}")
        ok, why = e.get("roi", (False, "not probed"))
        lines.append(f"  nvImageCodec regions of interest on the GPU: {'work' if ok else 'do NOT work'} ({why})")
    k = f.get("kernels")
    if k is not None:
        if k.get("ok"):
            lines.append(f"  kernels: compiled and ran in {k['first_s']:.1f} s; a second process, from the disk "
                         f"cache, in {k['second_s']:.1f} s")
        else:
            lines.append(f"  kernels: FAILED to compile or run: {k.get('error', '')[-600:]}")
    return lines


def preflight_failed(f: dict) -> str | None:
    g = f.get("gpudecode", {})
    if "error" in g:
        return f"gpudecode is not importable as installed: {g['error']}"
    if g.get("source_tree"):
        return "the source tree's gpudecode was imported instead of the installed one"
    if f.get("cuda") and not f.get("kernels", {}).get("ok"):
        return "the CUDA kernels did not compile or run"
    if not f.get("decoders", {}).get("cpu", {}).get("usable"):
        return "the CPU decoder failed"
    return None


# ---------------------------------------------------------------------------------------


def junit(path: Path) -> dict:
    """Counts, failures and skip reasons of a pytest junit XML file."""
    root = ET.parse(path).getroot()
    out: dict = {"passed": 0, "failed": [], "skipped": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            out["failed"].append({"test": name, "why": (bad.get("message") or "")[:300]})
        elif skip is not None:
            out["skipped"].append({"test": name, "why": (skip.get("message") or "")[:300]})
        else:
            out["passed"] += 1
    return out


def run_tests(part: str, *, env: dict, log: Log, deadline: float | None, rehearse: bool, work: Path) -> dict:
    xml = work / f"{part}.xml"
    # from tests/ (python -m puts the working folder on the path: tests/, not the source tree's gpudecode)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={xml}", "--durations=15"]
    if rehearse:
        cmd += ["-m", "not slow", "-k", REHEARSED]
    cmd += PARTS[part]
    t = time.perf_counter()
    log(f"==> gpu-check part {part!r}: pytest {' '.join(PARTS[part])}"
        + (f" -m 'not slow' -k '{REHEARSED}'" if rehearse else ""))
    status, cut = run_streamed(cmd, cwd=ROOT / "tests", env=env, log=log, deadline=deadline)
    result: dict = {"status": status, "cut": cut, "seconds": round(time.perf_counter() - t)}
    if xml.exists():
        result.update(junit(xml))
    elif not cut:
        result["failed"] = [{"test": part, "why": f"pytest exited {status} without a report"}]
    result["ok"] = status == 0 and not cut
    return result


def run_bench(*, env: dict, log: Log, deadline: float | None, out: Path, images: int, work: Path,
              rehearse: bool) -> dict:
    t = time.perf_counter()
    # (the rehearsal: small, the sections bench/gpu_call.sh's rehearsal does not run)
    args = ["--images", str(images)] + (["--batch-sizes", "16", "--threads", "2", "--sections", "runs,recipes"]
                                        if rehearse else [])
    log(f"==> gpu-check part 'bench': python -m gpudecode.bench.suite.gpu {' '.join(args)}")
    benv = dict(env)
    benv["GPUDECODE_BENCH_OUT"] = str(work / "bench")  # its datasets: not in the reports' folder
    status, cut = run_streamed([sys.executable, "-m", "gpudecode.bench.suite.gpu", "--out", str(out), *args],
                               cwd=work, env=benv, log=log, deadline=deadline)
    return {"status": status, "cut": cut, "seconds": round(time.perf_counter() - t), "ok": status == 0 and not cut,
            "report": "gpu.md"}


def run_cpu(*, env: dict, log: Log, deadline: float | None, work: Path, rehearse: bool) -> dict:
    """The host CPU's fused kernel against torchvision, one core (gpudecode.bench.suite.kernels,
    the main comparison, --ops and --stages): the GPU machines' hosts are Intel Xeons, where issue 41
    found the base resample 3x its Zen 4 cost; their figures land in the log."""
    t = time.perf_counter()
    n = "8" if rehearse else "128"
    status = 0
    cut = False
    # (the rehearsal runs the main comparison only, small: it checks the tooling, and make test's time counts)
    for extra in ([[]] if rehearse else [[], ["--ops"], ["--stages"]]):
        log(f"==> gpu-check part 'cpu': python -m gpudecode.bench.suite.kernels --images {n} {' '.join(extra)}")
        benv = dict(env)
        benv["GPUDECODE_BENCH_OUT"] = str(work / "bench")
        st, c = run_streamed([sys.executable, "-m", "gpudecode.bench.suite.kernels", "--images", n, *extra],
                             cwd=work, env=benv, log=log, deadline=deadline)
        status, cut = status or st, cut or c
        if cut:
            break
    return {"status": status, "cut": cut, "seconds": round(time.perf_counter() - t), "ok": status == 0 and not cut,
            "report": "gpu-check.log"}


def render(report: dict) -> list[str]:
    f = report.get("preflight", {})
    md = [f"# gpu-check: {f.get('gpu') or 'no CUDA device'}" + (" (rehearsal: DALI and torchcodec hidden)"
                                                                 if report.get("rehearse") else ""), ""]
    md += ["```"] + preflight_lines(f) + ["```", ""]
    if report.get("preflight_problem"):
        md += [f"preflight: FAILED: {report['preflight_problem']}", ""]
    for part in ORDER:
        r = report.get("parts", {}).get(part)
        if r is None:
            md.append(f"- {part}: not run yet")
            continue
        state = "cut at the time budget" if r.get("cut") else ("ok" if r.get("ok") else f"FAILED (exit {r['status']})")
        if part in ("bench", "cpu"):
            md.append(f"- {part}: {state} in {r['seconds']} s (see {'gpu.md' if part == 'bench' else 'the log'})")
            continue
        md.append(f"- {part}: {state} in {r['seconds']} s: {r.get('passed', 0)} passed, {len(r.get('failed', []))} "
                  f"failed, {len(r.get('skipped', []))} skipped")
        md += [f"  - FAILED {x['test']}: {x['why']}" for x in r.get("failed", [])]
        reasons: dict[str, int] = {}
        for x in r.get("skipped", []):
            reasons[x["why"]] = reasons.get(x["why"], 0) + 1
        md += [f"  - skipped ({n}): {why}" for why, n in reasons.items()]
    return md


def main() -> int:
    if sys.argv[1:2] == ["_preflight"]:
        return preflight_child()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=["all", "preflight", *ORDER])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "_out" / "gpu"))
    ap.add_argument("--budget", type=float, default=None, help="seconds this call may take (parts past it are cut)")
    ap.add_argument("--images", type=int, default=None,
                    help="images in the bench's dataset (default 4096, rehearsed 32; without CUDA: <= 256)")
    ap.add_argument("--rehearse", action="store_true", help="DALI and torchcodec hidden; a subset of each part's tests, the bench small")
    a = ap.parse_args()
    start = time.monotonic()
    deadline = start + a.budget if a.budget else None
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu-check.log")
    work = Path(tempfile.mkdtemp(prefix="gpudecode-gpu-check-"))
    env = child_env(a.rehearse, work / "cache")
    log(f"==> gpu-check {time.strftime('%Y-%m-%d %H:%M:%S')}: part {a.part}"
        + (f", budget {a.budget:.0f} s" if a.budget else "") + (" (rehearsal: DALI and torchcodec hidden)"
                                                                  if a.rehearse else ""))
    state = out / "gpu-check.json"
    try:
        report = json.loads(state.read_text()) if state.exists() else {}
    except ValueError:
        report = {}
    report["rehearse"] = a.rehearse
    report.setdefault("parts", {})
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_preflight"], cwd=work, env=env,
                       capture_output=True, text=True)
    try:
        facts = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        facts = {"gpudecode": {"error": f"the preflight process failed (exit {p.returncode}): "
                                        f"{(p.stderr or p.stdout)[-1500:]}"}}
    facts["seconds"] = round(time.perf_counter() - t)
    report["preflight"] = facts
    for line in preflight_lines(facts):
        log(line)
    problem = preflight_failed(facts)
    report["preflight_problem"] = problem
    if problem:
        log(f"gpu-check preflight: FAILED: {problem}")
    ok = problem is None
    parts = ORDER if a.part == "all" else () if a.part == "preflight" else (a.part,)
    for part in parts:
        if deadline is not None and time.monotonic() > deadline - 20:
            log(f"==> gpu-check part {part!r}: not started, the budget is spent")
            report["parts"][part] = {"status": None, "cut": True, "ok": False, "seconds": 0}
            ok = False
            continue
        if part == "bench":
            images = a.images or (32 if a.rehearse else 4096)
            r = run_bench(env=env, log=log, deadline=deadline, out=out, images=images, work=work, rehearse=a.rehearse)
        elif part == "cpu":
            r = run_cpu(env=env, log=log, deadline=deadline, work=work, rehearse=a.rehearse)
        else:
            r = run_tests(part, env=env, log=log, deadline=deadline, rehearse=a.rehearse, work=work)
        report["parts"][part] = r
        ok = ok and r["ok"]
        state.write_text(json.dumps(report, indent=1))  # after each part: a later cut keeps what is done
        (out / "gpu-check.md").write_text("\n".join(render(report)) + "\n")
    state.write_text(json.dumps(report, indent=1))
    (out / "gpu-check.md").write_text("\n".join(render(report)) + "\n")
    log("\n".join(render(report)))
    log(f"gpu-check: {'ok' if ok else 'FAILED'} in {time.monotonic() - start:.0f} s; reports in {out}")
    log.close()
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
