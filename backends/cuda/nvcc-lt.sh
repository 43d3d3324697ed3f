#!/bin/sh
# nvcc-lt.sh - run nvcc under libtool's compile mode: libtool passes gcc's PIC flags
# (-fPIC -DPIC), which nvcc does not take directly; forward them to the host compiler.
# For sm_90a code it also asks ptxas for its report and fails the compile on ptxas's
# messages C7510-C7519 about the warpgroup matrix pipeline ("wgmma.mma_async instructions
# are serialized ...", "warpgroup.wait is injected ..."): such a kernel is correct but
# waits for wgmma results where the code did not ask to (serialized, it runs each wgmma to
# completion before the next, several times slower), and nothing else would show it.
nvcc=$1; shift
sm90a=0
for a in "$@"; do
  shift
  case $a in
    -fPIC|-fpic) set -- "$@" "--compiler-options=$a" ;;
    *sm_90a*) sm90a=1; set -- "$@" "$a" ;;
    *) set -- "$@" "$a" ;;
  esac
done
[ $sm90a = 1 ] || exec $nvcc "$@"
log=$(mktemp "${TMPDIR:-/tmp}/nvcc-lt.XXXXXX") || exit 1
$nvcc -Xptxas -v "$@" 2> "$log"
rc=$?
grep -v -e "^ptxas info" -e "^    [0-9]* bytes stack frame" "$log" >&2
if grep -q "(C751[0-9])" "$log"; then
  grep "(C751[0-9])" "$log" >&2
  echo "nvcc-lt.sh: ptxas added waits to the wgmma pipeline (see above); fix the kernel" >&2
  rc=1
fi
rm -f "$log"
exit $rc
