#!/bin/sh
# build-kit.sh - on the development machine: the GPU kit, what the GPU machine runs.
# BUILD_DIR is a build tree configured with CUDA (--with-cuda-arch=90) where
# `make libflashattn.la backends/cuda/flashattn_cuda.la` has run. The script links
# test_cuda, stress_cuda and flashattn-bench against that library into DIR (default .gpu,
# which git ignores) and copies libflashattn.so.0 and flashattn_cuda.so there, for the
# device tool's carry, with liboracle_py.so (the Python tests' oracle and rule). The GPU
# machine has no libtool and no Check, hence the kit.
# Usage: bench/gpu/build-kit.sh BUILD_DIR [DIR]     (run from the repository root)
# CUDA (headers, libcudart_static) is taken from nvcc's installation; flashattn-bench
# needs nothing of CUDA (it loads the driver at run time).
set -e
B=${1:?usage: bench/gpu/build-kit.sh BUILD_DIR [DIR]}
D=${2:-.gpu}
S=$(pwd)
CU=$(dirname "$(dirname "$(command -v nvcc)")")
mkdir -p "$D"
LIBS="-L$B/.libs -lflashattn -L$CU/lib64 -lcudart_static -lrt -ldl -lpthread -lm"
# test_cuda: its parts and liboracle (the oracle and the tolerance rule, tests/oracle/;
# OpenMP: the oracle computes the KV heads of a sequence in parallel)
TC="$S/tests/cuda"
OR="$S/tests/oracle"
ORSRC="$OR/models.c $OR/problem.c $OR/check.c $OR/rule.c"
gcc -O2 -fopenmp -Wall -Wextra -I"$S/include" -I"$S/lib" -I"$OR" -I"$CU/include" "$TC/test_cuda.c" "$TC/cuda_util.c" \
  "$TC/cuda_dense.c" "$TC/cuda_varlen.c" "$TC/cuda_decode.c" $ORSRC -o "$D/test_cuda" $LIBS -Wl,-rpath,'$ORIGIN'
gcc -O2 -fopenmp -Wall -Wextra -I"$S/include" -I"$S/lib" -I"$OR" -I"$CU/include" "$TC/stress_cuda.c" "$TC/stress_cases.c" \
  "$TC/stress_check.c" "$TC/stress_bad.c" "$TC/stress_big.c" $ORSRC -o "$D/stress_cuda" $LIBS -Wl,-rpath,'$ORIGIN'
# flashattn-bench without the unfused-BLAS rung (its n/a row says so): OpenBLAS alone
# would take more than half of what the device tool carries.
cfg=$(mktemp -d)
sed '/define FA_HAVE_BLAS/d' "$B/config.h" > "$cfg/config.h"
gcc -O2 -fopenmp -pthread -I"$cfg" -I"$S/include" -I"$S/lib" -I"$OR" "$S"/bench/*.c $ORSRC -o "$D/flashattn-bench" \
  -L"$B/.libs" -lflashattn -ldl -lm -Wl,-rpath,'$ORIGIN'
rm -r "$cfg"
cp -L "$B/.libs/libflashattn.so.0" "$D/"   # a file, not a link: what the programs load
cp "$B/backends/cuda/.libs/flashattn_cuda.so" "$D/"
# the oracle and the rule for the Python tests (python/tests/oracle.py), built by
# `make tests/oracle/liboracle_py.la`
make -C "$B" tests/oracle/liboracle_py.la >/dev/null
cp "$B/tests/oracle/.libs/liboracle_py.so" "$D/"
ls -l "$D"
