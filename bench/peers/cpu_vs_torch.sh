#!/bin/sh
# bench/peers/cpu_vs_torch.sh BENCH OUTDIR: flashattn's CPU backend against torch's CPU
# scaled_dot_product_attention, side by side in one run, on the shapes of the CPU targets
# (fp32, B=1 H=16, d 64 and 128, S 1k and 4k, forward and backward, 1 thread and all).
# DTYPE=bf16 (or f16) runs the same shapes in that dtype, torch's peer included.
#   BENCH   the flashattn-bench program (default: flashattn-bench on PATH)
#   OUTDIR  where ours.csv, torch-*.csv and ratios.txt go (default cpu-vs-torch); the
#           per-shape bench outputs go to OUTDIR/work
# Needs python3 with torch for the peer; prints the ratio table last.
set -eu
bench=${1:-flashattn-bench}
out=${2:-cpu-vs-torch}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/work"
threads=$(nproc)
first=1
for d in 64 128; do
  for S in 1024 4096; do
    "$bench" --backend cpu --mode sweep --sweep-only --dtype "${DTYPE:-f32}" --heads 16 --seqlen "$S" \
      --headdim "$d" --budget "${BUDGET:-2}" --repeats "${REPEATS:-5}" --out "$out/work/d$d-S$S" \
      --format csv > "$out/work/d$d-S$S.csv"
    if [ $first = 1 ]; then cat "$out/work/d$d-S$S.csv"; first=0
    else tail -n +2 "$out/work/d$d-S$S.csv"; fi
  done
done > "$out/ours.csv"
python3 "$here/torch_sdpa.py" --ours "$out/ours.csv" --backward --threads 1 > "$out/torch-1.csv"
python3 "$here/torch_sdpa.py" --ours "$out/ours.csv" --backward --threads "$threads" > "$out/torch-all.csv"
{ cat "$out/torch-1.csv"; tail -n +2 "$out/torch-all.csv"; } > "$out/torch.csv"
python3 "$here/torch_sdpa.py" --ratios-only --ours "$out/ours.csv" --peer "$out/torch.csv" | tee "$out/ratios.txt"
