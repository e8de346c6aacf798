"""Build and run gpudecode's fuzzers, or replay their saved inputs under sanitizers.

    python tests/fuzz/run.py fuzz [--seconds N] [--targets a,b] [--jobs J]
        libFuzzer harnesses (clang, -fsanitize=fuzzer,address,undefined) for every C++
        entry point, and atheris harnesses for the Python parsers, N seconds each,
        starting from seeds (make_seeds.py), the saved corpus (tests/fuzz/corpus/) and the
        regression inputs (tests/fuzz/regressions/). Crashing inputs are written to
        tests/fuzz/crashes/ (move each, once fixed, to regressions/<target>/). Prints and
        writes (build/fuzz/summary.json) the executions and findings of each target.

    python tests/fuzz/run.py merge
        minimizes each target's working corpus into tests/fuzz/corpus/<target>.

    python tests/fuzz/run.py replay
        builds the C++ harnesses with g++ -fsanitize=address,undefined and a plain main
        (no libFuzzer needed) and replays the saved corpus and regressions through them:
        what `make test` runs. (The Python targets are replayed by pytest.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "tests" / "fuzz"
BUILD = ROOT / "build" / "fuzz"
SOURCES = [ROOT / "csrc" / n for n in ("tar.cpp", "probe.cpp", "jpeg_decode.cpp", "batch.cpp", "png_walk.cpp",
                                                   "warp.cpp")]
CPP = {"tar": 1 << 15, "probe": 4096, "jpeg": 1 << 15, "batch": 1 << 16, "png_walk": 1 << 15,  # target: -max_len
       "warp": 512}
PY = {"tar_stream": 1 << 14, "gzip_path": 1 << 14, "labels": 256, "shard_list": 256, "npy": 4096, "image": 1 << 15,
      "png_halves": 1 << 15, "parquet_pages": 1 << 15, "fields": 4096,
      "mask": 1 << 13, "boxes": 2048, "record": 1024, "warp_pick": 512}
FLAGS = ["-std=c++17", "-g", "-I", str(ROOT / "csrc")]
LIBS = ["-ljpeg", "-lpthread"]


def _pkg(name: str) -> list[str] | None:
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", name], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return out.stdout.split() if out.returncode == 0 else None


# libpng, as the module's build finds it (optional there, so here too): the png target and
# the PNG items of the batch target
_PNG = _pkg("libpng")
if _PNG is not None:
    SOURCES.append(ROOT / "csrc" / "png_decode.cpp")
    CPP["png"] = 1 << 15
    FLAGS += ["-DGPUDECODE_HAVE_PNG"]
    LIBS += _PNG
    # the direct path of png_decode.cpp (zlib, and libdeflate where found), as the module's build has it:
    # the png target holds it to libpng
    _ZLIB = _pkg("zlib")
    if _ZLIB is not None:
        FLAGS += ["-DGPUDECODE_HAVE_ZLIB"]
        LIBS += _ZLIB
        _DEFLATE = _pkg("libdeflate")
        if _DEFLATE is not None:
            FLAGS += ["-DGPUDECODE_HAVE_LIBDEFLATE"]
            LIBS += _DEFLATE


def _jpeg_flags() -> list[str]:
    return _pkg("libjpeg") or []


def _env() -> dict:
    """The environment of fuzzer processes: this Python first on PATH (libFuzzer re-runs
    an atheris script by its own path for -merge, through its shebang)."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def build_fuzzers(targets: list[str]) -> None:
    cxx = shutil.which("clang++") or shutil.which("clang++-14")
    if cxx is None:
        sys.exit("clang++ is needed for libFuzzer (apt-get install clang libclang-rt-14-dev)")
    BUILD.mkdir(parents=True, exist_ok=True)
    for t in targets:
        cmd = [cxx, *FLAGS, "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
               str(FUZZ / f"{t}_fuzzer.cpp"), *map(str, SOURCES), *_jpeg_flags(), *LIBS, "-o", str(BUILD / t)]
        subprocess.run(cmd, check=True)


def build_replay(targets: list[str], flags: list[str] | None = None, libs: list[str] | None = None,
                 suffix: str = "") -> dict[str, Path]:
    """Each target's replay executable (g++ -O1 under ASan + UBSan): the native sources compiled
    once into objects for these flags, each harness then compiled and linked with them (each
    harness compiling every source again took 203 s against 63 on a 2-core Zen 1)."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        sys.exit("a C++ compiler is needed")
    flags = FLAGS if flags is None else flags
    libs = LIBS if libs is None else libs
    cflags = [x for x in libs if not x.startswith(("-l", "-L"))]  # (pkg-config's -I and -D, for the objects)
    common = [*flags, "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    objects_dir = BUILD / "replay" / f"objects{suffix}"
    objects_dir.mkdir(parents=True, exist_ok=True)
    objects = []
    for src in [*SOURCES, FUZZ / "replay_main.cpp"]:
        obj = objects_dir / (src.stem + ".o")
        subprocess.run([cxx, *common, *cflags, *_jpeg_flags(), "-c", str(src), "-o", str(obj)], check=True)
        objects.append(str(obj))
    out = {}
    for t in targets:
        exe = BUILD / "replay" / (t + suffix)
        cmd = [cxx, *common, str(FUZZ / f"{t}_fuzzer.cpp"), *objects, *_jpeg_flags(), *libs, "-o", str(exe)]
        subprocess.run(cmd, check=True)
        out[t + suffix] = exe
    return out


def _zlib_build() -> tuple[list[str], list[str]] | None:
    """FLAGS and LIBS without libdeflate, where it was found: the png target is replayed
    once more with the direct path's zlib inflate (what a build without libdeflate runs)."""
    if "-DGPUDECODE_HAVE_LIBDEFLATE" not in FLAGS:
        return None
    deflate = _pkg("libdeflate") or []
    return [f for f in FLAGS if f != "-DGPUDECODE_HAVE_LIBDEFLATE"], [x for x in LIBS if x not in deflate]


