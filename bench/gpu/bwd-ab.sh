#!/bin/sh
# bwd-ab.sh - on the GPU machine (H200): the warp-specialized Hopper backward
# (backward_sm90ws.cuh, the default for d64 and d128) against the first Hopper backward
# (FA_CUDA_BWD=sm90v1) and torch SDPA, in one run. Tests first: test_cuda with the default
# kernels (TEST_ARGS, default: the full sweep) and under FA_CUDA_BWD=sm90v1 (V1_TEST_ARGS,
# default: the full sweep); the benchmarks run only if both passed.
# Then bench_gpu (BENCH_ARGS, default bf16) under FA_CUDA_BWD=sm90v1 (v1.csv) and with the
# default kernels (ws.csv), torch's peers against ws.csv (peers.csv, ratios.txt), and
# ab.txt: the backward cells side by side (TFLOP/s first Hopper backward, warp-specialized,
# ratio).
# Usage: bench/gpu/bwd-ab.sh [DIR]   (DIR as in bench/gpu/README.md; logs into $OUT)
# Environment: TEST_ARGS, TEST_TIMEOUT (400 s), V1_TEST_ARGS, BENCH_ARGS (bf16),
# BENCH_TIMEOUT (150 s), PEERS_FLAGS (--bf16), PEERS_TIMEOUT (150 s), NO_PEERS=1.
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
grep "^sass.*bwd" "$OUT/env.txt"
echo "== test_cuda ${TEST_ARGS:-(full)}"; t0=$(date +%s)
timeout ${TEST_TIMEOUT:-400} "$D/test_cuda" ${TEST_ARGS} > "$OUT/test.log" 2>&1; rc=$?
echo "test_cuda rc=$rc ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|passed" "$OUT/test.log" | head -20
echo "== FA_CUDA_BWD=sm90v1 test_cuda ${V1_TEST_ARGS:-(full)}"; t0=$(date +%s)
FA_CUDA_BWD=sm90v1 timeout ${TEST_TIMEOUT:-400} "$D/test_cuda" ${V1_TEST_ARGS} > "$OUT/test_v1.log" 2>&1; rcw=$?
echo "test_cuda (sm90v1) rc=$rcw ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|passed" "$OUT/test_v1.log" | head -20
[ $rc = 0 ] && [ $rcw = 0 ] || exit 1
echo "== bench ${BENCH_ARGS:-bf16} (FA_CUDA_BWD=sm90v1)"; t0=$(date +%s)
FA_CUDA_BWD=sm90v1 timeout ${BENCH_TIMEOUT:-150} "$D/bench_gpu" ${BENCH_ARGS:-bf16} > "$OUT/v1.csv" 2> "$OUT/bench_v1.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo "== bench ${BENCH_ARGS:-bf16} (default kernels)"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-150} "$D/bench_gpu" ${BENCH_ARGS:-bf16} > "$OUT/ws.csv" 2> "$OUT/bench_ws.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
# the backward cells side by side: who,dir,dtype,d,S,causal,ms,tflops
awk -F, 'NR == FNR { if ($2 == "bwd") a[$3","$4","$5","$6] = $8; next }
         $2 == "bwd" { k = $3","$4","$5","$6; printf "%-22s v1 %7.1f  ws %7.1f  ws/v1 %5.2f\n", k, a[k], $8, (a[k] > 0 ? $8 / a[k] : 0) }' \
    "$OUT/v1.csv" "$OUT/ws.csv" > "$OUT/ab.txt"
cat "$OUT/ab.txt"
[ -n "$NO_PEERS" ] && exit 0
echo "== torch peers (against the default kernels)"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-150} python3 bench/peers/torch_sdpa_gpu.py --ours "$OUT/ws.csv" ${PEERS_FLAGS:---bf16} > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"
cat "$OUT/ratios.txt"
