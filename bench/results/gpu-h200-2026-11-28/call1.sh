#!/usr/bin/env bash
# This turn's GPU call, run by on-device.sh after the build: END (epoch seconds) is when the
# call must be done; each step gets its budget or what is left before the ones after it.
set -u
out=${OUT:-/tmp/out}
export GPUDECODE_CACHE_DIR=/tmp/kcache GPUDECODE_BENCH_OUT=/tmp/bench PYTHONUNBUFFERED=1
left() { echo $(( END - $(date +%s) )); }
budget() { local want=$1 keep=$2 l; l=$(( $(left) - keep )); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }
nproc; lscpu | grep -E "Model name|^CPU family|^Model:" ; free -g | head -2
echo "==> turn: preflight ($(left) s left)"
timeout -k 5 "$(budget 60 330)" python3 bench/gpu_check.py --part preflight --out /tmp/gc
cp /tmp/gc/gpu-check.md "$out/" 2>/dev/null
echo "==> turn: tests/test_gpu.py ($(left) s left)"
(cd tests && timeout -s INT -k 20 "$(budget 220 200)" python3 -m pytest -q -rfEs -p no:cacheprovider --durations=12 \
   --tb=short test_gpu.py)
echo "==> turn: engines and resident bench ($(left) s left)"
(cd /tmp && timeout -s INT -k 10 "$(budget 160 50)" python3 -m gpudecode.bench.suite.gpu --sections engines,resident \
   --images 2048 --batch-sizes 256 --engine-threads 2,6,14 --threads 6 --out "$out")
echo "==> turn: nvCOMP inflate against zlib ($(left) s left)"
timeout -k 5 "$(budget 45 5)" python3 bench/nvcomp_inflate.py --images 256 --threads 6 --out "$out"
echo "==> turn: done ($(left) s left)"
