#!/bin/sh
# run-on-gpu.sh - on the GPU machine, in the repository root: the CUDA tests, the sanitizer
# sweep and the benchmark against torch SDPA, logs into $OUT (default ./gpu-out).
# DIR (default .gpu) holds what was built on the development machine: libflashattn.so*,
# flashattn_cuda.so, test_cuda, bench_gpu (see bench/gpu/README.md for how to build it).
# Usage: bench/gpu/run-on-gpu.sh [DIR]
# Environment: TEST_ARGS (quick), TEST_TIMEOUT (200 s), BENCH_ARGS (quick), BENCH_TIMEOUT (90 s),
# PEERS_FLAGS (--bf16; add --quick for the cells of bench_gpu quick), PEERS_TIMEOUT (170 s),
# NO_PEERS=1, NO_SAN=1.
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
echo "== test_cuda"; t0=$(date +%s)
timeout ${TEST_TIMEOUT:-200} "$D/test_cuda" $TEST_ARGS > "$OUT/test.log" 2>&1; echo "test_cuda rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|passed" "$OUT/test.log" | head -40
echo "== bench"; t0=$(date +%s)
timeout ${BENCH_TIMEOUT:-90} "$D/bench_gpu" $BENCH_ARGS > "$OUT/ours.csv" 2> "$OUT/bench.err"; echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"
if [ -z "$NO_PEERS" ]; then
echo "== torch peers"; t0=$(date +%s)
timeout ${PEERS_TIMEOUT:-170} python3 bench/peers/torch_sdpa_gpu.py --ours "$OUT/ours.csv" ${PEERS_FLAGS:---bf16} > "$OUT/peers.csv" 2> "$OUT/ratios.txt"
echo "peers rc=$? ($(( $(date +%s) - t0 )) s)"; cat "$OUT/ratios.txt" | tail -45
fi
[ -n "$NO_SAN" ] && exit 0
echo "== compute-sanitizer (quick sweep)"; t0=$(date +%s)
timeout 60 compute-sanitizer --tool memcheck --print-limit 5 "$D/test_cuda" quick > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"
tail -3 "$OUT/memcheck.log"
timeout 50 compute-sanitizer --tool racecheck --print-limit 5 "$D/test_cuda" quick > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$? ($(( $(date +%s) - t0 )) s)"
tail -3 "$OUT/racecheck.log"
