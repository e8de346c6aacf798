#!/usr/bin/env bash
# The next GPU call, prepared and rehearsed (issues 55 and 56 wait on it): one call of a lent GPU
# machine, each step under its own time limit, the new code first.
#
# On this machine, in the project's root, before the call:
#   bash <the team's gpu folder>/carry.sh   # wheels, nvCOMP, libjpeg-turbo into .device/ (git-ignored)
#   bash bench/gpu_call.sh carry            # adds Debian's libdeflate (the CPU decoder's PNG inflate)
# The call (the device tool's run, carry [".device"]), END the epoch second it must be done by:
#   export END=$(( $(date +%s) + 570 )); bash .device/on-device.sh bash bench/gpu_call.sh
#
# Steps, in order: what the open issues' acceptance waits on first, then what checks the rest:
#   1. the machine, and what the build found (libpng, libdeflate);
#   2. tests/test_gpu.py's PNG, resident, pinned-slot, strided-batch, mask and box tests (code that has never run on a device);
#   3. bench/gpu.py's PNG section (the two-halves engine against the CPU decoder, its detours), and
#      nvCOMP's inflate against zlib with 64, 256 and 1,024 streams a call, and straight into one buffer
#      (bench/nvcomp_inflate.py);
#   4. its resident section (keep="gpu": the CIFAR-sized set at batch 1024, the 256-pixel store), and
#      what one launch of the kernel costs the host, piece by piece (bench/launch_probe.py, into run.log);
#   5. the rest of tests/test_gpu.py;
#   6. the CIFAR example fed by gpudecode and by torchvision's DataLoader (14 workers);
#   7. bench/gpu.py's engines section at 6 and 14 threads, with what time is left.
# With END 570 s after the start and about 40 s of build, every step gets its share; a slow one
# takes from the last steps, never from the ones before it.
# What it prints, on-device.sh streams into $OUT/run.log (beside its gpu.txt and build.log); each bench
# section adds its gpu.json as $OUT/gpu-<section>.json and its table to $OUT/gpu-bench.md, and
# nvcomp_inflate.py its nvcomp.json: the eight files that come back. A step cut by its limit leaves its lines behind.
# GPU_CALL_REHEARSE=1 runs the same steps small on a machine without CUDA (tests/test_gpu_call.py).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = carry ]; then  # libdeflate's .debs beside libjpeg-turbo's: on-device.sh unpacks every one
  [ -d "$here/.device/deb" ] || { echo "no .device/deb: run the team's carry.sh first"; exit 1; }
  (cd "$here/.device/deb" && apt-get download libdeflate0 libdeflate-dev) || exit 1
  ls "$here/.device/deb"
  exit 0
fi
cd "$here"
out=${OUT:-/tmp/out}
mkdir -p "$out"
small=${GPU_CALL_REHEARSE:-0}
END=${END:-$(( $(date +%s) + 480 ))}
work=$(mktemp -d /tmp/gpudecode-call.XXXXXX)  # (this call's own scratch: the sections' reports, the bench's files)
trap 'rm -rf "$work"' EXIT
export GPUDECODE_CACHE_DIR=${GPUDECODE_CACHE_DIR:-$work/kcache} GPUDECODE_BENCH_OUT=$work/bench
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
left() { echo $(( END - $(date +%s) )); }
# budget WANT KEEP: WANT seconds, or fewer so that KEEP are left for the steps after this one
budget() { local want=$1 keep=$2 l; l=$(( $(left) - keep )); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }
step() { echo "==> $1 ($(left) s left)"; }
run() { "$@" 2>&1; }

step "the machine"
run bash -c 'nproc; lscpu | grep -E "Model name|^CPU family|^Model:"; free -g | head -2'
run bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'"
(cd /tmp && $PY -c 'import gpudecode, gpudecode._native as n
print("gpudecode", gpudecode.__version__, "from", gpudecode.__file__, "| libpng:", n.libpng, "| the CPU decoder'"'"'s PNG inflate:", n.png_inflater)') 2>&1

tests=(-q -p no:cacheprovider --tb=short)
new="png or resident or pinned or where_it_lies or masks or boxes"  # (without CUDA every test of the file skips, saying why)
step "tests/test_gpu.py: the PNG, resident, pinned-slot, strided-batch, mask and box tests"
(cd tests && timeout -s INT -k 15 "$(budget 90 440)" $PY -m pytest "${tests[@]}" -rfEsP test_gpu.py -k "$new") 2>&1

# bench/gpu.py, a section a process (each its own limit): its gpu.json kept as gpu-NAME.json, its table
# added to gpu-bench.md
section() {  # section NAME WANT KEEP ARGS...
  local name=$1 want=$2 keep=$3
  shift 3
  step "bench/gpu.py --sections $name"
  (cd /tmp && timeout -s INT -k 10 "$(budget "$want" "$keep")" $PY -m gpudecode.bench.suite.gpu --sections "$name" \
     --out "$work/$name" "$@") 2>&1
  [ -f "$work/$name/gpu.json" ] && cp "$work/$name/gpu.json" "$out/gpu-$name.json"
  [ -f "$work/$name/gpu.md" ] && cat "$work/$name/gpu.md" >> "$out/gpu-bench.md"
}
if [ "$small" = 1 ]; then set=(--images 32 --batch-sizes 16 --threads 2); else
  set=(--images 1024 --batch-sizes 256 --threads 6); fi
section png 100 380 "${set[@]}"
step "bench/nvcomp_inflate.py: nvCOMP against zlib, and with more streams a call"
if [ "$small" = 1 ]; then inflate=(--images 16 --calls 8,16 --threads 2 --repeats 1 --levels 1,9); else
  inflate=(--images 1024 --calls 64,256,1024 --threads 6); fi
(cd /tmp && timeout -s INT -k 10 "$(budget 45 330)" $PY "$here/bench/nvcomp_inflate.py" "${inflate[@]}" --out "$out") 2>&1
section resident 70 260 "${set[@]}"
step "bench/launch_probe.py: a launch's host work, piece by piece"
if [ "$small" = 1 ]; then probe=(--batch 64 --repeats 20); else probe=(--batch 1024 --repeats 300); fi
(cd /tmp && timeout -s INT -k 10 "$(budget 25 240)" $PY "$here/bench/launch_probe.py" "${probe[@]}") 2>&1

step "tests/test_gpu.py: the rest"
(cd tests && timeout -s INT -k 15 "$(budget 150 120)" $PY -m pytest "${tests[@]}" -rfEs --durations=8 test_gpu.py -k "not ($new)") 2>&1

step "the CIFAR example: gpudecode, then torchvision's DataLoader"
if [ "$small" = 1 ]; then cifar=(--demo --demo-size 200 --epochs 1 --steps 2 --batch-size 32); workers=2; else
  cifar=(--demo --demo-size 50000 --epochs 2 --batch-size 512); workers=14; fi
timeout -s INT -k 10 "$(budget 50 70)" $PY examples/cifar/train.py "${cifar[@]}" 2>&1
timeout -s INT -k 10 "$(budget 60 10)" $PY examples/cifar/train.py "${cifar[@]}" --torchvision --workers "$workers" 2>&1

if [ "$small" = 1 ]; then section engines 60 0 "${set[@]}"; else
  section engines 60 0 "${set[@]}" --engine-threads 6,14; fi
step "done"
