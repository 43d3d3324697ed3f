#!/usr/bin/env python3
"""The table of bench/gpu/env-ab.sh: per cell, the median TFLOP/s over the rounds of the first
variant and, for each other variant, its median as a ratio to the first (with the lowest and
highest single-round ratio).
Usage: env_ab_table.py OUT_DIR ROUNDS NAME [NAME ...]   (reads OUT_DIR/ab-NAME-ROUND.csv)"""
import sys, statistics
from collections import defaultdict

if len(sys.argv) < 4:
    sys.exit(__doc__)
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
vals = {n: defaultdict(dict) for n in names}          # name -> cell -> round -> tflops
for n in names:
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{out}/ab-{n}-{r}.csv").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split(",")
            if len(f) != 8 or f[0] != "ours" or f[7] == "nan":
                continue
            vals[n][(f[1], f[2], int(f[3]), int(f[4]), int(f[5]))][r] = float(f[7])
base = names[0]
print(f"# medians over {rounds} rounds; TFLOP/s of '{base}', then each variant / '{base}' (single-round min-max)")
print("# dir dtype d S causal | " + base + " | " + " | ".join(names[1:]))
for cell in sorted(vals[base]):
    b = vals[base][cell]
    row = f"{cell[0]} {cell[1]} d{cell[2]} S{cell[3]} c{cell[4]} | {statistics.median(b.values()):7.1f}"
    for n in names[1:]:
        v = vals[n].get(cell, {})
        rs = [v[r] / b[r] for r in v if r in b and b[r] > 0]
        if not v or not rs:
            row += " |   -"
            continue
        row += f" | {statistics.median(v.values()) / statistics.median(b.values()):5.3f} ({min(rs):.2f}-{max(rs):.2f})"
    print(row)
