#!/usr/bin/env bash
set -u
out=${OUT:-/tmp/out}
export GPUDECODE_CACHE_DIR=/tmp/kcache GPUDECODE_BENCH_OUT=/tmp/bench PYTHONUNBUFFERED=1
left() { echo $(( END - $(date +%s) )); }
budget() { local want=$1 keep=$2 l; l=$(( $(left) - keep )); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }
echo "==> turn3: engines, direct ($(left) s left)"
timeout -s INT -k 10 "$(budget 50 70)" python3 bench/engines_probe.py --part direct --threads 6 --images 2048 --out "$out"
echo "==> turn3: regions of interest: pixels, direct, pairs at 6 ($(left) s left)"
timeout -s INT -k 10 "$(budget 90 3)" python3 bench/engines_probe.py --part roi --threads 6 --images 2048 --out "$out"
echo "==> turn3: done ($(left) s left)"
