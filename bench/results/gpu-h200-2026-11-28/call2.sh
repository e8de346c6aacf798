#!/usr/bin/env bash
set -u
out=${OUT:-/tmp/out}
export GPUDECODE_CACHE_DIR=/tmp/kcache GPUDECODE_BENCH_OUT=/tmp/bench PYTHONUNBUFFERED=1
left() { echo $(( END - $(date +%s) )); }
budget() { local want=$1 keep=$2 l; l=$(( $(left) - keep )); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }
echo "==> turn2: the 8 tests that failed, fixed ($(left) s left)"
(cd tests && timeout -s INT -k 15 "$(budget 80 300)" python3 -m pytest -q -rfEs -p no:cacheprovider --tb=short test_gpu.py \
   -k "disk_cache or fixed_number or one_copy or no_allocation or canvas_steps")
echo "==> turn2: engines, direct ($(left) s left)"
timeout -s INT -k 10 "$(budget 50 240)" python3 bench/engines_probe.py --part direct --threads 6 --images 2048 --out "$out"
echo "==> turn2: engines, pairs ($(left) s left)"
cp "$out/engines_probe.json" /tmp/direct.json 2>/dev/null
timeout -s INT -k 10 "$(budget 80 150)" python3 bench/engines_probe.py --part pairs --threads 6,14 --images 2048 --out /tmp/pairs
cp /tmp/pairs/engines_probe.json "$out/engines_probe_pairs.json" 2>/dev/null
echo "==> turn2: engines with regions of interest ($(left) s left)"
timeout -s INT -k 10 "$(budget 80 60)" python3 bench/engines_probe.py --part roi --threads 6 --images 2048 --out "$out"
echo "==> turn2: GPU decoder tests with regions of interest on ($(left) s left)"
(cd tests && GPUDECODE_NVIMGCODEC_ROI=1 timeout -s INT -k 10 "$(budget 60 5)" python3 -m pytest -q -rfEs -p no:cacheprovider \
   --tb=short test_gpu.py -k "gpu_decoders or split_decoder or matches_the_cpu_loader or odd_jpegs")
echo "==> turn2: done ($(left) s left)"
