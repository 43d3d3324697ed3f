#!/bin/sh
# ring/tests/ring-bench.sh - make check: flashattn-ring-bench on tiny problems under
# configure's mpirun (the one ring/tests/ring-np.sh names):
#   1 rank --single: one table row, a placement line for rank 0, mode=single ranks=1 in the
#     summary line, a positive time;
#   2 ranks, the ring: two rows whose tokens sum to --seq, placement lines for ranks 0
#     and 1, mode=ring ranks=2;
#   --single on 2 ranks and an unknown option: a non-zero status, the option named on
#     stderr; --help: status 0, --single in the text.
MPIRUN=$(sed -n 's/^MPIRUN="\(.*\)"$/\1/p' ring/tests/ring-np.sh)
[ -n "$MPIRUN" ] || { echo "ring-bench.sh: no MPIRUN in ring/tests/ring-np.sh"; exit 99; }
out=${TMPDIR:-/tmp}/fa-ring-bench.$$
trap 'rm -rf "$out"' EXIT
mkdir -p "$out" || exit 99
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under --enable-sanitizers, as in ring-np.sh: Open MPI's own allocations outlive
# MPI_Finalize in modules LeakSanitizer cannot name, so leak checking is off for these
# processes; ASan's memory-error checks and UBSan stay on.
ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export ASAN_OPTIONS
bench() {   # bench NP ARGS...
  np=$1; shift
  "$MPIRUN" --oversubscribe --allow-run-as-root -np "$np" ./ring/flashattn-ring-bench "$@" \
    > "$out/stdout" 2> "$out/stderr"
}
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$out/stdout" "$out/stderr"; exit 1; }
field() { sed -n "s/^summary .*$1=\([^ ]*\).*/\1/p" "$out/stdout"; }

bench 1 --single --seq 96 --heads 2 --dim 32 --causal --threads 1 --reps 2 || fail "--single: status $?"
[ "$(grep -c '^    0 ' "$out/stdout")" = 1 ] || fail "--single: expected one row"
grep -q '^placement: rank 0 on .*: cpus [0-9]' "$out/stdout" || fail "--single: no placement line"
[ "$(field mode) $(field ranks)" = "single 1" ] || fail "--single: summary mode/ranks"
awk -v t="$(field slowest)" 'BEGIN { exit !(t > 0) }' || fail "--single: slowest not > 0"
echo "ok --single: $(grep '^summary' "$out/stdout" | cut -c1-100)"

bench 2 --seq 100 --heads 2 --dim 32 --causal --zigzag --threads 1 --reps 2 || fail "ring: status $?"
[ "$(awk '/^ +[01] +[0-9]+ / { n += $2 } END { print n }' "$out/stdout")" = 100 ] ||
  fail "ring: the rows' tokens do not sum to 100"
for r in 0 1; do
  grep -q "^placement: rank $r on .*: cpus [0-9]" "$out/stdout" || fail "ring: no placement for rank $r"
done
[ "$(field mode) $(field ranks)" = "ring 2" ] || fail "ring: summary mode/ranks"
echo "ok ring, 2 ranks: $(grep '^summary' "$out/stdout" | cut -c1-100)"

bench 2 --single --seq 64 && fail "--single on 2 ranks: status 0"
grep -q 'bad option --single' "$out/stderr" || fail "--single on 2 ranks: not named on stderr"
bench 1 --no-such-option && fail "--no-such-option: status 0"
grep -q 'bad option --no-such-option' "$out/stderr" || fail "--no-such-option: not named on stderr"
bench 1 --help || fail "--help: status $?"
grep -q -- '--single' "$out/stdout" || fail "--help: no --single"
echo "ok command line: --single on 2 ranks and a bad option refused, --help"
