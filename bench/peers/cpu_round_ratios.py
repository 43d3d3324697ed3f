#!/usr/bin/env python3
"""cpu_round_ratios.py ROUNDDIR...: the table of bench/peers/cpu_rounds.sh. Each ROUNDDIR
holds one round's *.csv (flashattn-bench --format csv) and *.torch.csv (torch_sdpa.py). Per
cell (dtype, d, S, direction, threads): the median GFLOP/s of ours (best of our rungs in a
round) and of torch over the rounds, their ratio, and the lowest and highest ratio of a
single round (ours and torch of the same round, measured back to back)."""
import csv, glob, os, statistics, sys


def rows(path):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("status") == "PASS" and r.get("gflops")]


def cell(r):
    return (r["dtype"], int(r["d"]), int(r["Sq"]), r["dir"], int(r["threads"] or 0))


def main(dirs):
    ours, torch = {}, {}
    for i, d in enumerate(dirs):
        for p in glob.glob(os.path.join(d, "*.csv")):
            side = torch if p.endswith(".torch.csv") else ours
            for r in rows(p):
                if side is ours and r.get("section") == "peer":
                    continue
                k = cell(r)
                side.setdefault(k, {})
                side[k][i] = max(side[k].get(i, 0.0), float(r["gflops"]))
    print(f"# ours / torch CPU SDPA, {len(dirs)} rounds, each cell's two sides back to back")
    print(f"# {'cell':<30} {'ours':>9} {'torch':>9} {'ratio':>7}   single rounds min-max")
    for k in sorted(ours):
        if k not in torch:
            continue
        common = sorted(set(ours[k]) & set(torch[k]))
        if not common:
            continue
        mo = statistics.median(ours[k][i] for i in common)
        mt = statistics.median(torch[k][i] for i in common)
        single = [ours[k][i] / torch[k][i] for i in common]
        name = f"{k[0]} d{k[1]} S{k[2]} {k[3]} {k[4]}T"
        print(f"  {name:<30} {mo:>9.1f} {mt:>9.1f} {mo / mt:>6.2f}x   "
              f"{min(single):.2f}-{max(single):.2f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
