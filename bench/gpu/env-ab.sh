#!/bin/sh
# env-ab.sh - on the GPU machine: bench_gpu under several environment settings of the same
# module (A/B knobs such as FA_CUDA_FWD, FA_CUDA_WS_BN, FA_CUDA_BWD), alternating within
# each of ROUNDS rounds, then one table of per-cell medians: the first variant's TFLOP/s
# and each other's as a ratio to it (bench/peers/env_ab_table.py). Logs into $OUT
# (ab-NAME-ROUND.csv, ab.txt).
# Usage: bench/gpu/env-ab.sh [DIR]   (DIR as in bench/gpu/README.md)
# Environment: AB (required): variants separated by ";", each NAME=VAR=VALUE[,VAR=VALUE...]
#   or NAME= for the default, e.g. AB="base=;lock=FA_CUDA_BWD=lockstep;w192=FA_CUDA_WS_BN=192"
#   BENCH_ARGS (bench_gpu's filters, e.g. "fwd bf16 d64"), ROUNDS (2), BENCH_TIMEOUT (150 s).
. "$(dirname "$0")/kit-env.sh"
[ -n "$AB" ] || { echo "env-ab.sh: set AB (see the header)"; exit 2; }
names=""
for r in $(seq 1 "${ROUNDS:-2}"); do
  IFS=';'; set -f
  for v in $AB; do
    name=${v%%=*} vars=${v#*=}
    unset IFS
    t0=$(date +%s)
    # shellcheck disable=SC2046
    env $(echo "$vars" | tr ',' ' ') timeout "${BENCH_TIMEOUT:-150}" "$D/bench_gpu" ${BENCH_ARGS} \
      > "$OUT/ab-$name-$r.csv" 2> "$OUT/ab-$name-$r.err" || echo "round $r $name: bench_gpu failed"
    echo "round $r $name ($vars): $(( $(date +%s) - t0 )) s"
    [ "$r" = 1 ] && names="$names $name"
    IFS=';'
  done
  unset IFS; set +f
done
python3 bench/peers/env_ab_table.py "$OUT" ${ROUNDS:-2} $names > "$OUT/ab.txt"
cat "$OUT/ab.txt"
