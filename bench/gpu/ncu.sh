#!/bin/sh
# ncu.sh - on the GPU machine: Nsight Compute on one launch of one kernel, clocks left
# alone. Default: the Hopper forward, bf16 d128 S=8192 non-causal (B=2 H=16) of the GPU
# sweep, the 4th launch of the kernel (after the oracle-checked call and 2 warm-ups).
# Usage: bench/gpu/ncu.sh [DIR] [KERNEL_REGEX] [SKIP]
# Environment: BENCH_ARGS (flashattn-bench options picking the cells of its GPU sweep;
# default "--dtype bf16 --headdim 128 --seqlen 8192 --forward-only"; the regex
# fa_bwd_sm90_kernel.*Li128 without --forward-only profiles the backward),
# TAG (suffix of the output files), SRC=1 (also $OUT/sass${TAG}.csv: the per-instruction
# SASS table with warp-stall samples, from the Source page).
# Output: $OUT/ncu${TAG}.txt, and a summary on stdout.
. "$(dirname "$0")/kit-env.sh"
rep=/tmp/ncu$$.ncu-rep
timeout ${NCU_TIMEOUT:-150} ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:${2:-fa_fwd_sm90_kernel.*Li128}" \
  --launch-skip ${3:-3} --launch-count 1 --import-source no -f -o "$rep" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section InstructionStats --section SourceCounters --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_global_red.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_ldsm.sum" \
  "$D/flashattn-bench" --backend cuda --mode sweep --out "$OUT/ncu-bench" \
  ${BENCH_ARGS:---dtype bf16 --headdim 128 --seqlen 8192 --forward-only} > "$OUT/ncu${TAG}.log" 2>&1
echo "ncu rc=$?"
ncu -i "$rep" --page details > "$OUT/ncu${TAG}.txt" 2>&1
if [ "${SRC:-0}" = 1 ]; then
  ncu -i "$rep" --page source --csv --print-source sass > "$OUT/sass${TAG}.csv" 2>&1 || echo "source page export failed"
  head -c 300 "$OUT/sass${TAG}.csv"; echo
fi
rm -f "$rep"
grep -E "stalled|pipe_tensor|inst_executed|bank_conflicts|wavefronts|Duration|Throughput|Pipe|Issue Slot|Stall|Warp Cycles|Eligible|Active Warps|Registers|Shared Memory Config|Executed Ipc|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Theoretical Occ|Achieved Occ|One or More|No Eligible" "$OUT/ncu${TAG}.txt" | head -90
