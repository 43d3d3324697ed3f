#!/bin/sh
# ncu-fwd.sh - on the GPU machine: Nsight Compute on one launch of the Hopper forward
# (bf16 d128 S=8192 non-causal, B=2 H=16: launch 53 of the d128 kernel in
# `bench_gpu quick fwd`), clocks left alone. Output: $OUT/ncu.txt.
# Usage: bench/gpu/ncu-fwd.sh [DIR] [KERNEL_REGEX] [SKIP]   Environment: BENCH_ARGS (quick fwd),
# TAG (suffix of the output file name).
D=${1:-.gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export FA_CUDA_MODULE="$D/flashattn_cuda.so" LD_LIBRARY_PATH="$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout ${NCU_TIMEOUT:-150} ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:${2:-fa_fwd_sm90_kernel.*Li128}" \
  --launch-skip ${3:-52} --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section InstructionStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_global_red.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_ldsm.sum" \
  "$D/bench_gpu" ${BENCH_ARGS:-quick fwd} > "$OUT/ncu${TAG}.txt" 2>&1
echo "ncu rc=$?"
grep -E "stalled|pipe_tensor|inst_executed|bank_conflicts|wavefronts|Duration|Throughput|Pipe|Issue Slot|Stall|Warp Cycles|Eligible|Active Warps|Registers|Shared Memory Config|Executed Ipc|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Theoretical Occ|Achieved Occ|One or More|No Eligible" "$OUT/ncu${TAG}.txt" | head -80
