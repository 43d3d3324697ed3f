#!/bin/sh
# full-ab.sh - on the GPU machine: the quick CUDA test sweep twice (default dispatch, whose
# forward is the Hopper kernel on an H200, and FA_CUDA_FWD=sm80, the sm80 fast kernel),
# the whole benchmark (forward and backward) with the default dispatch, the forward with
# FA_CUDA_FWD=sm80, and torch SDPA (flash, cuDNN, efficient) on the same cells, bf16.
# Tables: ratios.txt (ours / peers, forward and backward), sm80.csv (the sm80 forward).
# Usage: bench/gpu/full-ab.sh [DIR]   (logs into $OUT)
# Environment: PEERS_FLAGS (default --bf16; "--both" times fp16 too), SM80=0 skips the sm80
# forward bench; the ratio table is printed at the end.
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/sass.txt"
for m in default sm80; do
  echo "== test_cuda quick ($m)"; t0=$(date +%s)
  if [ $m = sm80 ]; then FA_CUDA_FWD=sm80 timeout 120 "$D/test_cuda" quick > "$OUT/test-$m.log" 2>&1; rc=$?
  else timeout 120 "$D/test_cuda" quick > "$OUT/test-$m.log" 2>&1; rc=$?; fi
  echo "rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -E "^FAIL|passed" "$OUT/test-$m.log" | head -8
done
echo "== bench (fwd + bwd)"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-150} "$D/bench_gpu" > "$OUT/ours.csv" 2> "$OUT/bench.err"; echo "rc=$? ($(( $(date +%s) - t0 )) s)"
if [ "${SM80:-1}" != 0 ]; then
  echo "== bench fwd (sm80 fast)"; t0=$(date +%s)
  FA_CUDA_FWD=sm80 timeout 60 "$D/bench_gpu" fwd > "$OUT/sm80.csv" 2> "$OUT/bench_sm80.err"; echo "rc=$? ($(( $(date +%s) - t0 )) s)"
fi
echo "== torch peers"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-200} python3 bench/peers/torch_sdpa_gpu.py --ours "$OUT/ours.csv" ${PEERS_FLAGS:---bf16} > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "rc=$? ($(( $(date +%s) - t0 )) s)"
cat "$OUT/ratios.txt"
