#!/bin/sh
# sweep-rounds.sh - on the GPU machine: ROUNDS (default 3) rounds of the whole sweep, each
# bench_gpu (ours) then torch's peers, then the table of per-cell medians
# (bench/peers/median_ratios.py): $OUT/ratios.txt. One round of bf16 and fp16 takes about
# 100 s (the peers most of it). Single-round tables flip cells whose ratio is within the
# run-to-run noise (the S512 cells moved by up to 0.15); the medians and the per-round
# spread say which cells are above a target reliably.
# Usage: bench/gpu/sweep-rounds.sh [DIR]   Environment: ROUNDS, BENCH_ARGS (bench_gpu's
# filters, default the whole sweep), PEERS_FLAGS (e.g. --bf16).
. "$(dirname "$0")/kit-env.sh"
kit_env "$OUT/env.txt"
o="" p=""
for r in $(seq 1 "${ROUNDS:-3}"); do
  t0=$(date +%s)
  "$D/bench_gpu" ${BENCH_ARGS} > "$OUT/ours$r.csv" 2> /dev/null || echo "round $r: bench_gpu failed"
  python3 bench/peers/torch_sdpa_gpu.py ${PEERS_FLAGS} > "$OUT/peers$r.csv" 2> /dev/null || echo "round $r: peers failed"
  echo "round $r: $(( $(date +%s) - t0 )) s"
  o="$o $OUT/ours$r.csv" p="$p $OUT/peers$r.csv"
done
python3 bench/peers/median_ratios.py --ours $o --peers $p > "$OUT/ratios.txt"
cat "$OUT/ratios.txt"
