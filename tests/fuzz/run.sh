#!/bin/sh
# tests/fuzz/run.sh [SECONDS] [TARGET...]: build the libFuzzer targets with clang (libFuzzer
# + ASan + UBSan, the library and the CPU backend compiled in) and run each for SECONDS
# (default 60) over its seed corpus in tests/fuzz/corpus/TARGET (new inputs go to a scratch
# copy under the build folder; the repo's corpus is not modified). Targets: fuzz_args
# (argument validation of every public call) and fuzz_diff (tiny problems against the
# oracle of liboracle, tests/oracle/). Run from a configured tree (needs config.h). Exit 1
# on a finding; the input that triggered it is left in $FUZZ_BUILD/TARGET-crash-* (reproduce: $FUZZ_BUILD/TARGET FILE).
#
# Environment: FUZZ_CC (clang), FUZZ_BUILD (tests/fuzz/build), FUZZ_JOBS (2: parallel
# compiles), FUZZ_FLAGS (extra libFuzzer flags), FA_TEST_BACKENDS (fuzz_diff: reference,cpu).
# Debian packages: clang libclang-rt-14-dev libomp-14-dev (tools/install-deps.sh --fuzz).
set -eu
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-"fuzz_args fuzz_diff"}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$top/tests/fuzz/build}
CC=${FUZZ_CC:-clang}
jobs=${FUZZ_JOBS:-2}
command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev libomp-14-dev)"; exit 1; }
[ -f "$top/config.h" ] || { echo "fuzz: run ./configure first (config.h missing)"; exit 1; }
pkg-config --exists hwloc check || { echo "fuzz: pkg-config cannot find hwloc and check"; exit 1; }
mkdir -p "$build"
t0=$(date +%s)

