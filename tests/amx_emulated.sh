#!/bin/sh
# tests/amx_emulated.sh - the AMX loop nests (the bf16 forward and backward on tiles:
# packing, padding, partial tiles) through the C emulation of the AMX kernels
# (backends/cpu/kernels_amx_emu.c, FA_CPU_AMX_EMULATE=1), so that machines without AMX
# test them too. On a CPU with AMX the variable is ignored and the real tiles run.
# The kernels themselves are checked against the emulation by test_kernels.
set -e
for t in test_forward test_backward test_varlen_kvcache test_determinism; do
  echo "amx_emulated: $t"
  FA_CPU_AMX_EMULATE=1 FA_TEST_BACKENDS=cpu ./tests/$t
done
