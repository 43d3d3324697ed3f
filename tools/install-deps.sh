#!/bin/sh
# tools/install-deps.sh [--fuzz]: install what building and testing flashattn needs
# (Debian/Ubuntu); packages already installed are left alone.
#   required : C compiler, autotools, libtool, pkg-config, hwloc (libhwloc-dev)
#   tests    : Check (check); CMake (make installcheck builds the examples with it)
#   optional : OpenBLAS (the bench's unfused rung), gnuplot (the bench's PNG plot)
#   python   : torch, numpy, pytest for /usr/bin/python3 (python/run-tests.sh, make check)
#   ring     : Open MPI (libflashattn_ring and its tests: mpicc, mpirun)
#   --fuzz   : also the fuzzing toolchain: clang 14 with its runtimes (libFuzzer,
#              sanitizers) and LLVM's OpenMP (tests/fuzz/run.sh, ThreadSanitizer + Archer;
#              docs/reliability.md). .ci/run asks for it before its fuzz step.
set -e
here=$(dirname "$0")
fuzz=no
for arg in "$@"; do
  case $arg in
  --fuzz) fuzz=yes ;;
  *) echo "usage: $0 [--fuzz]" >&2; exit 2 ;;
  esac
done
pkgs="build-essential autoconf automake libtool pkg-config libhwloc-dev check cmake libopenblas-dev gnuplot-nox"
pkgs="$pkgs python3-torch python3-numpy python3-pytest python3-venv python3-pip python3-wheel"
pkgs="$pkgs libopenmpi-dev openmpi-bin"
[ $fuzz = yes ] && pkgs="$pkgs clang libclang-rt-14-dev libomp-14-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all present ($pkgs)"
  exit 0
fi
echo "install-deps: installing$missing"
"$here/root" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"$here/root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
