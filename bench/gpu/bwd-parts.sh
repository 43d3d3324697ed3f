#!/bin/sh
# bwd-parts.sh - on the GPU machine: how one backward call's time splits over its kernels
# (fa_bwd_pre: D = rowsum(dO o O) and dQ workspace zeroed; the main kernel; fa_bwd_post: dQ
# converted), by Nsight Compute's Duration and memory throughput, clocks left alone. One
# call per cell, after 3 warm-up calls (the forward's launches are not profiled).
# Usage: bench/gpu/bwd-parts.sh [DIR] [CELL ...]   CELL: bench_gpu filters joined by '-',
# default "d128-S512-c0 d64-S512-c1 d128-S8192-c0". Output: $OUT/parts-CELL.txt and a
# summary on stdout (kernel, duration, DRAM and memory throughput).
. "$(dirname "$0")/kit-env.sh"
shift 2>/dev/null
cells=${*:-d128-S512-c0 d64-S512-c1 d128-S8192-c0}
for c in $cells; do
  timeout ${NCU_TIMEOUT:-120} ncu --clock-control none --kernel-name "regex:fa_bwd_(pre|post|ws|sm90|kernel)" \
    --launch-skip 9 --launch-count 3 --section SpeedOfLight \
    "$D/bench_gpu" $(echo "$c" | tr '-' ' ') bf16 > "$OUT/parts-$c.txt" 2>&1
  echo "== $c (ncu rc=$?)"
  awk '/fa_bwd_/ { split($0, a, "("); k = a[1]; sub(/^ +/, "", k) }
       /Duration/ { d = $NF " " $(NF-1) } /DRAM Throughput/ { dr = $NF } /^ *Memory Throughput/ { m = $NF }
       /Compute \(SM\) Throughput/ { printf "%-40s %12s  DRAM %5s%%  mem %5s%%  SM %5s%%\n", k, d, dr, m, $NF }' "$OUT/parts-$c.txt"
done