# What the configured build compiles, and with which flags, asked from its Makefile (a
# copy, so that make never tries to regenerate the real one): libflashattn's own sources
# (lib/, backends/cpu/) with libflashattn_la_CFLAGS, and each convenience library (the ISA
# kernel sets) with its own _CFLAGS. Sources outside lib/ and backends/cpu/ are left out.
cmp -s "$top/Makefile" "$build/vars.mk" 2>/dev/null || cp "$top/Makefile" "$build/vars.mk"
printf 'fuzz-print-%%:\n\t@echo '"'"'$($*)'"'"'\n' > "$build/print.mk"
mkvar() { make -s -C "$top" -f "$build/vars.mk" -f "$build/print.mk" "fuzz-print-$1"; }
canon() { echo "$1" | sed 's/[^A-Za-z0-9@]/_/g'; }
libflags=$(mkvar libflashattn_la_CFLAGS)
list="$build/sources.txt"
: > "$list"
for lib in $(mkvar noinst_LTLIBRARIES); do
  c=$(canon "$lib")
  for src in $(mkvar "${c}_SOURCES"); do
    case "$src" in lib/*.c|backends/cpu/*.c) echo "k $src $(mkvar "${c}_CFLAGS")" >> "$list" ;; esac
  done
done
for src in $(mkvar libflashattn_la_SOURCES); do
  case "$src" in lib/*.c|backends/cpu/*.c) echo "l $src $libflags" >> "$list" ;; esac
done
[ -s "$list" ] || { echo "fuzz: no sources found in $top/Makefile"; exit 1; }

common="-O1 -fno-omit-frame-pointer -Wno-unknown-warning-option -I$top -I$top/include -I$top/lib -I$top/tests -I$top/tests/oracle -DFLASHATTN_BUILDING -DHAVE_CONFIG_H $(pkg-config --cflags hwloc check)"
# Library sources: coverage feedback + ASan + UBSan (abort on the first report), full -g.
san="-g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# The ISA kernel sets are a few fully unrolled register-tile functions: with UBSan,
# coverage and full debug info clang 14 spends over 6 minutes in register allocation on
# kernels_avx512.c. They get ASan only (every load and store still checked), line tables.
ksan="-gline-tables-only -fsanitize=address"

# Compile one source into $build (skipped when the object is newer than the source, every
# header and this script). Arguments: source, flags.
headers=$(ls "$top"/config.h "$top"/include/*.h "$top"/lib/*.h "$top"/backends/cpu/*.h 2>/dev/null)
compile() {
  src=$1; shift
  obj="$build/$(echo "${src#"$top"/}" | tr / _ | sed 's/\.c$/.o/')"
  if [ -f "$obj" ] && [ -z "$(find "$src" $headers "$0" "$build/vars.mk" -newer "$obj" 2>/dev/null | head -1)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086
  $CC $common "$@" -c "$src" -o "$obj.tmp" && mv "$obj.tmp" "$obj"
}

# Kernel sets first (slowest), $jobs at a time.
objs=""
pids=""
n=0
fail=0
while read -r kind src flags; do
  if [ "$kind" = k ]; then f="$ksan"; else f="$san"; fi
  # shellcheck disable=SC2086
  compile "$top/$src" $flags $f &
  pids="$pids $!"
  n=$((n + 1))
  objs="$objs $build/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')"
  if [ $n -ge "$jobs" ]; then
    for p in $pids; do wait "$p" || fail=1; done
    pids=""; n=0
  fi
done < "$list"
for p in $pids; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { echo "fuzz: compiling the library failed"; exit 1; }
echo "fuzz: library ($(wc -l < "$list") sources) built in $(( $(date +%s) - t0 )) s"

status=0
for t in $targets; do
  [ -f "$top/tests/fuzz/$t.c" ] || { echo "fuzz: no target $t"; status=1; continue; }
  extra=""
  tflags=""
  tenv=""
  if [ "$t" = fuzz_args ]; then
    # the input decoding and the spec predicate with the checks (tests/fuzz/fuzz_args.h)
    extra="$top/tests/fuzz/fuzz_args_input.c $top/tests/fuzz/fuzz_args_spec.c"
  fi
  if [ "$t" = fuzz_diff ]; then
    # A failed Check assertion longjmps out of tu_run, leaking its buffers; with known
    # failures skipped (fuzz_diff.c) that is not a finding. Leaks in the library are the
    # job of fuzz_args and of the sanitizer make check (LeakSanitizer at every test exit).
    tflags="-detect_leaks=0 -max_len=128"
    tenv="detect_leaks=0"   # LeakSanitizer at exit too
    # the test suite's case runner and liboracle (the oracle and the tolerance rule);
    # tile/thread settings via a wrapped create
    extra="$top/tests/testutil.c $top/tests/buffers.c $top/tests/runner.c"
    extra="$extra $top/tests/oracle/models.c $top/tests/oracle/problem.c $top/tests/oracle/check.c $top/tests/oracle/rule.c"
    extra="$extra -Wl,--wrap=fa_context_create $(pkg-config --libs check)"
  fi
  # shellcheck disable=SC2086
  $CC $common -fopenmp -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      "$top/tests/fuzz/$t.c" $extra $objs $(pkg-config --libs hwloc) -lm -o "$build/$t"
  work="$build/corpus-$t"
  rm -rf "$work"; mkdir -p "$work"
  [ -d "$top/tests/fuzz/corpus/$t" ] && cp "$top/tests/fuzz/corpus/$t"/* "$work"/ 2>/dev/null || true
  rm -f "$build/$t"-crash-* "$build/$t"-leak-* "$build/$t"-timeout-* "$build/$t"-oom-*
  echo "fuzz: $t for ${secs}s ($(ls "$work" | wc -l) seed inputs)"
  ts=$(date +%s)
  # The fuzzer writes its log; every 30 s its latest status line (inputs, coverage, rss)
  # is echoed, so that a run cut short from outside still shows how far it got.
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}$tenv" "$build/$t" -max_total_time="$secs" -max_len=256 -timeout=30 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/$t-" $tflags ${FUZZ_FLAGS:-} \
      "$work" > "$build/$t.log" 2>&1 &
  fpid=$!
  (
    while sleep 30; do
      kill -0 "$fpid" 2>/dev/null || break
      echo "fuzz: $t after $(( $(date +%s) - ts )) s: $(grep -E '^#[0-9]+' "$build/$t.log" | tail -1 | cut -c1-150)"
    done
  ) &
  beat=$!
  frc=0
  wait "$fpid" || frc=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  if [ "$frc" -ne 0 ]; then
    echo "fuzz: $t FOUND A PROBLEM (exit $frc) after $(( $(date +%s) - ts )) s (log: $build/$t.log)"
    tail -60 "$build/$t.log"
    ls "$build/$t"-crash-* "$build/$t"-leak-* "$build/$t"-timeout-* "$build/$t"-oom-* 2>/dev/null || true
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb" "$build/$t.log" | sed "s/^/fuzz: $t /"
    echo "fuzz: $t: $(grep -E '^#[0-9]+' "$build/$t.log" | tail -1 | awk '{print $2, $3, $4, $5, $6, $7}') in $(( $(date +%s) - ts )) s"
  fi
done
echo "fuzz: done in $(( $(date +%s) - t0 )) s, status $status"
exit $status
