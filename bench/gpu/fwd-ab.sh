#!/bin/sh
# fwd-ab.sh - on the GPU machine: the quick CUDA test sweep, then the forward benchmark of the
# fast kernel and of the general kernel (FA_CUDA_FWD=general) in the same run, then the
# forward-only torch peers and the table (fast, general, flash, cuDNN). Logs into $OUT.
# Usage: bench/gpu/fwd-ab.sh [DIR]   Environment: TEST_ARGS (quick), TEST_TIMEOUT (100 s),
# BENCH_TIMEOUT (60 s each), PEERS_TIMEOUT (90 s), PEERS_FLAGS (empty: bf16 and fp16).
# DIR/prev/flashattn_cuda.so, when there, is timed too (an earlier build, same run).
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
echo "== test_cuda ${TEST_ARGS-quick}"; t0=$(date +%s)
timeout ${TEST_TIMEOUT:-100} "$D/test_cuda" ${TEST_ARGS-quick} > "$OUT/test.log" 2>&1; echo "test_cuda rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|passed|query" "$OUT/test.log" | head -30
echo "== bench fwd (fast)"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-60} "$D/bench_gpu" fwd > "$OUT/ours.csv" 2> "$OUT/bench.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo "== bench fwd (general)"; t0=$(date +%s)
FA_CUDA_FWD=general timeout ${BENCH_TIMEOUT:-60} "$D/bench_gpu" fwd > "$OUT/general.csv" 2> "$OUT/bench_general.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
if [ -f "$D/prev/flashattn_cuda.so" ]; then
echo "== bench fwd (previous fast build, $D/prev)"; t0=$(date +%s)
FA_CUDA_MODULE="$D/prev/flashattn_cuda.so" timeout ${BENCH_TIMEOUT:-60} "$D/bench_gpu" fwd > "$OUT/prev.csv" 2>/dev/null; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
PREV="--prev $OUT/prev.csv"
fi
echo "== torch peers (fwd)"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-90} python3 bench/gpu/peers_fwd.py "$OUT/ours.csv" "$OUT/general.csv" $PREV $PEERS_FLAGS > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
cat "$OUT/ratios.txt"
