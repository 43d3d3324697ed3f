#!/bin/sh
# examples/installcheck.sh MODE SRCDIR PREFIX LIBDIR WORKDIR: build every example against
# the flashattn installed under PREFIX (libraries in LIBDIR, both with any DESTDIR) and run
# it. MODE pkg-config: `$CC prog.c $(pkg-config --cflags --libs flashattn)`, as the
# examples' comments say; MODE cmake: examples/CMakeLists.txt through find_package.
# Environment: CC; EXAMPLE_CUDA_CPPFLAGS and EXAMPLE_CUDA_LIBS (empty: cuda_stream is built
# without the CUDA runtime); CUDA_HOME (the toolkit CMake should find); CMAKE (cmake). An example exiting 77 is a visible SKIP; any
# other non-zero exit fails the whole run (after every example has run).
set -u
mode=$1 srcdir=$2 prefix=$3 libdir=$4 work=$5
examples="hello varlen_train paged_decode cuda_stream"
rm -rf "$work" && mkdir -p "$work" || exit 1
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

case $mode in
pkg-config)
  PKG_CONFIG_PATH="$libdir/pkgconfig" && export PKG_CONFIG_PATH
  flags=$(pkg-config --define-variable=prefix="$prefix" --cflags --libs flashattn) || exit 1
  echo "installcheck (pkg-config): flags: $flags"
  for e in $examples; do
    extra_c= extra_l=
    [ "$e" = cuda_stream ] && extra_c=${EXAMPLE_CUDA_CPPFLAGS:-} extra_l=${EXAMPLE_CUDA_LIBS:-}
    # shellcheck disable=SC2086  # the flags are word lists
    ${CC:-cc} $extra_c -o "$work/$e" "$srcdir/examples/$e.c" $flags $extra_l || exit 1
  done ;;
cmake)
  cuda=OFF
  [ -n "${EXAMPLE_CUDA_LIBS:-}" ] && cuda=ON
  ${CMAKE:-cmake} -S "$srcdir/examples" -B "$work" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="${CC:-cc}" -DFLASHATTN_EXAMPLES_CUDA=$cuda \
    ${CUDA_HOME:+-DCUDAToolkit_ROOT="$CUDA_HOME"} >"$work.log" 2>&1 &&
  ${CMAKE:-cmake} --build "$work" >>"$work.log" 2>&1 ||
    { cat "$work.log"; exit 1; }
  echo "installcheck (cmake): find_package(flashattn) found $(sed -n 's/^set(flashattn_VERSION "\(.*\)")$/\1/p' "$libdir/cmake/flashattn/flashattnConfig.cmake") in $libdir/cmake/flashattn; CUDA runtime for cuda_stream: $cuda"
  rm -f "$work.log" ;;
*) echo "usage: $0 pkg-config|cmake SRCDIR PREFIX LIBDIR WORKDIR" >&2; exit 2 ;;
esac

fail=0
summary=
for e in $examples; do
  out=$("$work/$e" 2>&1); rc=$?
  echo "$out" | sed "s/^/  /"
  case $rc in
  0) summary="$summary $e:PASS" ;;
  77) summary="$summary $e:SKIP"; echo "SKIP: $e ($mode): $(echo "$out" | grep -m1 'skipped:' | sed 's/.*skipped: //')" ;;
  *) summary="$summary $e:FAIL"; fail=1; echo "FAIL: $e ($mode) exited $rc" ;;
  esac
done
echo "installcheck ($mode):$summary"
rm -rf "$work"
exit $fail
