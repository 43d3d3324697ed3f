#!/bin/sh
# check-all.sh - on the GPU machine: test_cuda's full sweep under the default dispatch and
# under each setting of TEST_ENVS, and compute-sanitizer's four tools (tests/cuda/sanitize.sh)
# under the default and under SAN_ENV, all at once (the cases are small: the GPU is shared
# without effect on the results). One line per run to stdout and $OUT/check.txt; the logs
# in $OUT/test-N.log and $OUT/san-N/.
# Usage: bench/gpu/check-all.sh [DIR]   (DIR as in bench/gpu/README.md)
# Environment: TEST_ENVS: settings separated by ";", each VAR=VALUE[,VAR=VALUE...]
#   (e.g. "FA_CUDA_BWD=lockstep;FA_CUDA_WS_BN=192"); SAN_ENV: one such setting
#   (none: the sanitizers run once); TEST_TIMEOUT (400 s).
# Exit status: 0 when every run passed.
. "$(dirname "$0")/kit-env.sh"
S=$(dirname "$0")
: > "$OUT/check.txt"
run_test() {   # N SETTING
  t0=$(date +%s)
  env $(echo "$2" | tr ',' ' ') timeout "${TEST_TIMEOUT:-400}" "$D/test_cuda" > "$OUT/test-$1.log" 2>&1
  rc=$?
  echo "test_cuda [${2:-default}] rc=$rc $(( $(date +%s) - t0 )) s: $(grep -E '^[0-9]+ passed' "$OUT/test-$1.log" | tail -1)" >> "$OUT/check.txt"
  grep -E "^FAIL" "$OUT/test-$1.log" | head -5 >> "$OUT/check.txt"
}
run_san() {    # N SETTING
  env $(echo "$2" | tr ',' ' ') OUT="$OUT/san-$1" sh "$S/../../tests/cuda/sanitize.sh" "$D" > /dev/null 2>&1
  rc=$?
  sed "s/^/sanitizer [${2:-default}] /" "$OUT/san-$1/san-summary.txt" >> "$OUT/check.txt"
  echo "sanitizers [${2:-default}] rc=$rc" >> "$OUT/check.txt"
}
run_test 0 "" &
n=1
IFS=';'; set -f
for e in $TEST_ENVS; do
  unset IFS
  run_test $n "$e" &
  n=$((n + 1))
  IFS=';'
done
unset IFS; set +f
run_san 0 "" &
[ -n "$SAN_ENV" ] && run_san 1 "$SAN_ENV" &
wait
cat "$OUT/check.txt"
! grep -qE "rc=[1-9]|^FAIL" "$OUT/check.txt"
