#!/bin/sh
# build-kit.sh - on the development machine: the GPU kit, what the GPU machine runs.
# BUILD_DIR is a build tree configured with CUDA (--with-cuda-arch=90) where
# `make libflashattn.la backends/cuda/flashattn_cuda.la` has run. The script builds
# flashattn-bench there, links test_cuda and stress_cuda against it, and copies them into
# DIR (default .gpu, which git ignores) with libflashattn.so.0, flashattn_cuda.so and the
# BLAS libraries flashattn-bench links (the GPU machine may lack them), for the device
# tool's carry. The GPU machine has no libtool and no Check, hence the kit.
# Usage: bench/gpu/build-kit.sh BUILD_DIR [DIR]     (run from the repository root)
# CUDA (headers, libcudart_static) is taken from nvcc's installation; flashattn-bench
# needs nothing of CUDA (it loads the driver at run time).
set -e
B=${1:?usage: bench/gpu/build-kit.sh BUILD_DIR [DIR]}
D=${2:-.gpu}
S=$(pwd)
CU=$(dirname "$(dirname "$(command -v nvcc)")")
mkdir -p "$D"
make -C "$B" bench/flashattn-bench > /dev/null
LIBS="-L$B/.libs -lflashattn -L$CU/lib64 -lcudart_static -lrt -ldl -lpthread -lm"
for p in test_cuda stress_cuda; do
  gcc -O2 -Wall -Wextra -I"$S/include" -I"$S/lib" -I"$CU/include" "$S/tests/cuda/$p.c" -o "$D/$p" $LIBS -Wl,-rpath,'$ORIGIN'
done
bin="$B/bench/.libs/flashattn-bench"
[ -f "$bin" ] || bin="$B/bench/flashattn-bench"      # linked statically: no libtool wrapper
cp "$bin" "$D/flashattn-bench"
ldd "$D/flashattn-bench" | awk '/openblas|gfortran|quadmath/ { print $3 }' | while read -r l; do
  cp -L "$l" "$D/"
done
cp -L "$B/.libs/libflashattn.so.0" "$D/"   # a file, not a link: what the programs load
cp "$B/backends/cuda/.libs/flashattn_cuda.so" "$D/"
ls -l "$D"
