#!/bin/sh
# run-on-gpu.sh - on the GPU machine, in the repository root: the CUDA tests, the GPU sweep
# of flashattn-bench, and torch SDPA on the same cells with the ours/peer ratios.
# DIR (default .gpu) is the kit of bench/gpu/build-kit.sh. Output in $OUT (default
# ./gpu-out): env.txt (GPU, clocks, the module's tensor-core instruction counts), test.log,
# ours.csv (flashattn-bench's CSV), bench.log (its table and progress), peers.csv and
# ratios.txt (bench/peers/torch_gpu.py).
# Usage: bench/gpu/run-on-gpu.sh [DIR]
# Environment: TEST_ARGS (test_cuda's, default quick; "" = the full sweep), TEST_TIMEOUT
# (200 s), BENCH_ARGS (more flashattn-bench options, e.g. "--dtype bf16" or "--quick"),
# BENCH_TIMEOUT (400 s), PEERS_TIMEOUT (300 s), NO_TESTS=1, NO_PEERS=1.
# The whole sweep (bf16 and fp16, forward and backward, each cell checked against the
# oracle first) takes several minutes: with the device tool's 10-minute limit per
# command, run bf16 and fp16 as two calls (BENCH_ARGS="--dtype bf16", then f16).
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
if [ -z "$NO_TESTS" ]; then
  echo "== test_cuda"; t0=$(date +%s)
  timeout "${TEST_TIMEOUT:-200}" "$D/test_cuda" ${TEST_ARGS-quick} > "$OUT/test.log" 2>&1
  echo "test_cuda rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "^FAIL|passed" "$OUT/test.log" | head -40
fi
echo "== flashattn-bench --backend cuda --mode sweep $BENCH_ARGS"; t0=$(date +%s)
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-400}" "$D/flashattn-bench" --backend cuda --mode sweep $BENCH_ARGS \
  --csv "$OUT/ours.csv" --out "$OUT/bench-out" > "$OUT/bench.log" 2>&1
echo "flashattn-bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|n/a" "$OUT/bench.log" | head -20
[ -n "$NO_PEERS" ] && exit 0
echo "== torch SDPA peers"; t0=$(date +%s)
timeout "${PEERS_TIMEOUT:-300}" python3 bench/peers/torch_gpu.py --ours "$OUT/ours.csv" \
  > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
grep -v "^\[peer\]" "$OUT/ratios.txt"
