#!/bin/sh
# ws-ab.sh - on the GPU machine (H200): the warp-specialized Hopper forward
# (forward_sm90ws.cuh) against the first Hopper forward (FA_CUDA_FWD=sm90v1) and torch SDPA
# in one run. test_cuda (TEST_ARGS, default quick) first; the benchmark runs only if it
# passed. The table (ratios.txt) has the warp-specialized kernel in the "fast" column, the
# run under B_ENV (default FA_CUDA_FWD=sm90v1: the first Hopper forward) in "general" and,
# when C_ENV is set (e.g. FA_CUDA_WS_PINGPONG=0), the run under C_ENV in "prev".
# Usage: bench/gpu/ws-ab.sh [DIR]   (DIR as in bench/gpu/README.md; logs into $OUT)
# Environment: TEST_ARGS, TEST_TIMEOUT (150 s), BENCH_ARGS (fwd), BENCH_TIMEOUT (90 s),
# PEERS_FLAGS (--bf16), PEERS_TIMEOUT (120 s), B_ENV, C_ENV (VAR=VALUE words for env).
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
grep "^sass.*ws" "$OUT/env.txt"
echo "== test_cuda ${TEST_ARGS:-quick}"; t0=$(date +%s)
timeout ${TEST_TIMEOUT:-150} "$D/test_cuda" ${TEST_ARGS:-quick} > "$OUT/test.log" 2>&1; rc=$?
echo "test_cuda rc=$rc ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|passed" "$OUT/test.log" | head -20
[ $rc = 0 ] || exit 1
echo "== bench ${BENCH_ARGS:-fwd} (warp-specialized)"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-90} "$D/bench_gpu" ${BENCH_ARGS:-fwd} > "$OUT/ours.csv" 2> "$OUT/bench.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
B_ENV=${B_ENV:-FA_CUDA_FWD=sm90v1}
echo "== bench ${BENCH_ARGS:-fwd} ($B_ENV)"; t0=$(date +%s)
env $B_ENV timeout ${BENCH_TIMEOUT:-90} "$D/bench_gpu" ${BENCH_ARGS:-fwd} > "$OUT/v1.csv" 2> "$OUT/bench_v1.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
PREV=
if [ -n "$C_ENV" ]; then
  echo "== bench ${BENCH_ARGS:-fwd} ($C_ENV)"; t0=$(date +%s)
  env $C_ENV timeout ${BENCH_TIMEOUT:-90} "$D/bench_gpu" ${BENCH_ARGS:-fwd} > "$OUT/c.csv" 2> "$OUT/bench_c.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
  PREV="--prev $OUT/c.csv"
fi
echo "== torch peers (fwd)"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-120} python3 bench/gpu/peers_fwd.py "$OUT/ours.csv" "$OUT/v1.csv" $PREV ${PEERS_FLAGS:---bf16} > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
cat "$OUT/ratios.txt"
