#!/bin/sh
# reliability.sh - the CUDA part of docs/reliability.md, on the GPU machine, in the
# repository root. Three lanes run at the same time (the GPU and 16 cores are shared by
# them; SERIAL=1 runs them one after another, for clean timings):
#   A  test_cuda, the full sweep                          (timeout TEST_TIMEOUT, 240 s)
#   B  stress_cuda STRESS_SECONDS (120) STRESS_SEED (1)    (timeout + 60 s), then
#      stress_cuda big: tensors over 2^31 elements         (timeout BIG_TIMEOUT, 150 s)
#   C  tests/cuda/sanitize.sh: memcheck, racecheck, initcheck, synccheck over test_cuda san
#                                                          (timeout SAN_TIMEOUT per tool, 100 s)
# DIR (default .gpu) holds what was built on the development machine: libflashattn.so*,
# flashattn_cuda.so, test_cuda, stress_cuda (bench/gpu/build-kit.sh). Logs go to $OUT (default
# ./gpu-out): env.txt, test_full.log, stress.log, big.log, san-TOOL.log, san-summary.txt,
# table.txt (the table printed at the end).
# Wall time: about max(A, B, C) in parallel, at most ~7 minutes with the default timeouts.
# Exit status: 0 when every part passed; 1 otherwise (77 from a program = no CUDA context).
# Usage: bench/gpu/reliability.sh [DIR]
D=${1:-.gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
for f in test_cuda stress_cuda flashattn_cuda.so libflashattn.so.0; do
  [ -e "$D/$f" ] || { echo "reliability.sh: $D/$f is missing (bench/gpu/build-kit.sh makes the kit)"; exit 2; }
done
export FA_CUDA_MODULE="$D/flashattn_cuda.so" LD_LIBRARY_PATH="$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T0=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  (compute-sanitizer --version || /usr/local/cuda/bin/compute-sanitizer --version) 2>&1 | tail -2
  nproc; free -g | head -2
} > "$OUT/env.txt" 2>&1

# part NAME TIMEOUT LOG CMD...: run CMD under timeout, log to $OUT/LOG, "rc seconds" to status-NAME
part() {
  name=$1 to=$2 log=$3; shift 3
  t0=$(date +%s)
  timeout "$to" "$@" > "$OUT/$log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  echo "$rc $dt" > "$OUT/status-$name"
  echo "== $name: rc=$rc, ${dt} s (at +$(( $(date +%s) - T0 )) s)"
}
lane_a() { part test_full "${TEST_TIMEOUT:-240}" test_full.log "$D/test_cuda"; }
lane_b() {
  part stress $(( ${STRESS_SECONDS:-120} + 60 )) stress.log "$D/stress_cuda" "${STRESS_SECONDS:-120}" "${STRESS_SEED:-1}"
  part big "${BIG_TIMEOUT:-150}" big.log "$D/stress_cuda" big
}
lane_c() {
  t0=$(date +%s)
  OUT="$OUT" sh tests/cuda/sanitize.sh "$D" > "$OUT/san.out" 2>&1
  echo "== sanitizers: rc=$?, $(( $(date +%s) - t0 )) s (at +$(( $(date +%s) - T0 )) s)"
}
rm -f "$OUT"/status-*
if [ -n "$SERIAL" ]; then
  lane_a; lane_b; lane_c
else
  lane_a & lane_b & lane_c & wait
fi

# The table
st() { [ -f "$OUT/status-$1" ] && cat "$OUT/status-$1" || echo "- -"; }
verdict() {   # verdict RC: the word for an exit status
  case $1 in 0) echo pass ;; 77) echo "NO CUDA" ;; 124|137) echo TIMEOUT ;; -) echo "NOT RUN" ;; *) echo FAIL ;; esac
}
ok=0
{
  printf "%-12s %-8s %5s  %s\n" part verdict secs result
  set -- $(st test_full)
  r=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$OUT/test_full.log" 2>/dev/null | tail -1)
  [ -n "$r" ] || r="no summary line; so far $(grep -c '^PASS' "$OUT/test_full.log" 2>/dev/null) PASS, $(grep -c '^FAIL' "$OUT/test_full.log" 2>/dev/null) FAIL lines"
  printf "%-12s %-8s %5s  %s\n" test_full "$(verdict $1)" "$2" "$r"; [ "$1" = 0 ] || ok=1
  set -- $(st stress)
  r=$(grep "^SUMMARY" "$OUT/stress.log" 2>/dev/null | sed 's/^SUMMARY stress_cuda: //')
  printf "%-12s %-8s %5s  %s\n" stress "$(verdict $1)" "$2" "${r:-no summary line}"; [ "$1" = 0 ] || ok=1
  set -- $(st big)
  r="$(grep -c '^PASS' "$OUT/big.log" 2>/dev/null) of 5 parts passed; $(grep '^SUMMARY' "$OUT/big.log" 2>/dev/null | sed 's/^SUMMARY stress_cuda big: //')"
  printf "%-12s %-8s %5s  %s\n" big "$(verdict $1)" "$2" "$r"; [ "$1" = 0 ] || ok=1
  for tool in memcheck racecheck initcheck synccheck; do
    l=$(grep "^$tool rc=" "$OUT/san-summary.txt" 2>/dev/null)
    if [ -z "$l" ]; then printf "%-12s %-8s %5s  %s\n" "$tool" "NOT RUN" - "see san.out"; ok=1; continue; fi
    rc=$(echo "$l" | sed 's/^[a-z]* rc=\([0-9]*\) .*/\1/')
    secs=$(echo "$l" | sed 's/^[a-z]* rc=[0-9]* \([0-9]*\) s.*/\1/')
    printf "%-12s %-8s %5s  %s\n" "$tool" "$(verdict "$rc")" "$secs" "$(echo "$l" | sed 's/^[a-z]* rc=[0-9]* [0-9]* s, //')"
    [ "$rc" = 0 ] || ok=1
  done
  echo "wall time $(( $(date +%s) - T0 )) s"
} > "$OUT/table.txt"
echo
for f in test_full.log stress.log big.log; do
  n=$(grep -c "^FAIL" "$OUT/$f" 2>/dev/null)
  [ "${n:-0}" -gt 0 ] && { echo "-- first FAIL lines of $f ($n in all):"; grep "^FAIL" "$OUT/$f" | head -8; }
done
grep -E "^(PASS|FAIL) " "$OUT/big.log" 2>/dev/null
cat "$OUT/table.txt"
exit $ok
