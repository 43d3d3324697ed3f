#!/bin/sh
# bench/ab.sh - time two builds against each other in alternating rounds (CPU or CUDA).
#
# Usage: bench/ab.sh ROUNDS 'COMMAND_A' 'COMMAND_B' [FLASHATTN_BENCH_OPTION...]
#
# COMMAND_A and COMMAND_B each run a flashattn-bench program: a path, or a command line with
# environment settings, e.g. 'env FA_CUDA_MODULE=old/flashattn_cuda.so .gpu/flashattn-bench'.
# Each round runs A, then B, with the same options (default: the CPU sweep of one problem,
# `--backend cpu --mode sweep --sweep-only --heads 16 --seqlen 4096 --headdim 128`; for the
# GPU, e.g. `--backend cuda --mode sweep --dtype bf16 --headdim 128`), each writing its CSV
# (`--csv`). On a machine whose speed drifts between minutes (other processes, clocks),
# alternating puts the drift on both sides alike; a single A-then-B pair is not evidence.
#
# The table: per cell (section, implementation, direction, dtype, shape, threads) the
# median GFLOP/s of A and of B over the rounds, B/A of the medians, and the lowest and
# highest B/A of a single round. Cells that failed or were skipped in a run are left out of
# that round. Environment: OUT (default ab-out) keeps each run's CSV and stderr.
# Exit status: 0, 1 when a run failed (its stderr is in OUT), 2 bad usage.
set -u
[ $# -ge 3 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
rounds=$1 a=$2 b=$3
shift 3
[ $# -gt 0 ] || set -- --backend cpu --mode sweep --sweep-only --heads 16 --seqlen 4096 --headdim 128
out=${OUT:-ab-out}
mkdir -p "$out" || exit 2
status=0
r=1
while [ "$r" -le "$rounds" ]; do
  for side in A B; do
    if [ $side = A ]; then cmd=$a; else cmd=$b; fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    eval "$cmd" '"$@"' --format csv --out "$out/work" --csv "$out/$side$r.csv" \
      > /dev/null 2> "$out/$side$r.err"
    rc=$?
    echo "round $r $side: exit $rc, $(( $(date +%s) - t0 )) s" >&2
    [ $rc -eq 0 ] || status=1
  done
  r=$((r + 1))
done
python3 - "$out" "$rounds" <<'PY'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    cells = {}
    for r in rows:
        if r.get("status") != "PASS" or r.get("section") == "peer":
            continue
        key = (r["section"], r["impl"], r["dir"], r["dtype"], r["B"], r["H"], r["Hkv"],
               r["Sq"], r["Sk"], r["d"], r["causal"], r["threads"])
        cells[key] = float(r["gflops"])
    return cells
A = [load(f"{out}/A{i}.csv") for i in range(1, rounds + 1)]
B = [load(f"{out}/B{i}.csv") for i in range(1, rounds + 1)]
keys = []
for run in A + B:
    keys += [k for k in run if k not in keys]
print(f"# {rounds} rounds, A then B in each; GFLOP/s medians; B/A of the medians; "
      "single-round B/A lowest-highest")
print(f"{'cell':<58} {'A':>9} {'B':>9} {'B/A':>6}  rounds")
for k in keys:
    a = [r[k] for r in A if k in r]
    b = [r[k] for r in B if k in r]
    if not a or not b:
        continue
    single = [B[i][k] / A[i][k] for i in range(rounds) if k in A[i] and k in B[i]]
    sec, impl, d, dt, Bn, H, Hkv, Sq, Sk, hd, c, thr = k
    name = (f"{sec} {impl} {d} {dt} B{Bn} H{H}" + (f":{Hkv}" if Hkv != H else "") +
            f" S{Sq}" + (f":{Sk}" if Sk != Sq else "") + f" d{hd}" + (" causal" if c == "1" else "") +
            (f" {thr}T" if thr else ""))
    ma, mb = statistics.median(a), statistics.median(b)
    spread = f"{min(single):.3f}-{max(single):.3f}" if single else "-"
    print(f"{name:<58} {ma:>9.1f} {mb:>9.1f} {mb / ma:>6.3f}  {spread}")
PY
exit $status
