#!/bin/sh
# bench/test-cuda-absent.sh - make check: `flashattn-bench --backend cuda` where the CUDA
# backend cannot be used (FA_CUDA_MODULE names a file that does not exist, so this holds on
# a GPU machine too) exits 0, with the cuda rung's one-line reason as an n/a row.
bench=./bench/flashattn-bench
out=${TMPDIR:-/tmp}/fa-bench-cuda-absent.$$
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$out/stdout" "$out/stderr" 2>/dev/null; exit 1; }
mkdir -p "$out" || exit 99
export FA_CUDA_MODULE=/nonexistent/flashattn_cuda.so FA_BENCH_NO_PERF=1
for dt in f32 bf16; do
  label=cuda; [ $dt = f32 ] && label="cuda (bf16)"
  $bench --backend cuda --mode ladder --quick --dtype $dt --budget 0.05 --out "$out" \
    > "$out/stdout" 2> "$out/stderr"
  rc=$?
  [ $rc -eq 0 ] || fail "--dtype $dt: exit status $rc, expected 0"
  grep -q "^CUDA: not available: " "$out/stdout" || fail "--dtype $dt: no 'CUDA: not available' line"
  n=$(grep -c "^$label  *n/a  *$label: not available: " "$out/stdout")
  [ "$n" = 1 ] || fail "--dtype $dt: expected one n/a row for '$label', found $n"
  grep -q "^ladder,\"$label\",.*,n/a," "$out/results.csv" || fail "--dtype $dt: no n/a row in results.csv"
  echo "ok --dtype $dt: $(grep "^$label  *n/a" "$out/stdout" | cut -c1-110)"
done
# a bad option still exits 2
$bench --backend gpu > /dev/null 2>&1
[ $? -eq 2 ] || fail "--backend gpu: expected exit status 2"
exit 0
