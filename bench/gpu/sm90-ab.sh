#!/bin/sh
# sm90-ab.sh - on the GPU machine (H200): the Hopper forward (forward_sm90.cuh) against the
# sm80 fast kernel and torch SDPA, in one run. Quick CUDA test sweep first with the default
# V descriptor layout and, if that fails, with the swapped one (FA_SM90_VDESC=1); the benchmark
# uses the layout that passed. Then bench_gpu fwd with the sm90 kernel, again with
# FA_CUDA_FWD=sm80 (the sm80 fast kernel), and the forward-only torch peers; the table
# (ratios.txt) has the sm90 kernel in the "fast" column and the sm80 fast kernel in "general".
# Usage: bench/gpu/sm90-ab.sh [DIR]   (DIR as in bench/gpu/README.md; logs into $OUT)
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
cuobjdump --dump-sass "$D/flashattn_cuda.so" 2>/dev/null | awk '/Function :/{f=$3; p=(f ~ /sm90.*bfloat16Li128/)} p' | grep -m 60 "HGMMA\|WARPGROUP\|DEPBAR\|BAR" >> "$OUT/env.txt"
grep "^sass" "$OUT/env.txt"
VD=0
for v in 0 1; do
  echo "== test_cuda quick, FA_SM90_VDESC=$v"; t0=$(date +%s)
  FA_SM90_VDESC=$v timeout ${TEST_TIMEOUT:-120} "$D/test_cuda" quick > "$OUT/test$v.log" 2>&1; rc=$?
  echo "test_cuda rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^FAIL|passed" "$OUT/test$v.log" | head -12
  if [ $rc = 0 ]; then VD=$v; break; fi
done
export FA_SM90_VDESC=$VD
echo "== bench fwd (sm90, FA_SM90_VDESC=$VD)"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-60} "$D/bench_gpu" fwd > "$OUT/ours.csv" 2> "$OUT/bench.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo "== bench fwd (sm80 fast)"; t0=$(date +%s)
FA_CUDA_FWD=sm80 timeout ${BENCH_TIMEOUT:-60} "$D/bench_gpu" fwd > "$OUT/sm80.csv" 2> "$OUT/bench_sm80.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo "== torch peers (fwd)"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-90} python3 bench/gpu/peers_fwd.py "$OUT/ours.csv" "$OUT/sm80.csv" $PEERS_FLAGS > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
cat "$OUT/ratios.txt"
