#!/bin/sh
# bench/peers/cpu_rounds.sh BENCH OUTDIR: flashattn's CPU backend against torch's CPU SDPA in
# ROUNDS rounds (default 3), each cell's ours and torch back to back, so that the host's
# drift (its 1-thread speed moved by up to 2x within one call on the GPU machine) lands on
# both sides of a ratio alike. Cells: the CPU targets' shapes (DTYPE, default f32; B=1 H=16;
# d 64 and 128; S 1k and 4k; forward and backward; 1 thread and all). Writes
# OUTDIR/rR/dD-SS.csv (ours; .err its progress) and .torch.csv per round, and OUTDIR/ratios.txt: per cell the
# median GFLOP/s of each side over the rounds, the ratio of the medians, and the lowest and
# highest single-round ratio (bench/peers/cpu_round_ratios.py). Progress on stderr.
#   BENCH   the flashattn-bench program (default: flashattn-bench on PATH)
#   OUTDIR  default cpu-rounds
# Environment: ROUNDS, DTYPE, BUDGET (s per measurement, default 1), REPEATS (default 3),
# CELLS (default "64:1024 64:4096 128:1024 128:4096", d:S pairs).
set -eu
bench=${1:-flashattn-bench}
out=${2:-cpu-rounds}
here=$(cd "$(dirname "$0")" && pwd)
threads=$(nproc)
for r in $(seq 1 "${ROUNDS:-3}"); do
  mkdir -p "$out/r$r"
  for cell in ${CELLS:-64:1024 64:4096 128:1024 128:4096}; do
    d=${cell%%:*} S=${cell##*:} f="$out/r$r/d$d-S$S"
    t0=$(date +%s)
    "$bench" --backend cpu --mode sweep --sweep-only --dtype "${DTYPE:-f32}" --heads 16 \
      --seqlen "$S" --headdim "$d" --budget "${BUDGET:-1}" --repeats "${REPEATS:-3}" \
      --out "$f.work" --format csv > "$f.csv" 2> "$f.err"
    { python3 "$here/torch_sdpa.py" --ours "$f.csv" --backward --threads 1 \
        --budget "${BUDGET:-1}" --repeats "${REPEATS:-3}" --cpu-only || true
      python3 "$here/torch_sdpa.py" --ours "$f.csv" --backward --threads "$threads" \
        --budget "${BUDGET:-1}" --repeats "${REPEATS:-3}" --cpu-only | tail -n +2 || true
    } > "$f.torch.csv" 2> "$f.torch.err"
    [ "$(grep -c PASS "$f.torch.csv")" -gt 0 ] || echo "round $r d$d S$S: no torch figures ($f.torch.err)" >&2
    echo "round $r d$d S$S: $(( $(date +%s) - t0 )) s" >&2
  done
done
python3 "$here/cpu_round_ratios.py" "$out"/r*/ | tee "$out/ratios.txt"
