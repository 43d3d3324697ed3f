#!/bin/sh
# nvcc-lt.sh - run nvcc under libtool's compile mode: libtool passes gcc's PIC flags
# (-fPIC -DPIC), which nvcc does not take directly; forward them to the host compiler.
nvcc=$1; shift
for a in "$@"; do
  shift
  case $a in
    -fPIC|-fpic) set -- "$@" "--compiler-options=$a" ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec $nvcc "$@"
