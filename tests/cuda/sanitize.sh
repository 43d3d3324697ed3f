#!/bin/sh
# sanitize.sh - compute-sanitizer's four tools (memcheck, racecheck, initcheck, synccheck)
# over test_cuda's "san" sweep (every kernel once, small grids), on the GPU machine.
# DIR (default .gpu) holds libflashattn.so*, flashattn_cuda.so and test_cuda, built as
# docs/bench.md ("The GPU kit") shows. Each tool's log goes to $OUT/san-TOOL.log (OUT default
# ./gpu-out) and one line per tool to stdout and $OUT/san-summary.txt:
#   TOOL rc=N SECONDS s, ERROR SUMMARY: N errors, test: P passed, F failed
# rc is the tool's exit status: 0 clean; 1 a sanitizer error (--error-exitcode 1) or a
# failed test case (the log's last lines tell which); 124 the timeout.
# Usage: tests/cuda/sanitize.sh [DIR]
# Environment: SAN_TIMEOUT (seconds per tool, 100), SAN_TOOLS (the four), SAN_ARGS (san),
# COMPUTE_SANITIZER (compute-sanitizer from PATH, else /usr/local/cuda/bin).
# Exit status: 0 when every tool finished clean, 1 otherwise.
. "$(dirname "$0")/../../bench/gpu/kit-env.sh"
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$CS" ]; then
  echo "sanitize.sh: compute-sanitizer not found ($CS)" | tee "$OUT/san-summary.txt"
  exit 1
fi
"$CS" --version > "$OUT/san-version.txt" 2>&1
: > "$OUT/san-summary.txt"
all=0
for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
  t0=$(date +%s)
  timeout "${SAN_TIMEOUT:-100}" "$CS" --tool "$tool" --error-exitcode 1 --print-limit 20 \
    "$D/test_cuda" ${SAN_ARGS:-san} > "$OUT/san-$tool.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  es=$(grep -o "ERROR SUMMARY: [0-9]* error[s]*" "$OUT/san-$tool.log" | tail -1)
  # racecheck reports "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"
  [ -z "$es" ] && es=$(grep -o "RACECHECK SUMMARY: .*" "$OUT/san-$tool.log" | tail -1)
  tr=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$OUT/san-$tool.log" | tail -1)
  [ "$rc" = 124 ] && es="${es:-no ERROR SUMMARY (timed out)}"
  line="$tool rc=$rc ${dt} s, ${es:-no ERROR SUMMARY}, test: ${tr:-no summary line}"
  echo "$line" | tee -a "$OUT/san-summary.txt"
  [ "$rc" = 0 ] || all=1
done
exit $all
