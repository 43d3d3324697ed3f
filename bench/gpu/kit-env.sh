# kit-env.sh - the preamble of the GPU machine's scripts, sourced as
#   . "$(dirname "$0")/kit-env.sh"
# after the script's own arguments are known: D = the kit folder ($1, default .gpu), OUT
# (default gpu-out, created), FA_CUDA_MODULE and LD_LIBRARY_PATH for the kit's programs
# (test_cuda, stress_cuda, flashattn-bench), FLASHATTN_LIB and FLASHATTN_ORACLE_LIB for the
# Python package and its tests, unbuffered Python. kit_env FILE writes the
# GPU's name, driver and clocks and a per-function table of the module's SASS (HGMMA, HMMA,
# UTMALDG, SYNCS, LDSM and local-memory instructions; functions with tensor-core
# instructions only) to FILE.
D=${1:-.gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export FA_CUDA_MODULE="$D/flashattn_cuda.so" LD_LIBRARY_PATH="$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the Python package and its tests on the kit's library and oracle
export FLASHATTN_LIB="$D/libflashattn.so.0" FLASHATTN_ORACLE_LIB="$D/liboracle_py.so"
export PYTHONUNBUFFERED=1
kit_env() {
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    cuobjdump --dump-sass "$D/flashattn_cuda.so" 2>/dev/null | awk '
      /Function :/ { f = $3; n[f] = 1 }
      /HGMMA/ { g[f]++ } /HMMA/ { h[f]++ } /UTMALDG/ { t[f]++ } /SYNCS/ { y[f]++ } /LDSM/ { l[f]++ } /LDL|STL/ { s[f]++ }
      END { for (k in n) if (g[k] || h[k]) print "sass", k, "HGMMA", g[k] + 0, "HMMA", h[k] + 0, "UTMALDG", t[k] + 0,
                                                "SYNCS", y[k] + 0, "LDSM", l[k] + 0, "LDL/STL", s[k] + 0 }'
  } > "$1" 2>&1
}