def saved(target: str) -> list[Path]:
    return [d for d in (FUZZ / "corpus" / target, FUZZ / "regressions" / target) if d.is_dir()]


# a Python target that reads a C++ target's inputs as they are (tests/test_fuzz_corpus.py replays them
# through it) starts from them too: the tar fuzzer's corpus found a stream-vs-native difference that
# tar_stream, fuzzing from its own, had not
SHARED = {"tar_stream": ("tar",), "image": ("probe",), "png_halves": ("png_walk",), "warp_pick": ("warp",)}


def _stats(log: str) -> dict:
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    done = re.findall(r"Done (\d+) runs in (\d+) second", log)
    execs = int(runs[-1]) if runs else (int(done[-1][0]) if done else 0)
    cov = re.findall(r"cov: (\d+)", log)
    return {"executions": execs, "coverage": int(cov[-1]) if cov else None}


def fuzz(targets: list[str], seconds: int, jobs: int) -> int:
    cpp = [t for t in targets if t in CPP]
    if cpp:
        build_fuzzers(cpp)
    subprocess.run([sys.executable, str(FUZZ / "make_seeds.py"), str(BUILD / "seeds")], check=True)
    seeds = {t: t for t in [*CPP, *PY]}
    crashes = FUZZ / "crashes"
    crashes.mkdir(exist_ok=True)
    procs: list = []
    ended: dict[str, float] = {}

    def poll() -> int:
        running = 0
        for t, p, _, _ in procs:
            if p.poll() is None:
                running += 1
            elif t not in ended:
                ended[t] = time.time()
        return running

    for t in targets:
        work = BUILD / "corpus" / t
        work.mkdir(parents=True, exist_ok=True)
        cmd = ([str(BUILD / t)] if t in CPP else [sys.executable, str(FUZZ / "fuzz_py.py"), t])
        cmd += [f"-max_total_time={seconds}", f"-max_len={(CPP | PY)[t]}", "-rss_limit_mb=3072", "-timeout=20",
                f"-artifact_prefix={crashes}/{t}-", "-print_final_stats=1", str(work),
                str(BUILD / "seeds" / seeds[t]), *map(str, saved(t)),
                *(str(d) for other in SHARED.get(t, ()) for d in saved(other))]
        log = open(BUILD / f"{t}.log", "w")
        procs.append((t, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=_env()), log,
                      time.time()))
        while poll() >= jobs:
            time.sleep(0.5)
    while poll():
        time.sleep(0.5)
    summary = {}
    for t, p, log, started in procs:
        rc = p.wait()
        log.close()
        text = (BUILD / f"{t}.log").read_text(errors="replace")
        found = sorted(str(c.relative_to(ROOT)) for c in crashes.glob(f"{t}-*"))
        summary[t] = {**_stats(text), "seconds": round(ended[t] - started), "exit": rc, "findings": found}
        print(f"{t:12s} {summary[t]['executions']:>10d} runs in {summary[t]['seconds']:>5d} s  exit {rc}  "
              f"{len(found)} finding(s)")
    (BUILD / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0 if all(s["exit"] == 0 and not s["findings"] for s in summary.values()) else 1


def merge(targets: list[str]) -> None:
    cpp = [t for t in targets if t in CPP]
    if cpp:
        build_fuzzers(cpp)
    for t in targets:
        dest = FUZZ / "corpus" / t
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [str(BUILD / t)] if t in CPP else [str(FUZZ / "fuzz_py.py"), t]
        subprocess.run(cmd + ["-merge=1", f"-max_len={(CPP | PY)[t]}", str(dest), str(BUILD / "corpus" / t)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
        print(f"{t}: {len(list(dest.iterdir()))} inputs saved")


def replay(targets: list[str]) -> int:
    exes = build_replay([t for t in targets if t in CPP])
    plain = _zlib_build()
    if plain is not None and "png" in exes:
        exes.update(build_replay(["png"], *plain, suffix="-zlib"))
    for t, exe in exes.items():
        dirs = [str(d) for d in saved(t.split("-")[0])]
        r = subprocess.run([str(exe), *dirs], capture_output=True, text=True)
        print(f"{t}: {r.stdout.strip()}{' FAILED' if r.returncode else ''}")
        if r.returncode:
            print(r.stderr[-4000:], file=sys.stderr)
            return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["fuzz", "merge", "replay"])
    ap.add_argument("--seconds", type=int, default=60, help="per target (fuzz)")
    ap.add_argument("--targets", default=",".join([*CPP, *PY]))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="fuzzers run at once")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    unknown = set(targets) - set(CPP) - set(PY)
    if unknown:
        sys.exit(f"unknown targets: {sorted(unknown)}")
    if a.mode == "fuzz":
        return fuzz(targets, a.seconds, a.jobs)
    if a.mode == "merge":
        merge(targets)
        return 0
    return replay(targets)


if __name__ == "__main__":
    sys.exit(main())
