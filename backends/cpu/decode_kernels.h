/* decode_kernels.h - the decode path's ISA kernels (decode_avx512.c, built with the
 * AVX-512 flags; decode.c calls them only on a context whose kernel set is avx512). */
#ifndef FA_CPU_DECODE_KERNELS_H
#define FA_CPU_DECODE_KERNELS_H

#include <stdint.h>

/* K^T from 16-bit rows: dst[c*ldd + j] = src[j*lds + c] as fp32 (f16: fp16, else bf16;
   exact), j < nk, c < d. Whole 16 x 16 register transposes: columns j up to
   round_up(nk, 16) of dst are written (0 past nk), so ldd >= round_up(nk, 16). */
void fa_cpu_decode_kt16_avx512(float *dst, int64_t ldd, const uint16_t *src, int64_t lds,
                               int nk, int64_t d, int f16);

#endif
