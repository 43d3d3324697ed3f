#!/usr/bin/env python3
"""The ratio table of torch_sdpa_gpu.py from several rounds: per cell, the median TFLOP/s of
ours over the ours CSVs (bench_gpu's "ours,dir,dtype,d,S,causal,ms,tflops") and of each peer
over the peers CSVs (torch_sdpa_gpu.py's stdout), then ours/peer; the spread column is the
lowest and highest ours/flash of the single rounds (round i of ours against round i of the
peers), so a cell that flips between runs shows it.
Usage: median_ratios.py --ours A.csv [B.csv ...] --peers A.csv [B.csv ...] > ratios.txt"""
import sys, statistics
from collections import defaultdict


def load(paths, who_filter):
    vals, per_round = defaultdict(list), []
    for path in paths:
        rnd = {}
        for line in open(path):
            f = line.strip().split(",")
            if len(f) != 8 or f[0] == "who" or not who_filter(f[0]) or f[7] == "nan":
                continue
            key = (f[0], f[1], f[2], int(f[3]), int(f[4]), int(f[5]))
            vals[key].append(float(f[7]))
            rnd[key] = float(f[7])
        per_round.append(rnd)
    return {k: statistics.median(v) for k, v in vals.items()}, per_round


args = sys.argv[1:]
if "--ours" not in args or "--peers" not in args:
    sys.exit(__doc__)
i_o, i_p = args.index("--ours"), args.index("--peers")
ours_paths = args[i_o + 1:i_p] if i_o < i_p else args[i_o + 1:]
peer_paths = args[i_p + 1:] if i_o < i_p else args[i_p + 1:i_o]
ours, ours_r = load(ours_paths, lambda w: w == "ours")
peers, peers_r = load(peer_paths, lambda w: w != "ours")
names = ["flash", "cudnn", "efficient"]
print(f"# medians over {len(ours_paths)} rounds of ours and {len(peer_paths)} of the peers")
print("# dir dtype d S causal | ours | " + " ".join(names) + " | ours/flash ours/cudnn | ours/flash min-max")
for (_, dirn, tn, d, S, c), t in sorted(ours.items(), key=lambda kv: kv[0][1:]):
    p = [peers.get((n, dirn, tn, d, S, c), float("nan")) for n in names]
    single = [r_o[("ours", dirn, tn, d, S, c)] / r_p[("flash", dirn, tn, d, S, c)]
              for r_o, r_p in zip(ours_r, peers_r)
              if ("ours", dirn, tn, d, S, c) in r_o and ("flash", dirn, tn, d, S, c) in r_p]
    spread = f"{min(single):4.2f}-{max(single):4.2f}" if single else "-"
    print(f"{dirn} {tn} d{d} S{S} c{c} | {t:7.1f} | " + " ".join(f"{x:7.1f}" for x in p) + " | " +
          " ".join(f"{t / x:5.2f}" for x in p[:2]) + f" | {spread}")
