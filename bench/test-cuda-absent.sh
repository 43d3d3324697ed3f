#!/bin/sh
# bench/test-cuda-absent.sh - make check: flashattn-bench where the CUDA backend cannot be
# used (FA_CUDA_MODULE names a file that does not exist, so this holds on a GPU machine
# too), and its command line.
#   --backend cuda --mode ladder: exit 0; the reason printed once ("CUDA: not available:
#     ..."), the cuda rung an n/a row forward and backward, n/a in results.csv;
#   --backend cuda --mode sweep (the GPU sweep): exit 3, the reason printed once;
#   -h, --help, --version: exit 0 with text on stdout; a bad option or value: exit 2;
#   --mode sweep --sweep-only: the rows of 1 thread and --threads, forward only with
#     --forward-only.
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
  n=$(cat "$out/stdout" "$out/stderr" | grep -c "cannot load the CUDA module")
  [ "$n" = 1 ] || fail "--dtype $dt: the reason is printed $n times, expected once"
  grep -q "^CUDA: not available: " "$out/stdout" || fail "--dtype $dt: no 'CUDA: not available' line"
  n=$(grep -c "^$label  *n/a  *$label: not available" "$out/stdout")
  [ "$n" = 2 ] || fail "--dtype $dt: expected two n/a rows (fwd, bwd) for '$label', found $n"
  grep -q "^ladder,\"$label\",.*,n/a," "$out/results.csv" || fail "--dtype $dt: no n/a row in results.csv"
  echo "ok --dtype $dt: $(grep "^$label  *n/a" "$out/stdout" | head -1 | cut -c1-110)"
done
$bench --backend cuda --mode sweep --out "$out" > "$out/stdout" 2> "$out/stderr"
rc=$?
[ $rc -eq 3 ] || fail "GPU sweep without CUDA: exit status $rc, expected 3"
n=$(cat "$out/stdout" "$out/stderr" | grep -c "cannot load the CUDA module")
[ "$n" = 1 ] || fail "GPU sweep without CUDA: the reason is printed $n times, expected once"
echo "ok GPU sweep without CUDA: exit 3"
for opt in -h --help --version; do
  $bench $opt > "$out/stdout" 2> "$out/stderr"
  rc=$?
  [ $rc -eq 0 ] && [ -s "$out/stdout" ] || fail "$opt: exit status $rc (expected 0) or no text on stdout"
done
echo "ok -h, --help, --version: exit 0"
for bad in "--backend gpu" "--isa sse" "--mode nope" "--seqlen 0" "--bogus" "stray"; do
  $bench $bad > "$out/stdout" 2> "$out/stderr"
  rc=$?
  [ $rc -eq 2 ] || fail "'$bad': exit status $rc, expected 2"
  [ "$(wc -l < "$out/stderr")" -eq 1 ] || fail "'$bad': expected a one-line error"
done
echo "ok bad options: exit 2 with one line"
# --sweep-only takes its threads from --threads and drops the backward with --forward-only
for t in 1 2; do
  $bench --backend cpu --mode sweep --sweep-only --heads 1 --seqlen 128 --headdim 64 \
    --threads $t --forward-only --format csv --out "$out" > "$out/stdout" 2> "$out/stderr" || fail "--sweep-only --threads $t: exit status $?"
  got=$(sed 's/"[^"]*"/q/g' "$out/stdout" | awk -F, '$1 == "full" { printf "%s/%s ", $4, $14 }')
  want="fwd/1 "; [ $t = 2 ] && want="fwd/1 fwd/2 "
  [ "$got" = "$want" ] || fail "--sweep-only --threads $t --forward-only: rows (dir/threads) '$got', expected '$want'"
done
echo "ok --sweep-only: --threads and --forward-only"
exit 0
