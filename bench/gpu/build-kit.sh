#!/bin/sh
# build-kit.sh - on the development machine: link test_cuda, stress_cuda and bench_gpu
# against a build tree where `make libflashattn.la backends/cuda/flashattn_cuda.la` has
# run, and copy them with the libraries into DIR (default .gpu, which git ignores) for
# the device tool's carry.
# Usage: bench/gpu/build-kit.sh BUILD_DIR [DIR]     (run from the repository root)
# CUDA (headers, libcudart_static) is taken from nvcc's installation.
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
gcc -O2 -fopenmp -Wall -Wextra -I"$S/include" -I"$S/lib" -I"$OR" -I"$CU/include" "$TC/test_cuda.c" "$TC/cuda_util.c" \
  "$TC/cuda_dense.c" "$TC/cuda_varlen.c" "$OR/models.c" "$OR/problem.c" "$OR/check.c" "$OR/rule.c" \
  -o "$D/test_cuda" $LIBS -Wl,-rpath,'$ORIGIN'
gcc -O2 -Wall -Wextra -I"$S/include" -I"$S/lib" -I"$CU/include" "$TC/stress_cuda.c" -o "$D/stress_cuda" $LIBS -Wl,-rpath,'$ORIGIN'
gcc -O2 -Wall -Wextra -I"$S/include" -I"$CU/include" "$S/bench/gpu/bench_gpu.c" -o "$D/bench_gpu" $LIBS -Wl,-rpath,'$ORIGIN'
cp -L "$B/.libs/libflashattn.so.0" "$D/"   # a file, not a link: what the programs load
cp "$B/backends/cuda/.libs/flashattn_cuda.so" "$D/"
ls -l "$D"
