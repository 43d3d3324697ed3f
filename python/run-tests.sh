#!/bin/sh
# python/run-tests.sh - make check's run of the Python package's tests (python/tests) on the
# library of this build tree. It builds nothing: it points FLASHATTN_LIB at
# .libs/libflashattn.so and FLASHATTN_ORACLE_LIB at tests/oracle/.libs/liboracle_py.so (the
# C suites' oracle and tolerance rule, which make check builds before it runs the tests;
# the working directory is the top build directory) and runs pytest from the source tree.
#
# Python: $PYTHON if set, else /usr/bin/python3 (Debian's, where tools/install-deps.sh puts
# torch, numpy and pytest), else python3 on PATH.
#   - no python3 at all, or a build without the shared library: SKIP (exit 77), with why;
#   - python3 without torch, numpy or pytest: FAIL, naming what is missing.
here=$(cd "$(dirname "$0")" && pwd)
lib="$PWD/.libs/libflashattn.so"
oracle="$PWD/tests/oracle/.libs/liboracle_py.so"
if [ -n "$PYTHON" ]; then py=$PYTHON
elif [ -x /usr/bin/python3 ]; then py=/usr/bin/python3
else py=$(command -v python3)
fi
if [ -z "$py" ]; then
  echo "python/run-tests.sh: SKIP: no python3 found (set PYTHON=...): the Python package is not tested"
  exit 77
fi
if [ ! -e "$lib" ]; then
  echo "python/run-tests.sh: SKIP: no shared library at $lib (configured with --disable-shared?)"
  exit 77
fi
if [ ! -e "$oracle" ]; then
  echo "python/run-tests.sh: FAIL: no oracle module at $oracle (make check builds it)"
  exit 1
fi
missing=""
for m in torch numpy pytest; do
  "$py" -c "import $m" 2>/dev/null || missing="$missing $m"
done
if [ -n "$missing" ]; then
  echo "python/run-tests.sh: FAIL: $py lacks:$missing"
  echo "  install them with tools/install-deps.sh (Debian: python3-torch python3-numpy python3-pytest)"
  exit 1
fi
# A library built with --enable-sanitizers needs the ASan runtime loaded before anything
# else in the (uninstrumented) interpreter: preload it, and leave leak checking off, since
# the interpreter keeps its own allocations to the end. Memory errors and undefined
# behaviour in the library still stop the run.
asan=$(ldd "$lib" 2>/dev/null | awk '/libasan\.so/ {print $3; exit}')
if [ -n "$asan" ]; then
  LD_PRELOAD="$asan${LD_PRELOAD:+ $LD_PRELOAD}"
  ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LD_PRELOAD ASAN_OPTIONS
  echo "python/run-tests.sh: sanitizer build: LD_PRELOAD=$asan, leak checking off"
fi
echo "python/run-tests.sh: $py ($("$py" -c 'import torch; print("torch", torch.__version__)')), FLASHATTN_LIB=$lib"
FLASHATTN_LIB=$lib FLASHATTN_ORACLE_LIB=$oracle PYTHONDONTWRITEBYTECODE=1 \
  exec "$py" -m pytest "$here/tests" -q -rs -p no:cacheprovider
