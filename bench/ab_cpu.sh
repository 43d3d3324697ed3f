#!/bin/sh
# bench/ab_cpu.sh ROUNDS BENCH_A BENCH_B [SHAPE...]: two builds of flashattn-bench on the
# CPU backend, alternated A, B, A, B ... for ROUNDS rounds on each SHAPE (a quoted list of
# flashattn-bench problem options; default: d128 H16 fp32 S1k causal, S1k, S4k causal,
# S4k), forward and backward, 1 thread and all (--mode sweep --sweep-only). On a shared
# machine whose speed drifts by 10-50% between minutes, alternating is what makes the two
# comparable; each run's fastest call (GFLOP/s from time_min_s) is kept, and the table
# gives per cell the best and the median over the rounds for A and B and their ratios.
#   REPEATS  timed calls per run (default 10)
#   OUT      where the per-run CSVs go (default ab-cpu)
# Prints the raw lines (A|B|shape|threads|dir|GFLOP/s) as it goes and the table last;
# each run's CSV and its progress log stay in OUT.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS BENCH_A BENCH_B [SHAPE...]" >&2; exit 2; }
rounds=$1 a=$2 b=$3
shift 3
[ $# -gt 0 ] || set -- "--seqlen 1024 --headdim 128 --causal" "--seqlen 1024 --headdim 128" \
                       "--seqlen 4096 --headdim 128 --causal" "--seqlen 4096 --headdim 128"
out=${OUT:-ab-cpu}
mkdir -p "$out"
raw="$out/raw.txt"
: > "$raw"
r=1
while [ "$r" -le "$rounds" ]; do
  for which in A B; do
    if [ "$which" = A ]; then prog=$a; else prog=$b; fi
    n=0
    for shape in "$@"; do
      n=$((n + 1))
      csv="$out/r$r-$which-$n.csv"
      # shellcheck disable=SC2086
      "$prog" --backend cpu --mode sweep --sweep-only --heads 16 $shape \
        --repeats "${REPEATS:-10}" --format csv --out "$out/work" > "$csv" 2> "${csv%.csv}.log"
      python3 - "$which" "$shape" "$csv" <<'PY' | tee -a "$raw"
import csv, sys
which, shape, path = sys.argv[1:4]
rows = list(csv.reader(open(path)))
head = rows[0]
for row in rows[1:]:
    d = dict(zip(head, row))
    if d.get("status") != "PASS":
        print("ab_cpu: %s %s: %s %s threads: %s" % (which, shape, d.get("dir"), d.get("threads"),
              d.get("status")), file=sys.stderr)
        continue
    best = float(d["gflops"]) * float(d["time_med_s"]) / float(d["time_min_s"])
    print("%s|%s|%s|%s|%.1f" % (which, shape, d["threads"], d["dir"], best))
PY
    done
  done
  r=$((r + 1))
done
python3 - "$raw" <<'PY'
import collections, statistics, sys
cells = collections.defaultdict(lambda: {"A": [], "B": []})
order = []
for line in open(sys.argv[1]):
    which, shape, thr, d, g = line.strip().split("|")
    key = (shape, thr, d)
    if key not in cells:
        order.append(key)
    cells[key][which].append(float(g))
print("%-40s %3s %3s  %-17s %-17s %s" % ("shape", "thr", "dir", "A best / median", "B best / median",
                                        "B/A best, median"))
for key in order:
    a, b = cells[key]["A"], cells[key]["B"]
    if not a or not b:
        continue
    print("%-40s %3s %3s  %7.1f / %7.1f  %7.1f / %7.1f  %.3f, %.3f" % (
        key[0], key[1], key[2], max(a), statistics.median(a), max(b), statistics.median(b),
        max(b) / max(a), statistics.median(b) / statistics.median(a)))
PY
